"""The contract defects issue 16's seeded mutations left alive, each killed by a behaviour test.

Invariants guarded (each case fails when the named guard is removed or weakened):
- ``node_overrides``: one trailing comma after an entry's items is accepted, two are not, and an
  empty item list is not (real 1.32.0 sessions agree on every case).
- QMoE offload (CUDA-only, OFFLOAD-NODE-C15): nvfp4 experts need H and I aligned to 32, int to
  64: H = I = 96 is eligible as nvfp4 and refused as int4 (and 80 is refused as both).
- QSA-DSA-CUDA-001: ``is_causal`` must be 1 (0 and 2 refused with ORT's CUDA text; 1 and absent
  accepted).
- QSA-INDEXER-CUDA-001: ``epsilon >= 0`` is inclusive (0 accepted, -1e-9 refused) for both
  indexers.
- CCONV-SCHEMA-003: an explicit ``state_length`` covers ``(k - 1) * dilation`` (dilation 2,
  kernel 3: 3 is too short, 4 is enough), against a real 1.32.0 session's text.
- CCONV-RUN-001 / -002 are evaluated on inputs with shapes and agree with what a real CPU session
  raises when it runs the model: depthwise weight, weight channels, past_state length (dilated,
  channels-last forms); the windowed form (state_window > 0, CUDA only) leads with the window.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import (
    MS,
    ORT_VERSION,
    _model,
    _vi,
    assert_agrees,
    causal_conv_model,
    dsa_model,
    graph_violations,
    identity_model,
    ort_error,
    psai_model,
    sai_model,
)
from support.offload_node_kit import offload_model

from contracts.causal_conv import RULES as CC_RULES
from contracts.config_surface import check_genai_config
from contracts.offload_config import check_offload_config
from contracts.offload_nodes import offload_eligibility
from contracts.qsa import RULES as QSA_RULES

_V132 = ORT_VERSION >= "1.32"
_OVERRIDES = "session.moe.offload.node_overrides"


@pytest.mark.parametrize(("value", "accepted"), [
    ("moe0:max_resident_slots=2,", True),
    ("moe0:max_resident_slots=2, ", True),
    ("moe0:max_resident_slots=2 ,", True),
    ("moe0:max_resident_slots=2,device_expert_bytes=1,", True),
    ("moe0:max_resident_slots=2,;b:max_resident_slots=1,", True),
    (",moe0:max_resident_slots=2", True),
    ("moe0:max_resident_slots=2,,", False),
    ("moe0:,", False),
    ("moe0: ,", False),
    ("moe0:,max_resident_slots=2", False),
])  # fmt: skip
def test_node_overrides_tolerate_exactly_one_trailing_comma(value: str, accepted: bool) -> None:
    violations = check_offload_config({_OVERRIDES: value}, ort_version="1.32.0")
    assert (not violations) == accepted, violations
    if _V132:
        assert_agrees(violations, ort_error(identity_model(), {_OVERRIDES: value}), context=value)


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


def _rule(rules: tuple[Any, ...], rule_id: str) -> Any:
    [rule] = [r for r in rules if r.rule_id == rule_id]
    return rule


@pytest.mark.parametrize(("is_causal", "refused"), [(None, False), (1, False), (0, True), (2, True)])
def test_dynamic_sparse_attention_cuda_needs_is_causal_1(is_causal: int | None, refused: bool) -> None:
    found = _rule(QSA_RULES, "QSA-DSA-CUDA-001").check(dsa_model(is_causal=is_causal), {})
    assert [v.message for v in found] == (["DynamicSparseAttention only supports is_causal=1."] if refused else [])


@pytest.mark.parametrize("build", [psai_model, sai_model], ids=["packed", "dense"])
@pytest.mark.parametrize(("epsilon", "refused"), [(None, False), (0.0, False), (1e-6, False), (-1e-9, True), (-1.0, True)])
def test_indexer_cuda_epsilon_bound_is_inclusive(build: Any, epsilon: float | None, refused: bool) -> None:
    model = build(epsilon=epsilon) if epsilon is not None else build()
    found = _rule(QSA_RULES, "QSA-INDEXER-CUDA-001").check(model, {})
    op = model.graph.node[0].op_type
    assert [v.message for v in found] == ([f"{op}: epsilon must be >= 0, got {epsilon:g}"] if refused else [])


@pytest.mark.parametrize(("state_length", "too_short"), [(3, True), (4, False), (5, False)])
def test_explicit_state_length_covers_kernel_minus_one_times_dilation(state_length: int, too_short: bool) -> None:
    model = causal_conv_model(state_length=state_length, dilation=2, channels_last=1, in_shape=[1, 5, 4])
    violations = graph_violations(model, version="1.32.0")
    ids = {v.rule_id for v in violations if v.severity == "error"}
    assert ("CCONV-SCHEMA-003" in ids) == too_short, violations
    if too_short:
        assert "CausalConvWithState: state_length is too short" in {v.message for v in violations}
    if _V132:
        assert_agrees(violations, ort_error(model), context=f"state_length={state_length}")


def _conv(x: list[int], w: list[int], past: list[int] | None, **attrs: Any) -> onnx.ModelProto:
    names = ["x", "w", "", "past"] if past is not None else ["x", "w"]
    node = oh.make_node("CausalConvWithState", names, ["y", "st"], name="cc", domain=MS, **attrs)
    ins = [_vi("x", TP.FLOAT, x), _vi("w", TP.FLOAT, w)] + ([_vi("past", TP.FLOAT, past)] if past is not None else [])
    return _model([node], ins, [_vi("y", TP.FLOAT, None), _vi("st", TP.FLOAT, None)])


def _run_error(model: onnx.ModelProto) -> str | None:
    """None when a CPU session runs the model on zero inputs, else ORT's error text."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32) for i in model.graph.input}
    try:
        session.run(None, feeds)
    except Exception as exc:  # onnxruntime raises several pybind exception types
        return str(exc)
    return None


RUN_CASES: list[tuple[str, onnx.ModelProto, str | None, str | None]] = [
    ("valid", _conv([1, 4, 5], [4, 1, 3], [1, 4, 2]), None, None),
    ("valid dilation 2", _conv([1, 4, 5], [4, 1, 3], [1, 4, 4], dilation=2), None, None),
    ("valid channels_last", _conv([1, 5, 4], [4, 1, 3], [1, 2, 4], channels_last=1), None, None),
    ("weight not depthwise", _conv([1, 4, 5], [4, 2, 3], [1, 4, 2]), "CCONV-RUN-001", "weight must be depthwise (group=1)"),
    ("weight channels", _conv([1, 4, 5], [6, 1, 3], None), "CCONV-RUN-001", "weight channels must match input channels"),
    ("past_state too short", _conv([1, 4, 5], [4, 1, 3], [1, 4, 1]), "CCONV-RUN-002",
     "Input 'past_state' is expected to have shape {1,4,2}, got {1,4,1}."),
    ("past_state undilated", _conv([1, 4, 5], [4, 1, 3], [1, 4, 2], dilation=2), "CCONV-RUN-002",
     "Input 'past_state' is expected to have shape {1,4,4}, got {1,4,2}."),
    ("past_state channels-first for channels_last", _conv([1, 5, 4], [4, 1, 3], [1, 4, 2], channels_last=1), "CCONV-RUN-002",
     "Input 'past_state' is expected to have shape {1,2,4}, got {1,4,2}."),
]  # fmt: skip


@pytest.mark.parametrize(("case", "model", "rule_id", "message"), RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_run_time_conv_rules_agree_with_a_session_that_runs(case: str, model: onnx.ModelProto, rule_id: str | None, message: str | None) -> None:
    found = [v for rid in ("CCONV-RUN-001", "CCONV-RUN-002") for v in _rule(CC_RULES, rid).check(model, {})]
    assert [(v.rule_id, v.message, v.severity) for v in found] == ([(rule_id, message, "warning")] if rule_id else [])
    assert ort_error(model) is None  # a run-time rule: the session is created
    error = _run_error(model)
    if rule_id is None:
        assert error is None, error
    else:
        assert error is not None and message is not None and message in error, error


def test_a_state_shape_mismatch_shows_an_unnamed_unknown_batch_as_a_question_mark() -> None:
    named = _rule(CC_RULES, "CCONV-RUN-002").check(_conv(["B", 4, 5], [4, 1, 3], [1, 4, 1]), {})  # type: ignore[list-item]
    unnamed = _rule(CC_RULES, "CCONV-RUN-002").check(_conv([None, 4, 5], [4, 1, 3], [1, 4, 1]), {})  # type: ignore[list-item]
    assert [v.message for v in named] == ["Input 'past_state' is expected to have shape {B,4,2}, got {1,4,1}."]
    assert [v.message for v in unnamed] == ["Input 'past_state' is expected to have shape {?,4,2}, got {1,4,1}."]


@pytest.mark.parametrize(("past", "attrs", "expected"), [
    ([2, 1, 4, 2], {}, None),
    ([1, 4, 2], {}, "{2,1,4,2}, got {1,4,2}"),
    ([3, 1, 4, 2], {}, "{2,1,4,2}, got {3,1,4,2}"),
    ([2, 1, 2, 4], {"channels_last": 1}, None),
    ([2, 1, 4, 2], {"channels_last": 1}, "{2,1,2,4}, got {2,1,4,2}"),
])  # fmt: skip
def test_a_windowed_state_leads_with_the_window(past: list[int], attrs: dict[str, int], expected: str | None) -> None:
    """§3C.2: with state_window = W > 0 past_state is [W, B, C, (k-1)*dilation] ([W, B, L, C]
    channels-last). CUDA-only (the CPU kernel refuses state_window > 0), so judged on the text."""
    x = [1, 5, 4] if attrs.get("channels_last") else [1, 4, 5]
    found = _rule(CC_RULES, "CCONV-RUN-002").check(_conv(x, [4, 1, 3], past, state_window=2, **attrs), {})
    assert [v.message for v in found] == ([f"Input 'past_state' is expected to have shape {expected}."] if expected else [])


@pytest.mark.parametrize(("graph", "where", "shown"), [
    ({"kv_capacity": 64, "prefill": {"chunk": True}}, "prefill.chunk", "true"),
    ({"kv_capacity": False, "prefill": {"chunk": 16}}, "kv_capacity", "false"),
])
def test_a_json_boolean_prefill_size_is_refused_by_name(graph: dict[str, Any], where: str, shown: str) -> None:
    found = check_genai_config({"model": {"qwen38_graph": graph}})
    assert [(v.rule_id, v.message) for v in found if v.rule_id != "CFG-SURFACE-001"] == [
        ("CFG-PREFILL-001", f"model.qwen38_graph.{where}: expected an integer, got {shown}")]


def test_a_profile_whose_maximum_is_below_its_minimum_is_cfg_profile_002() -> None:
    profiles = [{"id": "a", "eligibility": {"minimum_total_device_memory_bytes": 20,
                                            "maximum_total_device_memory_bytes": 10}}]
    found = check_genai_config({"runtime_profiles": profiles})
    assert [(v.rule_id, v.message) for v in found if v.rule_id != "CFG-SURFACE-001"] == [
        ("CFG-PROFILE-002", "runtime_profiles[0].eligibility: maximum_total_device_memory_bytes is below the minimum")]


def test_cuda_causal_conv_is_one_dimensional_only() -> None:
    found = _rule(CC_RULES, "CCONV-CUDA-001").check(causal_conv_model(rank_in=4, rank_w=4, ndim=2), {})
    assert [(v.rule_id, v.message, v.node) for v in found] == [
        ("CCONV-CUDA-001", "CUDA CausalConvWithState only supports ndim=1", "cc")]
    assert _rule(CC_RULES, "CCONV-CUDA-001").check(causal_conv_model(), {}) == []
