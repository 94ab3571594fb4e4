"""The RewritePass machinery every optimizer pass shares (q38/optimize/_common.py), on its own.

Invariants guarded:
* an anchor a pass neither matches nor declines still gets an outcome, with the fixed
  "not recognised" reason (no silent candidate);
* ``PassResult.modified`` is true exactly when the pass rewrote something;
* a candidate inside a subgraph is declined with the subgraph reason, and an unnamed one is
  described by its position in that subgraph;
* the log: one DEBUG line per outcome (its ``--explain`` text), one INFO summary per pass call
  with the rewrite and decline counts, a DEBUG line when the graph had to be sorted.
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
from onnx import helper

from q38.optimize._common import SUBGRAPH_REASON, UNRECOGNISED_REASON, RewritePass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass


class _Silent(RewritePass):
    """Anchors on every Tanh and answers nothing about it."""

    name = "silent"
    contrib_op = None

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        return [n for n in graph if n.op_type == "Tanh"]

    def match(self, ctx: object, node: ir.Node) -> None:  # type: ignore[override]
        return None


def _tanh_model(name: str = "/tanh") -> ir.Model:
    g = G.G()
    x = g.inp("x", G.F16, ["B"])
    g.op("Tanh", [x], outs=["y"], name=name)
    g.out("y", G.F16, ["B"])
    return ir.from_proto(g.model(ms=False))


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
