"""Every test of the hyper-connection pass (q38/optimize/hyper_connection.py): fusions with parity, each guard's
declines with their reasons, the regressions mutation testing and the property tests found,
its exporter forms and its parity self-test (tests/support/optimize_parity.py).

The PreMix / LowRankMix / PostMix chain (research and packed builder forms) fuses into
HyperConnectionLowRankMix absorbing the previous PostMix as its prologue; builder int4 graphs
(MatMulNBits gates) are declined as already quantized.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import support.optimize_graphs as G
import support.optimize_property_kit as K
from onnx import helper, numpy_helper
from support.optimize_helpers import (
    apply,
    close,
    nth_node,
    ops,
    outcome_lines,
    package_reader,
    reasons,
    run_ort,
    run_ref,
    set_init,
)
from support.optimize_parity import (
    parity_tests,
)
from support.synth_builder import feeds_for, zero_state

from q38._ops import HC_PRE_MIX, MATMUL_NBITS, MS_DOMAIN
from q38.optimize import optimize_model
from q38.optimize._common import (
    check_topological,
)
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.synth.qmoe import dequantize_int4, quantize_int4

MS = "com.microsoft"

LRM = (MS, "HyperConnectionLowRankMix")

FORM_STREAMS = np.random.default_rng(7).standard_normal((2, 3, 32)).astype(np.float16)


DIMS = {"B": 2, "S": 3, "T": 5}


# -- hyper-connection: the packed [down|inject] projection -----------------------------------------------
def _first_mix(proto: onnx.ModelProto) -> list[tuple[str, str, list[str], list[str]]]:
    return [(n.name, n.op_type, list(n.input), list(n.output)) for n in proto.graph.node if n.name.startswith("/l0/")]


def _packed_declined(proto: onnx.ModelProto, reason: str) -> None:
    before = _first_mix(proto)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert outcome_lines(p)[0] == f"hyper_connection: /l0/hc/HyperConnectionPreMix: declined: {reason}"
    assert p.count == 1  # the final mixer still fuses: the decline is about the first mix only
    assert _first_mix(ir.to_proto(model)) == before


STREAMS = np.random.default_rng(3).standard_normal((2, 3, 32)).astype(np.float16)


def _prologues(model) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for n in model.graph if n.op_type == LRM[1] and len(n.inputs) > 5 and n.inputs[5] is not None)


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


def onnx_ir_model(proto: onnx.ModelProto):  # type: ignore[no-untyped-def]
    import onnx_ir as ir

    return ir.from_proto(proto)


def ir_to_proto(model):  # type: ignore[no-untyped-def]
    import onnx_ir as ir

    return ir.to_proto(model)


BLOCK = 32

QUANTIZED = "PreMix gate projection is already quantized (MatMulNBits)"
QUANTIZED_REASON = (f"{QUANTIZED}; LowRankMix takes float down / up / inject weights; kept as exported")


def _int4_like_the_builder(model: onnx.ModelProto) -> int:
    """Replace each MatMul of a constant [K, N] weight (K % 32 == 0) by MatMulNBits, in place."""
    inits = {t.name: t for t in model.graph.initializer}
    count = 0
    for i, node in enumerate(model.graph.node):
        w = inits.get(node.input[1]) if node.op_type == "MatMul" and node.domain == "" else None
        if w is None or len(w.dims) != 2 or w.dims[0] % BLOCK:
            continue
        k, n = w.dims
        weight = numpy_helper.to_array(w)
        raw, scales = quantize_int4(weight.T.astype(np.float32), BLOCK)
        name = node.input[1]
        q = numpy_helper.from_array(raw.reshape(n, k // BLOCK, BLOCK // 2), name + "_Q4")
        s = numpy_helper.from_array(scales.astype(weight.dtype), name + "_scales")
        model.graph.initializer.extend([q, s])
        model.graph.node[i].CopyFrom(onnx.helper.make_node(
            MATMUL_NBITS, [node.input[0], q.name, s.name], list(node.output), name=node.name,
            domain=MS_DOMAIN, K=k, N=n, bits=4, block_size=BLOCK))  # fmt: skip
        count += 1
    used = {x for node in model.graph.node for x in node.input}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    return count


@pytest.fixture(scope="module")
def decoders(tiny_builder_cpu_package: Path) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(float decoder, its int4 quantization), all tensors inline."""
    fp = onnx.load(str(tiny_builder_cpu_package / "model.onnx"))
    q = onnx.ModelProto()
    q.CopyFrom(fp)
    assert _int4_like_the_builder(q) > 0
    return fp, q


# -- hyper-connection --------------------------------------------------------------------------------
def test_hyper_connection_fuses_and_absorbs_previous_post_mix() -> None:
    proto = G.hc_model(two_blocks=True)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 3  # two chains + one prologue
    assert ops(model) == {(MS, "HyperConnectionLowRankMix"): 2, ("", "Tanh"): 2, (MS, "HyperConnectionPostMix"): 1}
    assert [len(n.outputs) for n in model.graph if n.op_type == "HyperConnectionLowRankMix"] == [2, 3]
    x = np.random.default_rng(5).standard_normal((2, 3, 32)).astype(np.float16)
    close(run_ref(model, {"streams": x}), run_ort(proto, {"streams": x}))


def test_hyper_connection_defaults_epsilon_when_omitted() -> None:
    model, _ = apply(FuseHyperConnectionPass, G.hc_model(eps=None))
    node = next(n for n in model.graph if n.op_type == "HyperConnectionLowRankMix")
    assert node.attributes["epsilon"].value == pytest.approx(1e-5)


def test_hyper_connection_takes_scaled_silu_alpha_one_when_omitted() -> None:
    """ScaledSiLU without ``alpha`` scales by 1: the fused mix's silu_alpha is 1, with parity."""
    proto = G.hc_model()
    silu = nth_node(proto, "ScaledSiLU")
    del silu.attribute[:]
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 1
    node = next(n for n in model.graph if n.op_type == "HyperConnectionLowRankMix")
    assert node.attributes["silu_alpha"].value == pytest.approx(1.0)
    close(run_ref(model, {"streams": FORM_STREAMS}), run_ort(proto, {"streams": FORM_STREAMS}))


@pytest.mark.parametrize("kw,reason", [
    ({"scale_shape": (4, 8)}, "norm scale '/l0/attn_hc.norm.weight' shape [4,8] is not the flattened (C*H) layout"),
    ({"scale_dtype": np.float32}, "weight '/l0/attn_hc.norm.weight' dtype FLOAT != streams dtype FLOAT16 (LowRankMix needs one T)"),
])


def test_hyper_connection_validates_norm_scale(kw: dict[str, object], reason: str) -> None:
    _, p = apply(FuseHyperConnectionPass, G.hc_model(**kw))  # type: ignore[arg-type]
    assert reasons(p) == [reason]


def test_hyper_connection_rejects_post_mix_with_stream_mix() -> None:
    proto = G.hc_model(two_blocks=True)
    post = next(n for n in proto.graph.node if n.op_type == "HyperConnectionPostMix")
    post.input.append("stream_mix")
    proto.graph.input.append(helper.make_tensor_value_info("stream_mix", G.F16, ["B", "S", 4, 4]))
    _, p = apply(FuseHyperConnectionPass, proto)
    assert reasons(p) == ["PostMix has a stream_mix (only the identity mix can be absorbed)"]


def test_hyper_connection_declines_for_cpu_target() -> None:
    _, p = apply(FuseHyperConnectionPass, G.hc_model(), target="cpu")
    assert reasons(p) == ["no CPU kernel for HyperConnectionLowRankMix (target cpu)"]


@pytest.mark.parametrize("inject_first,split_attr", [(False, False), (True, False), (False, True)])
def test_packed_hyper_connection_mix_fuses_with_parity(inject_first: bool, split_attr: bool) -> None:
    opset = 13 if not split_attr else 11
    proto = G.hc_builder_model(inject_first=inject_first, split_attr=split_attr)
    if split_attr:
        proto.opset_import[0].version = opset
    model, p = apply(FuseHyperConnectionPass, proto)
    assert not reasons(p), reasons(p)
    # 3 mixes (2 blocks + the final mixer), 2 prologues (every mix after a PostMix).
    assert p.count == 5
    assert ops(model) == {LRM: 3, ("", "Tanh"): 2, ("", "Identity"): 1, ("", "MatMul"): 1}
    final = next(n for n in model.graph if n.op_type == "HyperConnectionLowRankMix" and not n.outputs[1].uses())
    assert final.inputs[4].name == "/model/final_hc.input_mix_down_block_inject.inject"
    feeds = {"streams": FORM_STREAMS}
    close(run_ref(model, feeds), run_ort(proto, feeds), atol=3e-2)


@pytest.mark.parametrize("split", ["input", "attribute", "equal"])
@pytest.mark.parametrize("inject_first", [False, True])
def test_packed_mix_split_sizes_cut_the_columns_where_the_graph_does(split: str, inject_first: bool) -> None:
    """R != C (down 6 wide, inject 4): sizes from the input or the attribute must be the ones used
    (an equal split would cut 5 | 5); with no sizes (equal split, R == C) the halves are used."""
    R = 4 if split == "equal" else 6
    proto = G.hc_builder_model(R=R, inject_first=inject_first, split_attr=split == "attribute",
                               split_equal=split == "equal")
    if split == "attribute":
        proto.opset_import[0].version = 11
    model, p = apply(FuseHyperConnectionPass, proto)
    assert not reasons(p), reasons(p)
    assert p.count == 5 and ops(model)[LRM] == 3
    downs = sorted(n.inputs[2].shape[1] for n in model.graph if n.op_type == "HyperConnectionLowRankMix")
    assert downs == [R, R, R]
    feeds = {"streams": FORM_STREAMS}
    close(run_ref(model, feeds), run_ort(proto, feeds), atol=3e-2)


def test_final_mixer_without_inject_projection_fuses_with_zero_inject() -> None:
    r = G.rng(1)
    g = G.G()
    X = g.inp("streams", G.F16, ["B", "S", 32])
    # The inject branch (MatMul(hn, inject) -> Div -> Sigmoid -> Mul) dropped: a mix with no combine.
    pre = _final_mixer(g, X, C=4, H=8, prefix="/model/final_hc", r=r)
    g.op("Identity", [pre], outs=["y"])
    g.out("y", G.F16, ["B", "S", 8])
    proto = g.model()
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 1 and ops(model) == {LRM: 1, ("", "Identity"): 1}
    mix = next(n for n in model.graph if n.op_type == "HyperConnectionLowRankMix")
    assert not mix.inputs[4].const_value.numpy().any()  # type: ignore[union-attr]
    close(run_ref(model, {"streams": FORM_STREAMS}), run_ort(proto, {"streams": FORM_STREAMS}), atol=3e-2)


def test_research_final_norm_mixer_is_declined_with_reason(tiny_cpu_package) -> None:  # type: ignore[no-untyped-def]
    model = ir.load(tiny_cpu_package / "model.onnx")
    result = optimize_model(model, passes=["hyper_connection"], reader=package_reader(tiny_cpu_package / "model.onnx"))
    declined = [o for o in result.outcomes if not o.applied]
    assert [o.anchor for o in declined] == ["/model/norm/HyperConnectionPreMix"]
    assert declined[0].reason.startswith("PreMix gate is a per-branch Sigmoid(MatMul(hn, W))")


@pytest.mark.parametrize("rank_known", [True, False])
def test_packed_split_along_the_sequence_axis_is_declined(rank_known: bool) -> None:
    """Split(MatMul(hn, [down|inject]), [R, C], axis=1) cuts the sequence, not the columns."""
    proto = G.hc_builder_model(blocks=1)
    split = next(n for n in proto.graph.node if n.name == "/l0/hc/Split")
    K.set_attr(split, "axis", 1)
    if rank_known:
        proto.graph.value_info.append(helper.make_tensor_value_info(split.input[0], G.F16, ["B", 8, 8]))
    _packed_declined(proto, "packed projection Split axis 1 is not the last axis")


def test_packed_split_without_an_axis_cuts_the_first_axis_and_is_declined() -> None:
    """Split's default axis is 0 (the batch axis), not the columns: declined as axis 0."""
    proto = G.hc_builder_model(blocks=1)
    split = next(n for n in proto.graph.node if n.name == "/l0/hc/Split")
    kept = [a for a in split.attribute if a.name != "axis"]
    del split.attribute[:]
    split.attribute.extend(kept)
    _packed_declined(proto, "packed projection Split axis 0 is not the last axis")


def test_packed_split_on_the_last_axis_counted_from_the_front_fuses_with_parity() -> None:
    """Split axis 2 of a rank-3 projection is its last axis, as -1 is: the mix fuses (the
    positive spelling of the column axis is not declined), with parity."""
    proto = G.hc_builder_model(blocks=1)
    split = next(n for n in proto.graph.node if n.name == "/l0/hc/Split")
    K.set_attr(split, "axis", 2)
    proto.graph.value_info.append(helper.make_tensor_value_info(split.input[0], G.F16, ["B", "S", 8]))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert not reasons(p), reasons(p)
    assert outcome_lines(p)[0] == "hyper_connection: /l0/hc/HyperConnectionPreMix: fused"
    assert ops(model).get(("", "Split"), 0) == 0
    feeds = {"streams": FORM_STREAMS}
    close(run_ref(model, feeds), run_ort(proto, feeds), atol=3e-2)


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
    assert outcome_lines(p) == [f"hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: {reason}"]
    assert K.signature(ir.to_proto(model)) == before


# -- PostMix prologue guards -------------------------------------------------------------------------
def test_post_mix_with_other_num_branches_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    K.set_attr(nth_node(proto, "HyperConnectionPostMix", 0), "num_branches", 2)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0 and ops(model)[LRM] == 2
    assert "PostMix num_branches differs from the LowRankMix" in reasons(p)
    post = next(n for n in model.graph if n.op_type == "HyperConnectionPostMix" and n.outputs[0].name == "streams_1")
    assert post.attributes["num_branches"].value == 2


def test_post_mix_with_per_feature_gate_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    post = nth_node(proto, "HyperConnectionPostMix", 0)
    post.input[2] = "gate_ch"
    proto.graph.input.append(helper.make_tensor_value_info("gate_ch", G.F16, ["B", "S", 4, 8]))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0
    assert any(r.startswith("PostMix post_mix shape") for r in reasons(p))


def test_post_mix_operand_of_other_dtype_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    post = nth_node(proto, "HyperConnectionPostMix", 0)
    cast = helper.make_node("Cast", [post.input[1]], ["blk_f32"], to=onnx.TensorProto.FLOAT, name="/cast")
    proto.graph.node.insert(list(proto.graph.node).index(post), cast)
    post.input[1] = "blk_f32"
    proto.graph.value_info.append(helper.make_tensor_value_info("blk_f32", onnx.TensorProto.FLOAT, ["B", "S", 8]))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0
    assert "PostMix operand 'blk_f32' dtype differs from the streams" in reasons(p)


def test_an_untyped_post_mix_output_is_still_absorbed_by_its_operands_types() -> None:
    """The streams a PostMix writes may carry no value_info (an exporter or an earlier rewrite left it
    untyped): its operands are judged against the streams' own type, so the prologue is absorbed and
    the graph computes what it did."""
    proto = G.hc_model(two_blocks=True)
    post = nth_node(proto, "HyperConnectionPostMix", 0)
    assert post.output[0] == "streams_1" and not [vi for vi in proto.graph.value_info if vi.name == "streams_1"]
    proto.graph.value_info.append(helper.make_tensor_value_info(post.input[1], G.F16, ["B", "S", 8]))  # typed block output
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 1, reasons(p)
    close(run_ref(model, {"streams": STREAMS}), run_ort(proto, {"streams": STREAMS}), atol=3e-2)


def test_post_mix_output_captured_by_a_subgraph_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    K.if_capture(proto, "streams_1")
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0
    assert "PostMix output 'streams_1' is captured by a subgraph" in reasons(p)
    post = next(n for n in model.graph if n.op_type == "HyperConnectionPostMix" and n.outputs[0].name == "streams_1")
    assert post.outputs[0].uses()


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


def test_rerunning_the_hyper_connection_pass_changes_nothing() -> None:
    import onnx_ir as ir

    once, p1 = apply(FuseHyperConnectionPass, G.hc_model(two_blocks=True))
    assert p1.count == 3
    proto = ir.to_proto(once)
    twice, p2 = apply(FuseHyperConnectionPass, proto)
    assert p2.count == 0
    assert K.signature(ir.to_proto(twice)) == K.signature(proto)


# -- identity, placement, names, captures -----------------------------------------------------------
def test_extra_reader_with_an_empty_name_still_declines() -> None:
    proto = G.hc_model()
    hn = nth_node(proto, "BranchwiseRMSNorm").output[0]
    K.extra_consumer(proto, hn)
    for node in proto.graph.node:
        node.name = ""
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 0 and ops(model).get(LRM, 0) == 0
    assert reasons(p) == [f"intermediate {hn!r} has another consumer (ReduceSum '')"]
    close(run_ort(ir_to_proto(model), {"streams": STREAMS}), run_ort(proto, {"streams": STREAMS}))


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
    mix = nth_node(proto, "HyperConnectionLowRankMix")
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
    # The PostMix output "x" is untyped: its typed operands are judged against the streams' type
    # (an untyped output once read as "dtype differs" declined it, and this test counted 0).
    assert outcome_lines(p) == ["hyper_connection: /mix: fused"]
    assert (p.count, p.sorted, _prologues(model)) == (1, 1, 1)
    assert check_topological(model.graph) is None
    r = G.rng(1)
    feeds = {name: r.standard_normal(shape).astype(np.float16)
             for name, shape in [("streams", (2, 3, 32)), ("b0", (2, 3, 8)), ("g0", (2, 3, 4)), ("b1", (2, 3, 8)), ("g1", (2, 3, 4))]}
    close(run_ref(model, feeds), run_ref(ir.from_proto(proto), feeds), atol=3e-2)


def test_prologue_of_a_mix_whose_mixed_output_is_a_graph_output_keeps_the_public_name() -> None:
    """The second mix's PreMix output is also a graph output ("mlp_mixed"): the chain fuses, the
    PostMix before it is absorbed as the prologue, and the graph output is then the 3-output
    LowRankMix's first output under its public name, the replaced value renamed aside; parity holds
    on both outputs."""
    proto = G.hc_model(two_blocks=True)
    pre = next(n for n in proto.graph.node if n.name == "/l0/mlp_hc/HyperConnectionPreMix")
    old = pre.output[0]
    for n in proto.graph.node:
        n.input[:] = ["mlp_mixed" if i == old else i for i in n.input]
    pre.output[0] = "mlp_mixed"
    proto.graph.output.append(helper.make_tensor_value_info("mlp_mixed", G.F16, ["B", "S", 8]))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert outcome_lines(p) == [
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused",
        "hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused",
        "hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused",
    ]
    assert _prologues(model) == 1
    assert [v.name for v in model.graph.outputs] == ["streams_out", "mlp_mixed"]
    mixed = model.graph.outputs[1]
    mix = mixed.producer()
    assert mix is not None and mix.op_type == "HyperConnectionLowRankMix" and len(mix.outputs) == 3
    assert mixed is mix.outputs[0]
    assert [u.node.op_type for u in mixed.uses()] == ["Tanh"]  # the block reads the new output too
    names = [o.name for n in model.graph for o in n.outputs]
    assert len(names) == len(set(names))
    close(run_ref(model, {"streams": STREAMS}), run_ort(proto, {"streams": STREAMS}), atol=3e-2)


def test_a_post_mix_read_by_two_mixes_is_absorbed_once_without_crashing() -> None:
    """Two blocks' mixes read one PostMix output ("streams_1"): the three chains fuse; the PostMix
    may be absorbed into one of them at most, the other reading the streams it then outputs, and
    the graph computes what it did."""
    C, H, R = 4, 8, 4
    r = G.rng(0)
    g = G.G()
    X = g.inp("streams", G.F16, ["B", "S", C * H])
    pre, pg = G.hc_chain(g, X, C=C, H=H, R=R, prefix="/l0/attn_hc", r=r)
    X1 = g.op("HyperConnectionPostMix", [X, g.o("Tanh", [pre]), pg], domain=MS, num_branches=C,
              name="/l0/attn_hc/PostMix", outs=["streams_1"])[0]
    for name in ("a", "b"):
        pre2, pg2 = G.hc_chain(g, X1, C=C, H=H, R=R, prefix=f"/l1/{name}_hc", r=r)
        g.op("HyperConnectionPostMix", [X1, g.o("Tanh", [pre2]), pg2], domain=MS, num_branches=C,
             outs=[f"out_{name}"], name=f"/l1/{name}_hc/PostMix")
        g.out(f"out_{name}", G.F16, ["B", "S", C * H])
    proto = g.model()
    model, p = apply(FuseHyperConnectionPass, proto)
    assert ops(model)[LRM] == 3 and _prologues(model) <= 1
    # Every candidate gets an outcome: the mix whose PostMix went to the other one is declined, saying so.
    assert _prologues(model) == 1 and (
        "its PostMix was absorbed into another LowRankMix reading the same output" in " ".join(reasons(p)))
    close(run_ref(model, {"streams": STREAMS}), run_ort(proto, {"streams": STREAMS}), atol=3e-2)


# -- PostMix prologue: partial prologues, missing and rank-1 gates -----------------------------------
@pytest.mark.parametrize("kept", [5, 6])
def test_low_rank_mix_with_half_a_prologue_is_not_fused_again(kept: int) -> None:
    """One of the two prologue inputs (block output, post gate) is enough to make the mix a
    prologue-carrying mix: absorbing the PostMix again would overwrite the one it has."""
    proto = _fused_mix_after_post(streams_out=False)
    mix = nth_node(proto, "HyperConnectionLowRankMix")
    mix.input[11 - kept] = ""  # input 5 or 6 left empty, the other one kept
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 0 and reasons(p) == ["LowRankMix already has a prologue"]
    assert ops(model) == {(MS, "HyperConnectionPostMix"): 1, LRM: 1}


def test_post_mix_without_a_gate_is_not_absorbed() -> None:
    proto = G.hc_model(two_blocks=True)
    del nth_node(proto, "HyperConnectionPostMix", 0).input[2:]
    model, p = apply(FuseHyperConnectionPass, proto)
    assert _prologues(model) == 0
    assert reasons(p) == ["PostMix has no post_mix input"]


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


def test_the_prologue_streams_output_of_an_unnamed_post_mix_output_is_named_from_hc() -> None:
    """Phase two: a PostMix whose output has no name (a graph built in onnx_ir) is absorbed, and
    the new LowRankMix's streams output is named "hc_p", never from None; the mix's own outputs
    are named after the ones they replace."""
    model = ir.from_proto(G.hc_model(two_blocks=True))
    post = next(n for n in model.graph if n.op_type == "HyperConnectionPostMix" and n.outputs[0].name == "streams_1")
    post.outputs[0].name = None
    p = FuseHyperConnectionPass()
    p(model)
    assert p.count == 3 and _prologues(model) == 1
    mix = next(n for n in model.graph if n.op_type == "HyperConnectionLowRankMix" and len(n.outputs) == 3)
    assert [v.name for v in mix.outputs] == ["v18_0_fused_p", "v22_0_fused_p", "hc_p"]


def test_a_post_mix_gated_by_a_graph_input_of_shape_c_is_absorbed() -> None:
    """A PostMix whose post gate is no LowRankMix output but a graph input declared (..., C) is
    provably the identity stream mix with a (..., C) gate: it is absorbed as the LowRankMix's
    prologue, and the graph computes what it did."""
    proto = _fused_mix_after_post(streams_out=False)
    mix = nth_node(proto, "HyperConnectionLowRankMix")
    del mix.input[5:]  # no prologue yet: a candidate
    proto.graph.value_info.append(helper.make_tensor_value_info("x", G.F16, ["B", "S", 32]))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert outcome_lines(p) == ["hyper_connection: /mix: fused"]
    assert ops(model) == {LRM: 1}
    fused = next(iter(model.graph))
    assert [v.name for v in fused.inputs[5:]] == ["b0", "g0"]
    feeds = K.feeds_for(proto, {"B": 2, "S": 3}, 0)
    close(run_ref(model, feeds), run_ref(onnx_ir_model(proto), feeds))



@pytest.mark.parametrize("mix_name", ["/mix", ""])
def test_the_prologue_mix_keeps_the_mix_name_or_is_named_after_its_op(mix_name: str) -> None:
    """The LowRankMix that absorbs a PostMix is named after the mix it replaces (a fresh name:
    "/mix_1"), or after its op when the mix had none -- never an empty node name."""
    proto = _fused_mix_after_post(streams_out=False)
    mix = nth_node(proto, "HyperConnectionLowRankMix")
    del mix.input[5:]
    mix.name = mix_name
    proto.graph.value_info.append(helper.make_tensor_value_info("x", G.F16, ["B", "S", 32]))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 1
    (fused,) = model.graph
    assert fused.name is not None and fused.name.startswith(mix_name or "/HyperConnectionLowRankMix")


@pytest.mark.parametrize("op,replacement", [("Mul", "Add"), ("Sigmoid", "Tanh"), ("Div", "Sub")])
def test_an_inject_branch_that_is_not_the_post_gate_is_declined(op: str, replacement: str) -> None:
    """The inject projection must feed Mul(Sigmoid(Div(inject, gate_div)), gate_mul); with any of
    the three ops replaced, the mix is declined with that reason and the graph left as it was."""
    proto = G.hc_model()
    inj = next(n for n in proto.graph.node if n.op_type == "MatMul" and n.input[1] == "/l0/attn_hc.inject").output[0]
    div = next(n for n in proto.graph.node if n.op_type == "Div" and n.input[0] == inj)
    sig = next(n for n in proto.graph.node if n.op_type == "Sigmoid" and n.input[0] == div.output[0])
    mul = next(n for n in proto.graph.node if n.op_type == "Mul" and n.input[0] == sig.output[0])
    {"Div": div, "Sigmoid": sig, "Mul": mul}[op].op_type = replacement
    before = K.signature(proto)
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 0
    assert reasons(p) == ["inject projection is not Mul(Sigmoid(Div(inject, gate_div)), gate_mul)"]
    assert K.signature(ir.to_proto(model)) == before


@pytest.mark.parametrize("kernel_type,fused", [("tensor(float16)", True), ("tensor(float)", False)])
def test_a_prologue_is_fused_only_where_the_release_has_the_mix_at_the_streams_dtype(
    kernel_type: str, fused: bool
) -> None:
    """With a --target-ort kernel table, absorbing a PostMix re-creates the LowRankMix at the
    streams' dtype (float16 here): fused where the release has that kernel, declined (naming the
    op and the release) where it has the op for float only."""
    from q38.optimize.target_kernels import TargetKernels, active

    proto = _fused_mix_after_post(streams_out=False)
    del nth_node(proto, "HyperConnectionLowRankMix").input[5:]
    proto.graph.value_info.append(helper.make_tensor_value_info("x", G.F16, ["B", "S", 32]))
    table = TargetKernels("9.9", "cuda", {LRM: (frozenset({kernel_type}),)}, "test table")
    with active(table):
        model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == int(fused)
    if not fused:
        assert reasons(p) == [
            "no CUDA kernel for HyperConnectionLowRankMix in onnxruntime 9.9 (target cuda, --target-ort; test table)"
        ]
        assert ops(model) == {(MS, "HyperConnectionPostMix"): 1, LRM: 1}

def _final_mixer(g: G.G, X: str, *, C: int, H: int, prefix: str, r: np.random.Generator) -> str:
    """A mix with no inject projection (no combine): its PreMix output."""
    pre, _ = G.hc_chain(g, X, C=C, H=H, R=4, prefix=prefix, r=r)
    inject_mm = next(n for n in g.nodes if n.op_type == "MatMul" and n.input[1] == f"{prefix}.inject")
    drop = {inject_mm.output[0]}
    kept = []
    for n in g.nodes:
        if any(i in drop for i in n.input) or n is inject_mm:
            drop.update(n.output)
            continue
        kept.append(n)
    g.nodes = kept
    return pre


def test_final_mixers_of_other_shapes_get_their_own_zero_inject_weights() -> None:
    """Two final mixers of one graph with another branch count (C=4, H=8 and C=2, H=16 over the
    same 32-wide streams) and a third like the first: each LowRankMix gets zeros of its own
    (C*H, C); the two of one shape share one tensor. The graph computes what it did."""
    r = G.rng(1)
    g = G.G()
    X = g.inp("streams", G.F16, ["B", "S", 32])
    for i, (c, h) in enumerate([(4, 8), (2, 16), (4, 8)]):
        pre = _final_mixer(g, X, C=c, H=h, prefix=f"/final{i}_hc", r=r)
        g.op("Identity", [pre], outs=[f"y{i}"])
        g.out(f"y{i}", G.F16, ["B", "S", h])
    proto = g.model()
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 3 and ops(model) == {LRM: 3, ("", "Identity"): 3}
    injects = [n.inputs[4] for n in model.graph if n.op_type == "HyperConnectionLowRankMix"]
    assert [list(v.shape) for v in injects] == [[32, 4], [32, 2], [32, 4]]  # type: ignore[arg-type]
    assert injects[0] is injects[2] and injects[1] is not injects[0]
    assert [v.name for v in injects[:2]] == ["/final0_hc.norm.weight.zero_inject", "/final1_hc.norm.weight.zero_inject"]
    close(run_ref(model, {"streams": FORM_STREAMS}), run_ort(proto, {"streams": FORM_STREAMS}), atol=3e-2)


def test_hyper_connection_per_branch_up_projection_is_declined() -> None:
    proto = G.hc_model(C=2, H=4, R=3)
    set_init(proto, "/l0/attn_hc.up", np.full((3, 2), 0.1, np.float16))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert reasons(p) == ["up weight '/l0/attn_hc.up' shape [3, 2] is not (R, C*H) = [3, 8] (per-feature gates)"]
    assert (MS, "HyperConnectionLowRankMix") not in ops(model)


def test_hyper_connection_per_feature_scale_with_symbolic_width_is_declined() -> None:
    proto = G.hc_model(C=2, H=4, R=3, scale_shape=(4,))
    proto.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "W"
    _, p = apply(FuseHyperConnectionPass, proto)
    assert reasons(p) == ["norm scale '/l0/attn_hc.norm.weight' length 4 is not C*H = 8 (down rows)"]


def test_one_hyper_connection_pass_instance_fuses_every_model_it_is_given() -> None:
    """The pass runs its two phases per call and is back in phase one after it."""
    p = FuseHyperConnectionPass()
    names = []
    for _ in range(2):
        model = ir.from_proto(G.hc_model(two_blocks=True))
        p(model)
        assert p.count == 3
        assert ops(model) == {(MS, "HyperConnectionLowRankMix"): 2, (MS, "HyperConnectionPostMix"): 1, ("", "Tanh"): 2}
        names.append([n.name for n in model.graph])
    assert names[1] == names[0]  # named from the model's own table: no _2, _3 suffixes carried over


def test_the_int4_decoder_is_a_real_graph_ort_runs_close_to_the_float_one(
    decoders: tuple[onnx.ModelProto, onnx.ModelProto],
) -> None:
    fp, q = decoders
    ops = {(n.domain, n.op_type) for n in q.graph.node}
    assert (MS_DOMAIN, MATMUL_NBITS) in ops and (MS_DOMAIN, HC_PRE_MIX) in ops
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    runs = []
    for model in (fp, q):
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        feeds = feeds_for(np.array([[1, 5, 9]]), 0, zero_state(sess))
        runs.append(sess.run(["logits"], feeds)[0].astype(np.float32))
    assert np.isfinite(runs[1]).all()
    assert np.abs(runs[1] - runs[0]).max() < 0.1 * max(1.0, float(np.abs(runs[0]).max()))


def test_quantize_int4_round_trips_within_half_a_step() -> None:
    w = np.random.default_rng(1).normal(size=(8, 64)).astype(np.float32)
    raw, scales = quantize_int4(w, BLOCK)
    back = dequantize_int4(raw, scales, BLOCK)
    step = np.repeat(scales.astype(np.float32), BLOCK, axis=1)
    assert (np.abs(back - w) <= step / 2 + 1e-3).all()


def test_a_premix_gate_of_matmulnbits_is_declined_as_already_quantized(
    decoders: tuple[onnx.ModelProto, onnx.ModelProto],
) -> None:
    _fp, q = decoders
    model = ir.from_proto(q)
    anchors = [n.name for n in model.graph if n.domain == MS_DOMAIN and n.op_type == HC_PRE_MIX]
    gated = [
        n.name for n in q.graph.node if n.op_type == HC_PRE_MIX
        and any(p.op_type == "Sigmoid" and p.output[0] == n.input[1] and any(
            m.op_type == MATMUL_NBITS and m.output[0] == p.input[0] for m in q.graph.node) for p in q.graph.node)
    ]  # fmt: skip
    assert gated and set(gated) <= set(anchors)
    result = optimize_model(model, passes=["hyper_connection"])
    outcomes = {o.anchor: o for o in result.outcomes if o.pass_name == "hyper_connection"}
    assert set(outcomes) == set(anchors)
    for name in gated:
        assert not outcomes[name].applied
        assert outcomes[name].reason == QUANTIZED_REASON, outcomes[name].line()


def test_the_float_builder_graph_is_not_declined_as_quantized(
    decoders: tuple[onnx.ModelProto, onnx.ModelProto],
) -> None:
    fp, _q = decoders
    result = optimize_model(ir.from_proto(fp), passes=["hyper_connection"])
    reasons = [o.reason for o in result.outcomes if o.pass_name == "hyper_connection"]
    assert reasons and not any(r.startswith(QUANTIZED) for r in reasons)


# -- parity that can fail (tests/support/optimize_parity.py) ---------------------------------------
test_real_rewrite_passes_parity, test_every_fused_weight_broken_fails_parity = parity_tests("hyper_connection")
