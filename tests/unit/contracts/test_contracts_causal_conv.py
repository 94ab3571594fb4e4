"""The causal-conv rule family (CCONV-*): schema, run-time and CUDA-only rules of
CausalConvWithState.
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
    graph_violations,
    ort_error,
    rule_named,
)

from contracts.causal_conv import RULES as CC_RULES

_V132 = ORT_VERSION >= "1.32"


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


@pytest.mark.parametrize(("case", "model", "rule_id", "message"), RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_run_time_conv_rules_agree_with_a_session_that_runs(case: str, model: onnx.ModelProto, rule_id: str | None, message: str | None) -> None:
    found = [v for rid in ("CCONV-RUN-001", "CCONV-RUN-002") for v in rule_named(CC_RULES, rid).check(model, {})]
    assert [(v.rule_id, v.message, v.severity) for v in found] == ([(rule_id, message, "warning")] if rule_id else [])
    assert ort_error(model) is None  # a run-time rule: the session is created
    error = _run_error(model)
    if rule_id is None:
        assert error is None, error
    else:
        assert error is not None and message is not None and message in error, error


def test_a_state_shape_mismatch_shows_an_unnamed_unknown_batch_as_a_question_mark() -> None:
    named = rule_named(CC_RULES, "CCONV-RUN-002").check(_conv(["B", 4, 5], [4, 1, 3], [1, 4, 1]), {})  # type: ignore[list-item]
    unnamed = rule_named(CC_RULES, "CCONV-RUN-002").check(_conv([None, 4, 5], [4, 1, 3], [1, 4, 1]), {})  # type: ignore[list-item]
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
    found = rule_named(CC_RULES, "CCONV-RUN-002").check(_conv(x, [4, 1, 3], past, state_window=2, **attrs), {})
    assert [v.message for v in found] == ([f"Input 'past_state' is expected to have shape {expected}."] if expected else [])


def test_cuda_causal_conv_is_one_dimensional_only() -> None:
    found = rule_named(CC_RULES, "CCONV-CUDA-001").check(causal_conv_model(rank_in=4, rank_w=4, ndim=2), {})
    assert [(v.rule_id, v.message, v.node) for v in found] == [
        ("CCONV-CUDA-001", "CUDA CausalConvWithState only supports ndim=1", "cc")]
    assert rule_named(CC_RULES, "CCONV-CUDA-001").check(causal_conv_model(), {}) == []


def test_cuda_causal_conv_names_the_activations_it_takes() -> None:
    model = causal_conv_model(activation="gelu")
    found = rule_named(CC_RULES, "CCONV-CUDA-001").check(model, {})
    assert [(v.rule_id, v.message, v.node) for v in found] == [
        ("CCONV-CUDA-001", "activation must be one of: none, silu, swish", "cc")]
    error = ort_error(model)  # the CPU kernel refuses it in the same words
    assert error is not None and found[0].message in error


def _dynamic_varlen(**attrs: Any) -> onnx.ModelProto:
    """VarlenCausalConvWithState 'vl' in dynamic mode (kernel_delta, previous_mask) with shapes 1.32.0's
    inference accepts (probed): x [6,4], dynamic weight [4,1,2], kernel_delta [6,4,2], mask [6,1]."""
    names = ["x", "w", "cu", "", "st", "", "kd", "pm"]
    node = oh.make_node("VarlenCausalConvWithState", names, ["y", "sto"], name="vl", domain=MS, **attrs)
    ins = [_vi("x", TP.FLOAT, [6, 4]), _vi("w", TP.FLOAT, [4, 1, 2]), _vi("cu", TP.INT32, [3]),
           _vi("st", TP.FLOAT, [2, 4, 2]), _vi("kd", TP.FLOAT, [6, 4, 2]), _vi("pm", TP.FLOAT, [6, 1])]  # fmt: skip
    return _model([node], ins, [_vi("y", TP.FLOAT, None), _vi("sto", TP.FLOAT, None)])


@pytest.mark.skipif(not _V132, reason="1.31.1 has neither the dynamic attributes nor a Varlen CPU kernel")
def test_the_varlen_cpu_kernel_names_the_dynamic_grouped_node_it_refuses() -> None:
    model = _dynamic_varlen(group_size=2)
    found = graph_violations(model)
    assert [(v.rule_id, v.message, v.node) for v in found] == [
        ("VCCONV-CPU-001", "CPU VarlenCausalConvWithState does not support dynamic grouped convolution (CUDA only)", "vl")]
    assert_agrees(found, ort_error(model), context="group_size=2 with kernel_delta")
