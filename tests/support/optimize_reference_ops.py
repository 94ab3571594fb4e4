"""numpy reference implementations of the fused contrib ops that have no ORT CPU kernel.

Each follows the schema text of docs/reference/ort-1.32.0-contrib-schemas.txt and is exposed both
as a plain function and as an ``onnx.reference`` op, so a whole rewritten graph can be evaluated
with ``ReferenceEvaluator(model, new_ops=REFERENCE_OPS)``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from onnx.reference.op_run import OpRun

MS = "com.microsoft"
F32 = np.float32


def rms_norm_rotary(
    x: np.ndarray, scale: np.ndarray, position_ids: np.ndarray, cosine: np.ndarray, sine: np.ndarray,
    *, rotary_embedding_dim: int, epsilon: float = 1e-6, output_fp16: int = 0,
    input_width: int = 0, input_start: int = 0,
) -> np.ndarray:
    """FP32-intermediate path (fp16 input or fp32 caches): normalize a last-axis slice, rotate."""
    assert x.dtype in (np.float16, ml_dtypes.bfloat16) and x.ndim == 4
    b, s, heads, stride = x.shape
    width = input_width or stride - input_start
    xs = x.astype(F32)[..., input_start:input_start + width]
    inv = 1.0 / np.sqrt(np.mean(xs * xs, axis=-1, keepdims=True) + F32(epsilon))
    n = xs * inv * scale.astype(F32)
    half = rotary_embedding_dim // 2
    pos = np.asarray(position_ids, dtype=np.int64)
    if pos.size == 1:
        pos = np.broadcast_to(pos.reshape(1, 1) + np.arange(s), (b, s))
    c = cosine.astype(F32)[pos][:, :, None, :]
    sn = sine.astype(F32)[pos][:, :, None, :]
    x1, x2, rest = n[..., :half], n[..., half:2 * half], n[..., 2 * half:]
    y = np.concatenate([x1 * c - x2 * sn, x2 * c + x1 * sn, rest], axis=-1)
    out_t = np.float16 if output_fp16 else ml_dtypes.bfloat16
    return y.reshape(b, s, heads * width).astype(out_t)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(F32)))).astype(F32)


def hyper_connection_low_rank_mix(
    streams: np.ndarray, norm_scale: np.ndarray, down: np.ndarray, up: np.ndarray, inject: np.ndarray,
    prev_block_output: np.ndarray | None = None, prev_post_gate: np.ndarray | None = None,
    *, num_branches: int, epsilon: float = 1e-5, silu_alpha: float = 1.0, reduction_scale: float = 1.0,
    gate_div: float = 1.0, gate_mul: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The schema's numerics contract: fp32 accumulation, one rounding to T per step."""
    t = streams.dtype

    def r(v: np.ndarray) -> np.ndarray:
        return np.asarray(v, dtype=F32).astype(t).astype(F32)

    c = num_branches
    lead = streams.shape[:-1]
    h = streams.shape[-1] // c
    s = streams.astype(F32)
    if prev_block_output is not None and prev_post_gate is not None:
        s = r(s.reshape(*lead, c, h) + prev_post_gate.astype(F32)[..., :, None]
              * prev_block_output.astype(F32)[..., None, :]).reshape(*lead, c * h)
    sg = s.reshape(*lead, c, h)
    inv = 1.0 / np.sqrt(np.mean(sg * sg, axis=-1, keepdims=True) + F32(epsilon))
    hn = r(sg * inv * norm_scale.astype(F32).reshape(c, h)).reshape(*lead, c * h)
    d = r(hn @ down.astype(F32))
    z = r(F32(silu_alpha) * d)
    hidden = r(z * r(_sigmoid(z)))
    g = r(_sigmoid(r(hidden @ up.astype(F32))))
    pre = r(F32(reduction_scale) * np.sum((hn * g).reshape(*lead, c, h), axis=-2))
    inj = r(hn @ inject.astype(F32))
    post = r(r(r(_sigmoid(r(inj / F32(gate_div)))) * F32(gate_mul)))
    return pre.astype(t), post.astype(t), s.astype(t)


def matmul_fp8(a: np.ndarray, b: np.ndarray, b_scale: np.ndarray, a_scale: np.ndarray | None = None,
               bias: np.ndarray | None = None, *, block_size: int = 128) -> np.ndarray:
    """Y = A @ (fp8(B) * b_scale[n, k // block]).T (+ bias), in A's dtype."""
    _, k = b.shape
    scales = np.repeat(b_scale.astype(F32), block_size, axis=1)[:, :k]
    bs = b.astype(F32) * scales
    a32 = a.astype(F32)
    if a_scale is not None:
        sc = F32(np.asarray(a_scale).reshape(()))
        a32 = (a32 / sc).astype(ml_dtypes.float8_e4m3fn).astype(F32) * sc
    y = a32 @ bs.T
    if bias is not None:
        y = y + bias.astype(F32)
    return y.astype(a.dtype)


def _opt(x: Any) -> Any:
    return None if x is None or (isinstance(x, np.ndarray) and x.size == 0 and x.dtype == object) else x


class RMSNormRotary(OpRun):
    op_domain = MS

    def _run(self, x, scale, position_ids, cosine, sine, prefill_numerics=None, **_: Any):  # type: ignore[no-untyped-def]
        return (rms_norm_rotary(
            x, scale, position_ids, cosine, sine,
            rotary_embedding_dim=int(self.rotary_embedding_dim),  # type: ignore[attr-defined]
            epsilon=float(getattr(self, "epsilon", 1e-6)),
            output_fp16=int(getattr(self, "output_fp16", 0)),
            input_width=int(getattr(self, "input_width", 0)),
            input_start=int(getattr(self, "input_start", 0)),
        ),)


class HyperConnectionLowRankMix(OpRun):
    op_domain = MS

    def _run(self, streams, norm_scale, down, up, inject, prev_block_output=None, prev_post_gate=None, **_: Any):  # type: ignore[no-untyped-def]
        pre, post, s = hyper_connection_low_rank_mix(
            streams, norm_scale, down, up, inject, _opt(prev_block_output), _opt(prev_post_gate),
            num_branches=int(self.num_branches),  # type: ignore[attr-defined]
            epsilon=float(getattr(self, "epsilon", 1e-5)),
            silu_alpha=float(getattr(self, "silu_alpha", 1.0)),
            reduction_scale=float(getattr(self, "reduction_scale", 1.0)),
            gate_div=float(getattr(self, "gate_div", 1.0)),
            gate_mul=float(getattr(self, "gate_mul", 1.0)),
        )
        return pre, post, s


class MatMulBlockQuantizedFp8Weight(OpRun):
    op_domain = MS

    def _run(self, a, b, b_scale, a_scale=None, bias=None, **_: Any):  # type: ignore[no-untyped-def]
        return (matmul_fp8(a, b, b_scale, _opt(a_scale), _opt(bias),
                           block_size=int(getattr(self, "block_size", 128))),)


class HyperConnectionPostMix(OpRun):
    """Identity-stream-mix PostMix with a (..., C) or (..., C, H) gate, so mixed graphs evaluate in numpy too."""

    op_domain = MS

    def _run(self, streams, block_output, post_mix, stream_mix=None, **_: Any):  # type: ignore[no-untyped-def]
        assert _opt(stream_mix) is None
        c = int(self.num_branches)  # type: ignore[attr-defined]
        s = streams.astype(F32).reshape(*streams.shape[:-1], c, -1)
        gate = post_mix.astype(F32)
        gate = gate[..., :, None] if gate.ndim == streams.ndim else gate  # (..., C) or (..., C, H)
        y = s + gate * block_output.astype(F32)[..., None, :]
        return (y.reshape(streams.shape).astype(streams.dtype),)


REFERENCE_OPS = [RMSNormRotary, HyperConnectionLowRankMix, MatMulBlockQuantizedFp8Weight, HyperConnectionPostMix]
