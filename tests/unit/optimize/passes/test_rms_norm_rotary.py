"""Every test of the RMSNorm + rotary pass (q38/optimize/rms_norm_rotary.py): fusions with parity, each guard's
declines with their reasons, the regressions mutation testing and the property tests found,
its exporter forms and its parity self-test (tests/support/optimize_parity.py).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import support.optimize_graphs as G
import support.optimize_property_kit as K
from onnx import helper
from support.optimize_helpers import (
    apply,
    close,
    ops,
    outcome_lines,
    reasons,
    run_ort,
    run_ref,
    set_init,
)
from support.optimize_parity import (
    CASE,
    ParityError,
    parity,
    parity_tests,
)

from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass

MS = "com.microsoft"

X16 = np.random.default_rng(1).standard_normal((2, 3, 16)).astype(np.float16)

POS = np.array([[0, 1, 2], [5, 6, 7]], np.int64)

DIMS = {"B": 2, "S": 3, "T": 5}


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


# -- RMSNorm + rotary ----------------------------------------------------------------------------------
def test_rms_with_the_reciprocal_as_first_factor_fuses_with_parity() -> None:
    proto = G.rms_rotary_model(alternate=True)
    norm = next(n for n in proto.graph.node if n.op_type == "Mul"
                and any(p.op_type == "Reciprocal" and p.output[0] in n.input for p in proto.graph.node))
    norm.input[:] = [norm.input[1], norm.input[0]]  # Mul(Reciprocal(rms), r)
    model, p = K.check_rewrite(proto, FuseRMSNormRotaryPass, K.feeds_for(proto, DIMS, 0))
    assert outcome_lines(p) == ["rms_norm_rotary: /q/Concat: fused"]
    assert [n.op_type for n in model.graph] == ["Reshape", "RMSNormRotary"]


def test_rms_rotary_slice_with_runtime_ends_is_declined() -> None:
    proto = G.rms_rotary_model()
    K.to_input(proto, "/q.e0")  # the first half's end comes in at run time
    before = K.signature(proto)
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert outcome_lines(p) == [("rms_norm_rotary: /q/Concat: declined: rotary Slices are not constant "
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
    assert outcome_lines(p) == [("rms_norm_rotary: /q/Concat: declined: position ids shape [1,S] is not the "
                         "input's [B, S] = [B, S]")]
    # and with [B, S] position ids the same graph fuses (the guard is about the broadcast only)
    pos.CopyFrom(helper.make_tensor_value_info("position_ids", G.I64, ["B", "S"]))
    _, p = K.check_rewrite(proto, FuseRMSNormRotaryPass, K.feeds_for(proto, DIMS, 0))
    assert p.count == 1


@pytest.mark.parametrize("shape,shown", [([1, 1], "[1,1]"), ([1, "S"], "[1,S]")])
def test_rms_norm_rotary_broadcast_position_ids_are_declined(shape: list[str | int | None], shown: str) -> None:
    proto = G.rms_rotary_model()
    pos = next(i for i in proto.graph.input if i.name == "position_ids")
    pos.CopyFrom(onnx.helper.make_tensor_value_info("position_ids", G.I64, shape))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert reasons(p) == [f"position ids shape {shown} is not the input's [B, S] = [B, S]"]
    assert (MS, "RMSNormRotary") not in ops(model)



def test_rms_norm_rotary_broadcast_position_ids_are_declined_by_the_rotary_input_shape_alone() -> None:
    """The [B, S] the positions must match is read from the 4-D rotary input when it declares a
    shape: with the flat input untyped, [1, S] positions are still declined."""
    proto = G.rms_rotary_model()
    x = next(i for i in proto.graph.input if i.name == "x")
    x.type.tensor_type.ClearField("shape")
    r = next(n for n in proto.graph.node if n.name == "/q/Reshape").output[0]
    proto.graph.value_info.append(onnx.helper.make_tensor_value_info(r, G.F16, ["B", "S", 2, 8]))
    pos = next(i for i in proto.graph.input if i.name == "position_ids")
    pos.CopyFrom(onnx.helper.make_tensor_value_info("position_ids", G.I64, [1, "S"]))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert reasons(p) == ["position ids shape [1,S] is not the input's [B, S] = [B, S]"]
    assert (MS, "RMSNormRotary") not in ops(model)

def test_rms_norm_rotary_negative_epsilon_is_declined() -> None:
    proto = G.rms_rotary_model()
    set_init(proto, "/q.eps", np.array(-0.125, np.float16))
    _, p = apply(FuseRMSNormRotaryPass, proto)
    assert reasons(p) == ["epsilon -0.125 is not finite and nonnegative"]



@pytest.mark.parametrize("shape", [(16, 4, 1), (16, 8)])
def test_rms_norm_rotary_cache_not_rows_by_half_the_head_size_is_declined(shape: tuple[int, ...]) -> None:
    """RMSNormRotary reads [rows, head_size / 2] caches: a cache of another rank (even with
    head_size / 2 columns) or of another width is declined, the graph left unfused."""
    proto = G.rms_rotary_model()
    set_init(proto, "cos_cache", np.zeros(shape, np.float16))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    shown = ",".join(str(d) for d in shape)
    assert reasons(p) == [f"cosine cache shape [{shown}] is not [rows, 4]"]
    assert (MS, "RMSNormRotary") not in ops(model)


def test_rms_norm_rotary_with_epsilon_zero_fuses_with_parity() -> None:
    """Epsilon 0 is nonnegative and finite: the chain fuses, the op's epsilon is 0."""
    proto = G.rms_rotary_model()
    set_init(proto, "/q.eps", np.array(0.0, np.float16))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert p.count == 1
    node = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert node.attributes["epsilon"].value == 0.0
    close(run_ref(model, {"x": X16, "position_ids": POS}), run_ort(proto, {"x": X16, "position_ids": POS}))


def test_rms_norm_rotary_final_reshape_of_rank_four_is_declined() -> None:
    """The op's output is [B, S, heads*head_size]: a final Reshape to [0, 0, -1, 1] is declined."""
    proto = G.rms_rotary_model()
    set_init(proto, "/q.shape3", np.asarray([0, 0, -1, 1], np.int64))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert reasons(p) == ["final Reshape shape [0, 0, -1, 1] is not [0, 0, heads*head_size]"]
    assert (MS, "RMSNormRotary") not in ops(model)

def test_rms_norm_rotary_cos_sin_swap_fails_parity() -> None:
    case = CASE["rms_norm_rotary"]
    want = case.want()
    model = case.rewritten()
    node = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    cos, sin = node.inputs[3], node.inputs[4]
    node.replace_input_with(3, sin)
    node.replace_input_with(4, cos)
    with pytest.raises(ParityError):
        parity(case.got(model), want, case.rel)


@pytest.mark.parametrize("bfloat16", [False, True])
def test_rms_norm_rotary_keeps_bfloat16_caches_and_widens_float16_ones_to_float(bfloat16: bool) -> None:
    """RMSNormRotary takes FP32 or BF16 cos/sin caches: bf16 caches are read as they are (no
    converted copy), fp16 ones become FP32 initializers; the scale is FP32 either way. The fused
    graph computes what the chain did."""
    proto = G.rms_rotary_model()
    if bfloat16:
        proto = G.as_bfloat16(proto)
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert p.count == 1
    node = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    cache_type = ir.DataType.BFLOAT16 if bfloat16 else ir.DataType.FLOAT
    suffix = "" if bfloat16 else "_fp32"
    assert [(v.name, v.dtype) for v in node.inputs[1:]] == [
        ("q_norm.weight_fp32", ir.DataType.FLOAT), ("position_ids", ir.DataType.INT64),
        (f"cos_cache{suffix}", cache_type), (f"sin_cache{suffix}", cache_type)]
    assert sorted(model.graph.initializers) == sorted(
        ["/q.shape4", "q_norm.weight_fp32", f"cos_cache{suffix}", f"sin_cache{suffix}"])
    # output_fp16 follows the activation dtype (the norm's input is an untyped intermediate here):
    # 1 on a bf16 graph made ORT refuse the fused node's bf16 output at load.
    assert node.attributes["output_fp16"].value == (0 if bfloat16 else 1)
    assert node.outputs[0].dtype == (ir.DataType.BFLOAT16 if bfloat16 else ir.DataType.FLOAT16)
    try:  # ORT resolves the fused graph's types; the CPU EP has no RMSNormRotary kernel (CUDA only)
        ort.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several pybind exception types
        assert "NOT_IMPLEMENTED" in str(exc) and "Type Error" not in str(exc), str(exc)
    feeds = {"x": X16.astype(ml_dtypes.bfloat16) if bfloat16 else X16, "position_ids": POS}
    close(run_ref(model, feeds), run_ref(ir.from_proto(proto), feeds))


def test_rms_input_untyped_and_not_a_reshape_output_takes_the_scale_dtype() -> None:
    """The normalized input comes from an untyped Identity (no head-split Reshape behind it to
    read a dtype from, and a flattening Reshape to [0, 0, -1]): the compute dtype is the scale's,
    float16 -- the chain fuses, no crash, with parity."""
    proto = G.rms_rotary_model()
    r = next(n for n in proto.graph.node if n.name == "/q/Reshape").output[0]
    for node in proto.graph.node:
        node.input[:] = ["r_id" if i == r else i for i in node.input]
    at = [n.name for n in proto.graph.node].index("/q/Reshape") + 1
    proto.graph.node.insert(at, helper.make_node("Identity", [r], ["r_id"], name="/q/Identity"))
    set_init(proto, "/q.shape3", np.asarray([0, 0, -1], np.int64))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert outcome_lines(p) == ["rms_norm_rotary: /q/Concat: fused"]
    node = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert node.inputs[0].name == "r_id" and node.outputs[0].dtype == ir.DataType.FLOAT16
    close(run_ref(model, {"x": X16, "position_ids": POS}), run_ort(proto, {"x": X16, "position_ids": POS}))


# -- a rotary Slice without its axes input --------------------------------------------------------------
def test_rotary_slices_without_axes_cut_the_first_axis_and_are_declined() -> None:
    """Slice(nw, [0], [D/2]) with no axes input cuts axis 0, not the head dimension: the unfused
    graph does not even run (the halves do not broadcast against cos/sin), and fusing it would turn
    it into a valid graph computing a full-width rotary. Declined, the graph left unchanged."""
    proto = G.rms_rotary_model()
    for node in proto.graph.node:
        if node.op_type == "Slice":
            del node.input[3:]  # starts, ends only: no axes, no steps
    with pytest.raises(Exception):  # noqa: B017  # onnxruntime raises several pybind exception types
        K.session(proto).run(None, {"x": X16, "position_ids": POS})
    before = K.signature(proto)
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert outcome_lines(p) == [("rms_norm_rotary: /q/Concat: declined: rotary Slices are not constant "
                                 "single-axis slices of the last axis")]
    assert K.signature(ir.to_proto(model)) == before


# -- parity that can fail (tests/support/optimize_parity.py) ---------------------------------------
test_real_rewrite_passes_parity, test_every_fused_weight_broken_fails_parity = parity_tests("rms_norm_rotary")


def test_a_pass_instance_called_again_on_an_edited_model_names_against_its_names_now() -> None:
    """A pass instance that saw a model before (here: handed out its context) and is called on it again
    after something else added names must not hand out a name the model now holds: its table is the
    model's as of this call (a table kept from before crashed with "Initializer ... is already registered")."""
    probe = ir.from_proto(G.rms_rotary_model())
    FuseRMSNormRotaryPass()(probe)
    taken = sorted(set(probe.graph.initializers) - {i.name for i in G.rms_rotary_model().graph.initializer})
    assert taken, "the rewrite adds an initializer under a fresh name"
    p = FuseRMSNormRotaryPass()
    model = ir.from_proto(G.rms_rotary_model())
    p.context(model)  # the instance has seen this model
    for name in taken:  # another pass then takes the names this rewrite would pick
        model.graph.register_initializer(ir.Value(name=name, const_value=ir.tensor(np.zeros(1, np.float32))))
    p(model)
    assert p.count == 1
    added = set(model.graph.initializers) - {i.name for i in G.rms_rotary_model().graph.initializer} - set(taken)
    assert added == {f"{name}_1" for name in taken}


def test_a_pass_instance_reused_on_another_model_names_against_that_model() -> None:
    """Fresh names come from the table of the model being rewritten, not the first one the instance
    saw: the second model already holds the name the first rewrite took, so the reused pass must
    pick another (it crashed with "Initializer ... is already registered")."""
    p = FuseRMSNormRotaryPass()
    first = ir.from_proto(G.rms_rotary_model())
    p(first)
    taken = sorted(set(first.graph.initializers) - {i.name for i in G.rms_rotary_model().graph.initializer})
    assert taken, "the rewrite adds an initializer under a fresh name"
    proto = G.rms_rotary_model()
    # the second model already has the names the first model's table would hand out next
    held = [f"{name}_{i}" for name in taken for i in (1, 2)]
    for name in held:
        proto.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(1, np.float32), name))
    second = ir.from_proto(proto)
    p(second)
    assert p.count == 1
    added = set(second.graph.initializers) - {i.name for i in proto.graph.initializer}
    assert added == set(taken)  # free in this model: the plain names, as on a first use


# -- an unnamed chain output (an in-memory model) ---------------------------------------------------------
def test_rms_norm_rotary_unnamed_internal_output_gets_the_default_fused_name() -> None:
    """An in-memory model may leave the chain's internal output unnamed: the fused output is then ``rms_norm_rotary_fused``, with parity."""
    proto = G.rms_rotary_model()
    g = proto.graph
    flatten = next(n for n in reversed(g.node) if n.op_type == "Reshape" and n.output[0] == "y")
    flatten.output[0] = "y_mid"
    g.node.append(helper.make_node("Identity", ["y_mid"], ["y"]))
    model = ir.from_proto(proto)
    reader = next(n for n in model.graph if n.op_type == "Identity")
    chain_out = reader.inputs[0]
    assert chain_out is not None
    chain_out.name = None  # onnx_ir allows unnamed intermediate values (what a graph builder may hand over)
    p = FuseRMSNormRotaryPass()
    p(model)
    assert outcome_lines(p) == ["rms_norm_rotary: /q/Concat: fused"]
    node = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert node.outputs[0].name == "rms_norm_rotary_fused"
    assert reader.inputs[0] is node.outputs[0]
    feeds = {"x": X16, "position_ids": POS}
    close(run_ref(model, feeds), run_ort(proto, feeds))
