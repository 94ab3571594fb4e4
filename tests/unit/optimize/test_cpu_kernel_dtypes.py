"""``--target cpu`` consults the probed CPU kernels WITH the dtype of every node a rewrite produces.

A rewrite on target cpu is declined unless :meth:`q38.ort_kernels.CpuKernels.has` says the
installed onnxruntime runs each produced node (op, domain) at its compute dtype: an operator whose
CPU kernel exists for float16 only must not be produced for bfloat16, and vice versa. The tables
below are the installed ORT's own (probed), or that table with one operator's verdicts replaced,
so each test pins the dtype being asked (a check by op name alone fails them).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
import support.optimize_graphs as G
from support.optimize_helpers import apply, ops, reasons

from q38._ops import MS_DOMAIN
from q38.optimize import optimize_model
from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.fp8_head import QuantizeFp8HeadPass
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass
from q38.optimize.shared_expert import FuseSharedExpertPass
from q38.ort_kernels import CpuKernels, OpKernels, cpu_kernels

MS = MS_DOMAIN


def _table(op: str, **verdicts: str) -> CpuKernels:
    """The installed ORT's table with ``com.microsoft::op`` probed as ``verdicts`` (dtype -> verdict)."""
    base = cpu_kernels()
    changed = dict(base.ops)
    changed[(MS, op)] = OpKernels("output:0", dict(verdicts), (), {})
    return dataclasses.replace(base, ops=changed)


def _head(*, bfloat16: bool = False) -> onnx.ModelProto:
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 200])
    w = g.init("lm_head.weight", (0.1 * G.rng(0).standard_normal((200, 16))).astype(np.float16))
    g.op("MatMul", [n, w], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 16])
    proto = g.model(ms=False)
    return G.as_bfloat16(proto) if bfloat16 else proto


# -- the installed ORT's own table -------------------------------------------------------------------
def test_installed_table_has_conv_for_float16_not_bfloat16() -> None:
    """The premise of the conv tests below, from the probe itself (ORT 1.31 / 1.32 CPU)."""
    k = cpu_kernels()
    assert k.has("CausalConvWithState", MS, "float16") and not k.has("CausalConvWithState", MS, "bfloat16")
    assert k.has("MatMul", "", "float16") and not k.has("MatMul", "", "bfloat16")


@pytest.mark.parametrize("form", ["channels_first", "channels_last"])
def test_conv_carry_on_cpu_fuses_float16_and_declines_bfloat16(form: str) -> None:
    fp16 = G.conv_carry_model(form=form)
    _, p16 = apply(FuseCausalConvStatePass, fp16, target="cpu")
    assert p16.count == 1 and reasons(p16) == []
    bf16 = G.as_bfloat16(fp16)
    model, p = apply(FuseCausalConvStatePass, bf16, target="cpu")
    assert p.count == 0
    assert reasons(p) == ["no CPU kernel for CausalConvWithState for bfloat16 (target cpu)"]
    # Nothing changed: the carry chain is still there, node for node.
    assert [(n.op_type, n.name) for n in model.graph] == [(n.op_type, n.name) for n in bf16.graph.node]
    # target cuda has no such limit: the same bf16 graph fuses.
    assert apply(FuseCausalConvStatePass, bf16, target="cuda")[1].count == 1


def test_shared_expert_on_cpu_fuses_float16_and_declines_bfloat16() -> None:
    fp16 = G.shared_expert_model()
    assert apply(FuseSharedExpertPass, fp16, target="cpu")[1].count == 1
    model, p = apply(FuseSharedExpertPass, G.as_bfloat16(fp16), target="cpu")
    assert p.count == 0 and reasons(p) == ["no CPU kernel for MatMul for bfloat16 (target cpu)"]
    assert ops(model)[("", "MatMul")] == 4 and ("", "Split") not in ops(model)


# -- a table where the fused op HAS a CPU kernel, for one dtype only ----------------------------------
@pytest.mark.parametrize("kernel_for,runs", [("float16", True), ("bfloat16", False)])
def test_rms_norm_rotary_on_cpu_follows_the_dtype_of_its_kernel(kernel_for: str, runs: bool) -> None:
    other = "bfloat16" if kernel_for == "float16" else "float16"
    table = _table("RMSNormRotary", **{kernel_for: "kernel", other: "none"})
    model, p = apply(FuseRMSNormRotaryPass, G.rms_rotary_model(), target="cpu", kernels=table)
    if runs:
        assert p.count == 1 and reasons(p) == [] and ops(model)[(MS, "RMSNormRotary")] == 1
    else:
        assert p.count == 0 and (MS, "RMSNormRotary") not in ops(model)
        assert reasons(p) == ["no CPU kernel for RMSNormRotary for float16 (target cpu)"]


def test_rms_norm_rotary_bfloat16_declined_by_a_float16_only_kernel() -> None:
    table = _table("RMSNormRotary", float16="kernel", bfloat16="none")
    _, p = apply(FuseRMSNormRotaryPass, G.as_bfloat16(G.rms_rotary_model()), target="cpu", kernels=table)
    assert p.count == 0 and reasons(p) == ["no CPU kernel for RMSNormRotary for bfloat16 (target cpu)"]
    # The same table on target cuda is not consulted.
    assert apply(FuseRMSNormRotaryPass, G.as_bfloat16(G.rms_rotary_model()), target="cuda", kernels=table)[1].count == 1


@pytest.mark.parametrize("kernel_for,runs", [("float16", True), ("float", False)])
def test_hyper_connection_on_cpu_follows_the_dtype_of_its_kernel(kernel_for: str, runs: bool) -> None:
    table = _table("HyperConnectionLowRankMix", **{kernel_for: "kernel", "float16" if not runs else "float": "none"})
    model, p = apply(FuseHyperConnectionPass, G.hc_model(two_blocks=True), target="cpu", kernels=table)
    if runs:  # both mixes, and the second one's prologue (the PostMix between them) absorbed
        assert p.count == 3 and reasons(p) == []
        assert ops(model)[(MS, "HyperConnectionLowRankMix")] == 2
    else:
        assert p.count == 0 and (MS, "HyperConnectionLowRankMix") not in ops(model)
        assert reasons(p) == ["no CPU kernel for HyperConnectionLowRankMix for float16 (target cpu)"] * 2


@pytest.mark.parametrize("bfloat16", [False, True])
def test_fp8_head_on_cpu_follows_the_activation_dtype(bfloat16: bool) -> None:
    table = _table("MatMulBlockQuantizedFp8Weight", bfloat16="kernel", float16="none")
    model, p = apply(QuantizeFp8HeadPass, _head(bfloat16=bfloat16), target="cpu", kernels=table)
    if bfloat16:
        assert p.count == 1 and ops(model) == {(MS, "MatMulBlockQuantizedFp8Weight"): 1}
    else:
        assert p.count == 0 and ops(model) == {("", "MatMul"): 1}
        assert reasons(p) == ["no CPU kernel for MatMulBlockQuantizedFp8Weight for float16 (target cpu)"]


def test_op_with_no_cpu_kernel_at_all_is_named_without_a_dtype() -> None:
    table = _table("RMSNormRotary", float16="none", bfloat16="none", float="none")
    _, p = apply(FuseRMSNormRotaryPass, G.rms_rotary_model(), target="cpu", kernels=table)
    assert reasons(p) == ["no CPU kernel for RMSNormRotary (target cpu)"]


def test_optimize_model_passes_the_table_to_every_pass() -> None:
    import onnx_ir as ir

    table = _table("RMSNormRotary", float16="kernel")
    model = ir.from_proto(G.rms_rotary_model())
    result = optimize_model(model, target="cpu", kernels=table)
    assert result.rewrites["rms_norm_rotary"] == 1
    model = ir.from_proto(G.rms_rotary_model())
    assert optimize_model(model, target="cpu").rewrites["rms_norm_rotary"] == 0  # the installed ORT has none
