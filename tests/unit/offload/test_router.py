"""``q38.offload.router.refuse_qmoe_offload``: the old tool's QMoEOffload node is refused.

Invariant guarded: every graph is scanned, subgraphs of control-flow nodes included: a
``QMoEOffload`` node is refused in one line naming the graph and the node; a graph without one passes.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from syrupy.assertion import SnapshotAssertion

from q38.errors import OffloadError
from q38.offload.router import refuse_qmoe_offload


def _if_model(branch_node: onnx.NodeProto) -> ir.Model:
    """A model whose only top-level nodes are an Identity and an If whose then-branch holds ``branch_node``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    then_out = helper.make_tensor_value_info(branch_node.output[0], TensorProto.FLOAT, [1])
    else_out = helper.make_tensor_value_info("e", TensorProto.FLOAT, [1])
    then_branch = helper.make_graph([branch_node], "then", [], [then_out])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="else_id")], "else", [], [else_out])
    nodes = [
        helper.make_node("Identity", ["x"], ["x1"], name="top_id"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch),
    ]
    return ir.from_proto(helper.make_model(helper.make_graph(nodes, "g", [x, cond], [y])))


def test_a_qmoe_offload_node_inside_a_branch_is_refused_naming_it(messages_snapshot: SnapshotAssertion) -> None:
    """A QMoEOffload inside an If branch is found and refused by graph and node name."""
    legacy = helper.make_node("QMoEOffload", ["x"], ["t"], name="/model/layers.0/moe/QMoEOffload",
                              domain="com.microsoft")
    with pytest.raises(OffloadError) as info:
        refuse_qmoe_offload(_if_model(legacy), where="copied.onnx")
    assert messages_snapshot == str(info.value)


def test_a_graph_without_qmoe_offload_passes() -> None:
    """A graph holding no QMoEOffload node anywhere is accepted (a graph q38 only copies stays copyable)."""
    plain = helper.make_node("Identity", ["x"], ["t"], name="then_id")
    refuse_qmoe_offload(_if_model(plain), where="copied.onnx")  # no OffloadError
