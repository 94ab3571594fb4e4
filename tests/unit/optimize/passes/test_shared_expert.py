"""Every test of the shared-expert pass (q38/optimize/shared_expert.py): fusions with parity, each guard's
declines with their reasons, the regressions mutation testing and the property tests found,
its exporter forms and its parity self-test (tests/support/optimize_parity.py).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
import support.optimize_property_kit as K
from onnx import helper, numpy_helper
from support.optimize_helpers import apply, close, ops, outcome_lines, reasons, run_ort
from support.optimize_parity import (
    CASE,
    ParityError,
    fused_weights,
    parity,
    parity_tests,
    replace_weight,
    shared_expert_proto,
)

from q38.optimize.shared_expert import FuseSharedExpertPass

DIMS = {"B": 2, "S": 3, "T": 5}


def _shared_fused(model: ir.Model) -> ir.Value:
    (w,) = [v for v in fused_weights(model, "MatMul") if v.shape is not None and v.shape[1] == 17]
    return w


# -- shared expert ---------------------------------------------------------------------------------
@pytest.mark.parametrize("commuted", [False, True])
@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_shared_expert_projections_fuse_into_one_matmul_and_split(commuted: bool, target: str) -> None:
    proto = G.shared_expert_model(commuted=commuted)
    model, p = apply(FuseSharedExpertPass, proto, target=target)
    assert p.count == 1 and p.sorted == 0  # the fused MatMul and Split land in a sorted place
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


# -- shared expert -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["gate", "shared_gate"])
def test_shared_expert_gemm_projection_is_not_a_matmul(role: str) -> None:
    """Gemm(h, W, alpha=0.5) on [T, H] tokens computes half of MatMul(h, W): it is no projection
    the fused MatMul + Split can take over."""
    proto = G.shared_expert_model()
    proto.graph.input[0].CopyFrom(helper.make_tensor_value_info("h", G.F16, ["T", 16]))
    proto.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", G.F16, ["T", 16]))
    name = {"gate": "/mlp/shared/gate/MatMul", "shared_gate": "/mlp/shared/sgate/MatMul"}[role]
    node = next(n for n in proto.graph.node if n.name == name)
    node.op_type = "Gemm"
    K.set_attr(node, "alpha", 0.5)
    model, p = K.check_rewrite(proto, FuseSharedExpertPass, K.feeds_for(proto, DIMS, 0))
    assert p.count == 0
    if role == "gate":
        assert outcome_lines(p) == []  # the SiLU's input is no MatMul: no candidate at all
    else:
        assert outcome_lines(p) == [("shared_expert: /mlp/shared/gate/MatMul: declined: 0 shared-gate MatMul -> "
                             "Sigmoid projections read the input, not one")]
    assert sum(n.op_type == "Gemm" for n in model.graph) == 1


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


def test_shared_expert_gate_up_swap_fails_parity() -> None:
    """The named defect: the concatenated weight holds [up | gate | shared-gate] instead of [gate | up | ...]."""
    case = CASE["shared_expert"]
    want = case.want()
    model = case.rewritten()
    replace_weight(_shared_fused(model), lambda a: np.concatenate([a[:, 8:16], a[:, :8], a[:, 16:]], axis=1))
    with pytest.raises(ParityError):
        parity(case.got(model), want, case.rel)


def test_shared_expert_fused_weight_is_gate_up_shared_gate_in_order() -> None:
    """The fused MatMul's weight is exactly [W_gate | W_up | W_shared_gate], and parity holds with
    gate and up of different scales (where silu(g) * u and silu(u) * g differ by O(1))."""
    proto = shared_expert_proto()
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    fused = _shared_fused(apply(FuseSharedExpertPass, proto)[0]).const_value.numpy()  # type: ignore[union-attr]
    expected = np.concatenate([inits["mlp.shared_expert.gate_proj.weight"], inits["mlp.shared_expert.up_proj.weight"],
                               inits["mlp.shared_expert_gate.weight"]], axis=1)
    np.testing.assert_array_equal(fused, expected)


# -- shared expert: the gate output's first reader is not the Sigmoid -----------------------------------
def test_shared_expert_gate_read_first_by_another_node_still_fuses_with_parity() -> None:
    """The SiLU is looked for among every reader of the gate output: an Identity reading it ahead
    of the Sigmoid (first in its use list) is skipped, not the end of the search. The projections
    fuse, the Identity then reads the Split's gate output, and both outputs keep their values."""
    proto = G.shared_expert_model()
    gate = next(n for n in proto.graph.node if n.name == "/mlp/shared/gate/MatMul")
    sig = next(n for n in proto.graph.node if n.op_type == "Sigmoid" and n.input[0] == gate.output[0])
    ident = helper.make_node("Identity", [gate.output[0]], ["g_copy"], name="/mlp/shared/gate/Identity")
    proto.graph.node.insert(list(proto.graph.node).index(sig), ident)
    proto.graph.output.append(helper.make_tensor_value_info("g_copy", G.F16, ["B", "S", 8]))
    readers = ir.from_proto(proto).graph.node("/mlp/shared/gate/MatMul").outputs[0].uses()
    assert [u.node.op_type for u in readers] == ["Identity", "Sigmoid", "Mul"]  # the premise
    model, p = apply(FuseSharedExpertPass, proto)
    assert outcome_lines(p) == ["shared_expert: /mlp/shared/gate/MatMul: fused"]
    assert ops(model) == {("", "MatMul"): 2, ("", "Split"): 1, ("", "Identity"): 1, ("", "Sigmoid"): 2, ("", "Mul"): 3}
    (copy,) = [n for n in model.graph if n.op_type == "Identity"]
    split = copy.inputs[0].producer()  # type: ignore[union-attr]
    assert split is not None and split.op_type == "Split" and copy.inputs[0].index() == 0  # type: ignore[union-attr]
    h = np.random.default_rng(4).standard_normal((2, 3, 16)).astype(np.float16)
    close(run_ort(model, {"h": h}), run_ort(proto, {"h": h}), atol=2e-3)


# -- parity that can fail (tests/support/optimize_parity.py) ---------------------------------------
test_real_rewrite_passes_parity, test_every_fused_weight_broken_fails_parity = parity_tests("shared_expert")


# -- shared expert: a projection MatMul without its weight input --------------------------------------------
@pytest.mark.parametrize("role,name", [("gate", "/mlp/shared/gate/MatMul"), ("up", "/mlp/shared/up/MatMul"),
                                       ("shared-gate", "/mlp/shared/sgate/MatMul")])
def test_shared_expert_projection_with_an_absent_weight_input_is_declined(role: str, name: str) -> None:
    """A projection MatMul whose weight input is absent ('') has nothing to concatenate: declined naming the role, graph unchanged, no crash."""
    proto = G.shared_expert_model()
    next(n for n in proto.graph.node if n.name == name).input[1] = ""
    before = K.signature(proto)
    model, p = apply(FuseSharedExpertPass, proto)
    assert p.count == 0
    assert outcome_lines(p) == [(f"shared_expert: /mlp/shared/gate/MatMul: declined: {role} weight None is not a "
                                 "constant initializer")]
    assert K.signature(ir.to_proto(model)) == before
