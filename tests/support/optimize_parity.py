"""Parity that can fail: the machinery and cases of every fused op's numeric parity self-test.

Each optimizer pass's test module (tests/unit/optimize/passes/test_<pass>.py) runs its own case
with :func:`assert_rewrite_parity` and :func:`assert_every_fused_weight_broken_fails`.

For each rewrite of ``q38 optimize`` (RMSNormRotary, HyperConnectionLowRankMix, the shared
expert's fused MatMul + Split, CausalConvWithState's carry, the FP8 head) the rewritten micro-graph
is compared with the original under :func:`parity`: the largest absolute difference over every
output must be within ``rel`` times the largest magnitude of the original output (and that
magnitude must be neither vanishing nor dominated by one saturated value). Then the self-test
breaks the rewritten graph -- every floating weight the fused node reads is in turn rolled by one
along its last axis (a permuted / transposed layout) or zeroed (a dropped weight), and the named
defects are reproduced (gate and up swapped in the shared expert's concatenated weight, cos and
sin swapped) -- and asserts that :func:`parity` reports each one.

Inputs and weights are chosen so that every weight matters: non-symmetric draws (uniform scales
in [0.25, 2], weights with distinct row / column norms), scaled so the outputs are O(1) -- not
saturated by the sigmoids / SiLU, not vanishing. Tolerances (relative to max |reference|):
RMSNormRotary 1e-2, shared expert 1e-2, HyperConnection 2e-2 (fp16 reference chains),
CausalConvWithState 1e-3, FP8 head 8e-2 (FP8 E4M3 has 3 mantissa bits).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
from onnx import numpy_helper
from support.optimize_helpers import apply, run_ort, run_ref

from q38.optimize._common import RewritePass
from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.fp8_head import QuantizeFp8HeadPass
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass
from q38.optimize.shared_expert import FuseSharedExpertPass

FLOATS = {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.FLOAT8E4M3FN}


class ParityError(AssertionError):
    """The rewritten graph's outputs differ from the original's beyond the stated tolerance."""


def parity(got: list[np.ndarray], want: list[np.ndarray], rel: float) -> None:
    """Raise :class:`ParityError` unless every output is within ``rel`` x max|want| of ``want``."""
    for i, (x, y) in enumerate(zip(got, want, strict=True)):
        x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x64.shape != y64.shape or not np.all(np.isfinite(x64)):
            raise ParityError(f"output {i}: shape {x64.shape} vs {y64.shape} or non-finite values")
        scale = float(np.max(np.abs(y64)))
        err = float(np.max(np.abs(x64 - y64)))
        if err > rel * scale:
            raise ParityError(f"output {i}: max |diff| {err:.4g} > {rel} x max |ref| {scale:.4g}")


def _well_scaled(outputs: list[np.ndarray]) -> None:
    """The reference outputs are O(1) and spread: a broken weight cannot hide in saturation."""
    for y in outputs:
        a = np.abs(np.asarray(y, np.float64))
        assert 0.1 < a.max() < 50, a.max()
        assert a.std() > 0.05 * a.max(), "outputs nearly constant (saturated or vanishing)"


def _set(proto: onnx.ModelProto, **arrays: np.ndarray) -> onnx.ModelProto:
    """``proto`` with the named initializers ("." and "/" spelled "_") replaced, same dtype as before."""
    done = set()
    for init in proto.graph.initializer:
        key = init.name.replace(".", "_").replace("/", "_")
        if key in arrays:
            old = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(arrays[key].astype(old.dtype), init.name))
            done.add(key)
    assert done == set(arrays), set(arrays) - done
    return proto


def fused_weights(model: ir.Model, op: str) -> list[ir.Value]:
    """The floating initializers (more than one distinct value) the fused ``op`` nodes read."""
    found: dict[str, ir.Value] = {}
    for node in model.graph:
        if node.op_type != op:
            continue
        for v in node.inputs:
            if v is not None and v.is_initializer() and v.dtype in FLOATS and v.name:
                arr = v.const_value.numpy()  # type: ignore[union-attr]
                if arr.size > 1 and len(np.unique(arr.astype(np.float32))) > 1:
                    found[v.name] = v
    return list(found.values())


def replace_weight(value: ir.Value, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    arr = value.const_value.numpy()  # type: ignore[union-attr]
    value.const_value = ir.Tensor(np.ascontiguousarray(fn(arr)).astype(arr.dtype), name=value.name)


def _roll(a: np.ndarray) -> np.ndarray:
    return np.roll(a, 1, axis=-1)


def _zero(a: np.ndarray) -> np.ndarray:
    return np.zeros_like(a)


class Case:
    """One fused op: its pass, graph, feeds, how its rewritten graph runs, and its tolerance."""

    def __init__(self, name: str, cls: type[RewritePass], proto: Callable[[], onnx.ModelProto],
                 feeds: dict[str, np.ndarray], op: str, rel: float, *, ref: bool, **kw: object) -> None:
        self.name, self.cls, self.proto, self.feeds, self.op, self.rel, self.ref, self.kw = (
            name, cls, proto, feeds, op, rel, ref, kw)

    def want(self) -> list[np.ndarray]:
        return run_ort(self.proto(), self.feeds)

    def rewritten(self) -> ir.Model:
        model, p = apply(self.cls, self.proto(), **self.kw)
        assert p.count >= 1, [o.reason for o in p.outcomes]
        return model

    def got(self, model: ir.Model) -> list[np.ndarray]:
        return run_ref(model, self.feeds) if self.ref else run_ort(model, self.feeds)


R = np.random.default_rng(2025)


def _rms_rotary() -> onnx.ModelProto:
    r = np.random.default_rng(11)
    return _set(G.rms_rotary_model(), q_norm_weight=r.uniform(0.25, 2.0, 8))


def shared_expert_proto() -> onnx.ModelProto:
    r = np.random.default_rng(12)
    cols = np.linspace(0.5, 1.5, 8)  # distinct column norms: gate and up differ column by column
    return _set(
        G.shared_expert_model(),
        mlp_shared_expert_gate_proj_weight=0.45 * r.standard_normal((16, 8)) * cols + 0.15,
        mlp_shared_expert_up_proj_weight=0.3 * r.standard_normal((16, 8)) * cols[::-1] - 0.1,
        mlp_shared_expert_gate_weight=0.3 * r.standard_normal((16, 1)) + 0.05,
        mlp_shared_expert_down_proj_weight=0.5 * r.standard_normal((8, 16)),
    )


def _hc() -> onnx.ModelProto:
    r = np.random.default_rng(13)
    pre = "_l0_attn_hc_"
    return _set(
        G.hc_model(),
        **{f"{pre}norm_weight": r.uniform(0.25, 2.0, 32), f"{pre}down": 0.6 * r.standard_normal((32, 4)),
           f"{pre}up": 0.8 * r.standard_normal((4, 32)), f"{pre}inject": 0.6 * r.standard_normal((32, 4))},
    )


def _conv() -> onnx.ModelProto:
    r = np.random.default_rng(14)
    return _set(G.conv_carry_model(), conv_weight=0.6 * r.standard_normal((8, 1, 4)) + np.linspace(-0.3, 0.3, 4),
                conv_bias=r.uniform(-0.5, 0.5, 8))


def _head() -> onnx.ModelProto:
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 200])
    w = 0.1 * np.random.default_rng(15).standard_normal((200, 16)) * np.linspace(0.5, 2.0, 16)
    g.op("MatMul", [n, g.init("lm_head.weight", w.astype(np.float16))], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 16])
    return g.model(ms=False)


CASES = [
    Case("rms_norm_rotary", FuseRMSNormRotaryPass, _rms_rotary,
         {"x": R.standard_normal((2, 3, 16)).astype(np.float16), "position_ids": np.array([[0, 1, 2], [5, 6, 7]])},
         "RMSNormRotary", 1e-2, ref=True),
    Case("shared_expert", FuseSharedExpertPass, shared_expert_proto,
         {"h": (1.5 * R.standard_normal((2, 3, 16))).astype(np.float16)}, "MatMul", 1e-2, ref=False),
    Case("hyper_connection", FuseHyperConnectionPass, _hc,
         {"streams": (1.5 * R.standard_normal((2, 3, 32))).astype(np.float16)}, "HyperConnectionLowRankMix", 2e-2,
         ref=True),
    Case("causal_conv_carry", FuseCausalConvStatePass, _conv,
         {"x": R.standard_normal((2, 5, 8)).astype(np.float16), "past.0.conv": R.standard_normal((2, 8, 3)).astype(np.float16)},
         "CausalConvWithState", 1e-3, ref=False, target="cpu"),
    Case("fp8_head", QuantizeFp8HeadPass, _head, {"n": R.standard_normal((1, 2, 200)).astype(np.float16)},
         "MatMulBlockQuantizedFp8Weight", 8e-2, ref=True),
]
IDS = [c.name for c in CASES]

CASE = {c.name: c for c in CASES}
BREAKAGES = [_roll, _zero]
BREAKAGE_IDS = ["rolled", "dropped"]


def assert_rewrite_parity(case: Case) -> None:
    """The real rewrite of ``case`` passes :func:`parity` against well-scaled reference outputs."""
    want = case.want()
    _well_scaled(want)
    parity(case.got(case.rewritten()), want, case.rel)


def assert_every_fused_weight_broken_fails(case: Case, breakage: Callable[[np.ndarray], np.ndarray]) -> None:
    """Every floating weight the fused op reads, broken by ``breakage`` in turn, fails :func:`parity`."""
    want = case.want()
    names = [v.name for v in fused_weights(case.rewritten(), case.op)]
    assert names, f"{case.op} reads no floating weight"
    for name in names:
        model = case.rewritten()
        replace_weight(next(v for v in fused_weights(model, case.op) if v.name == name), breakage)
        with pytest.raises(ParityError):
            parity(case.got(model), want, case.rel)



def parity_tests(name: str) -> tuple[Callable[..., None], Callable[..., None]]:
    """The two parity tests a pass module binds at its top level for its case ``CASE[name]``:
    the real rewrite passes parity, and every broken variant of every fused weight fails it."""
    case = CASE[name]

    @pytest.mark.parametrize("case", [case], ids=[case.name])
    def test_real_rewrite_passes_parity(case: Case) -> None:
        assert_rewrite_parity(case)

    @pytest.mark.parametrize("case", [case], ids=[case.name])
    @pytest.mark.parametrize("breakage", BREAKAGES, ids=BREAKAGE_IDS)
    def test_every_fused_weight_broken_fails_parity(case: Case, breakage: Callable[[np.ndarray], np.ndarray]) -> None:
        assert_every_fused_weight_broken_fails(case, breakage)

    return test_real_rewrite_passes_parity, test_every_fused_weight_broken_fails_parity
