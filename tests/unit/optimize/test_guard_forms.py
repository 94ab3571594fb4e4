"""Forms and guards the mutation sample of q38/optimize still found unguarded (issue 16, round 2).

Each test builds the graph one guard (or one recognised form) exists for and asserts what it
protects: the exact ``--explain`` outcome, no (wrong) fusion with the graph unchanged, no crash,
or, for a form that must fuse, the fusion with numerical parity against the unfused graph on
onnxruntime (``support.optimize_property_kit.check_rewrite``, the property tests' oracle).
Invariants:

* RMSNorm: ``Mul(Reciprocal(rms), r)`` (the reciprocal first) is the same normalization as
  ``Mul(r, Reciprocal(rms))`` and fuses; a rotary Slice whose ends are not constant is declined,
  never read as one; broadcast ``[1, S]`` position ids are refused when the 4-D input says
  ``[B, S]`` (not only when the 3-D source does);
* hyper-connection: a packed ``[down|inject]`` Split along another axis than the last, or with
  sizes that do not add up to the packed width, is not fused (with the rank known or not: no
  crash); the inject weight is held to the constant-initializer and one-T guards like the others;
* FP8 head: a weight from a Constant node is declined even when onnx-ir knows its value; an
  untyped weight (a graph built in onnx_ir) behind untyped values is declined
  with its reason (the dtype is unknown), never a crash;
* shared expert: a ``Gemm`` projection (alpha 0.5) is not a MatMul: neither as the gate (no
  candidate) nor as the shared gate (declined); fusing it would drop its alpha;
* CausalConvWithState: a carry Slice that spells out its unit step fuses like one without;
* ``optimize_model`` hands the caller's weight reader to every pass (package code reads pool
  bytes onnx-ir cannot reach).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
import support.optimize_property_kit as K
from onnx import helper
from support.optimize_helpers import apply

from q38.optimize.fp8_head import QuantizeFp8HeadPass
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass
from q38.optimize.shared_expert import FuseSharedExpertPass

DIMS = {"B": 2, "S": 3, "T": 5}


def _node(proto: onnx.ModelProto, op: str, k: int = 0) -> onnx.NodeProto:
    return [n for n in proto.graph.node if n.op_type == op][k]


def _lines(p: object) -> list[str]:
    return [o.line() for o in p.outcomes]  # type: ignore[attr-defined]


# -- RMSNorm + rotary ----------------------------------------------------------------------------------
def test_rms_with_the_reciprocal_as_first_factor_fuses_with_parity() -> None:
    proto = G.rms_rotary_model(alternate=True)
    norm = next(n for n in proto.graph.node if n.op_type == "Mul"
                and any(p.op_type == "Reciprocal" and p.output[0] in n.input for p in proto.graph.node))
    norm.input[:] = [norm.input[1], norm.input[0]]  # Mul(Reciprocal(rms), r)
    model, p = K.check_rewrite(proto, FuseRMSNormRotaryPass, K.feeds_for(proto, DIMS, 0))
    assert _lines(p) == ["rms_norm_rotary: /q/Concat: fused"]
    assert [n.op_type for n in model.graph] == ["Reshape", "RMSNormRotary"]


def test_rms_rotary_slice_with_runtime_ends_is_declined() -> None:
    proto = G.rms_rotary_model()
    K.to_input(proto, "/q.e0")  # the first half's end comes in at run time
    before = K.signature(proto)
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert _lines(p) == [("rms_norm_rotary: /q/Concat: declined: rotary Slices are not constant "
                         "single-axis slices of the last axis")]
    assert K.signature(ir.to_proto(model)) == before


def test_rms_broadcast_position_ids_are_refused_against_the_four_d_input() -> None:
    """The head-split input r is typed [B, S, N, D], so [B, S] comes from r itself (not from the
    3-D x behind it): [1, S] position ids are a broadcast the op does not take."""
    proto = G.rms_rotary_model()
    r = next(n for n in proto.graph.node if n.name == "/q/Reshape")
    proto.graph.value_info.append(helper.make_tensor_value_info(r.output[0], G.F16, ["B", "S", 2, 8]))
    pos = next(i for i in proto.graph.input if i.name == "position_ids")
    pos.CopyFrom(helper.make_tensor_value_info("position_ids", G.I64, [1, "S"]))
    _model, p = K.check_rewrite(proto, FuseRMSNormRotaryPass, K.feeds_for(proto, DIMS, 0))
    assert _lines(p) == [("rms_norm_rotary: /q/Concat: declined: position ids shape [1,S] is not the "
                         "input's [B, S] = [B, S]")]
    # and with [B, S] position ids the same graph fuses (the guard is about the broadcast only)
    pos.CopyFrom(helper.make_tensor_value_info("position_ids", G.I64, ["B", "S"]))
    _, p = K.check_rewrite(proto, FuseRMSNormRotaryPass, K.feeds_for(proto, DIMS, 0))
    assert p.count == 1


# -- hyper-connection: the packed [down|inject] projection -----------------------------------------------
def _first_mix(proto: onnx.ModelProto) -> list[tuple[str, str, list[str], list[str]]]:
    return [(n.name, n.op_type, list(n.input), list(n.output)) for n in proto.graph.node if n.name.startswith("/l0/")]


def _packed_declined(proto: onnx.ModelProto, reason: str) -> None:
    before = _first_mix(proto)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _lines(p)[0] == f"hyper_connection: /l0/hc/HyperConnectionPreMix: declined: {reason}"
    assert p.count == 1  # the final mixer still fuses: the decline is about the first mix only
    assert _first_mix(ir.to_proto(model)) == before


@pytest.mark.parametrize("rank_known", [True, False])
def test_packed_split_along_the_sequence_axis_is_declined(rank_known: bool) -> None:
    """Split(MatMul(hn, [down|inject]), [R, C], axis=1) cuts the sequence, not the columns."""
    proto = G.hc_builder_model(blocks=1)
    split = next(n for n in proto.graph.node if n.name == "/l0/hc/Split")
    K.set_attr(split, "axis", 1)
    if rank_known:
        proto.graph.value_info.append(helper.make_tensor_value_info(split.input[0], G.F16, ["B", 8, 8]))
    _packed_declined(proto, "packed projection Split axis 1 is not the last axis")


def test_packed_split_sizes_that_do_not_add_up_to_the_width_are_declined() -> None:
    """A packed weight one column wider than [R, C]: the graph is invalid (ORT refuses the
    Split), and fusing it would silently make it a valid one computing other numbers."""
    proto = G.hc_builder_model(blocks=1)
    name = "/l0/hc.input_mix_down_block_inject"
    w = onnx.numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == name))
    K.set_init(proto, name, np.concatenate([w, w[:, :1]], axis=1))
    with pytest.raises(Exception, match="split"):
        K.session(proto).run(None, K.feeds_for(proto, DIMS, 0))
    _packed_declined(proto, f"packed projection Split sizes [4, 4] do not cut {name!r} (width 9) "
                            "into [down, inject]")


@pytest.mark.parametrize("inject", ["graph_input", "float32"])
def test_inject_weight_is_held_to_the_weight_guards(inject: str) -> None:
    """The post-gate inject projection's weight, like down/up/scale: a constant initializer of the
    streams' dtype (LowRankMix takes one T and constant weights)."""
    proto = G.hc_model()
    name = "/l0/attn_hc.inject"
    if inject == "graph_input":
        K.to_input(proto, name)
        reason = "a hyper-connection weight is not a constant initializer"
    else:
        w = onnx.numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == name))
        K.set_init(proto, name, w.astype(np.float32))
        reason = f"weight {name!r} dtype FLOAT != streams dtype FLOAT16 (LowRankMix needs one T)"
    before = K.signature(proto)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _lines(p) == [f"hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: {reason}"]
    assert K.signature(ir.to_proto(model)) == before


# -- FP8 head --------------------------------------------------------------------------------------------
def test_fp8_head_with_an_untyped_weight_behind_untyped_values_is_declined() -> None:
    """A graph built in onnx_ir may give an initializer a shape and no type (``ir.Value`` does not
    take the type from its tensor); with the activation behind an Identity and the output untyped
    nothing says the compute dtype: declined with that reason, never a crash."""
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 64])
    a = g.o("Identity", [n], name="/norm/Identity")
    w = g.init("lm_head.weight", np.ones((64, 8), np.float16))
    g.op("MatMul", [a, w], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 8])
    model = ir.from_proto(g.model(ms=False))
    model.graph.initializers[w].type = None
    model.graph.outputs[0].type = None
    p = QuantizeFp8HeadPass()
    p(model)
    assert _lines(p) == ["fp8_head: /lm_head/MatMul: declined: activation dtype None is not float16/bfloat16"]
    assert [n.op_type for n in model.graph] == ["Identity", "MatMul"]
    assert list(model.graph.initializers) == [w]


@pytest.mark.parametrize("folded", [False, True])
def test_fp8_head_weight_from_a_constant_node_is_declined(folded: bool) -> None:
    """W from a Constant node is no initializer, even when onnx-ir knows its value (``folded``:
    ``const_value`` set on the node's output, as constant folding in onnx-ir/onnxscript leaves
    it): the pattern is W a constant initializer (the FP8 copies record it as their source), so it
    is declined and the graph left unchanged."""
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 64])
    arr = (0.1 * G.rng(1).standard_normal((64, 8))).astype(np.float16)
    g.op("Constant", [], outs=["lm_head.weight"], name="/lm_head/Constant", value=onnx.numpy_helper.from_array(arr))
    g.op("MatMul", [n, "lm_head.weight"], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 8])
    proto = g.model(ms=False)
    proto.graph.value_info.append(helper.make_tensor_value_info("lm_head.weight", G.F16, [64, 8]))
    model = ir.from_proto(proto)
    if folded:
        model.graph.node(0).outputs[0].const_value = ir.Tensor(arr, name="lm_head.weight")
    p = QuantizeFp8HeadPass()
    p(model)
    assert _lines(p) == ["fp8_head: /lm_head/MatMul: declined: head weight is not a constant initializer"]
    assert [n.op_type for n in model.graph] == ["Constant", "MatMul"] and not model.graph.initializers


# -- shared expert -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["gate", "shared_gate"])
def test_shared_expert_gemm_projection_is_not_a_matmul(role: str) -> None:
    """Gemm(h, W, alpha=0.5) on [T, H] tokens computes half of MatMul(h, W): it is no projection
    the fused MatMul + Split can take over."""
    proto = G.shared_expert_model()
    proto.graph.input[0].CopyFrom(helper.make_tensor_value_info("h", G.F16, ["T", 16]))
    proto.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", G.F16, ["T", 16]))
    name = {"gate": "/mlp/shared/gate/MatMul", "shared_gate": "/mlp/shared/sgate/MatMul"}[role]
    node = next(n for n in proto.graph.node if n.name == name)
    node.op_type = "Gemm"
    K.set_attr(node, "alpha", 0.5)
    model, p = K.check_rewrite(proto, FuseSharedExpertPass, K.feeds_for(proto, DIMS, 0))
    assert p.count == 0
    if role == "gate":
        assert _lines(p) == []  # the SiLU's input is no MatMul: no candidate at all
    else:
        assert _lines(p) == [("shared_expert: /mlp/shared/gate/MatMul: declined: 0 shared-gate MatMul -> "
                             "Sigmoid projections read the input, not one")]
    assert sum(n.op_type == "Gemm" for n in model.graph) == 1


# -- CausalConvWithState carry: explicit unit steps ------------------------------------------------------
def test_conv_carry_slice_with_explicit_unit_steps_fuses_with_parity() -> None:
    """Slice(hist, -3, INT64_MAX, -1, steps=[1]) is the same trailing slice as without steps."""
    from q38.optimize.causal_conv_state import FuseCausalConvStatePass

    proto = G.conv_carry_model()
    sl = _node(proto, "Slice")
    proto.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray([1], np.int64), "carry.steps"))
    sl.input.append("carry.steps")
    _, p = K.check_rewrite(proto, FuseCausalConvStatePass, K.feeds_for(proto, DIMS, 0), atol=0)
    assert _lines(p) == ["causal_conv_state: /conv/CausalConvWithState: fused"]


# -- the pipeline reads weights through the caller's reader ----------------------------------------------
def test_optimize_model_reads_weights_through_the_callers_reader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Package code passes its own reader (the bytes live in its pool): every pass must read
    through it. Here the weights' external file does not exist where onnx-ir would look."""
    from q38.optimize.pipeline import optimize_model

    proto = G.shared_expert_model()
    model = ir.from_proto(proto)
    arrays = {}
    for name, value in model.graph.initializers.items():
        arr = value.const_value.numpy()  # type: ignore[union-attr]
        arrays[name] = arr
        value.const_value = ir.ExternalTensor("pool.bin", 0, arr.nbytes, value.dtype,  # type: ignore[arg-type]
                                              shape=ir.Shape(arr.shape), name=name, base_dir=tmp_path)
    read: list[str] = []

    def reader(value: ir.Value) -> np.ndarray:
        read.append(value.name or "")
        return arrays[value.name or ""]

    result = optimize_model(model, passes=["shared_expert"], reader=reader)
    assert result.rewrites == {"shared_expert": 1}
    assert sorted(read) == sorted(n for n in arrays if "down_proj" not in n)
    fused = next(v for v in model.graph.initializers.values() if v.name.endswith(".fused"))
    np.testing.assert_array_equal(fused.const_value.numpy(), np.concatenate(  # type: ignore[union-attr]
        [arrays[f"mlp.shared_expert.{k}.weight"] for k in ("gate_proj", "up_proj")]
        + [arrays["mlp.shared_expert_gate.weight"]], axis=1))
