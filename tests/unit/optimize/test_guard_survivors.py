"""One failing-on-defect test per optimizer guard that mutation testing found unguarded (issue 16).

Each test builds the graph the guard exists for and asserts the behaviour the guard protects: no
(wrong) fusion — exact operator counts — plus numerical parity with the unfused graph where the
wrong fusion would compute something else, or no crash where the defect crashes. Invariants:

* PostMix prologue: a PostMix with another num_branches, a (..., C, H) gate, an operand of another
  dtype, or a captured output is not absorbed;
* LowRankMix that already has a prologue or a streams output is not fused again, and re-running
  the pass on its own output changes nothing;
* CausalConvWithState: input rank other than 3, one of input/state transposed, dilation 0 (which
  would fuse with history 0), a carry Concat on the channel axis and a present_state that already
  has readers are declined;
* check_private tells nodes apart by identity: with every name empty, an extra reader of an
  intermediate still declines the fusion;
* hyper_connection places its fused node before a reader of the streams that sits between the
  PostMix and the next mix, with no sort; the sort fallback runs when no sorted place exists;
* fresh names avoid names used inside subgraphs; remove_dead keeps a node whose output a
  subgraph captures.
"""

from __future__ import annotations

import collections
import logging

import numpy as np
import onnx
import pytest
import support.optimize_graphs as G
import support.optimize_property_kit as K
from onnx import helper
from support.optimize_helpers import apply, close, ops, reasons, run_ort, run_ref

from q38.optimize._common import check_topological
from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass

MS = "com.microsoft"
LRM = (MS, "HyperConnectionLowRankMix")
STREAMS = np.random.default_rng(3).standard_normal((2, 3, 32)).astype(np.float16)


def _node(proto: onnx.ModelProto, op: str, k: int = 0) -> onnx.NodeProto:
    return [n for n in proto.graph.node if n.op_type == op][k]


def _prologues(model) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for n in model.graph if n.op_type == LRM[1] and len(n.inputs) > 5 and n.inputs[5] is not None)


# -- PostMix prologue guards -------------------------------------------------------------------------
def test_post_mix_with_other_num_branches_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    K.set_attr(_node(proto, "HyperConnectionPostMix", 0), "num_branches", 2)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0 and ops(model)[LRM] == 2
    assert "PostMix num_branches differs from the LowRankMix" in reasons(p)
    post = next(n for n in model.graph if n.op_type == "HyperConnectionPostMix" and n.outputs[0].name == "streams_1")
    assert post.attributes["num_branches"].value == 2


def test_post_mix_with_per_feature_gate_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    post = _node(proto, "HyperConnectionPostMix", 0)
    post.input[2] = "gate_ch"
    proto.graph.input.append(helper.make_tensor_value_info("gate_ch", G.F16, ["B", "S", 4, 8]))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0
    assert any(r.startswith("PostMix post_mix shape") for r in reasons(p))


def test_post_mix_operand_of_other_dtype_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    post = _node(proto, "HyperConnectionPostMix", 0)
    cast = helper.make_node("Cast", [post.input[1]], ["blk_f32"], to=onnx.TensorProto.FLOAT, name="/cast")
    proto.graph.node.insert(list(proto.graph.node).index(post), cast)
    post.input[1] = "blk_f32"
    proto.graph.value_info.append(helper.make_tensor_value_info("blk_f32", onnx.TensorProto.FLOAT, ["B", "S", 8]))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0
    assert "PostMix operand 'blk_f32' dtype differs from the streams" in reasons(p)


def test_post_mix_output_captured_by_a_subgraph_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    K.if_capture(proto, "streams_1")
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0
    assert "PostMix output 'streams_1' is captured by a subgraph" in reasons(p)
    post = next(n for n in model.graph if n.op_type == "HyperConnectionPostMix" and n.outputs[0].name == "streams_1")
    assert post.outputs[0].uses()


# -- LowRankMix already fused ------------------------------------------------------------------------
def _fused_mix_after_post(*, streams_out: bool) -> onnx.ModelProto:
    """X = PostMix(S, b0, g0); LowRankMix(X, w..., b1, g1) with a prologue of its own."""
    C, H, R = 4, 8, 4
    r = G.rng(5)
    g = G.G()
    s = g.inp("streams", G.F16, ["B", "S", C * H])
    b0 = g.inp("b0", G.F16, ["B", "S", H])
    g0 = g.inp("g0", G.F16, ["B", "S", C])
    b1 = g.inp("b1", G.F16, ["B", "S", H])
    g1 = g.inp("g1", G.F16, ["B", "S", C])
    w = [g.init(f"w{i}", (0.2 * r.standard_normal(shape)).astype(np.float16))
         for i, shape in enumerate([(C * H,), (C * H, R), (R, C * H), (C * H, C)])]
    x = g.op("HyperConnectionPostMix", [s, b0, g0], domain=MS, num_branches=C, name="/post", outs=["x"])[0]
    outs = ["pre", "pg", "s_out"] if streams_out else ["pre", "pg"]
    g.op("HyperConnectionLowRankMix", [x, *w, b1, g1], domain=MS, num_branches=C, name="/mix", outs=outs,
         epsilon=1e-5, silu_alpha=1.0, reduction_scale=0.25, gate_div=2.0, gate_mul=2.0)
    for o in outs:
        g.out(o, G.F16, None)
    return g.model()


@pytest.mark.parametrize("streams_out,reason", [
    (True, "LowRankMix already has a streams output"), (False, "LowRankMix already has a prologue"),
])
def test_low_rank_mix_with_a_prologue_is_not_fused_again(streams_out: bool, reason: str) -> None:
    proto = _fused_mix_after_post(streams_out=streams_out)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 0 and reasons(p) == [reason]
    assert ops(model) == {(MS, "HyperConnectionPostMix"): 1, LRM: 1}
    feeds = K.feeds_for(proto, {"B": 2, "S": 3}, 0)
    close(run_ref(model, feeds), run_ref(onnx_ir_model(proto), feeds))


def onnx_ir_model(proto: onnx.ModelProto):  # type: ignore[no-untyped-def]
    import onnx_ir as ir

    return ir.from_proto(proto)


def test_rerunning_the_hyper_connection_pass_changes_nothing() -> None:
    import onnx_ir as ir

    once, p1 = apply(FuseHyperConnectionPass, G.hc_model(two_blocks=True))
    assert p1.count == 3
    proto = ir.to_proto(once)
    twice, p2 = apply(FuseHyperConnectionPass, proto)
    assert p2.count == 0
    assert K.signature(ir.to_proto(twice)) == K.signature(proto)


# -- CausalConvWithState guards ---------------------------------------------------------------------
def _conv_decline(proto: onnx.ModelProto, reason: str) -> None:
    before = K.signature(proto)
    import onnx_ir as ir

    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 0 and reasons(p) == [reason]
    assert K.signature(ir.to_proto(model)) == before


def test_conv_input_of_rank_four_is_declined() -> None:
    proto = G.conv_carry_model()
    xT = _node(proto, "Transpose").output[0]
    proto.graph.value_info.append(helper.make_tensor_value_info(xT, G.F16, ["B", 8, "S", 1]))
    _conv_decline(proto, "input rank 4 is not 3")


def test_conv_with_only_the_state_transposed_is_declined() -> None:
    g = G.G()
    r = G.rng(0)
    w = g.init("conv.weight", (0.5 * r.standard_normal((8, 1, 4))).astype(np.float16))
    b = g.init("conv.bias", np.zeros(8, np.float16))
    x = g.inp("x", G.F16, ["B", 8, "S"])
    past = g.inp("past.0.conv", G.F16, ["B", 3, 8])
    pT = g.o("Transpose", [past], perm=[0, 2, 1])
    g.op("CausalConvWithState", [x, w, b, pT], 2, domain=MS, name="/conv", outs=["y", "st"], activation="silu")
    hist = g.o("Concat", [pT, x], axis=-1)
    g.op("Slice", [hist, g.ints("st0", [-3]), g.ints("en", [G.INT64_MAX]), g.ints("ax", [-1])], outs=["present.0.conv"])
    g.out("y", G.F16, None)
    g.out("present.0.conv", G.F16, None)
    _conv_decline(g.model(), "input and state layouts differ (one transposed, one not)")


def test_conv_with_dilation_zero_is_declined_not_fused_with_history_zero() -> None:
    proto = G.conv_carry_model(dilation=0, hist=0)
    _conv_decline(proto, "dilation=0 is not >= 1")


def test_conv_carry_concat_on_the_channel_axis_is_declined() -> None:
    proto = G.conv_carry_model(S=3, K=4)
    K.set_attr(_node(proto, "Concat"), "axis", 1)
    _conv_decline(proto, "carry Concat axis 1 is not the sequence axis")
    feeds = {"x": STREAMS[:, :, :8], "past.0.conv": STREAMS[:, :3, :8].transpose(0, 2, 1).copy()}
    assert run_ort(proto, feeds)[1].shape == (2, 16, 3)  # the channel-axis carry: not the op's state


def test_conv_whose_present_state_already_has_readers_is_declined() -> None:
    proto = G.conv_carry_model()
    K.extra_consumer(proto, "conv_state_unused")
    _conv_decline(proto, "present_state output already has consumers")


# -- identity, placement, names, captures -----------------------------------------------------------
def test_extra_reader_with_an_empty_name_still_declines() -> None:
    proto = G.hc_model()
    hn = _node(proto, "BranchwiseRMSNorm").output[0]
    K.extra_consumer(proto, hn)
    for node in proto.graph.node:
        node.name = ""
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 0 and ops(model).get(LRM, 0) == 0
    assert reasons(p) == [f"intermediate {hn!r} has another consumer (ReduceSum '')"]
    close(run_ort(ir_to_proto(model), {"streams": STREAMS}), run_ort(proto, {"streams": STREAMS}))


def ir_to_proto(model):  # type: ignore[no-untyped-def]
    import onnx_ir as ir

    return ir.to_proto(model)


def test_streams_reader_between_post_mix_and_next_mix_needs_no_sort() -> None:
    proto = G.hc_model(two_blocks=True)
    K.extra_consumer(proto, "streams_1")
    probe = [n for n in proto.graph.node if n.name.startswith("extra/")]
    for n in probe:  # move the reader right after the PostMix that produces streams_1
        proto.graph.node.remove(n)
    at = [n.output[0] for n in proto.graph.node].index("streams_1") + 1
    for i, n in enumerate(probe):
        proto.graph.node.insert(at + i, n)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 3 and p.sorted == 0 and _prologues(model) == 1
    assert check_topological(model.graph) is None
    close(run_ref(model, {"streams": STREAMS}), run_ort(proto, {"streams": STREAMS}), atol=3e-2)


def test_prologue_with_late_weights_falls_back_to_one_sort() -> None:
    proto = _fused_mix_after_post(streams_out=False)
    mix = _node(proto, "HyperConnectionLowRankMix")
    mix.input[5] = mix.input[6] = ""  # no prologue yet: a candidate
    del mix.input[5:]
    # the up weight comes from a node placed after a reader of the PostMix output
    up = mix.input[3]
    nodes = list(proto.graph.node)
    reader = helper.make_node("Identity", ["x"], ["x_probe"], name="/probe")
    late = helper.make_node("Identity", [up], ["up_late"], name="/late")
    mix.input[3] = "up_late"
    del proto.graph.node[:]
    proto.graph.node.extend([nodes[0], reader, late, *nodes[1:]])
    proto.graph.output.append(helper.make_tensor_value_info("x_probe", G.F16, None))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 0  # the weight is no initializer: a LowRankMix made by hand, left alone
    assert check_topological(model.graph) is None


def test_fresh_names_avoid_names_inside_subgraphs() -> None:
    proto = G.rms_rotary_model()
    body = helper.make_graph([helper.make_node("Identity", ["q_norm.weight"], ["q_norm.weight_fp32"])], "b", [],
                             [helper.make_tensor_value_info("q_norm.weight_fp32", G.F16, None)])
    proto.graph.input.append(helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []))
    proto.graph.node.append(helper.make_node("If", ["cond"], ["w_if"], then_branch=body, else_branch=body))
    proto.graph.output.append(helper.make_tensor_value_info("w_if", G.F16, None))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert p.count == 1
    fused = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert fused.inputs[1].name == "q_norm.weight_fp32_1"  # the body's name is taken
    names = collections.Counter(v.name for n in model.graph for v in n.outputs)
    assert all(c == 1 for c in names.values())


def test_remove_dead_keeps_a_shared_node_whose_output_a_subgraph_captures() -> None:
    proto = G.rms_rotary_model()
    c = _node(proto, "Unsqueeze").output[0]
    K.if_capture(proto, c)
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert p.count == 1
    assert check_topological(model.graph) is None
    kept = [n for n in model.graph if n.op_type == "Unsqueeze"]
    assert [n.outputs[0].name for n in kept] == [c]
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 16)).astype(np.float16),
             "position_ids": np.array([[0, 1, 2], [3, 4, 5]]), "cond": np.array(True)}
    close(run_ref(model, feeds), run_ort(proto, feeds))


# -- survivors of `nox -s mutation -- q38/optimize` (node positions) ---------------------------------
def test_an_unnamed_anchor_is_described_by_its_position_in_the_graph() -> None:
    """``--explain`` names an unnamed candidate by op and index (NodeOrder.index), a named one by name."""
    proto = G.conv_carry_model(state_window=1)  # declined: non-default attribute
    for node in proto.graph.node:
        node.name = ""
    idx = next(i for i, n in enumerate(proto.graph.node) if n.op_type == "CausalConvWithState")
    assert idx > 1
    _, p = apply(FuseCausalConvStatePass, proto)
    assert [(o.anchor, o.applied) for o in p.outcomes] == [(f"<unnamed CausalConvWithState #{idx}>", False)]
    _, p = apply(FuseCausalConvStatePass, G.conv_carry_model(state_window=1))
    assert [o.anchor for o in p.outcomes] == ["/conv/CausalConvWithState"]


def test_conv_stays_in_place_when_every_reader_of_the_state_follows_it() -> None:
    """The conv moves up only for a reader that precedes it: a reader after it -- here inside an
    If body, positioned through its If -- leaves the order as it was, with no sort."""
    proto = G.conv_carry_model()
    g = proto.graph
    conv_idx = next(i for i, n in enumerate(g.node) if n.op_type == "CausalConvWithState")
    # An unrelated node just before the conv: a conv moved up would jump over it.
    g.node.insert(conv_idx, helper.make_node("Neg", ["x"], ["neg_x"], name="unrelated"))
    body = helper.make_graph([helper.make_node("Identity", ["present.0.conv"], ["cap"])], "b", [],
                             [helper.make_tensor_value_info("cap", G.F16, None)])
    g.input.append(helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []))
    g.node.insert(conv_idx + 2, helper.make_node("If", ["cond"], ["captured"], then_branch=body, else_branch=body))
    g.output.extend([helper.make_tensor_value_info("neg_x", G.F16, None),
                     helper.make_tensor_value_info("captured", G.F16, None)])
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 1 and p.sorted == 0
    order = [n.op_type for n in model.graph]
    assert order.index("Neg") + 1 == order.index("CausalConvWithState") < order.index("If")
    assert check_topological(model.graph) is None
    feeds = {"x": np.ones((1, 2, 8), np.float16), "past.0.conv": np.ones((1, 8, 3), np.float16),
             "cond": np.array(True)}
    close(run_ort(model, feeds), run_ort(proto, feeds), atol=0)


def test_conv_moved_after_a_late_weight_producer_is_sorted_once(caplog: pytest.LogCaptureFixture) -> None:
    """A reader of the carried state sits before the conv and the conv's weight is produced after
    that reader: the conv cannot be placed before the reader, so the pass records the sort it needs
    and the result is still topologically sorted, with the same outputs."""
    proto = G.conv_carry_model()
    g = proto.graph
    nodes = list(g.node)
    conv_idx = next(i for i, n in enumerate(nodes) if n.op_type == "CausalConvWithState")
    reader = helper.make_node("Identity", ["present.0.conv"], ["state_probe"], name="/probe")
    late = helper.make_node("Identity", ["conv.weight"], ["w_late"], name="/late")
    nodes[conv_idx].input[1] = "w_late"
    del g.node[:]
    g.node.extend([*nodes[:conv_idx], reader, late, *nodes[conv_idx:]])
    g.output.append(helper.make_tensor_value_info("state_probe", G.F16, None))
    g.value_info.append(helper.make_tensor_value_info("w_late", G.F16, [8, 1, 4]))
    caplog.set_level(logging.DEBUG, logger="q38.optimize._common")
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 1 and p.sorted == 1
    assert "causal_conv_state: a rewrite had no sorted place; sorting the graph once" in caplog.messages
    assert check_topological(model.graph) is None
    order = [n.name for n in model.graph]
    assert order.index("/late") < order.index("/conv/CausalConvWithState") < order.index("/probe")
    feeds = {"x": np.ones((1, 2, 8), np.float16), "past.0.conv": np.full((1, 8, 3), 0.5, np.float16)}
    close(run_ort(model, feeds), run_ort(proto, feeds), atol=0)


def test_conv_carry_slice_over_two_axes_is_declined() -> None:
    """A carry Slice that also cuts the batch axis is no trailing slice of the sequence axis: fusing
    it would carry every batch row where the graph carries all but the first."""
    proto = G.conv_carry_model()
    sl = _node(proto, "Slice")
    K.set_init(proto, sl.input[1], np.asarray([-3, 1], np.int64))
    K.set_init(proto, sl.input[2], np.asarray([G.INT64_MAX, G.INT64_MAX], np.int64))
    K.set_init(proto, sl.input[3], np.asarray([-1, 0], np.int64))
    _conv_decline(proto, "carry Slice is not a constant trailing slice of the sequence axis")
    feeds = {"x": np.ones((2, 2, 8), np.float16), "past.0.conv": np.ones((2, 8, 3), np.float16)}
    assert run_ort(proto, feeds)[1].shape == (1, 8, 3)


# -- FP8 head: one quantized weight per source weight, a typed output --------------------------------
def _two_heads(same_weight: bool) -> onnx.ModelProto:
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 64])
    r = G.rng(5)
    w0 = g.init("lm_head.weight", (0.1 * r.standard_normal((64, 8))).astype(np.float16))
    w1 = w0 if same_weight else g.init("mtp.0.lm_head.weight", (0.1 * r.standard_normal((64, 8))).astype(np.float16))
    g.op("MatMul", [n, w0], outs=["logits"], name="/lm_head/MatMul")
    g.op("MatMul", [n, w1], outs=["mtp.0.logits"], name="/mtp/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 8])
    g.out("mtp.0.logits", G.F16, ["B", "S", 8])
    return g.model(ms=False)


def test_fp8_head_is_chosen_by_the_last_component_of_the_output_name() -> None:
    """"logits" in a directory of the output name does not make a projection a vocabulary head."""
    from q38.optimize.fp8_head import QuantizeFp8HeadPass

    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 64])
    w = g.init("proj.weight", np.ones((64, 8), np.float16))
    g.op("MatMul", [n, w], outs=["logits/next_embeds"], name="/proj/MatMul")
    g.out("logits/next_embeds", G.F16, ["B", "S", 8])
    _, p = apply(QuantizeFp8HeadPass, g.model(ms=False))
    assert p.count == 0
    assert reasons(p) == ["graph output 'logits/next_embeds' is not a logits projection"]


@pytest.mark.parametrize("same_weight", [False, True])
def test_fp8_heads_quantize_each_source_weight_once_and_read_their_own(same_weight: bool) -> None:
    """Two vocabulary projections: with two weights each fused node reads its own FP8 copy (and
    keeps the parity of its own head); with one shared weight both read the one copy."""
    from q38.optimize.fp8_head import QuantizeFp8HeadPass

    proto = _two_heads(same_weight)
    model, p = apply(QuantizeFp8HeadPass, proto)
    assert p.count == 2
    fused = [n for n in model.graph if n.op_type == "MatMulBlockQuantizedFp8Weight"]
    read = [(n.inputs[1].name, n.inputs[2].name) for n in fused]
    if same_weight:
        assert read == [("lm_head.weight.fp8", "lm_head.weight.fp8_scale")] * 2
    else:
        assert read == [("lm_head.weight.fp8", "lm_head.weight.fp8_scale"),
                        ("mtp.0.lm_head.weight.fp8", "mtp.0.lm_head.weight.fp8_scale")]
    assert sorted(model.graph.initializers) == sorted({name for pair in read for name in pair})
    feeds = {"n": np.random.default_rng(2).standard_normal((1, 2, 64)).astype(np.float16)}
    close(run_ref(model, feeds), run_ort(proto, feeds), atol=0.05)


@pytest.mark.parametrize("weight_dtype", [np.float16, np.float32])
def test_fp8_head_output_declared_without_a_type_gets_the_activation_dtype(weight_dtype: type) -> None:
    """An untyped head output: the compute dtype is the activation's (float16), whatever the
    weight's (an fp32 weight is quantized too)."""
    import onnx_ir as ir

    from q38.optimize.fp8_head import QuantizeFp8HeadPass

    proto = _two_heads(same_weight=True)
    init = proto.graph.initializer[0]
    init.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init).astype(weight_dtype), init.name))
    model = ir.from_proto(proto)
    for out in model.graph.outputs:
        out.type = None
    p = QuantizeFp8HeadPass()
    p(model)
    assert p.count == 2
    assert [(o.name, o.dtype) for o in model.graph.outputs] == [
        ("logits", ir.DataType.FLOAT16), ("mtp.0.logits", ir.DataType.FLOAT16)]


# -- PostMix prologue: partial prologues, missing and rank-1 gates -----------------------------------
@pytest.mark.parametrize("kept", [5, 6])
def test_low_rank_mix_with_half_a_prologue_is_not_fused_again(kept: int) -> None:
    """One of the two prologue inputs (block output, post gate) is enough to make the mix a
    prologue-carrying mix: absorbing the PostMix again would overwrite the one it has."""
    proto = _fused_mix_after_post(streams_out=False)
    mix = _node(proto, "HyperConnectionLowRankMix")
    mix.input[11 - kept] = ""  # input 5 or 6 left empty, the other one kept
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 0 and reasons(p) == ["LowRankMix already has a prologue"]
    assert ops(model) == {(MS, "HyperConnectionPostMix"): 1, LRM: 1}


def test_post_mix_without_a_gate_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    del _node(proto, "HyperConnectionPostMix", 0).input[2:]
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0
    assert reasons(p) == ["PostMix has no post_mix input"]



# -- shared expert: the up projection must be a MatMul of the gate's own input -----------------------
@pytest.mark.parametrize("up_reads", ["other_input", "no_matmul"])
def test_shared_expert_whose_up_factor_is_not_a_matmul_of_the_same_input_is_declined(up_reads: str) -> None:
    """SiLU(gate(h)) * up: an up MatMul of another tensor (fusing it would project h instead), or an
    up factor no MatMul produces (nothing to fuse), is declined with the graph unchanged."""
    import onnx_ir as ir

    from q38.optimize.shared_expert import FuseSharedExpertPass

    proto = G.shared_expert_model()
    up = next(n for n in proto.graph.node if n.name == "/mlp/shared/up/MatMul")
    proto.graph.input.append(helper.make_tensor_value_info("h2", G.F16, ["B", "S", 16]))
    if up_reads == "other_input":
        up.input[0] = "h2"
    else:
        prod = next(n for n in proto.graph.node if n.op_type == "Mul" and up.output[0] in n.input)
        prod.input[list(prod.input).index(up.output[0])] = "h2_i"
        proto.graph.input.append(helper.make_tensor_value_info("h2_i", G.F16, ["B", "S", 8]))
    before = K.signature(proto)
    model, p = apply(FuseSharedExpertPass, proto)
    assert p.count == 0
    assert reasons(p) == ["the SiLU is not multiplied by an up projection MatMul of the same input"]
    assert K.signature(ir.to_proto(model)) == before


def test_conv_with_one_output_and_no_carry_chain_is_declined_without_a_crash() -> None:
    g = G.G()
    w = g.init("conv.weight", np.ones((8, 1, 4), np.float16))
    x = g.inp("x", G.F16, ["B", 8, "S"])
    past = g.inp("past.0.conv", G.F16, ["B", 8, 3])
    g.op("CausalConvWithState", [x, w, "", past], domain=MS, name="/conv", outs=["y"], activation="silu")
    g.out("y", G.F16, None)
    _conv_decline(g.model(), "no Concat/Slice carry chain reads the past state")


def test_fp8_block_of_zeros_gets_scale_one_and_zero_codes() -> None:
    """An all-zero block (a pruned vocabulary row) has no absmax to divide by: its scale is 1 and
    its FP8 codes are zeros, never 0/0 NaNs; the other blocks scale by their absmax / 448."""
    import ml_dtypes

    from q38.optimize.fp8_head import BLOCK_SIZE, quantize_fp8_blockwise

    w = np.zeros((2 * BLOCK_SIZE, 3), np.float16)  # [K, N]: column 1 all zero
    w[:, 0] = 1.0
    w[BLOCK_SIZE:, 2] = -2.0
    q, scale = quantize_fp8_blockwise(w)
    assert q.dtype == ml_dtypes.float8_e4m3fn and q.shape == (3, 2 * BLOCK_SIZE)
    np.testing.assert_array_equal(scale, np.array([[1 / 448, 1 / 448], [1, 1], [1, 2 / 448]], np.float32))
    deq = q.astype(np.float32) * np.repeat(scale, BLOCK_SIZE, axis=1)
    assert not np.isnan(deq).any()
    np.testing.assert_allclose(deq, w.T.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("taken_by", ["unused_initializer", "intermediate"])
def test_fresh_names_avoid_unread_initializers_and_intermediate_values(taken_by: str) -> None:
    """The name a rewrite would give its fp32 scale is already taken -- by an initializer no node
    reads, or by a value only nodes produce and read: the new tensor gets the next free name."""
    proto = G.rms_rotary_model()
    taken = "q_norm.weight_fp32"
    if taken_by == "unused_initializer":
        proto.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(2, np.float16), taken))
    else:
        proto.graph.node.extend([helper.make_node("Identity", ["x"], [taken], name="/probe/a"),
                                 helper.make_node("Identity", [taken], ["probe"], name="/probe/b")])
        proto.graph.output.append(helper.make_tensor_value_info("probe", G.F16, None))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert p.count == 1
    fused = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert fused.inputs[1].name == f"{taken}_1"
    names = collections.Counter(v.name for n in model.graph for v in (*n.inputs, *n.outputs) if v is not None)
    assert names[taken] == (0 if taken_by == "unused_initializer" else 2)


def _probed(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The graph outputs y and present.0.conv are read by Identity probes, which become the outputs."""
    g = proto.graph
    for out in list(g.output):
        g.node.append(helper.make_node("Identity", [out.name], [f"{out.name}.probe"], name=f"/probe/{out.name}"))
        probe = onnx.ValueInfoProto()
        probe.CopyFrom(out)
        probe.name = f"{out.name}.probe"
        g.output.remove(out)
        g.output.append(probe)
    return proto


@pytest.mark.parametrize("conv_name", ["/conv/CausalConvWithState", ""])
@pytest.mark.parametrize("form", ["channels_first", "channels_last"])
def test_conv_values_the_rewrite_creates_are_named_after_the_conv(form: str, conv_name: str) -> None:
    """A carried state that no graph output names (channels-first: a conv whose state output is
    unnamed; channels-last: the new conv's outputs) gets a name derived from the conv's, or from
    "conv" when the conv has none -- never an empty name, which no ONNX model may have."""
    import onnx_ir as ir

    reference = _probed(G.conv_carry_model(form=form))
    proto = _probed(G.conv_carry_model(form=form))
    conv = _node(proto, "CausalConvWithState")
    conv.name = conv_name
    if form == "channels_first":
        conv.output[1] = ""  # the state output left unnamed
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 1
    fused = next(n for n in model.graph if n.op_type == "CausalConvWithState")
    base = conv_name or "conv"
    expected = [f"{base}/present_state"] if form == "channels_first" else [f"{base}/output_cl", f"{base}/present_state_cl"]
    assert [v.name for v in fused.outputs][-len(expected):] == expected
    onnx.checker.check_model(ir.to_proto(model))
    feeds = K.feeds_for(reference, {"B": 2, "S": 3}, 0)
    close(run_ort(model, feeds), run_ort(reference, feeds), atol=0)


@pytest.mark.parametrize("output_typed", [True, False])
def test_conv_dtype_for_the_cpu_check_comes_from_its_output_when_its_inputs_are_untyped(output_typed: bool) -> None:
    """--target cpu: a bfloat16 conv whose input (a Transpose output) and weight (an Identity of
    the initializer, declared with elem_type 0 = UNDEFINED) carry no dtype is still known to be bfloat16 from its declared output, and
    declined (ORT CPU has no bfloat16 CausalConvWithState) rather than fused as "any dtype". With
    no dtype anywhere the check is "some CPU kernel exists" (documented for Produced.dtype None):
    it fuses, and does not crash."""
    proto = G.as_bfloat16(G.conv_carry_model())
    conv = _node(proto, "CausalConvWithState")
    proto.graph.node.insert(0, helper.make_node("Identity", ["conv.weight"], ["w_id"], name="/w_id"))
    conv.input[1] = "w_id"
    proto.graph.value_info.append(helper.make_tensor_value_info("w_id", onnx.TensorProto.UNDEFINED, [8, 1, 4]))
    if output_typed:
        proto.graph.value_info.append(helper.make_tensor_value_info(conv.output[0], onnx.TensorProto.BFLOAT16,
                                                                    ["B", 8, "S"]))
    _, p = apply(FuseCausalConvStatePass, proto, target="cpu")
    if output_typed:
        assert p.count == 0
        assert reasons(p) == ["no CPU kernel for CausalConvWithState for bfloat16 (target cpu)"]
    else:
        assert p.count == 1 and reasons(p) == []


def test_hyper_connection_outputs_of_unnamed_values_are_named_from_hc() -> None:
    """A graph built in onnx_ir may leave the PreMix output and the post gate unnamed: the fused
    mix's outputs are then named from "hc", never from None."""
    import onnx_ir as ir

    model = ir.from_proto(G.hc_model())
    pre = next(n for n in model.graph if n.op_type == "HyperConnectionPreMix").outputs[0]
    post = next(n for n in model.graph if n.op_type == "HyperConnectionPostMix")
    pre.name = None
    post.inputs[2].name = None  # type: ignore[union-attr]
    p = FuseHyperConnectionPass()
    p(model)
    assert p.count == 1
    mix = next(n for n in model.graph if n.op_type == "HyperConnectionLowRankMix")
    assert [v.name for v in mix.outputs] == ["hc_fused", "hc_fused_1"]
