"""Per-rewrite behaviour of the q38 optimizer passes on micro-graphs.

Invariants guarded (one test each unless noted):
* each rewrite fires on the exporter form and its alternate/commuted form, with exact op counts
  by (domain, op) and numerical parity (ORT CPU at ORT_DISABLE_ALL, numpy references otherwise);
* every guard declines with its reason text (no exception);
* --target cpu declines ops without CPU kernels with "no CPU kernel for <op> (target cpu)";
* the com.microsoft opset import is added when a contrib node is introduced;
* generated names never collide, even when the graph already uses the obvious names;
* values captured by (nested) subgraphs are never pruned and stay resolvable;
* nodes are identified by identity (duplicate and empty names);
* weights shared before a rewrite stay shared after it (one converted tensor, provenance recorded).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
from onnx import helper
from support.optimize_helpers import apply, close, ops, reasons, run_ort, run_ref

from q38.optimize._common import check_topological
from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.fp8_head import QuantizeFp8HeadPass
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass
from q38.optimize.shared_expert import FuseSharedExpertPass

MS = "com.microsoft"
X16 = np.random.default_rng(1).standard_normal((2, 3, 16)).astype(np.float16)
POS = np.array([[0, 1, 2], [5, 6, 7]], np.int64)


# -- RMSNormRotary ------------------------------------------------------------------------------
@pytest.mark.parametrize("alternate,commuted", [(False, False), (True, True)])
def test_rms_norm_rotary_fuses_exporter_and_alternate_forms(alternate: bool, commuted: bool) -> None:
    proto = G.rms_rotary_model(alternate=alternate, commuted=commuted)
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert ops(model) == {("", "Reshape"): 1, (MS, "RMSNormRotary"): 1}
    assert model.opset_imports[MS] == 1
    scale = model.graph.initializers["q_norm.weight_fp32"]
    assert scale.dtype == ir.DataType.FLOAT
    assert p.provenance["q_norm.weight_fp32"] == ["q_norm.weight"]
    close(run_ref(model, {"x": X16, "position_ids": POS}), run_ort(proto, {"x": X16, "position_ids": POS}))


def test_rms_norm_rotary_declines_fp32_input() -> None:
    model, p = apply(FuseRMSNormRotaryPass, G.rms_rotary_model(dtype=np.float32))
    assert reasons(p) == ["input dtype FLOAT is not float16/bfloat16"]
    assert (MS, "RMSNormRotary") not in ops(model)


def test_rms_norm_rotary_declines_for_cpu_target() -> None:
    _, p = apply(FuseRMSNormRotaryPass, G.rms_rotary_model(), target="cpu")
    assert reasons(p) == ["no CPU kernel for RMSNormRotary (target cpu)"]


def test_rms_norm_rotary_declines_escaping_intermediate() -> None:
    proto = G.rms_rotary_model()
    nw = next(n for n in proto.graph.node if n.op_type == "Slice").input[0]
    proto.graph.output.append(helper.make_tensor_value_info(nw, G.F16, None))
    _, p = apply(FuseRMSNormRotaryPass, proto)
    assert reasons(p) == [f"intermediate {nw!r} is a graph output"]


def test_rms_norm_rotary_generated_names_do_not_collide_with_existing_ones() -> None:
    proto = G.rms_rotary_model()
    g = proto.graph
    # The graph already uses every name the pass would pick first.
    g.initializer.append(onnx.numpy_helper.from_array(np.zeros(1, np.float32), "q_norm.weight_fp32"))
    g.node.append(helper.make_node("Identity", ["q_norm.weight_fp32"], ["y_fused"], name="/q/Flatten/RMSNormRotary"))
    g.output.append(helper.make_tensor_value_info("y_fused", G.F32, [1]))
    model, _ = apply(FuseRMSNormRotaryPass, proto)
    node = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert node.name == "/q/Flatten/RMSNormRotary_1"
    assert node.inputs[1].name == "q_norm.weight_fp32_1"
    assert model.graph.initializers["q_norm.weight_fp32"].shape == ir.Shape([1])
    onnx.checker.check_model(ir.to_proto(model))


def test_rms_norm_rotary_keeps_scale_captured_by_nested_subgraph() -> None:
    proto = G.rms_rotary_model()
    inner = helper.make_graph([helper.make_node("Identity", ["q_norm.weight"], ["in_w"])], "inner", [],
                              [helper.make_tensor_value_info("in_w", G.F16, [8])])
    mid = helper.make_graph([helper.make_node("If", ["cond"], ["mid_w"], then_branch=inner, else_branch=inner)],
                            "mid", [], [helper.make_tensor_value_info("mid_w", G.F16, [8])])
    proto.graph.input.append(helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []))
    proto.graph.node.append(helper.make_node("If", ["cond"], ["w_out"], then_branch=mid, else_branch=mid))
    proto.graph.output.append(helper.make_tensor_value_info("w_out", G.F16, [8]))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert p.count == 1
    assert "q_norm.weight" in model.graph.initializers
    onnx.checker.check_model(ir.to_proto(model))
    feeds = {"x": X16, "position_ids": POS, "cond": np.array(True)}
    close(run_ref(model, feeds), run_ort(proto, feeds))


def test_rms_norm_rotary_q_and_k_share_converted_caches() -> None:
    r = G.rng(0)
    g = G.G()
    x = g.inp("x", G.F16, ["B", "S", 16])
    pos = g.inp("position_ids", G.I64, ["B", "S"])
    cos = g.init("cos_cache", r.standard_normal((16, 4)).astype(np.float16))
    sin = g.init("sin_cache", r.standard_normal((16, 4)).astype(np.float16))
    w = g.init("norm.weight", np.ones(8, np.float16))
    G.rms_rotary_chain(g, x, pos, cos, sin, w, N=2, D=8, prefix="/q", out="q")
    G.rms_rotary_chain(g, x, pos, cos, sin, w, N=2, D=8, prefix="/k", out="k")
    g.out("q", G.F16, None)
    g.out("k", G.F16, None)
    # Both chains get the same (empty) node name: identity, not names, tells them apart.
    for n in g.nodes:
        n.name = ""
    model, p = apply(FuseRMSNormRotaryPass, g.model())
    fused = [n for n in model.graph if n.op_type == "RMSNormRotary"]
    assert len(fused) == 2 and p.count == 2
    assert fused[0].inputs[1] is fused[1].inputs[1] and fused[0].inputs[3] is fused[1].inputs[3]
    assert ops(model) == {("", "Reshape"): 2, (MS, "RMSNormRotary"): 2}


# -- shared expert ---------------------------------------------------------------------------------
@pytest.mark.parametrize("commuted", [False, True])
@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_shared_expert_projections_fuse_into_one_matmul_and_split(commuted: bool, target: str) -> None:
    proto = G.shared_expert_model(commuted=commuted)
    model, p = apply(FuseSharedExpertPass, proto, target=target)
    assert p.count == 1
    assert ops(model) == {("", "MatMul"): 2, ("", "Split"): 1, ("", "Sigmoid"): 2, ("", "Mul"): 3}
    h = np.random.default_rng(2).standard_normal((2, 3, 16)).astype(np.float16)
    close(run_ort(model, {"h": h}), run_ort(proto, {"h": h}), atol=2e-3)


def test_shared_expert_declines_non_constant_weight() -> None:
    proto = G.shared_expert_model(up_weight="wu_in")
    proto.graph.input.append(helper.make_tensor_value_info("wu_in", G.F16, [16, 8]))
    model, p = apply(FuseSharedExpertPass, proto)
    assert reasons(p) == ["up weight 'wu_in' is not a constant initializer"]
    # The behaviour, not only the text: nothing fused, the up projection still reads the input.
    assert p.count == 0 and ops(model) == {("", "MatMul"): 4, ("", "Sigmoid"): 2, ("", "Mul"): 3}
    assert any(n.op_type == "MatMul" and n.inputs[1] is not None and n.inputs[1].name == "wu_in" for n in model.graph)


# -- CausalConvWithState -----------------------------------------------------------------------------
@pytest.mark.parametrize("form,S,expected", [
    ("channels_first", "S", {("", "Transpose"): 2, (MS, "CausalConvWithState"): 1}),
    ("first_token", 1, {("", "Transpose"): 2, (MS, "CausalConvWithState"): 1}),
    ("channels_last", "S", {(MS, "CausalConvWithState"): 1}),
])
def test_conv_carry_reuses_present_state(form: str, S: object, expected: dict[tuple[str, str], int]) -> None:
    proto = G.conv_carry_model(form=form, S=S)
    model, p = apply(FuseCausalConvStatePass, proto, target="cpu")
    assert p.count == 1 and ops(model) == expected
    assert [o.name for o in model.graph.outputs] == ["y", "present.0.conv"]
    s = 1 if S == 1 else 5
    x = np.random.default_rng(3).standard_normal((2, s, 8)).astype(np.float16)
    past = np.random.default_rng(4).standard_normal((2, 3, 8) if form == "channels_last" else (2, 8, 3)).astype(np.float16)
    close(run_ort(model, {"x": x, "past.0.conv": past}), run_ort(proto, {"x": x, "past.0.conv": past}), atol=0)


@pytest.mark.parametrize("kw,reason", [
    ({"hist": 2}, "history length 2 != (K-1)*dilation = 3"),
    ({"state_window": 2}, "non-default attribute state_window=2"),
    ({"ndim": 2}, "ndim=2 is not 1"),
    ({"state_length": 3}, "extended attribute state_length is set (CUDA-only path)"),
    ({"dilation": 2, "hist": 3}, "history length 3 != (K-1)*dilation = 6"),
    ({"form": "first_token", "S": "S"}, "first-token carry form needs sequence length 1 (got S)"),
])
def test_conv_carry_guards_decline_with_reason(kw: dict[str, object], reason: str) -> None:
    _, p = apply(FuseCausalConvStatePass, G.conv_carry_model(**kw))  # type: ignore[arg-type]
    assert reasons(p) == [reason]


def test_conv_carry_declines_history_captured_by_subgraph() -> None:
    proto = G.conv_carry_model()
    hist = next(n for n in proto.graph.node if n.op_type == "Concat").output[0]
    body = helper.make_graph([helper.make_node("Identity", [hist], ["h_in"])], "b", [],
                             [helper.make_tensor_value_info("h_in", G.F16, None)])
    proto.graph.input.append(helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []))
    proto.graph.node.append(helper.make_node("If", ["cond"], ["h_out"], then_branch=body, else_branch=body))
    proto.graph.output.append(helper.make_tensor_value_info("h_out", G.F16, None))
    _, p = apply(FuseCausalConvStatePass, proto)
    assert reasons(p) == [f"intermediate {hist!r} is captured by a subgraph"]


def test_conv_carry_consumer_of_reused_state_runs_after_its_producer() -> None:
    proto = G.conv_carry_model()
    g = proto.graph
    # A consumer of the carried state placed before the conv (legal before the rewrite), and a
    # nested capture of it inside an If.
    conv_idx = next(i for i, n in enumerate(g.node) if n.op_type == "CausalConvWithState")
    g.node.insert(conv_idx, helper.make_node("Neg", ["present.0.conv"], ["neg_state"], name="early"))
    body = helper.make_graph([helper.make_node("Identity", ["present.0.conv"], ["cap"])], "b", [],
                             [helper.make_tensor_value_info("cap", G.F16, None)])
    g.input.append(helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []))
    g.node.insert(conv_idx + 1, helper.make_node("If", ["cond"], ["captured"], then_branch=body, else_branch=body))
    g.output.extend([helper.make_tensor_value_info("neg_state", G.F16, None),
                     helper.make_tensor_value_info("captured", G.F16, None)])
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 1
    assert check_topological(model.graph) is None
    order = [n.op_type for n in model.graph]
    assert order.index("CausalConvWithState") < order.index("Neg") < order.index("If")
    x = np.ones((1, 2, 8), np.float16)
    past = np.ones((1, 8, 3), np.float16)
    feeds = {"x": x, "past.0.conv": past, "cond": np.array(True)}
    close(run_ort(model, feeds), run_ort(proto, feeds), atol=0)


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


# -- FP8 head ---------------------------------------------------------------------------------------
def _head(H: int = 200, V: int = 16, captured: bool = False) -> onnx.ModelProto:
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", H])
    w = g.init("lm_head.weight", (0.1 * G.rng(0).standard_normal((H, V))).astype(np.float16))
    g.op("MatMul", [n, w], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", V])
    if captured:
        body = helper.make_graph([helper.make_node("Identity", ["logits"], ["c"])], "b", [],
                                 [helper.make_tensor_value_info("c", G.F16, None)])
        g.inp("cond", onnx.TensorProto.BOOL, [])
        g.op("If", ["cond"], outs=["cap"], then_branch=body, else_branch=body)
        g.out("cap", G.F16, None)
    return g.model(ms=False)


def test_fp8_head_quantizes_with_fp32_block_scales() -> None:
    proto = _head()
    model, p = apply(QuantizeFp8HeadPass, proto)
    assert ops(model) == {(MS, "MatMulBlockQuantizedFp8Weight"): 1}
    node = next(iter(model.graph))
    assert node.inputs[1].dtype == ir.DataType.FLOAT8E4M3FN and node.inputs[1].shape == ir.Shape([16, 200])
    assert node.inputs[2].dtype == ir.DataType.FLOAT and node.inputs[2].shape == ir.Shape([16, 2])
    assert model.opset_imports[MS] == 1 and p.count == 1
    n = np.random.default_rng(6).standard_normal((1, 2, 200)).astype(np.float16)
    # FP8 (3 mantissa bits) against the fp16 original: a quantization-sized tolerance.
    close(run_ref(model, {"n": n}), run_ort(proto, {"n": n}), atol=0.15)


def test_fp8_head_refuses_captured_head_output() -> None:
    _, p = apply(QuantizeFp8HeadPass, _head(captured=True))
    assert reasons(p) == ["head output 'logits' is captured by a subgraph"]


def test_fp8_head_skips_fused_projection_with_non_fp32_scales() -> None:
    g = G.G()
    n = g.inp("n", G.F16, ["B", 128])
    b = g.init("b", np.zeros((4, 128), np.uint8))
    s = g.init("s", np.ones((4, 1), np.float16))
    g.op("MatMulBlockQuantizedFp8Weight", [n, b, s], outs=["logits"], domain=MS)
    g.out("logits", G.F16, None)
    _, p = apply(QuantizeFp8HeadPass, g.model())
    assert reasons(p) == ["fused FP8 projection has FLOAT16 scales, FP32 required; skipped"]


def test_fp8_head_handles_producer_without_shape() -> None:
    g = G.G()
    x = g.inp("x", G.F16, ["B", 128])
    n = g.o("Relu", [x])  # no value_info: the producer carries no type or shape
    g.op("MatMul", [n, g.init("w", np.ones((128, 8), np.float16))], outs=["logits"])
    g.out("logits", G.F16, None)
    model, p = apply(QuantizeFp8HeadPass, g.model())
    assert p.count == 1 and ops(model) == {("", "Relu"): 1, (MS, "MatMulBlockQuantizedFp8Weight"): 1}


def test_fp8_head_keeps_non_logits_projections_in_precision() -> None:
    g = G.G()
    n = g.inp("n", G.F16, ["B", 128])
    g.op("MatMul", [n, g.init("fold.proj.weight", np.ones((128, 8), np.float16))], outs=["next_embeds"])
    g.out("next_embeds", G.F16, ["B", 8])
    model, p = apply(QuantizeFp8HeadPass, g.model())
    assert p.count == 0 and ops(model) == {("", "MatMul"): 1}
    assert reasons(p) == ["graph output 'next_embeds' is not a logits projection"]


def test_rms_norm_rotary_fused_output_gets_a_fresh_name_when_it_is_internal() -> None:
    """The fused output is named ``<out>_fused`` only while that name is free.

    The rotary output here is internal (an Identity reads it into the graph output ``y``), so the
    rewrite names the RMSNormRotary output itself; the graph already holds a value ``y_mid_fused``,
    the name the rewrite would pick first. The fused output must take another name: two values of
    one name break the graph (SSA) and its second reader would read the wrong tensor.
    """
    proto = G.rms_rotary_model()
    g = proto.graph
    reshape = next(n for n in reversed(g.node) if n.op_type == "Reshape" and n.output[0] == "y")
    reshape.output[0] = "y_mid"
    g.node.append(helper.make_node("Identity", ["y_mid"], ["y"]))
    g.node.append(helper.make_node("Neg", ["x"], ["y_mid_fused"], name="planted"))
    g.output.append(helper.make_tensor_value_info("y_mid_fused", G.F16, ["B", "S", 16]))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert p.count == 1
    node = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert node.outputs[0].name != "y_mid_fused"
    names = [o.name for n in model.graph for o in n.outputs]
    assert len(names) == len(set(names))
    onnx.checker.check_model(ir.to_proto(model), full_check=True)
    feeds = {"x": X16, "position_ids": POS}
    got, want = run_ref(model, feeds), run_ort(proto, feeds)
    close(got, want)
    np.testing.assert_array_equal(got[1], -X16)  # the planted value still reads its own producer
