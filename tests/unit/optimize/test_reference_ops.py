"""The numpy references of the fused ops (tests/support/optimize_reference_ops.py), on their own.

The parity tests of the rewrites trust these references where ORT has no CPU kernel, so each is
checked here against an independent reading of docs/reference/ort-1.32.0-contrib-schemas.txt.

Invariants guarded:
* RMSNormRotary: equals a per-element loop written from the schema text (normalize the
  last-axis slice [input_start, input_start + width) with the FP32 scale, rotate the first
  rotary_embedding_dim values non-interleaved, pass the rest through, flatten to heads*width),
  for full and partial rotary, a sliced input, [B,S] positions and one base position;
* HyperConnectionLowRankMix (with the PostMix prologue): equals the ORT CPU chain it replaces,
  BranchwiseRMSNorm + MatMul + ScaledSiLU + MatMul + Sigmoid + HyperConnectionPreMix and the
  inject MatMul/Div/Sigmoid/Mul, after HyperConnectionPostMix (ORT_DISABLE_ALL), in fp32 and fp16;
* MatMulBlockQuantizedFp8Weight: equals dequantize-then-matmul written per element with
  ml_dtypes (weight-only, W8A8 with a_scale, bias; K not a multiple of block_size), and the FP8
  quantizer of the fp8_head pass round-trips within half an FP8 step per block.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
import support.optimize_graphs as G
from onnx import helper
from support.optimize_helpers import run_ort
from support.optimize_reference_ops import (
    hyper_connection_low_rank_mix,
    matmul_fp8,
    rms_norm_rotary,
)

from q38.optimize.fp8_head import quantize_fp8_blockwise

F32 = np.float32


# -- RMSNormRotary --------------------------------------------------------------------------------
def _rms_norm_rotary_loop(x, scale, pos, cos, sin, *, rot, eps, start, width):  # type: ignore[no-untyped-def]
    b_, s_, heads, _ = x.shape
    y = np.zeros((b_, s_, heads, width), F32)
    half = rot // 2
    for b in range(b_):
        for s in range(s_):
            p = int(pos.reshape(-1)[0]) + s if pos.size == 1 else int(pos[b, s])
            for h in range(heads):
                v = [float(x[b, s, h, start + i]) for i in range(width)]
                inv = 1.0 / np.sqrt(sum(t * t for t in v) / width + eps)
                n = [v[i] * inv * float(scale[i]) for i in range(width)]
                for i in range(width):
                    if i < half:
                        y[b, s, h, i] = n[i] * float(cos[p, i]) - n[i + half] * float(sin[p, i])
                    elif i < rot:
                        j = i - half
                        y[b, s, h, i] = n[i] * float(cos[p, j]) + n[j] * float(sin[p, j])
                    else:
                        y[b, s, h, i] = n[i]
    return y.reshape(b_, s_, heads * width)


@pytest.mark.parametrize("rot,start,width,base_position", [
    (8, 0, 0, False),   # full-width rotary over the whole head
    (4, 0, 0, False),   # partial rotary: the second half of the head passes through
    (4, 2, 6, False),   # a sliced input: normalize x[..., 2:8]
    (8, 0, 0, True),    # one base position instead of [B, S] positions
])
def test_rms_norm_rotary_reference_matches_schema_formula(rot: int, start: int, width: int, base_position: bool) -> None:
    r = np.random.default_rng(10)
    x = r.standard_normal((2, 3, 2, 8)).astype(np.float16)
    w = width or 8 - start
    scale = (1 + 0.1 * r.standard_normal(w)).astype(F32)
    cos = r.standard_normal((16, rot // 2)).astype(F32)
    sin = r.standard_normal((16, rot // 2)).astype(F32)
    pos = np.array([4], np.int64) if base_position else np.array([[0, 3, 7], [1, 2, 15]], np.int64)
    got = rms_norm_rotary(x, scale, pos, cos, sin, rotary_embedding_dim=rot, epsilon=1e-6, output_fp16=1,
                          input_width=width, input_start=start)
    want = _rms_norm_rotary_loop(x, scale, pos, cos, sin, rot=rot, eps=1e-6, start=start, width=w)
    assert got.dtype == np.float16 and got.shape == (2, 3, 2 * w)
    np.testing.assert_allclose(got.astype(F32), want, rtol=1e-3, atol=1e-3)


def test_rms_norm_rotary_reference_defaults_to_bfloat16_output() -> None:
    x = np.ones((1, 1, 1, 4), np.float16)
    out = rms_norm_rotary(x, np.ones(4, F32), np.zeros((1, 1), np.int64), np.ones((1, 2), F32),
                          np.zeros((1, 2), F32), rotary_embedding_dim=4)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(out.astype(F32), np.ones((1, 1, 4)), atol=1e-2)


# -- HyperConnectionLowRankMix --------------------------------------------------------------------
def _hc_chain_with_prologue(dtype: type, C: int = 4, H: int = 8, R: int = 4) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    r = G.rng(11)
    g = G.G()
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    X = g.inp("streams", et, ["B", "S", C * H])
    blk = g.inp("prev_block_output", et, ["B", "S", H])
    gate = g.inp("prev_post_gate", et, ["B", "S", C])
    S = g.op("HyperConnectionPostMix", [X, blk, gate], domain=G.MS, num_branches=C, outs=["streams_out"])[0]
    pre, pg = G.hc_chain(g, S, C=C, H=H, R=R, prefix="/hc", r=r, dtype=dtype)
    g.op("Identity", [pre], outs=["pre_output"])
    g.op("Identity", [pg], outs=["post_gate"])
    for name, width in (("pre_output", H), ("post_gate", C), ("streams_out", C * H)):
        g.out(name, et, ["B", "S", width])
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in g.inits}
    return g.model(), weights


@pytest.mark.parametrize("dtype,atol", [(np.float32, 1e-5), (np.float16, 1e-2)])
def test_low_rank_mix_reference_matches_ort_cpu_chain_with_post_mix_prologue(dtype: type, atol: float) -> None:
    C, H = 4, 8
    proto, w = _hc_chain_with_prologue(dtype, C=C, H=H)
    r = np.random.default_rng(12)
    feeds: dict[str, np.ndarray] = {
        "streams": r.standard_normal((2, 3, C * H)).astype(dtype),
        "prev_block_output": r.standard_normal((2, 3, H)).astype(dtype),
        "prev_post_gate": r.uniform(0, 2, (2, 3, C)).astype(dtype),
    }
    want = run_ort(proto, feeds)
    got = hyper_connection_low_rank_mix(
        feeds["streams"], w["/hc.norm.weight"], w["/hc.down"], w["/hc.up"], w["/hc.inject"],
        feeds["prev_block_output"], feeds["prev_post_gate"], num_branches=C, epsilon=1e-5, silu_alpha=1.5,
        reduction_scale=1.0 / C, gate_div=float(w["/hc.gdiv"]), gate_mul=float(w["/hc.gmul"]),
    )
    for name, a, b in zip(("pre_output", "post_gate", "streams_out"), got, want, strict=True):
        assert a.dtype == np.dtype(dtype) and a.shape == b.shape, name
        np.testing.assert_allclose(a.astype(F32), b.astype(F32), atol=atol, rtol=atol, err_msg=name)


def test_low_rank_mix_reference_without_prologue_returns_streams_unchanged() -> None:
    r = np.random.default_rng(13)
    s = r.standard_normal((1, 2, 8)).astype(F32)
    ones = np.ones(8, F32)
    _, _, out = hyper_connection_low_rank_mix(s, ones, np.zeros((8, 2), F32), np.zeros((2, 8), F32),
                                              np.zeros((8, 2), F32), num_branches=2)
    np.testing.assert_array_equal(out, s)


# -- FP8 matmul -----------------------------------------------------------------------------------
def _fp8_loop(a, b, b_scale, block, a_scale=None, bias=None):  # type: ignore[no-untyped-def]
    n_, k_ = b.shape
    a2 = a.reshape(-1, k_).astype(F32)
    if a_scale is not None:
        a2 = (a2 / F32(a_scale)).astype(ml_dtypes.float8_e4m3fn).astype(F32) * F32(a_scale)
    y = np.zeros((a2.shape[0], n_), np.float64)
    for n in range(n_):
        col = np.array([float(b[n, k]) * float(b_scale[n, k // block]) for k in range(k_)])
        y[:, n] = a2.astype(np.float64) @ col
    if bias is not None:
        y += bias.astype(np.float64)
    return y.reshape(*a.shape[:-1], n_).astype(a.dtype)


@pytest.mark.parametrize("K,block,w8a8,with_bias", [(200, 128, False, False), (96, 32, True, True), (64, 64, False, True)])
def test_fp8_matmul_reference_matches_dequantize_then_matmul(K: int, block: int, w8a8: bool, with_bias: bool) -> None:
    r = np.random.default_rng(14)
    N = 6
    a = r.standard_normal((2, 3, K)).astype(np.float16)
    b = r.uniform(-4, 4, (N, K)).astype(ml_dtypes.float8_e4m3fn)
    b_scale = r.uniform(0.01, 0.1, (N, -(-K // block))).astype(F32)
    a_scale = np.array(0.05, F32) if w8a8 else None
    bias = r.standard_normal(N).astype(np.float16) if with_bias else None
    got = matmul_fp8(a, b, b_scale, a_scale, bias, block_size=block)
    want = _fp8_loop(a, b, b_scale, block, a_scale, bias)
    assert got.dtype == np.float16 and got.shape == (2, 3, N)
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=2e-3, atol=2e-3)


def test_fp8_blockwise_quantizer_round_trips_within_half_a_step() -> None:
    w = np.random.default_rng(15).standard_normal((200, 16)).astype(np.float16)  # [K, N]
    q, scale = quantize_fp8_blockwise(w, 128)
    assert q.dtype == ml_dtypes.float8_e4m3fn and q.shape == (16, 200) and scale.shape == (16, 2)
    deq = q.astype(F32) * np.repeat(scale, 128, axis=1)[:, :200]
    # E4M3 has 3 mantissa bits: relative error at most 2**-4 of the value (half a step).
    err = np.abs(deq - w.T.astype(F32))
    assert np.all(err <= np.abs(w.T.astype(F32)) * 2.0**-4 + np.repeat(scale, 128, axis=1)[:, :200] * 2.0**-9)
    assert np.abs(q.astype(F32)).max() <= 448.0
