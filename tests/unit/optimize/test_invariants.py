"""Invariants every optimizer pass keeps, each built to break a naive pass.

Invariants guarded (for every pass of the pipeline):
* values and initializers captured by Loop and Scan bodies (a Scan nested inside a Loop body, and
  a top-level Scan) survive the rewrite's pruning, and a replaced value is renamed inside the
  bodies too: the captures read the replacement, under the public name, and the outputs of the
  bodies are unchanged numerically;
* nodes are identified by identity: with every node name empty, or every node named the same,
  each pass fires exactly as on the named graph (same op counts by (domain, op));
* the pipeline order is pinned, and --passes/--skip keep it whatever order they are given in;
* patterns inside subgraphs (If/Loop/Scan bodies) are declined, never rewritten, with the reason
  "inside a subgraph (only the top-level graph is rewritten)".
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
from onnx import TensorProto, helper
from support.optimize_helpers import apply, close, ops, reasons, run_ort, run_ref

from q38.optimize import PASS_NAMES
from q38.optimize._common import SUBGRAPH_REASON, check_topological, iter_graphs
from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.fp8_head import QuantizeFp8HeadPass
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass
from q38.optimize.shared_expert import FuseSharedExpertPass


def _fp8_head() -> onnx.ModelProto:
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 200])
    w = g.init("lm_head.weight", (0.1 * G.rng(0).standard_normal((200, 16))).astype(np.float16))
    g.op("MatMul", [n, w], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 16])
    return g.model()


_R = np.random.default_rng(20)
# pass, builder, feeds, captured names (a source the rewrite prunes; a value it replaces), runs on ORT CPU
CASES: dict[str, tuple[Any, ...]] = {
    "rms_norm_rotary": (
        FuseRMSNormRotaryPass, G.rms_rotary_model,
        {"x": _R.standard_normal((2, 3, 16)).astype(np.float16), "position_ids": np.array([[0, 1, 2], [3, 4, 5]])},
        ["q_norm.weight", "cos_cache", "y"], False,
    ),
    "shared_expert": (
        FuseSharedExpertPass, G.shared_expert_model, {"h": _R.standard_normal((2, 3, 16)).astype(np.float16)},
        ["mlp.shared_expert.gate_proj.weight", "mlp.shared_expert_gate.weight", "v1_0"], True,
    ),
    "hyper_connection": (
        FuseHyperConnectionPass, lambda: G.hc_model(two_blocks=True),
        {"streams": _R.standard_normal((2, 3, 32)).astype(np.float16)},
        ["/l0/attn_hc.inject", "/l0/mlp_hc.down", "streams_out"], False,
    ),
    "causal_conv_state": (
        FuseCausalConvStatePass, G.conv_carry_model,
        {"x": _R.standard_normal((2, 5, 8)).astype(np.float16),
         "past.0.conv": _R.standard_normal((2, 8, 3)).astype(np.float16)},
        ["conv.weight", "present.0.conv"], True,
    ),
    "fp8_head": (
        QuantizeFp8HeadPass, _fp8_head, {"n": _R.standard_normal((1, 2, 200)).astype(np.float16)},
        ["lm_head.weight"], False,
    ),
}
assert sorted(CASES) == sorted(PASS_NAMES)


def _add_loop_and_scan_captures(proto: onnx.ModelProto, names: list[str]) -> list[str]:
    """Capture ``names`` in a top-level Scan body and in a Scan nested in a Loop body."""
    g = proto.graph
    k = len(names)

    def scan_body(tag: str) -> onnx.GraphProto:
        nodes = [helper.make_node("Identity", [n], [f"{tag}_c{i}"]) for i, n in enumerate(names)]
        return helper.make_graph(
            nodes, f"{tag}_scan_body", [helper.make_tensor_value_info(f"{tag}_elt", TensorProto.FLOAT, [])],
            [helper.make_tensor_value_info(f"{tag}_c{i}", TensorProto.FLOAT16, None) for i in range(k)],
        )

    g.initializer.append(onnx.numpy_helper.from_array(np.zeros(1, np.float32), "cap.seq"))
    g.initializer.append(onnx.numpy_helper.from_array(np.array(1, np.int64), "cap.trips"))
    g.initializer.append(onnx.numpy_helper.from_array(np.array(True), "cap.cond"))
    top = [f"scan_out{i}" for i in range(k)]
    g.node.append(helper.make_node("Scan", ["cap.seq"], top, num_scan_inputs=1, body=scan_body("top"), name="cap/Scan"))
    inner = [f"in_scan{i}" for i in range(k)]
    loop_body = helper.make_graph(
        [helper.make_node("Scan", ["cap.seq"], inner, num_scan_inputs=1, body=scan_body("nested"), name="cap/inner/Scan"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         *[helper.make_node("Identity", [n], [f"loop_c{i}"]) for i, n in enumerate(inner)]],
        "loop_body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         *[helper.make_tensor_value_info(f"loop_c{i}", TensorProto.FLOAT16, None) for i in range(k)]],
    )
    looped = [f"loop_out{i}" for i in range(k)]
    g.node.append(helper.make_node("Loop", ["cap.trips", "cap.cond"], looped, body=loop_body, name="cap/Loop"))
    for name in (*top, *looped):
        g.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT16, None))
    return [*top, *looped]


@pytest.mark.parametrize("case", sorted(CASES))
def test_loop_and_scan_captures_survive_and_follow_renames(case: str) -> None:
    cls, build, feeds, captured, on_ort = CASES[case]
    proto = build()
    extra = _add_loop_and_scan_captures(proto, captured)
    model, p = apply(cls, proto)
    assert p.count >= 1, reasons(p)
    assert check_topological(model.graph) is None
    graph_values = {v.name: v for v in model.graph.outputs}
    for sub in iter_graphs(model.graph):
        for node in sub:
            value = node.inputs[0] if node.inputs else None
            if node.op_type != "Identity" or node.graph is model.graph or value is None:
                continue
            producer = value.producer()
            if value.name in graph_values:
                assert value is graph_values[value.name]  # the replacement, under the public name
            elif value.is_initializer() and value.name is not None:
                assert model.graph.initializers[value.name] is value  # not pruned
            elif producer is not None and producer.graph is model.graph:
                assert value.name not in captured  # renamed: a replaced intermediate reads the new one
                assert producer.op_type in ("Split", "RMSNormRotary", "CausalConvWithState")
    names = [o.name for o in model.graph.outputs]
    got = (run_ort(model, feeds) if on_ort else run_ref(model, feeds))
    want = run_ort(proto, feeds)
    idx = [names.index(n) for n in extra]
    # onnx.reference stacks nested Loop scan outputs with np.vstack (one axis fewer than ORT).
    close([np.reshape(got[i], want[i].shape) for i in idx], [want[i] for i in idx],
          atol=0.15 if case == "fp8_head" else 1e-2)


@pytest.mark.parametrize("naming", ["empty", "duplicate"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_nodes_are_identified_by_identity_not_names(case: str, naming: str) -> None:
    cls, build, *_ = CASES[case]
    reference, p_ref = apply(cls, build())
    proto = build()
    for node in proto.graph.node:
        node.name = "" if naming == "empty" else "same"
    model, p = apply(cls, proto)
    assert p.count == p_ref.count >= 1
    assert ops(model) == ops(reference)
    named = [n.name for n in model.graph if n.name and n.name != "same"]
    assert len(named) == len(set(named))  # generated names never collide


def _wrap_in_if(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The whole pattern moved into both branches of an If (initializers stay outside)."""
    g = proto.graph
    outs = [o.name for o in g.output]
    branch = helper.make_graph(list(g.node), "branch", [], list(g.output))
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    node = helper.make_node("If", ["cond"], [f"{o}_if" for o in outs], then_branch=branch, else_branch=branch, name="/if")
    graph = helper.make_graph([node], "g", [*g.input, cond],
                              [helper.make_tensor_value_info(f"{o}_if", TensorProto.UNDEFINED, None) for o in outs],
                              list(g.initializer))
    return helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)


@pytest.mark.parametrize("case", sorted(CASES))
def test_patterns_inside_subgraphs_are_declined_with_reason(case: str) -> None:
    cls, build, *_ = CASES[case]
    proto = _wrap_in_if(build())
    before = collections.Counter((n.domain, n.op_type) for g in iter_graphs(ir.from_proto(proto).graph) for n in g)
    model, p = apply(cls, proto)
    after = collections.Counter((n.domain, n.op_type) for g in iter_graphs(model.graph) for n in g)
    assert p.count == 0 and after == before
    assert reasons(p) and set(reasons(p)) == {SUBGRAPH_REASON}
