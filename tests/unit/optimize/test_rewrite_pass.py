"""The RewritePass machinery every optimizer pass shares (q38/optimize/_common.py), on its own.

Invariants guarded:
* an anchor a pass neither matches nor declines still gets an outcome, with the fixed
  "not recognised" reason (no silent candidate);
* ``PassResult.modified`` is true exactly when the pass rewrote something;
* a candidate inside a subgraph is declined with the subgraph reason, and an unnamed one is
  described by its position in that subgraph;
* the log: one DEBUG line per outcome (its ``--explain`` text), one INFO summary per pass call
  with the rewrite and decline counts (an unnamed graph is "(unnamed)"), a DEBUG line when the
  graph had to be sorted;
* every body is walked wherever its node holds it: a Scan whose scalar attributes come before
  its body, a node with a GRAPHS attribute (a list of bodies) -- each candidate there is declined
  with the subgraph reason, none is missed and none crashes the walk;
* ``NodeOrder.flush`` removes buried nodes only when nothing outside them still reads them: a
  node buried with a live reader is refused and the graph is left as it was;
* ``check_topological`` looks into bodies: a capture of a value produced after its If is out of order;
* a pass run on its own (not in the pipeline) checks its input's invariants, and a pass that
  rewrote anything (a single rewrite included) has its output checked; one that rewrote nothing
  is not re-checked;
* a pass constructed without a target is a ``cuda`` pass, the same as ``target="cuda"``;
* a RewriteContext made without a pass name records a new initializer's origin as no pass ("");
* a constant a guard reads may come from a ``Constant`` node's ``value`` tensor as well as from an
  initializer: the pattern fuses the same, with parity.
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
from support.optimize_helpers import apply, close, nth_node, run_ort, run_ref
from syrupy.assertion import SnapshotAssertion

from q38.optimize._common import (
    SUBGRAPH_REASON,
    UNRECOGNISED_REASON,
    RewriteContext,
    RewritePass,
    check_topological,
    const_array,
    default_reader,
)
from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.graph_order import NodeOrder
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass
from q38.optimize.shared_expert import FuseSharedExpertPass


class _Silent(RewritePass):
    """Anchors on every Tanh and answers nothing about it."""

    name = "silent"
    contrib_op = None

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        return [n for n in graph if n.op_type == "Tanh"]

    def match(self, ctx: object, node: ir.Node) -> None:  # type: ignore[override]
        return None


def _tanh_model(name: str = "/tanh") -> ir.Model:
    return ir.from_onnx_text(f"""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float16[B] x) => (float16[B] y) {{ ["{name}"] y = Tanh (x) }}
    """)


def test_an_anchor_no_guard_answers_for_is_declined_as_not_recognised() -> None:
    p = _Silent()
    result = p(_tanh_model())
    assert [o.line() for o in p.outcomes] == [f"silent: /tanh: declined: {UNRECOGNISED_REASON}"]
    assert result.modified is False


def test_modified_says_whether_the_pass_rewrote_anything() -> None:
    assert FuseRMSNormRotaryPass()(ir.from_proto(G.rms_rotary_model())).modified is True
    assert FuseRMSNormRotaryPass()(_tanh_model()).modified is False


def test_an_unnamed_candidate_inside_a_subgraph_is_described_by_its_place_there() -> None:
    body = G.rms_rotary_model().graph
    for node in body.node:
        node.name = ""
    branch = helper.make_graph(list(body.node), "branch", [], list(body.output))
    cond = helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])
    if_node = helper.make_node("If", ["cond"], ["y_if"], then_branch=branch, else_branch=branch, name="/if")
    graph = helper.make_graph([if_node], "g", [*body.input, cond],
                              [helper.make_tensor_value_info("y_if", onnx.TensorProto.FLOAT16, None)],
                              list(body.initializer))
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10))
    concat = next(i for i, n in enumerate(branch.node) if n.op_type == "Concat")
    p = FuseRMSNormRotaryPass()
    p(model)
    assert [o.line() for o in p.outcomes] == [
        f"rms_norm_rotary: <unnamed Concat #{concat}>: declined: {SUBGRAPH_REASON}"] * 2  # then and else


def test_the_log_has_every_outcome_and_a_summary_per_pass_call(caplog: pytest.LogCaptureFixture) -> None:
    model = ir.from_proto(G.rms_rotary_model())
    caplog.set_level(logging.DEBUG, logger="q38.optimize._common")
    p = FuseRMSNormRotaryPass(target="cpu")
    p(model)
    assert [r.getMessage() for r in caplog.records] == [
        "rms_norm_rotary: /q/Concat: declined: no CPU kernel for RMSNormRotary (target cpu)",
        "pass rms_norm_rotary on graph g: 0 rewrite(s), 1 candidate(s) declined",
    ]
    caplog.clear()
    p = FuseRMSNormRotaryPass()
    p(ir.from_proto(G.rms_rotary_model()))
    assert [r.getMessage() for r in caplog.records] == [
        "rms_norm_rotary: /q/Concat: fused",
        "pass rms_norm_rotary on graph g: 1 rewrite(s), 0 candidate(s) declined",
    ]


def test_the_summary_names_an_unnamed_graph_unnamed(caplog: pytest.LogCaptureFixture) -> None:
    proto = G.rms_rotary_model()
    proto.graph.name = ""
    caplog.set_level(logging.INFO, logger="q38.optimize._common")
    FuseRMSNormRotaryPass()(ir.from_proto(proto))
    assert [r.getMessage() for r in caplog.records] == [
        "pass rms_norm_rotary on graph (unnamed): 1 rewrite(s), 0 candidate(s) declined"]


def _rms_body(name: str, inputs: list[onnx.ValueInfoProto]) -> tuple[onnx.GraphProto, onnx.ModelProto]:
    """The RMS + rotary chain as a body reading x, position ids and the weights from the outer graph."""
    proto = G.rms_rotary_model()
    body = helper.make_graph(list(proto.graph.node), name, inputs, list(proto.graph.output))
    return body, proto


def _outer(proto: onnx.ModelProto, node: onnx.NodeProto, extra_inputs: list[onnx.ValueInfoProto],
           out: onnx.ValueInfoProto, opsets: list[onnx.OperatorSetIdProto]) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", [*proto.graph.input, *extra_inputs], [out], list(proto.graph.initializer))
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def test_a_scan_body_after_its_scalar_attributes_is_walked() -> None:
    """Scan(num_scan_inputs=1, body=...) with the attributes in that order (ONNX does not order
    them): the body's candidate is reported, the model still runs the same on onnxruntime."""
    body, proto = _rms_body("scan_body", [helper.make_tensor_value_info("it_i", onnx.TensorProto.FLOAT, [])])
    scan = helper.make_node("Scan", ["it"], ["ys"], name="/scan")
    scan.attribute.extend([helper.make_attribute("num_scan_inputs", 1), helper.make_attribute("body", body)])
    model_proto = _outer(proto, scan, [helper.make_tensor_value_info("it", onnx.TensorProto.FLOAT, [2])],
                         helper.make_tensor_value_info("ys", G.F16, [2, "B", "S", 16]),
                         [helper.make_opsetid("", 21)])
    feeds = {**K.feeds_for(proto, {"B": 2, "S": 3}, 0), "it": np.zeros(2, np.float32)}
    expected = K.session(model_proto).run(None, feeds)
    model = ir.from_proto(model_proto)
    p = FuseRMSNormRotaryPass()
    p(model)
    assert [o.line() for o in p.outcomes] == [f"rms_norm_rotary: /q/Concat: declined: {SUBGRAPH_REASON}"]
    np.testing.assert_array_equal(K.session(ir.to_proto(model)).run(None, feeds)[0], expected[0])


def test_every_body_of_a_graphs_attribute_is_walked() -> None:
    """A node of another domain holding a list of bodies (a GRAPHS attribute): each is walked."""
    bodies = [_rms_body(f"body{i}", [])[0] for i in range(2)]
    proto = G.rms_rotary_model()
    node = helper.make_node("Bodies", [], ["ys"], name="/bodies", domain="q38.test")
    node.attribute.append(helper.make_attribute("bodies", bodies))
    model = ir.from_proto(_outer(proto, node, [], helper.make_tensor_value_info("ys", G.F16, None),
                                 [helper.make_opsetid("", 21), helper.make_opsetid("q38.test", 1)]))
    p = FuseRMSNormRotaryPass()
    p(model)
    assert [o.line() for o in p.outcomes] == [f"rms_norm_rotary: /q/Concat: declined: {SUBGRAPH_REASON}"] * 2


def test_flush_refuses_a_buried_node_that_is_still_read() -> None:
    g = G.G()
    x = g.inp("x", G.F16, ["B"])
    a = g.o("Relu", [x], name="/relu")
    g.op("Neg", [a], outs=["y"], name="/neg")
    g.out("y", G.F16, ["B"])
    model = ir.from_proto(g.model(ms=False))
    order = NodeOrder(model.graph)
    relu = model.graph.node(0)
    order.bury([relu])  # a wrong proof of deadness: /neg still reads its output
    with pytest.raises(ValueError, match="still being used"):
        order.flush()
    assert [n.name for n in model.graph] == ["/relu", "/neg"]
    assert model.graph.node(1).inputs[0] is relu.outputs[0]


def test_check_topological_sees_a_body_reading_a_value_produced_after_its_node() -> None:
    """An If body captures a value the outer graph produces only after the If: out of order."""
    g = G.G()
    x = g.inp("x", G.F16, ["B"])
    g.inp("cond", onnx.TensorProto.BOOL, [])
    body = helper.make_graph([helper.make_node("Identity", ["late"], ["in_body"], name="/body/id")], "b", [],
                             [helper.make_tensor_value_info("in_body", G.F16, None)])
    g.nodes.append(helper.make_node("If", ["cond"], ["y_if"], name="/if", then_branch=body, else_branch=body))
    g.op("Neg", [x], outs=["late"], name="/late")
    g.out("y_if", G.F16, None)
    g.out("late", G.F16, ["B"])
    model = ir.from_proto(g.model(ms=False))
    assert check_topological(model.graph) == "node Identity '/body/id' reads 'late' before it is produced"


def test_a_pass_run_on_its_own_checks_its_input(messages_snapshot: SnapshotAssertion) -> None:
    """Outside the pipeline (which proves each pass's input once) a pass refuses an input that
    breaks the invariants, even when it would rewrite nothing: here a node reads a value before
    its producer."""
    g = G.G()
    x = g.inp("x", G.F16, ["B"])
    g.nodes.append(helper.make_node("Neg", ["early"], ["y"], name="/neg"))
    g.op("Relu", [x], outs=["early"], name="/relu")
    g.out("y", G.F16, ["B"])
    model = ir.from_proto(g.model(ms=False))
    with pytest.raises(ir.passes.PreconditionError) as caught:
        FuseRMSNormRotaryPass()(model)
    assert messages_snapshot == str(caught.value.__cause__)


def test_remove_dead_keeps_a_shared_node_whose_output_a_subgraph_captures() -> None:
    proto = G.rms_rotary_model()
    c = nth_node(proto, "Unsqueeze").output[0]
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


def test_a_pass_constructed_without_a_target_is_a_cuda_pass() -> None:
    """The default target is ``cuda``, exactly as an explicit ``target="cuda"``: with no
    --target-ort a contrib op ORT has no CPU kernel for still fuses (only ``cpu`` consults the CPU
    kernels), and under --target-ort the decline names the target as ``cuda``."""
    from q38.optimize.target_kernels import active, for_target

    kernels = for_target("1.31.1", "cuda")
    seen = []
    for kw in ({}, {"target": "cuda"}):
        fused = FuseRMSNormRotaryPass(**kw)  # type: ignore[arg-type]
        fused(ir.from_proto(G.rms_rotary_model()))
        declined = FuseRMSNormRotaryPass(**kw)  # type: ignore[arg-type]
        with active(kernels):
            declined(ir.from_proto(G.rms_rotary_model()))
        seen.append((fused.count, [o.line() for o in declined.outcomes]))
    reason = f"no CUDA kernel for RMSNormRotary in onnxruntime 1.31.1 (target cuda, --target-ort; {kernels.source})"
    assert seen[0] == seen[1] == (1, [f"rms_norm_rotary: /q/Concat: declined: {reason}"])


class _Clobbering(RewritePass):
    """Rewrites each Tanh by renaming its output after the graph input: a broken result."""

    name = "clobbering"
    contrib_op = None

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        return [n for n in graph if n.op_type == "Tanh"]

    def match(self, ctx: object, node: ir.Node) -> ir.Node:  # type: ignore[override]
        return node

    def rewrite(self, ctx: object, match: object) -> None:  # type: ignore[override]
        assert isinstance(match, ir.Node)
        match.outputs[0].name = "x"


def test_a_single_rewrite_that_breaks_an_invariant_is_caught_by_the_post_condition(messages_snapshot: SnapshotAssertion) -> None:
    """``ensures`` checks the invariants after any pass that rewrote something, one rewrite
    included: a rewrite leaving two values named 'x' fails the pass. A pass that rewrote nothing
    is not re-checked (its input was proved): here the same broken graph, handed on with
    ``check_requires=False`` and no anchor, passes through."""
    p = _Clobbering()
    model = _tanh_model()
    with pytest.raises(ir.passes.PostconditionError) as caught:
        p(model)
    assert p.count == 1
    assert messages_snapshot == str(caught.value.__cause__)
    assert _Silent(check_requires=False)(model).modified is False


def test_a_context_made_without_a_pass_name_records_no_pass_as_the_origin() -> None:
    """``origins`` maps each new initializer to the pass that made it (the derived-weights store
    writes it as ``pass:<name>``): a context made with no pass name records "" -- no pass -- and a
    pass's own context records its name."""
    model = _tanh_model()
    x = model.graph.inputs[0]
    provenance: dict[str, list[str]] = {}
    ctx = RewriteContext(model, default_reader, provenance)
    made = ctx.add_initializer("w.fused", np.zeros(2, np.float16), [x])
    assert (ctx.pass_name, ctx.origins, provenance) == ("", {made.name: ""}, {made.name: ["x"]})
    own = FuseRMSNormRotaryPass().context(model)
    other = own.add_initializer("w.fused", np.ones(2, np.float16), [x])
    assert other.name != made.name and own.origins == {other.name: "rms_norm_rotary"}



def test_a_context_for_a_subgraph_adds_initializers_to_that_graph() -> None:
    """``RewriteContext(..., graph=g)`` works on ``g``: a new initializer is registered in ``g``,
    not in the model's main graph, and its name is still fresh across the whole model."""
    model = ir.from_onnx_text("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (bool c, float16[2] x) => (float16[2] y) {
            y = If (c) <then_branch = t () => (float16[2] a) { a = Identity (x) },
                        else_branch = e () => (float16[2] b) { b = Neg (x) }>
        }
    """)
    sub = next(iter(model.graph)).attributes["then_branch"].as_graph()
    ctx = RewriteContext(model, default_reader, {}, graph=sub)
    made = ctx.add_initializer("a", np.zeros(2, np.float16), [])
    assert made.name != "a" and list(sub.initializers) == [made.name]
    assert not model.graph.initializers

def _as_constant_node(proto: onnx.ModelProto, name: str) -> None:
    """The initializer ``name`` becomes the output of a Constant node holding it as its ``value`` tensor."""
    init = next(t for t in proto.graph.initializer if t.name == name)
    proto.graph.initializer.remove(init)
    proto.graph.node.insert(0, helper.make_node("Constant", [], [name], value=init, name=f"/const/{name}"))


def test_constants_from_constant_nodes_value_tensors_are_read_like_initializers() -> None:
    """The rotary chain with every constant a guard reads (slice bounds and axes, the epsilon, the
    ReduceMean and Unsqueeze axes, the flattening shape) given by ``Constant(value=<tensor>)``
    nodes instead of initializers: onnx-ir gives such outputs no ``const_value``, so only the
    attribute holds them. const_array reads the tensor, and the chain fuses with parity."""
    proto = G.rms_rotary_model()
    names = ["/q.s0", "/q.e0", "/q.a0", "/q.s1", "/q.e1", "/q.a1", "/q.eps", "/q.axes", "/q.ax2", "/q.ax2b",
             "/q.shape3"]
    for name in names:
        _as_constant_node(proto, name)
    model = ir.from_proto(proto)
    values = {v.name: v for n in model.graph if n.op_type == "Constant" for v in n.outputs}
    assert values["/q.e0"].const_value is None  # the premise: nothing but the attribute holds it
    np.testing.assert_array_equal(const_array(values["/q.e0"], default_reader), np.array([4], np.int64))
    assert const_array(values["/q.eps"], default_reader) == np.float16(1e-6)
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert [o.line() for o in p.outcomes] == ["rms_norm_rotary: /q/Concat: fused"]
    assert [n.op_type for n in model.graph if n.op_type != "Constant"] == ["Reshape", "RMSNormRotary"]
    node = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert node.attributes["rotary_embedding_dim"].value == 8
    assert node.attributes["epsilon"].value == pytest.approx(float(np.float16(1e-6)))
    x = np.random.default_rng(1).standard_normal((2, 3, 16)).astype(np.float16)
    feeds = {"x": x, "position_ids": np.array([[0, 1, 2], [5, 6, 7]], np.int64)}
    close(run_ref(model, feeds), run_ort(proto, feeds))


# -- survivors of `nox -s mutation -- q38/optimize` (candidate loop, base produces, slices, removal) --
def _two_shared_experts_first_up_silu(H: int = 8) -> onnx.ModelProto:
    """Two shared-expert blocks in a row; the first block's up projection also feeds its own
    SiLU ``Mul(u, Sigmoid(u))``, so that MatMul is an anchor too (listed between the two gates)."""
    r = G.rng(3)
    g = G.G()
    x = g.inp("h", G.F16, ["B", "S", H])

    def w(name: str, cols: int) -> str:
        return g.init(name, (0.3 * r.standard_normal((H, cols))).astype(np.float16))

    for b in (1, 2):
        gg = g.o("MatMul", [x, w(f"b{b}.gate_proj.weight", H)], name=f"/b{b}/gate/MatMul")
        u = g.o("MatMul", [x, w(f"b{b}.up_proj.weight", H)], name=f"/b{b}/up/MatMul")
        sg = g.o("MatMul", [x, w(f"b{b}.shared_expert_gate.weight", 1)], name=f"/b{b}/sgate/MatMul")
        a = g.o("Mul", [g.o("Mul", [gg, g.o("Sigmoid", [gg])]), u])
        y = g.o("Mul", [g.o("MatMul", [a, w(f"b{b}.down_proj.weight", H)], name=f"/b{b}/down/MatMul"), g.o("Sigmoid", [sg])])
        if b == 1:
            y = g.o("Add", [y, g.o("Mul", [u, g.o("Sigmoid", [u])])])
        x = y
    g.op("Identity", [x], outs=["y"])
    g.out("y", G.F16, ["B", "S", H])
    return g.model()


def test_an_anchor_an_earlier_rewrite_consumed_is_skipped_and_later_anchors_still_fuse() -> None:
    """The first block's fusion absorbs its up MatMul, itself an anchor listed next: that anchor is
    skipped silently (no outcome) and the candidate loop goes on to the second block, which fuses
    too -- a consumed anchor must not end the pass's walk."""
    proto = _two_shared_experts_first_up_silu()
    assert [n.name for n in FuseSharedExpertPass().anchors(ir.from_proto(proto).graph)] == [
        "/b1/gate/MatMul", "/b1/up/MatMul", "/b2/gate/MatMul"]
    model, p = apply(FuseSharedExpertPass, proto)
    assert [o.line() for o in p.outcomes] == ["shared_expert: /b1/gate/MatMul: fused",
                                              "shared_expert: /b2/gate/MatMul: fused"]
    assert p.count == 2
    assert sorted(n.name for n in model.graph if n.op_type in ("MatMul", "Split")) == [
        "/b1/down/MatMul", "/b1/gate/FusedMatMul", "/b1/gate/FusedSplit",
        "/b2/down/MatMul", "/b2/gate/FusedMatMul", "/b2/gate/FusedSplit"]
    feeds = {"h": np.random.default_rng(4).standard_normal((2, 3, 8)).astype(np.float16)}
    close(run_ref(model, feeds), run_ort(proto, feeds))


class _Renaming(RewritePass):
    """Rewrites each Tanh by giving it a fresh name: standard ops only, no ``contrib_op``."""

    name = "renaming"
    contrib_op = None

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        return [n for n in graph if n.op_type == "Tanh"]

    def match(self, ctx: RewriteContext, node: ir.Node) -> ir.Node:
        return node

    def rewrite(self, ctx: RewriteContext, match: object) -> None:
        assert isinstance(match, ir.Node)
        match.name = ctx.node_name("/renamed")


def test_a_pass_introducing_no_contrib_op_rewrites_under_target_cpu() -> None:
    """A pass with no ``contrib_op`` that keeps the base ``produces`` leaves no contrib node for
    ``--target cpu`` to check: it rewrites there as on cuda (no 'no CPU kernel' decline)."""
    p = _Renaming(target="cpu")
    model = _tanh_model()
    result = p(model)
    assert [o.line() for o in p.outcomes] == ["renaming: /tanh: fused"]
    assert result.modified is True
    assert [n.name for n in model.graph] == ["/renamed"]


@pytest.mark.parametrize(("starts", "axes"), [([0], [-1, 2]), ([0, 0], [-1])])
def test_a_rotary_slice_whose_starts_and_axes_differ_in_length_is_declined(starts: list[int],
                                                                          axes: list[int]) -> None:
    """A rotary Slice whose ``starts`` and ``axes`` do not both name exactly one axis (an ill-formed
    Slice: two axes for one start, or two starts for one axis) is not read as a one-axis slice of
    the first entries: the chain is declined and left as it was."""
    proto = G.rms_rotary_model()
    for name, vals in (("/q.s0", starts), ("/q.a0", axes)):
        init = next(t for t in proto.graph.initializer if t.name == name)
        init.CopyFrom(onnx.numpy_helper.from_array(np.asarray(vals, np.int64), name))
    before = [n.op_type for n in proto.graph.node]
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert [o.line() for o in p.outcomes] == [
        "rms_norm_rotary: /q/Concat: declined: rotary Slices are not constant single-axis slices of the last axis"]
    assert [n.op_type for n in model.graph] == before


def test_remove_dead_without_a_node_order_removes_the_dead_candidates_at_once() -> None:
    """``remove_dead`` called with no pass-call order (every pass passes its own, so only a direct
    call reaches this mode) removes the candidates nobody else reads, right away, and keeps one
    whose output is a graph output."""
    from q38.optimize.graph_order import remove_dead

    g = G.G()
    x = g.inp("x", G.F16, ["B"])
    a = g.o("Relu", [x], name="/relu")
    g.o("Neg", [a], name="/neg")
    g.op("Tanh", [x], outs=["y"], name="/tanh")
    g.out("y", G.F16, ["B"])
    model = ir.from_proto(g.model(ms=False))
    relu, neg, tanh = list(model.graph)
    remove_dead(model.graph, [relu, neg, tanh])
    assert [n.name for n in model.graph] == ["/tanh"]
    assert relu.graph is None and neg.graph is None
    assert [u.node.name for u in model.graph.inputs[0].uses()] == ["/tanh"]


def test_a_pass_given_keyword_fields_runs_with_its_run_record_changed_in_those_fields_only() -> None:
    """One :class:`PassRun` record carries what a run gives its passes; the keyword shorthand of a
    pass used on its own names exactly the record's fields and replaces only those, so the run's
    sinks (outcomes, provenance) stay the ones the caller holds and the caller's record is untouched."""
    import dataclasses

    from q38.optimize._common import PassRun, RunFields

    assert set(RunFields.__annotations__) == {f.name for f in dataclasses.fields(PassRun)}
    run = PassRun()
    p = FuseRMSNormRotaryPass(run, target="cpu")
    assert (p.run.target, run.target) == ("cpu", "cuda")
    assert p.outcomes is run.outcomes and p.provenance is run.provenance and p.run.reader is default_reader
    fused = FuseRMSNormRotaryPass(run)
    fused(ir.from_proto(G.rms_rotary_model()))
    assert fused.run is run and [o.line() for o in run.outcomes] == ["rms_norm_rotary: /q/Concat: fused"]
    with pytest.raises(TypeError):
        FuseRMSNormRotaryPass(run, tagret="cpu")  # type: ignore[call-arg]
