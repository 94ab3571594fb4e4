"""Names a rewrite creates are fresh: never a name a subgraph, an unread initializer or an
intermediate value already holds (the next free ``<name>_<n>``), nor one the input model held
for a value a rewrite has since removed.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
import support.optimize_graphs as G
from onnx import helper
from support.optimize_helpers import apply

from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass


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


def test_a_name_a_first_phase_rewrite_freed_is_not_given_to_a_new_value() -> None:
    """The hyper-connection pass runs two phases in one call. An intermediate of the second
    chain, removed by phase one, was named "streams_1_p" -- the name phase two would give the
    absorbed PostMix's streams output: that output gets the next free name, so no name of the
    input model ever denotes a different tensor in the output."""
    proto = G.hc_model(two_blocks=True)
    down = next(n for n in proto.graph.node if n.op_type == "MatMul" and n.input[1] == "/l0/mlp_hc.down")
    freed = down.output[0]
    for node in proto.graph.node:
        node.input[:] = ["streams_1_p" if i == freed else i for i in node.input]
    down.output[0] = "streams_1_p"
    model, p = apply(FuseHyperConnectionPass, proto)
    assert p.count == 3
    mix = next(n for n in model.graph if n.op_type == "HyperConnectionLowRankMix" and len(n.outputs) == 3)
    assert mix.outputs[2].name == "streams_1_p_1"
    names = [v.name for n in model.graph for v in n.outputs]
    assert "streams_1_p" not in names and len(names) == len(set(names))


def test_a_base_name_taken_twice_gets_the_next_free_number() -> None:
    """Both ``q_norm.weight_fp32`` and ``q_norm.weight_fp32_1`` are already value names: the fp32
    scale the rewrite creates is ``q_norm.weight_fp32_2`` -- the search for a free name keeps
    counting instead of retrying the first suffix (which would never end)."""
    proto = G.rms_rotary_model()
    for i, taken in enumerate(("q_norm.weight_fp32", "q_norm.weight_fp32_1")):
        proto.graph.initializer.append(onnx.numpy_helper.from_array(np.full(2, i, np.float16), taken))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert [o.line() for o in p.outcomes] == ["rms_norm_rotary: /q/Concat: fused"]
    fused = next(n for n in model.graph if n.op_type == "RMSNormRotary")
    assert fused.inputs[1].name == "q_norm.weight_fp32_2"
    kept = model.graph.initializers["q_norm.weight_fp32_1"].const_value
    assert kept is not None
    np.testing.assert_array_equal(kept.numpy(), np.ones(2, np.float16))  # the other tensor, untouched
