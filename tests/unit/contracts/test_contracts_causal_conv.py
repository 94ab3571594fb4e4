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
    varlen_conv_model,
    varlen_dynamic_model,
)

from contracts.causal_conv import RULES as CC_RULES

_V132 = ORT_VERSION >= "1.32"


def _conv(x: list[int], w: list[int], past: list[int] | None, **attrs: Any) -> onnx.ModelProto:
    names = ["x", "w", "", "past"] if past is not None else ["x", "w"]
    node = oh.make_node("CausalConvWithState", names, ["y", "st"], name="cc", domain=MS, **attrs)
    ins = [_vi("x", TP.FLOAT, x), _vi("w", TP.FLOAT, w)] + ([_vi("past", TP.FLOAT, past)] if past is not None else [])
    return _model([node], ins, [_vi("y", TP.FLOAT, None), _vi("st", TP.FLOAT, None)])


def _run_error(model: onnx.ModelProto, **given: np.ndarray) -> str | None:
    """None when a CPU session runs the model on zero float inputs (``given`` ones aside), else ORT's error text."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32) for i in model.graph.input}
    feeds.update(given)
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


_EXT_NAMES = frozenset({"state_length", "state_channels_last", "state_update_capacity", "input_channels",
                        "input_channel_offset"})  # fmt: skip
_XS = ("y", "st")
_X3 = ("y", "st", "su")


def _cc(x: list[Any] | None = None, w: list[Any] | None = None, outputs: tuple[str, ...] = _XS, **attrs: Any) -> onnx.ModelProto:
    """CausalConvWithState 'cc' over x (default channels-last [1,5,4]) and w (default [4,1,3]); None: unshaped."""
    node = oh.make_node("CausalConvWithState", ["x", "w", "", ""], list(outputs), name="cc", domain=MS, **attrs)
    ins = [_vi("x", TP.FLOAT, x), _vi("w", TP.FLOAT, w)]
    return _model([node], ins, [_vi(o, TP.FLOAT, None) for o in outputs])


_S3 = "CCONV-SCHEMA-003"
_S1 = "CCONV-SCHEMA-001"
_REQ = "extended attributes require channels_last=1, ndim=1, state_window=0"
_BAD = "invalid extended attributes"
_OUT3 = "state_update output requires state_update_capacity > 0"
_FIELD = "invalid receptive field"
_SHORT = "state_length is too short"
_CPU_EXT = "CPU CausalConvWithState does not support extended channel/state options (CUDA only)"
_X = [1, 5, 4]  # channels-last input, width 4
_W = [4, 1, 3]
_X4, _W4 = [1, 5, 4, 2], [4, 1, 3, 3]
_BIG = 2**31

# (case, x, w, outputs, attributes, rule id, text without the op prefix): 1.32.0's first refusal (probed).
# An extended node (an extended attribute off its default, or the third output) is checked by the
# extended checks first: their ranges, then the layout they require (which also refuses dilation < 1),
# then the third output's capacity, and only then the input shape; the general checks see plain nodes.
EXT_ORDER_CASES: list[tuple[str, list[Any] | None, list[Any] | None, tuple[str, ...], dict[str, Any], str, str]] = [
    # the layout before the general attribute checks
    ("channels_last=1 ndim=2 state_length=4", _X, _W, _XS, {"channels_last": 1, "ndim": 2, "state_length": 4}, _S3, _REQ),
    ("channels_last=1 ndim=2 state_length=4, rank 4", _X4, _W4, _XS, {"channels_last": 1, "ndim": 2, "state_length": 4},
     _S3, _REQ),
    ("ndim=4 state_length=4", _X, _W, _XS, {"ndim": 4, "state_length": 4}, _S3, _REQ),
    ("channels_last=1 dilation=0 state_length=4", _X, _W, _XS, {"channels_last": 1, "dilation": 0, "state_length": 4},
     _S3, _REQ),
    ("channels_last=1 dilation=-1 state_length=4", _X, _W, _XS, {"channels_last": 1, "dilation": -1, "state_length": 4},
     _S3, _REQ),
    ("dilation=0 state_length=4", _X, _W, _XS, {"dilation": 0, "state_length": 4}, _S3, _REQ),
    ("state_window=9 state_length=4", _X, _W, _XS, {"state_window": 9, "state_length": 4}, _S3, _REQ),
    ("state_window=-1 channels_last=1 state_length=4", _X, _W, _XS,
     {"state_window": -1, "channels_last": 1, "state_length": 4}, _S3, _REQ),
    ("channels_last=2 state_length=4", _X, _W, _XS, {"channels_last": 2, "state_length": 4}, _S3, _REQ),
    ("third output, ndim=4", _X, _W, _X3, {"ndim": 4}, _S3, _REQ),
    # the ranges before the layout and the general checks
    ("state_update_capacity=9, channels_last 0", _X, _W, _XS, {"state_update_capacity": 9}, _S3, _BAD),
    ("state_update_capacity=9, state_window=2", _X, _W, _XS,
     {"state_update_capacity": 9, "channels_last": 1, "state_window": 2}, _S3, _BAD),
    ("state_update_capacity=9, channels_last=1 ndim=2", _X, _W, _XS,
     {"state_update_capacity": 9, "channels_last": 1, "ndim": 2}, _S3, _BAD),
    ("state_update_capacity=9, dilation=0", _X, _W, _XS, {"state_update_capacity": 9, "dilation": 0}, _S3, _BAD),
    ("state_update_capacity=9, ndim=4", _X, _W, _XS, {"state_update_capacity": 9, "ndim": 4}, _S3, _BAD),
    ("state_update_capacity=-1", _X, _W, _XS, {"state_update_capacity": -1, "channels_last": 1}, _S3, _BAD),
    ("state_channels_last=5, ndim=4", _X, _W, _XS, {"state_channels_last": 5, "ndim": 4}, _S3, _BAD),
    ("state_channels_last=-2", _X, _W, _XS, {"state_channels_last": -2, "channels_last": 1}, _S3, _BAD),
    ("input_channels=-1, ndim=4", _X, _W, _XS, {"input_channels": -1, "ndim": 4}, _S3, _BAD),
    ("input_channel_offset=-1, ndim=4", _X, _W, _XS, {"input_channel_offset": -1, "ndim": 4}, _S3, _BAD),
    ("state_length=-1", _X, _W, _XS, {"state_length": -1, "channels_last": 1}, _S3, _BAD),
    ("state_length=-1, dilation=0", _X, _W, _XS, {"state_length": -1, "dilation": 0}, _S3, _BAD),
    ("state_length=2^31", _X, _W, _XS, {"state_length": _BIG, "channels_last": 1}, _S3, _BAD),
    ("input_channels=2^31", _X, _W, _XS, {"input_channels": _BIG, "channels_last": 1}, _S3, _BAD),
    ("input_channel_offset=2^31", _X, _W, _XS, {"input_channel_offset": _BIG, "channels_last": 1}, _S3, _BAD),
    ("third output, state_update_capacity=9, ndim=4", _X, _W, _X3, {"state_update_capacity": 9, "ndim": 4}, _S3, _BAD),
    # the third output's capacity before any shape
    ("third output before the input rank", _X4, _W, _X3, {"channels_last": 1}, _S3, _OUT3),
    ("third output, input unshaped", None, _W, _X3, {"channels_last": 1}, _S3, _OUT3),
    ("third output before state_length too short", _X, _W, _X3, {"channels_last": 1, "state_length": 1}, _S3, _OUT3),
    # then the input rank, the slice, the weight rank and channels, the receptive field, state_length
    ("input rank 4", _X4, _W4, _XS, {"channels_last": 1, "state_update_capacity": 1}, _S3,
     "extended input must have rank 3"),
    ("weight rank 2", _X, [4, 1], _XS, {"channels_last": 1, "state_length": 1}, _S3, "weight must have rank 3"),
    ("weight rank 4", _X, _W4, _XS, {"channels_last": 1, "state_update_capacity": 1}, _S3, "weight must have rank 3"),
    ("weight rank before weight channels", _X, [6, 1], _XS, {"channels_last": 1, "state_update_capacity": 1}, _S3,
     "weight must have rank 3"),
    ("channel slice before the weight rank", _X, [4, 1], _XS, {"channels_last": 1, "input_channel_offset": 1}, _S3,
     "channel slice exceeds input width"),
    ("channel slice, weight unshaped", _X, None, _XS, {"channels_last": 1, "input_channel_offset": 1}, _S3,
     "channel slice exceeds input width"),
    ("weight channels from input_channels, width symbolic", [1, 5, "C"], _W, _XS,
     {"channels_last": 1, "input_channels": 2}, _S3, "weight channels mismatch"),
    ("receptive field over INT_MAX", _X, _W, _XS, {"channels_last": 1, "state_update_capacity": 1, "dilation": _BIG},
     _S3, _FIELD),
    ("receptive field 2^31 (dilation 2^30)", _X, _W, _XS,
     {"channels_last": 1, "state_update_capacity": 1, "dilation": 2**30}, _S3, _FIELD),
    ("receptive field, kernel 2, dilation 2^31", _X, [4, 1, 2], _XS,
     {"channels_last": 1, "state_update_capacity": 1, "dilation": _BIG}, _S3, _FIELD),
    ("receptive field, kernel 0", _X, [4, 1, 0], _XS, {"channels_last": 1, "state_length": 1}, _S3, _FIELD),
    ("receptive field, width symbolic", [1, 5, "C"], _W, _XS,
     {"channels_last": 1, "state_update_capacity": 1, "dilation": _BIG}, _S3, _FIELD),
    ("receptive field before state_length too short", _X, _W, _XS, {"channels_last": 1, "state_length": 1, "dilation": _BIG},
     _S3, _FIELD),
    ("state_length too short", _X, [4, 1, 2], _XS, {"channels_last": 1, "state_length": 1, "dilation": 2}, _S3, _SHORT),
    # near misses: accepted by inference, refused by the CPU kernel ("CPU")
    ("valid extended", _X, _W, _XS, {"channels_last": 1, "state_length": 4}, "CPU", _CPU_EXT),
    ("valid extended, every default spelled out", _X, _W, _XS,
     {"channels_last": 1, "state_length": 4, "ndim": 1, "state_window": 0, "dilation": 1}, "CPU", _CPU_EXT),
    ("state_update_capacity=8", _X, _W, _XS, {"channels_last": 1, "state_update_capacity": 8}, "CPU", _CPU_EXT),
    ("state_channels_last=1", _X, _W, _XS, {"channels_last": 1, "state_channels_last": 1}, "CPU", _CPU_EXT),
    ("state_length=INT_MAX", _X, _W, _XS, {"channels_last": 1, "state_length": _BIG - 1}, "CPU", _CPU_EXT),
    ("channel slice 3 from 1", _X, [3, 1, 3], _XS, {"channels_last": 1, "input_channels": 3, "input_channel_offset": 1},
     "CPU", _CPU_EXT),
    ("receptive field INT_MAX - 1", _X, _W, _XS, {"channels_last": 1, "state_update_capacity": 1, "dilation": 2**30 - 1},
     "CPU", _CPU_EXT),
    ("receptive field INT_MAX (kernel 2)", _X, [4, 1, 2], _XS,
     {"channels_last": 1, "state_update_capacity": 1, "dilation": _BIG - 1}, "CPU", _CPU_EXT),
    ("input unshaped: no shape check", None, _W, _XS, {"channels_last": 1, "state_length": 1}, "CPU", _CPU_EXT),
    ("input unshaped: no weight rank", None, [4, 1], _XS, {"channels_last": 1, "state_length": 1}, "CPU", _CPU_EXT),
    ("weight unshaped", _X, None, _XS, {"channels_last": 1, "state_length": 1}, "CPU", _CPU_EXT),
    ("kernel symbolic", _X, [4, 1, "K"], _XS, {"channels_last": 1, "state_length": 1}, "CPU", _CPU_EXT),
    # plain nodes (explicit defaults are not extended): the general checks, unchanged
    ("defaults spelled out, ndim=4", _X, _W, _XS,
     {"ndim": 4, "state_length": 0, "state_channels_last": -1, "input_channel_offset": 0, "state_update_capacity": 0},
     _S1, "ndim must be 1, 2, or 3, got 4"),
    ("plain ndim=4", _X, _W, _XS, {"ndim": 4}, _S1, "ndim must be 1, 2, or 3, got 4"),
    ("plain dilation=0", _X, _W, _XS, {"channels_last": 1, "dilation": 0}, _S1, "dilation must be >= 1, got 0"),
    ("plain state_window=9", _X, _W, _XS, {"state_window": 9}, _S1, "state_window must be in [0, 8], got 9"),
    ("plain channels_last=2", _X, _W, _XS, {"channels_last": 2}, _S1, "channels_last must be 0 or 1, got 2"),
    ("plain channels_last=1 ndim=2", _X4, _W4, _XS, {"channels_last": 1, "ndim": 2}, _S1,
     "channels_last requires ndim = 1"),
    ("plain dilation 2^31 (the CPU kernel, no receptive field)", _X, _W, _XS, {"channels_last": 1, "dilation": _BIG},
     "CPU", f"dilation must be <= INT_MAX, got {_BIG}"),
]  # fmt: skip


@pytest.mark.parametrize("version", ["1.31.1", "1.32.0"])
@pytest.mark.parametrize(("case", "x", "w", "outputs", "attrs", "rule_id", "text"), EXT_ORDER_CASES,
                         ids=[c[0] for c in EXT_ORDER_CASES])  # fmt: skip
def test_extended_attributes_are_checked_first_in_onnxruntime_order(
    case: str, x: list[Any] | None, w: list[Any] | None, outputs: tuple[str, ...], attrs: dict[str, Any],
    rule_id: str, text: str, version: str,
) -> None:  # fmt: skip
    """1.32.0 reports an extended node's extended-attribute refusal before the general checks (the
    rule id and ORT's text of its first refusal), a plain node's general ones as before; 1.31.1 has no
    extended attributes (an unknown attribute, or a third output, is refused by the schema layer)."""
    model = _cc(x, w, outputs, **attrs)
    found = _errors(model, version)
    if version == "1.32.0":
        want = ("CCONV-CPU-001", text, "cc") if rule_id == "CPU" else (rule_id, _P_CC + text, "cc")
        assert found == [want], case
    elif len(outputs) == 3:  # the arity before the attributes
        assert found[0][0] == "ORT-SCHEMA-004" and "has output size 3" in found[0][1], found
    elif _EXT_NAMES & set(attrs):
        assert found[0][0] == "ORT-SCHEMA-003" and found[0][1].startswith("Unrecognized attribute: "), found
    else:  # a plain node: the same verdict on both versions
        assert found == [("CCONV-CPU-001", text, "cc") if rule_id == "CPU" else (rule_id, _P_CC + text, "cc")], case
    if version[:4] == ORT_VERSION[:4]:
        error = ort_error(model)
        assert_agrees(graph_violations(model), error, context=case)
        assert error is not None and found[0][1] in error, error  # ORT's first refusal is the one named first


_P_CC = "CausalConvWithState: "


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


@pytest.mark.parametrize(("dilation", "refused"), [(2**31 - 1, False), (2**31, True)], ids=["INT_MAX", "INT_MAX+1"])
def test_cuda_causal_conv_takes_a_dilation_up_to_int_max(dilation: int, refused: bool) -> None:
    """CCONV-CUDA-001 refuses a dilation above INT_MAX, not INT_MAX itself. The CPU kernel makes the
    same check in the same words, so a real CPU session draws the boundary at the same place."""
    model = causal_conv_model(dilation=dilation)
    found = rule_named(CC_RULES, "CCONV-CUDA-001").check(model, {})
    text = f"dilation must be <= INT_MAX, got {dilation}"
    assert [(v.rule_id, v.message, v.node) for v in found] == ([("CCONV-CUDA-001", text, "cc")] if refused else [])
    error = ort_error(model)
    if refused:
        assert error is not None and text in error, error
    else:
        assert error is None, error


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


@pytest.mark.skipif(not _V132, reason="1.31.1 has neither the dynamic inputs nor a Varlen CPU kernel")
@pytest.mark.parametrize(("case", "dynamic", "attrs"), [
    ("static", False, {}), ("static, silu", False, {"activation": "silu"}),
    ("dynamic", True, {}), ("dynamic, defaults spelled out", True, {"group_size": 1, "delta_offset": 0}),
])  # fmt: skip
def test_a_wired_kernel_delta_loads_on_cpu_but_its_first_run_is_refused(case: str, dynamic: bool, attrs: dict[str, Any]) -> None:
    model = varlen_dynamic_model(**attrs) if dynamic else varlen_conv_model(**attrs)
    found = graph_violations(model)
    assert ort_error(model) is None, case  # the session is created: no load-time error may be reported
    assert not [v for v in found if v.severity == "error"], case
    warned = [(v.rule_id, v.message, v.node, v.severity) for v in found if v.rule_id == "VCCONV-RUN-001"]
    error = _run_error(model, cu=np.array([0, 3, 6], np.int32))  # two sequences of three tokens
    if dynamic:
        assert warned == [("VCCONV-RUN-001", _VL_CPU_TEXT, "vl", "warning")], case
        assert error is not None and _VL_CPU_TEXT in error, error
    else:
        assert warned == [] and error is None, (case, error)


def test_a_grouped_dynamic_node_is_refused_by_the_constructor_rule_alone() -> None:
    # 1.32.0's rules whatever is installed: 1.31.1 has no dynamic inputs (its arity rule refuses the node)
    found = [(v.rule_id, v.severity) for v in graph_violations(_dynamic_varlen(group_size=2), version="1.32.0")]
    assert ("VCCONV-CPU-001", "error") in found and all(rid != "VCCONV-RUN-001" for rid, _ in found)


_VL_CPU_TEXT = "CPU VarlenCausalConvWithState does not support dynamic grouped convolution (CUDA only)"


# VarlenCausalConvWithState shape inference (VCCONV-SCHEMA-001), probed on 1.32.0 and 1.31.1: the
# input lists (an empty name is an omitted optional input) and the shapes it starts from, which
# 1.32.0 accepts in dynamic mode with group_size 1: channels 4, total_tokens 6, batch 2, two taps.
_VL_BASE: dict[str, list[Any] | None] = {"x": [6, 4], "w": [4, 1, 2], "cu": [3], "b": [4], "st": [2, 4, 1],
                                         "cc": [2], "kd": [6, 2, 4], "pm": [6, 1]}  # fmt: skip
_DYN = ("x", "w", "cu", "", "st", "", "kd", "pm")
_DYN_BIAS = ("x", "w", "cu", "b", "st", "", "kd", "pm")
_KD_ONLY = ("x", "w", "cu", "", "st", "", "kd")
_PM_ONLY = ("x", "w", "cu", "", "st", "", "", "pm")
_STATIC = ("x", "w", "cu", "", "st")
_STATIC_COUNT = ("x", "w", "cu", "", "st", "cc")
_CPU = "CPU"  # schema inference passes; the CPU kernel refuses group_size / delta_offset
_VP = "VarlenCausalConvWithState: "
_IMAX = 2**31 - 1


def _varlen(inputs: tuple[str, ...], shapes: dict[str, list[Any] | None], **attrs: Any) -> onnx.ModelProto:
    """VarlenCausalConvWithState 'vl' over ``inputs``; ``shapes`` overrides _VL_BASE (None: no shape)."""
    dims = {**_VL_BASE, **shapes}
    node = oh.make_node("VarlenCausalConvWithState", list(inputs), ["y", "sto"], name="vl", domain=MS, **attrs)
    ins = [_vi(n, TP.INT32 if n in {"cu", "cc"} else TP.FLOAT, dims[n]) for n in inputs if n]
    return _model([node], ins, [_vi("y", TP.FLOAT, None), _vi("sto", TP.FLOAT, None)])


_VL_NO_KERNEL = [("ORT-KERNEL-001", "Could not find an implementation for VarlenCausalConvWithState(1) node with name 'vl'", "vl")]


def _vl_expected(expected: str | None, version: str = "1.32.0") -> list[tuple[str, str, str]]:
    if expected is None:  # 1.31.1 has the schema but no CPU kernel: the partitioner refuses the node
        return _VL_NO_KERNEL if version.startswith("1.31.") else []
    if expected == _CPU:
        return [("VCCONV-CPU-001", "CPU VarlenCausalConvWithState does not support dynamic grouped convolution (CUDA only)",
                 "vl")]  # fmt: skip
    return [("VCCONV-SCHEMA-001", _VP + expected, "vl")]


def _errors(model: onnx.ModelProto, version: str | None = None) -> list[tuple[str, str, str | None]]:
    return [(v.rule_id, v.message, v.node) for v in graph_violations(model, version=version) if v.severity == "error"]


_TOGETHER = "kernel_delta and previous_mask must be supplied together"
_INVALID = "invalid group_size or delta_offset"
_DYN_MODE = "dynamic mode requires dilation=1, activation=none and no bias"
_WEIGHT = "dynamic weight must have shape (channels, 1, 2)"
_DELTA = "invalid kernel_delta shape or delta_offset"
_MASK = "previous_mask must have shape (total_tokens, 1)"
_DIVIDE = "group_size must divide channels"
_TOKENS = "dynamic inputs must match total_tokens"
_GROUPS = "kernel_delta groups mismatch"

VL_DYNAMIC_CASES: list[tuple[str, tuple[str, ...], dict[str, list[Any] | None], dict[str, Any], str | None]] = [
    # ORT refuses (one fault each)
    ("kernel_delta without previous_mask", _KD_ONLY, {}, {}, _TOGETHER),
    ("previous_mask without kernel_delta", _PM_ONLY, {}, {}, _TOGETHER),
    ("previous_mask alone with group_size 2", _PM_ONLY, {}, {"group_size": 2}, _TOGETHER),
    ("group_size 0", _DYN, {}, {"group_size": 0}, _INVALID),
    ("group_size 2^31", _DYN, {}, {"group_size": 2**31}, _INVALID),
    ("delta_offset -1", _DYN, {}, {"delta_offset": -1}, _INVALID),
    ("delta_offset INT_MAX-1", _DYN, {"kd": [6, "P", 4]}, {"delta_offset": _IMAX - 1}, _INVALID),
    ("group_size 0 without kernel_delta", _STATIC, {}, {"group_size": 0}, _INVALID),
    ("delta_offset INT_MAX-1 without kernel_delta", _STATIC, {}, {"delta_offset": _IMAX - 1}, _INVALID),
    ("dilation 2", _DYN, {}, {"dilation": 2}, _DYN_MODE),
    ("activation silu", _DYN, {}, {"activation": "silu"}, _DYN_MODE),
    ("activation None (case-sensitive)", _DYN, {}, {"activation": "None"}, _DYN_MODE),
    ("activation empty", _DYN, {}, {"activation": ""}, _DYN_MODE),
    ("bias", _DYN_BIAS, {}, {}, _DYN_MODE),
    ("weight kernel 3", _DYN, {"w": [4, 1, 3]}, {}, _WEIGHT),
    ("weight [4,2,2]", _DYN, {"w": [4, 2, 2]}, {}, _WEIGHT),
    ("weight rank 2", _DYN, {"w": [4, 2]}, {}, _WEIGHT),
    ("weight rank 2, symbolic", _DYN, {"w": ["A", "B"]}, {}, _WEIGHT),
    ("weight [4,O,3]", _DYN, {"w": [4, "O", 3]}, {}, _WEIGHT),
    ("weight kernel 3, input unshaped", _DYN, {"w": [4, 1, 3], "x": None}, {}, _WEIGHT),
    ("kernel_delta rank 2", _DYN, {"kd": [6, 8]}, {}, _DELTA),
    ("kernel_delta rank 4", _DYN, {"kd": [6, 2, 4, 1]}, {}, _DELTA),
    ("kernel_delta one tap", _DYN, {"kd": [6, 1, 4]}, {}, _DELTA),
    ("kernel_delta two taps, delta_offset 1", _DYN, {}, {"delta_offset": 1}, _DELTA),
    ("kernel_delta three taps, delta_offset 2", _DYN, {"kd": [6, 3, 4]}, {"delta_offset": 2}, _DELTA),
    ("kernel_delta one tap, input unshaped", _DYN, {"kd": [6, 1, 4], "x": None}, {}, _DELTA),
    ("previous_mask [6,2]", _DYN, {"pm": [6, 2]}, {}, _MASK),
    ("previous_mask rank 1", _DYN, {"pm": [6]}, {}, _MASK),
    ("previous_mask rank 3", _DYN, {"pm": [6, 1, 1]}, {}, _MASK),
    ("previous_mask rank 1, symbolic", _DYN, {"pm": ["A"]}, {}, _MASK),
    ("previous_mask [6,2], input unshaped", _DYN, {"pm": [6, 2], "x": None}, {}, _MASK),
    ("input rank 3", _DYN, {"x": [6, 4, 1]}, {}, "input must have rank 2"),
    ("input rank 3, weight unshaped", _DYN, {"x": [6, 4, 1], "w": None}, {}, "input must have rank 2"),
    ("input rank 3, dynamic operands unshaped", _DYN, {"x": [6, 4, 1], "kd": None, "pm": None}, {},
     "input must have rank 2"),
    ("group_size 3 of 4 channels", _DYN, {"kd": [6, 2, 1]}, {"group_size": 3}, _DIVIDE),
    ("group_size 3, weight unshaped", _DYN, {"w": None}, {"group_size": 3}, _DIVIDE),
    ("group_size 3, kernel_delta unshaped", _DYN, {"kd": None}, {"group_size": 3}, _DIVIDE),
    ("group_size 3 of the input's channels, not the weight's", _DYN, {"w": [3, 1, 2], "kd": [6, 2, 1]},
     {"group_size": 3}, _DIVIDE),
    ("zero channels", _DYN, {"x": [6, 0], "kd": [6, 2, 0]}, {}, _DIVIDE),
    ("kernel_delta 5 tokens", _DYN, {"kd": [5, 2, 4]}, {}, _TOKENS),
    ("previous_mask 5 tokens", _DYN, {"pm": [5, 1]}, {}, _TOKENS),
    ("previous_mask 5 tokens, kernel_delta symbolic tokens", _DYN, {"kd": ["T", 2, 4], "pm": [5, 1]}, {}, _TOKENS),
    ("previous_mask 5 tokens, kernel_delta unshaped", _DYN, {"kd": None, "pm": [5, 1]}, {}, _TOKENS),
    ("input 5 tokens", _DYN, {"x": [5, 4]}, {}, _TOKENS),
    ("kernel_delta 2 groups for 4", _DYN, {"kd": [6, 2, 2]}, {}, _GROUPS),
    ("group_size 2, kernel_delta 4 groups", _DYN, {"kd": [6, 2, 4]}, {"group_size": 2}, _GROUPS),
    ("groups from the input's channels, not the weight's", _DYN, {"w": [3, 1, 2], "kd": [6, 2, 3]}, {}, _GROUPS),
    ("groups, weight unshaped", _DYN, {"w": None, "kd": [6, 2, 3]}, {}, _GROUPS),
    ("cumulative_sequence_length rank 2 in dynamic mode", _DYN, {"cu": [3, 1]}, {},
     "cumulative_sequence_length must have rank 1"),
    # ORT's order: the first failing check is the one reported
    ("state_update_capacity 9 before group_size 0", _DYN, {}, {"state_update_capacity": 9, "group_size": 0},
     "state_update_capacity must be in [0, 8], got 9"),
    ("dilation 0 before group_size 0", _DYN, {}, {"dilation": 0, "group_size": 0}, "dilation must be >= 1, got 0"),
    ("group_size 0 before the lone kernel_delta", _KD_ONLY, {}, {"group_size": 0}, _INVALID),
    ("the lone kernel_delta before dilation 2", _KD_ONLY, {}, {"dilation": 2}, _TOGETHER),
    ("group_size 0 before dilation 2", _DYN, {}, {"group_size": 0, "dilation": 2}, _INVALID),
    ("dilation 2 before weight kernel 3", _DYN, {"w": [4, 1, 3]}, {"dilation": 2}, _DYN_MODE),
    ("weight before kernel_delta", _DYN, {"w": [4, 1, 3], "kd": [6, 1, 4]}, {}, _WEIGHT),
    ("kernel_delta before previous_mask", _DYN, {"kd": [6, 1, 4], "pm": [6, 2]}, {}, _DELTA),
    ("previous_mask before the input rank", _DYN, {"pm": [6, 2], "x": [6, 4, 1]}, {}, _MASK),
    ("divide before tokens", _DYN, {"kd": [5, 2, 1]}, {"group_size": 3}, _DIVIDE),
    ("tokens before groups", _DYN, {"kd": [5, 2, 3]}, {}, _TOKENS),
    ("groups before cumulative_sequence_length", _DYN, {"kd": [6, 2, 3], "cu": [3, 1]}, {}, _GROUPS),
    # ORT accepts (near misses; group_size / delta_offset != default leave the CPU kernel to refuse)
    ("valid", _DYN, {}, {}, None),
    ("valid, activation none spelled out", _DYN, {}, {"activation": "none", "dilation": 1}, None),
    ("valid group_size 2", _DYN, {"kd": [6, 4, 2]}, {"group_size": 2}, _CPU),
    ("valid delta_offset 1 of three taps", _DYN, {"kd": [6, 3, 4]}, {"delta_offset": 1}, _CPU),
    ("delta_offset INT_MAX-2, taps unknown", _DYN, {"kd": [6, "P", 4]}, {"delta_offset": _IMAX - 2}, _CPU),
    ("group_size INT_MAX without kernel_delta", _STATIC, {}, {"group_size": _IMAX},
     "group_size and delta_offset require kernel_delta"),
    ("weight unshaped", _DYN, {"w": None}, {}, None),
    ("weight kernel symbolic", _DYN, {"w": [4, 1, "K"]}, {}, None),
    ("weight kernel unknown", _DYN, {"w": [4, 1, None]}, {}, None),
    ("weight [4,O,2]", _DYN, {"w": [4, "O", 2]}, {}, None),
    ("weight channels differ from the input's", _DYN, {"w": [3, 1, 2]}, {}, None),
    ("kernel_delta unshaped", _DYN, {"kd": None}, {}, None),
    ("kernel_delta taps symbolic, delta_offset 5", _DYN, {"kd": [6, "P", 4]}, {"delta_offset": 5}, _CPU),
    ("kernel_delta groups symbolic", _DYN, {"kd": [6, 2, "G"]}, {}, None),
    ("kernel_delta four taps", _DYN, {"kd": [6, 4, 4]}, {}, None),
    ("previous_mask unshaped", _DYN, {"pm": None}, {}, None),
    ("previous_mask [6,O]", _DYN, {"pm": [6, "O"]}, {}, None),
    ("previous_mask [T,1]", _DYN, {"pm": ["T", 1]}, {}, None),
    ("input unshaped, groups 3", _DYN, {"x": None, "kd": [6, 2, 3]}, {}, None),
    ("input channels symbolic, group_size 3", _DYN, {"x": [6, "C"]}, {"group_size": 3}, _CPU),
    ("input channels symbolic, groups 3", _DYN, {"x": [6, "C"], "kd": [6, 2, 3]}, {}, None),
    ("input tokens symbolic: kernel_delta 5, previous_mask 6", _DYN, {"x": ["T", 4], "kd": [5, 2, 4]}, {}, None),
    ("input tokens symbolic: same symbols", _DYN, {"x": ["T", 4], "kd": ["T", 2, 4], "pm": ["U", 1]}, {}, None),
    ("group_size 3 of 3 channels", _DYN, {"x": [6, 3], "kd": [6, 2, 1]}, {"group_size": 3}, _CPU),
    ("5 tokens throughout", _DYN, {"x": [5, 4], "kd": [5, 2, 4], "pm": [5, 1]}, {}, None),
    ("weight unshaped: no cumulative_sequence_length check", _DYN, {"w": None, "cu": [3, 1]}, {}, None),
    ("input unshaped: no batch check", _DYN, {"x": None, "cu": [8]}, {}, None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "inputs", "shapes", "attrs", "expected"), VL_DYNAMIC_CASES,
                         ids=[c[0] for c in VL_DYNAMIC_CASES])  # fmt: skip
def test_varlen_dynamic_mode_is_refused_where_onnxruntime_refuses_it(
    case: str, inputs: tuple[str, ...], shapes: dict[str, list[Any] | None], attrs: dict[str, Any], expected: str | None
) -> None:
    """1.32.0's dynamic mode: each refusal with ORT's text, the first in ORT's order (a schema failure
    hides the CPU kernel's refusal), nothing where a dim ORT cannot read would decide."""
    model = _varlen(inputs, shapes, **attrs)
    assert _errors(model, "1.32.0") == _vl_expected(expected)
    if _V132:
        assert_agrees(graph_violations(model), ort_error(model), context=case)


_COUNT_RANK = "capture_count must have rank 1"
_COUNT_SHAPE = "capture_count must have shape (batch_size)"
_CU_RANK = "cumulative_sequence_length must have rank 1"
_CU_TWO = "cumulative_sequence_length must have at least 2 elements"
_BATCH = "total_tokens must be at least batch_size"

VL_SHAPE_CASES: list[tuple[str, tuple[str, ...], dict[str, list[Any] | None], dict[str, Any], str | None]] = [
    ("cumulative_sequence_length rank 2", _STATIC, {"cu": [3, 1]}, {}, _CU_RANK),
    ("cumulative_sequence_length rank 2, symbolic", _STATIC, {"cu": ["N", "M"]}, {}, _CU_RANK),
    ("cumulative_sequence_length of 1", _STATIC, {"cu": [1]}, {}, _CU_TWO),
    ("cumulative_sequence_length of 1, input tokens symbolic", _STATIC, {"cu": [1], "x": ["T", 4]}, {}, _CU_TWO),
    ("batch 7 of 6 tokens", _STATIC, {"cu": [8]}, {}, _BATCH),
    ("batch 1 of 0 tokens", _STATIC, {"cu": [2], "x": [0, 4]}, {}, _BATCH),
    ("capture_count rank 2", _STATIC_COUNT, {"cc": [2, 1]}, {}, _COUNT_RANK),
    ("capture_count rank 0", _STATIC_COUNT, {"cc": []}, {}, _COUNT_RANK),
    ("capture_count rank 2, batch symbolic", _STATIC_COUNT, {"cc": [2, 1], "cu": ["N"]}, {}, _COUNT_RANK),
    ("capture_count of 3 for batch 2", _STATIC_COUNT, {"cc": [3]}, {}, _COUNT_SHAPE),
    ("capture_count of 1 for batch 2, capacity 1", _STATIC_COUNT, {"cc": [1]}, {"state_update_capacity": 1},
     _COUNT_SHAPE),
    # ORT's order
    ("state_update_capacity 9 before dilation 0", _STATIC, {}, {"state_update_capacity": 9, "dilation": 0},
     "state_update_capacity must be in [0, 8], got 9"),
    ("input rank before weight rank", _STATIC, {"x": [6, 4, 1], "w": [4, 2]}, {},
     "input must have rank 2 (total_tokens, channels)"),
    ("weight rank before cumulative_sequence_length", _STATIC, {"w": [4, 2], "cu": [3, 1]}, {},
     "weight must have rank 3 (channels, 1, kernel_size)"),
    ("cumulative_sequence_length rank before capture_count", _STATIC_COUNT, {"cu": [3, 1], "cc": [2, 1]}, {}, _CU_RANK),
    ("two elements before capture_count", _STATIC_COUNT, {"cu": [1], "cc": [2, 1]}, {}, _CU_TWO),
    ("batch before capture_count", _STATIC_COUNT, {"cu": [8], "cc": [2, 1]}, {}, _BATCH),
    # ORT accepts
    ("valid", _STATIC, {}, {}, None),
    ("valid with capture_count", _STATIC_COUNT, {}, {"state_update_capacity": 1}, None),
    ("batch 6 of 6 tokens", _STATIC, {"cu": [7]}, {}, None),
    ("batch 1 of 1 token: two elements suffice", _STATIC, {"cu": [2], "x": [1, 4]}, {}, None),
    ("batch 7, tokens symbolic", _STATIC, {"cu": [8], "x": ["T", 4]}, {}, None),
    ("batch symbolic", _STATIC, {"cu": ["N"]}, {}, None),
    ("cumulative_sequence_length unshaped", _STATIC, {"cu": None}, {}, None),
    ("cumulative_sequence_length unshaped: capture_count unchecked", _STATIC_COUNT, {"cu": None, "cc": [2, 1]}, {},
     None),
    ("capture_count batch symbolic", _STATIC_COUNT, {"cc": ["B"]}, {}, None),
    ("capture_count of 3, batch symbolic", _STATIC_COUNT, {"cc": [3], "cu": ["N"]}, {}, None),
    ("capture_count unshaped", _STATIC_COUNT, {"cc": None, "cu": [3]}, {}, None),
    ("input unshaped: nothing checked", _STATIC_COUNT, {"x": None, "w": [4, 2], "cu": [3, 1], "cc": [2, 1]}, {}, None),
    ("weight unshaped: nothing checked", _STATIC_COUNT, {"w": None, "x": [6, 4, 1], "cu": [3, 1], "cc": [3]}, {},
     None),
    ("weight kernel symbolic", _STATIC, {"w": [4, 1, "K"]}, {}, None),
    ("weight kernel symbolic, cumulative_sequence_length rank 2", _STATIC, {"w": [4, 1, "K"], "cu": [3, 1]}, {},
     _CU_RANK),
]  # fmt: skip


@pytest.mark.parametrize("version", ["1.31.1", "1.32.0"])
@pytest.mark.parametrize(("case", "inputs", "shapes", "attrs", "expected"), VL_SHAPE_CASES,
                         ids=[c[0] for c in VL_SHAPE_CASES])  # fmt: skip
def test_varlen_lengths_and_capture_count_are_refused_where_onnxruntime_refuses_them(
    case: str, inputs: tuple[str, ...], shapes: dict[str, list[Any] | None], attrs: dict[str, Any],
    expected: str | None, version: str,
) -> None:  # fmt: skip
    """Both versions check cumulative_sequence_length and capture_count once input and weight have
    shapes, capacity before dilation; the installed onnxruntime agrees (1.31.1 has no Varlen CPU
    kernel: a graph its schema accepts is ORT-KERNEL-001, ORT's NOT_IMPLEMENTED)."""
    model = _varlen(inputs, shapes, **attrs)
    assert _errors(model, version) == _vl_expected(expected, version)
    if version[:4] == ORT_VERSION[:4]:
        assert_agrees(graph_violations(model), ort_error(model), context=case)
