"""CUDA-only QMoE offload node rules (ort-contract-rules.md §1B-1F), table-driven.

Invariants guarded:
- A valid base node per format (int4 standard and transposed, int3, int2, nvfp4) is eligible.
- Every negative case changes exactly one thing from a valid base and yields exactly ORT's reason
  text for the first failing check; `required` turns it into one error with ORT's session message,
  `auto` into a warning ("stays on the GPU"); disabled examines nothing.
- Expert initializers shared with a non-offload consumer, plain MoE, and tail-substitution rank
  checks produce ORT's messages.
These are marked cuda_rule so the GPU suite can assert them against a real CUDA session.
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest
from onnx import TensorProto as TP
from support.offload_node_cases import NEGATIVES
from support.offload_node_kit import FORMATS, E, offload_model

from contracts.offload_nodes import (
    NODE_CHECKS,
    check_offload_nodes,
    offload_eligibility,
    required_rejection_message,
)

pytestmark = pytest.mark.cuda_rule
_P = "session.moe.offload."


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_valid_base_node_is_eligible_in_every_format(fmt: str) -> None:
    model = offload_model(fmt)
    assert offload_eligibility(model, "required") == [("moe0", None)]
    assert check_offload_nodes(model, {_P + "mode": "required"}, cuda=True) == []


def test_an_nvfp4_node_without_block_size_is_eligible() -> None:
    # 1C.3: the checker reads a missing block_size as -1, which nvfp4 takes like 16 (its only block)
    model = offload_model("nvfp4", attrs={"block_size": None})
    assert offload_eligibility(model, "required") == [("moe0", None)]
    assert check_offload_nodes(model, {_P + "mode": "required"}, cuda=True) == []
    stated = offload_model("nvfp4", attrs={"block_size": 1})
    assert offload_eligibility(stated, "required") == [
        ("moe0", "invalid block_size=1 for quant_type='nvfp4' (expected 16)")]


@pytest.mark.parametrize("k", [1, E])
def test_k_from_one_to_the_expert_count_is_eligible(k: int) -> None:
    # ORT's check is k > 0 (1C.7) and k <= num_experts (1C.13): both ends are eligible
    model = offload_model("int4", attrs={"k": k})
    assert offload_eligibility(model, "required") == [("moe0", None)]
    assert check_offload_nodes(model, {_P + "mode": "required"}, cuda=True) == []


def test_every_node_check_has_a_negative_case() -> None:
    covered = {row[3] for row in NEGATIVES}
    assert {rule_id for rule_id, *_ in NODE_CHECKS} <= covered


@pytest.mark.parametrize(("case", "fmt", "kwargs", "rule_id", "reason"), NEGATIVES, ids=[n[0] for n in NEGATIVES])
def test_one_change_from_a_valid_node_gives_orts_reason(case: str, fmt: str, kwargs: dict[str, Any], rule_id: str, reason: str) -> None:
    model = offload_model(fmt, **kwargs)
    assert offload_eligibility(model, "auto") == [("moe0", reason)]
    required = check_offload_nodes(model, {_P + "mode": "required"}, cuda=True)
    assert [(v.rule_id, v.severity, v.node) for v in required] == [(rule_id, "error", "moe0")]
    if rule_id == "OFFLOAD-NODE-SHARED":
        assert required[0].message == (
            "MoE offload mode='required' rejected node 'moe0': expert initializer 'fc1_w' is shared "
            "with a non-offload consumer."
        )
    else:
        op = kwargs.get("op_type", "QMoE")
        assert required[0].message == required_rejection_message("moe0", op, reason)
        assert required[0].message == f"MoE offload mode='required' rejected node 'moe0' ({op}): {reason}."
    auto = check_offload_nodes(model, {_P + "mode": "auto"}, cuda=True)
    assert [(v.rule_id, v.severity, v.node) for v in auto] == [(rule_id, "warning", "moe0")]
    if rule_id == "OFFLOAD-NODE-SHARED":
        assert auto[0].message == (
            "stays on the GPU (not offloaded): expert initializer 'fc1_w' is shared with a non-offload consumer")
    else:
        assert auto[0].message == f"stays on the GPU (not offloaded): {reason}"
    assert check_offload_nodes(model, {_P + "mode": "disabled"}, cuda=True) == []
    assert offload_eligibility(model, "disabled") == []


def test_cpu_sessions_never_run_node_checks() -> None:
    model = offload_model("int4", slots={14: (TP.FLOAT16, [2, 4])})
    assert check_offload_nodes(model, {_P + "mode": "required"}, cuda=False) == []


def test_compute_capability_below_sm80_is_the_first_reason() -> None:
    assert offload_eligibility(offload_model("int4"), "required", compute_capability=(7, 5)) == [
        ("moe0", "CUDA execution provider requires SM80 or later for QMoE offload")
    ]


@pytest.mark.parametrize(("rank", "threshold", "failing"), [
    ("0", "0.5", False), ("1", "0.5", False), ("2", "0.5", True), ("-1", "0.5", True), ("2", "0", False),
])  # fmt: skip
def test_tail_substitution_rank_must_stay_below_k(rank: str, threshold: str, failing: bool) -> None:
    entries = {_P + "mode": "auto", _P + "tail_substitution_min_rank": rank, _P + "tail_substitution_threshold": threshold}
    found = check_offload_nodes(offload_model("int4"), entries, cuda=True)
    expected = (
        [("OFFLOAD-TAIL-001", "Invalid session.moe.offload.tail_substitution_min_rank for node 'moe0': expected 0 <= min_rank < k=2.")]
        if failing else []
    )  # fmt: skip
    assert [(v.rule_id, v.message) for v in found] == expected


def _experts(fmt: str, hidden: int, inter: int) -> onnx.ModelProto:
    scale = TP.FLOAT8E4M3FN if fmt == "nvfp4" else TP.FLOAT16
    block = 16 if fmt == "nvfp4" else 32
    return offload_model(fmt, slots={
        2: (TP.UINT8, [4, 2 * inter, hidden // 2]), 3: (scale, [4, 2 * inter, hidden // block]),
        5: (TP.UINT8, [4, hidden, inter // 2]), 6: (scale, [4, hidden, inter // block]),
    })  # fmt: skip


@pytest.mark.parametrize(("fmt", "dims", "reason"), [
    ("nvfp4", 96, None),
    ("int4", 96, "expert hidden_size and inter_size must be positive and divisible by 64"),
    ("nvfp4", 80, "expert hidden_size and inter_size must be positive and divisible by 32"),
    ("int4", 128, None),
])  # fmt: skip


def test_offload_alignment_is_32_for_nvfp4_and_64_for_int(fmt: str, dims: int, reason: str | None) -> None:
    assert offload_eligibility(_experts(fmt, dims, dims), "required") == [("moe0", reason)]


@pytest.mark.parametrize(("slot", "name", "width"), [(4, "fc1_b", 2 * 64), (7, "fc2_b", 64)])
def test_a_bias_slot_that_is_no_constant_is_named_by_its_slot(slot: int, name: str, width: int) -> None:
    """The fc1 / fc2 bias of a QMoE fed from a graph input keeps the node on the GPU, naming the slot."""
    model = offload_model("int4", slots={slot: (TP.FLOAT16, [4, width])}, graph_inputs=[slot])
    assert offload_eligibility(model, "required") == [("moe0", f"optional expert slot {slot} ('{name}') must be a constant initializer")]


def test_a_wrong_kind_attribute_is_left_to_the_schema_rules() -> None:
    """An attribute of the wrong kind is a schema fault, which the offload node rule must not report again."""
    model = offload_model("int4", attrs={"k": "two"})
    assert offload_eligibility(model, "required")[0][1] is not None
    assert check_offload_nodes(model, {_P + "mode": "required"}, cuda=True) == []
    assert check_offload_nodes(model, {_P + "mode": "auto"}, cuda=True) == []


def test_a_moe_packed_node_with_a_single_expert_is_eligible() -> None:
    """§1F's expert-count range starts at 1: a MoEPacked node with one expert and k=1 is offloaded."""
    slots: dict[int, Any] = {2: (TP.UINT8, [1, 8, 8]), 3: (TP.UINT8, [1, 8, 8]), 4: (TP.UINT8, [1, 8, 8]), 5: None, 6: None}
    attrs = {"quant_type": None, "expert_weight_bits": None, "weights_prepacked": None, "block_size": None,
             "swiglu_fusion": None, "use_sparse_mixer": None, "k": 1}  # fmt: skip
    model = offload_model("int4", op_type="MoEPacked", attrs=attrs, slots=slots)
    assert offload_eligibility(model, "required") == [("moe0", None)]
    assert check_offload_nodes(model, {_P + "mode": "required"}, cuda=True) == []
