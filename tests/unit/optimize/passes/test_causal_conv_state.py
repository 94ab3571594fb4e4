"""Every test of the causal-conv state carry pass (q38/optimize/causal_conv_state.py): fusions with parity, each guard's
declines with their reasons, the regressions mutation testing and the property tests found,
its exporter forms and its parity self-test (tests/support/optimize_parity.py).
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
import support.optimize_property_kit as K
from onnx import helper
from support.optimize_helpers import apply, close, nth_node, ops, outcome_lines, reasons, run_ort
from support.optimize_parity import (
    parity_tests,
)

from q38.optimize._common import check_topological
from q38.optimize.causal_conv_state import FuseCausalConvStatePass

MS = "com.microsoft"

DIMS = {"B": 2, "S": 3, "T": 5}


STREAMS = np.random.default_rng(3).standard_normal((2, 3, 32)).astype(np.float16)


# -- CausalConvWithState guards ---------------------------------------------------------------------
def _conv_decline(proto: onnx.ModelProto, reason: str) -> None:
    before = K.signature(proto)

    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 0 and reasons(p) == [reason]
    assert K.signature(ir.to_proto(model)) == before


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


def test_conv_builder_form_is_left_unchanged() -> None:
    proto = G.conv_state_output_model()
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 0 and ops(model)[(MS, "CausalConvWithState")] == 1


# -- CausalConvWithState carry: explicit unit steps ------------------------------------------------------
def test_conv_carry_slice_with_explicit_unit_steps_fuses_with_parity() -> None:
    """Slice(hist, -3, INT64_MAX, -1, steps=[1]) is the same trailing slice as without steps."""
    from q38.optimize.causal_conv_state import FuseCausalConvStatePass

    proto = G.conv_carry_model()
    sl = nth_node(proto, "Slice")
    proto.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray([1], np.int64), "carry.steps"))
    sl.input.append("carry.steps")
    _, p = K.check_rewrite(proto, FuseCausalConvStatePass, K.feeds_for(proto, DIMS, 0), atol=0)
    assert outcome_lines(p) == ["causal_conv_state: /conv/CausalConvWithState: fused"]


def test_conv_first_token_carry_on_channel_axis_is_declined() -> None:
    proto = G.conv_carry_model(form="first_token", S=1, K=3, C=4)
    concat = next(n for n in proto.graph.node if n.op_type == "Concat")
    concat.attribute[0].i = 1
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 0 and reasons(p) == ["carry Concat axis 1 is not the sequence axis"]
    assert ops(model)[("", "Concat")] == 1


@pytest.mark.parametrize("src_dims", [None, ["B", 1, 8, 1]])
def test_conv_first_token_carry_needs_a_rank_three_source_to_know_its_sequence_length(
        src_dims: list[object] | None) -> None:
    """First-token form, the conv input an untyped Transpose([0,2,1]) of ``x``: the sequence length
    is read from ``x`` only when ``x`` declares a rank-3 shape. An ``x`` with no shape (or a shape
    of another rank, even one whose second dimension is 1) gives no length: the carry is declined
    with that reason, the graph left as it was -- no crash, and no fusion on a guessed length."""
    proto = G.conv_carry_model(form="first_token", S=1)
    x = next(i for i in proto.graph.input if i.name == "x")
    if src_dims is None:
        x.type.tensor_type.ClearField("shape")
    else:
        x.CopyFrom(helper.make_tensor_value_info("x", G.F16, src_dims))
    assert not [v for v in proto.graph.value_info if v.name == nth_node(proto, "Transpose").output[0]]
    _conv_decline(proto, "first-token carry form needs sequence length 1 (got None)")


@pytest.mark.parametrize("axes", ["ax", "ax1"])
def test_conv_first_token_carry_slicing_another_axis_is_declined(axes: str) -> None:
    """First-token form with either Slice (the past's tail ``ax``, or the input's head ``ax1``)
    cutting the channel axis instead of the sequence axis: no carry of the sequence, declined with
    the form's reason and the graph left as it was."""
    proto = G.conv_carry_model(form="first_token", S=1)
    K.set_init(proto, axes, np.asarray([1], np.int64))
    _conv_decline(proto, "first-token carry is not Concat(Slice(past,[1],[MAX]), Slice(x,[0],[1]))")


def test_conv_declaring_no_state_output_gets_one_for_the_carry() -> None:
    """A conv whose node lists only its output (present_state not declared; ORT's schema wants
    both): the carry chain is still replaced, by a second output the rewrite adds to the conv,
    which takes the graph output's public name; the outputs are what the declared form computes."""
    reference = G.conv_carry_model()
    proto = G.conv_carry_model()
    conv = nth_node(proto, "CausalConvWithState")
    del conv.output[1:]
    model, p = apply(FuseCausalConvStatePass, proto)
    assert outcome_lines(p) == ["causal_conv_state: /conv/CausalConvWithState: fused"]
    fused = next(n for n in model.graph if n.op_type == "CausalConvWithState")
    assert [v.name for v in fused.outputs] == ["conv_y", "present.0.conv"]
    assert ops(model) == {("", "Transpose"): 2, (MS, "CausalConvWithState"): 1}
    feeds = K.feeds_for(reference, DIMS, 0)
    close(run_ort(model, feeds), run_ort(reference, feeds), atol=0)


def test_conv_input_of_rank_four_is_declined() -> None:
    proto = G.conv_carry_model()
    xT = nth_node(proto, "Transpose").output[0]
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
    K.set_attr(nth_node(proto, "Concat"), "axis", 1)
    _conv_decline(proto, "carry Concat axis 1 is not the sequence axis")
    feeds = {"x": STREAMS[:, :, :8], "past.0.conv": STREAMS[:, :3, :8].transpose(0, 2, 1).copy()}
    assert run_ort(proto, feeds)[1].shape == (2, 16, 3)  # the channel-axis carry: not the op's state



@pytest.mark.parametrize("form,S", [("channels_first", "S"), ("first_token", 1)])
def test_conv_carry_concat_on_the_sequence_axis_spelled_positive_fuses_with_parity(form: str, S: object) -> None:
    """axis=2 of the rank-3 carry is the sequence axis, as axis=-1: the carry fuses, same outputs."""
    proto = G.conv_carry_model(form=form, S=S)
    K.set_attr(nth_node(proto, "Concat"), "axis", 2)
    feeds = K.feeds_for(proto, {**DIMS, "S": 1 if S == 1 else 3}, 0)
    _, p = K.check_rewrite(proto, FuseCausalConvStatePass, feeds, atol=0)
    assert outcome_lines(p) == ["causal_conv_state: /conv/CausalConvWithState: fused"]

def test_conv_whose_present_state_already_has_readers_is_declined() -> None:
    proto = G.conv_carry_model()
    K.extra_consumer(proto, "conv_state_unused")
    _conv_decline(proto, "present_state output already has consumers")


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


def _late_weight_model(*, reader_first: bool) -> onnx.ModelProto:
    """The carry model with the conv's weight produced late (``/late``) and a reader of the carried
    state (``/probe``), both just before the conv, the reader first or second."""
    proto = G.conv_carry_model()
    g = proto.graph
    nodes = list(g.node)
    conv_idx = next(i for i, n in enumerate(nodes) if n.op_type == "CausalConvWithState")
    late = helper.make_node("Identity", ["conv.weight"], ["w_late"], name="/late")
    reader = helper.make_node("Identity", ["present.0.conv"], ["state_probe"], name="/probe")
    nodes[conv_idx].input[1] = "w_late"
    del g.node[:]
    g.node.extend([*nodes[:conv_idx], *((reader, late) if reader_first else (late, reader)), *nodes[conv_idx:]])
    g.output.append(helper.make_tensor_value_info("state_probe", G.F16, None))
    g.value_info.append(helper.make_tensor_value_info("w_late", G.F16, [8, 1, 4]))
    return proto


def test_conv_moved_after_a_late_weight_producer_is_sorted_once(caplog: pytest.LogCaptureFixture) -> None:
    """A reader of the carried state sits before the conv and the conv's weight is produced after
    that reader: the conv cannot be placed before the reader, so the pass records the sort it needs
    and the result is still topologically sorted, with the same outputs."""
    proto = _late_weight_model(reader_first=True)
    caplog.set_level(logging.DEBUG, logger="q38.optimize._common")
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 1 and p.sorted == 1
    assert "causal_conv_state: a rewrite had no sorted place; sorting the graph once" in caplog.messages
    assert check_topological(model.graph) is None
    order = [n.name for n in model.graph]
    assert order.index("/late") < order.index("/conv/CausalConvWithState") < order.index("/probe")
    feeds = {"x": np.ones((1, 2, 8), np.float16), "past.0.conv": np.full((1, 8, 3), 0.5, np.float16)}
    close(run_ort(model, feeds), run_ort(proto, feeds), atol=0)


def test_conv_moved_up_lands_after_a_late_weight_producer_and_before_the_reader_without_a_sort() -> None:
    """The conv's weight is produced by a node after the carry chain, and a reader of the carried
    state sits between that node and the conv: the conv moves to just after the weight's producer,
    before the reader -- a sorted place, so no sort -- and the outputs are unchanged."""
    proto = _late_weight_model(reader_first=False)
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 1 and p.sorted == 0
    order = [n.name for n in model.graph]
    assert order.index("/late") + 1 == order.index("/conv/CausalConvWithState") == order.index("/probe") - 1
    assert check_topological(model.graph) is None
    feeds = {"x": np.ones((1, 2, 8), np.float16), "past.0.conv": np.full((1, 8, 3), 0.5, np.float16)}
    close(run_ort(model, feeds), run_ort(proto, feeds), atol=0)


def test_conv_carry_slice_over_two_axes_is_declined() -> None:
    """A carry Slice that also cuts the batch axis is no trailing slice of the sequence axis: fusing
    it would carry every batch row where the graph carries all but the first."""
    proto = G.conv_carry_model()
    sl = nth_node(proto, "Slice")
    K.set_init(proto, sl.input[1], np.asarray([-3, 1], np.int64))
    K.set_init(proto, sl.input[2], np.asarray([G.INT64_MAX, G.INT64_MAX], np.int64))
    K.set_init(proto, sl.input[3], np.asarray([-1, 0], np.int64))
    _conv_decline(proto, "carry Slice is not a constant trailing slice of the sequence axis")
    feeds = {"x": np.ones((2, 2, 8), np.float16), "past.0.conv": np.ones((2, 8, 3), np.float16)}
    assert run_ort(proto, feeds)[1].shape == (1, 8, 3)


def test_conv_with_one_output_and_no_carry_chain_is_declined_without_a_crash() -> None:
    g = G.G()
    w = g.init("conv.weight", np.ones((8, 1, 4), np.float16))
    x = g.inp("x", G.F16, ["B", 8, "S"])
    past = g.inp("past.0.conv", G.F16, ["B", 8, 3])
    g.op("CausalConvWithState", [x, w, "", past], domain=MS, name="/conv", outs=["y"], activation="silu")
    g.out("y", G.F16, None)
    _conv_decline(g.model(), "no Concat/Slice carry chain reads the past state")


@pytest.mark.parametrize("conv_name", ["/conv/CausalConvWithState", ""])
@pytest.mark.parametrize("form", ["channels_first", "channels_last"])
def test_conv_values_the_rewrite_creates_are_named_after_the_conv(form: str, conv_name: str) -> None:
    """A carried state that no graph output names (channels-first: a conv whose state output is
    unnamed; channels-last: the new conv's outputs) gets a name derived from the conv's, or from
    "conv" when the conv has none -- never an empty name, which no ONNX model may have."""

    reference = _probed(G.conv_carry_model(form=form))
    proto = _probed(G.conv_carry_model(form=form))
    conv = nth_node(proto, "CausalConvWithState")
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


@pytest.mark.parametrize("typed", ["output", "input", None])
def test_conv_dtype_for_the_cpu_check_comes_from_its_output_or_input_when_its_weight_is_untyped(
    typed: str | None,
) -> None:
    """--target cpu: a bfloat16 conv whose weight (an Identity of the initializer, declared with
    elem_type 0 = UNDEFINED) carries no dtype is still known to be bfloat16 from its declared
    output, or from its declared input when the output is untyped, and declined (ORT CPU has no
    bfloat16 CausalConvWithState) rather than fused as "any dtype". With no dtype anywhere the
    check is "some CPU kernel exists" (documented for Produced.dtype None): it fuses, and does
    not crash."""
    proto = G.as_bfloat16(G.conv_carry_model())
    conv = nth_node(proto, "CausalConvWithState")
    proto.graph.node.insert(0, helper.make_node("Identity", ["conv.weight"], ["w_id"], name="/w_id"))
    conv.input[1] = "w_id"
    proto.graph.value_info.append(helper.make_tensor_value_info("w_id", onnx.TensorProto.UNDEFINED, [8, 1, 4]))
    if typed is not None:
        name = conv.output[0] if typed == "output" else conv.input[0]
        proto.graph.value_info.append(helper.make_tensor_value_info(name, onnx.TensorProto.BFLOAT16, ["B", 8, "S"]))
    _, p = apply(FuseCausalConvStatePass, proto, target="cpu")
    if typed is not None:
        assert p.count == 0
        assert reasons(p) == ["no CPU kernel for CausalConvWithState for bfloat16 (target cpu)"]
    else:
        assert p.count == 1 and reasons(p) == []


# -- parity that can fail (tests/support/optimize_parity.py) ---------------------------------------
test_real_rewrite_passes_parity, test_every_fused_weight_broken_fails_parity = parity_tests("causal_conv_carry")
