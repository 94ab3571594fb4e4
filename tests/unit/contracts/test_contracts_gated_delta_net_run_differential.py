"""GatedDeltaNet's first-Run refusals (GDN-RUN-001) against a real onnxruntime session's ``run``.

Invariants guarded:
- On 1.32.0 every case creates a CPU session; the contract's GDN-RUN-001 warning is given exactly
  when the first ``run`` fails, and its text is in ORT's (Compute's order: capture_count with the
  capacity, decay / beta presence per update_rule, decay / beta shapes, a_log and dt_bias for a
  softplus / sigmoid gate and their shapes, capture_count [batch]).
- A run-time rule never refuses: a GDN-RUN-001 case has no error-severity violation.
- On 1.31.1 (no GatedDeltaNet CPU kernel) the rule does not apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import MS, ORT_VERSION, _model, _vi, graph_violations

pytestmark = pytest.mark.differential
_V132 = ORT_VERSION >= "1.32"
_NP = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16, TP.INT32: np.int32}
_FULL = ("qkv", "", "", "", "decay", "beta", "st", "alog", "dtb")


def _gdn(names: Sequence[str] = _FULL, shapes: dict[str, list[int]] | None = None,
         **attrs: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:  # fmt: skip
    """Packed-QKV GatedDeltaNet (Hq 2, Hv 4, dk = dv = 16) named 'gdn', with feeds for one run."""
    base = {"gate_activation": "softplus", "beta_activation": "sigmoid", "qk_l2_norm": 1, "update_rule": "gated_delta", **attrs}
    dims = {"qkv": [1, 3, 128], "decay": [1, 3, 4], "beta": [1, 3, 4], "st": [1, 4, 16, 16], "alog": [4], "dtb": [4],
            "cc": [1], **(shapes or {})}  # fmt: skip
    elem = {"qkv": TP.FLOAT16, "decay": TP.FLOAT16, "beta": TP.FLOAT16, "st": TP.FLOAT, "alog": TP.FLOAT,
            "dtb": TP.FLOAT, "cc": TP.INT32}  # fmt: skip
    node = oh.make_node("GatedDeltaNet", list(names), ["y", "st_o"], name="gdn", domain=MS, **base)
    used = [n for n in dict.fromkeys(names) if n]
    model = _model([node], [_vi(n, elem[n], dims[n]) for n in used], [_vi("y", TP.FLOAT16, None), _vi("st_o", TP.FLOAT, None)])
    rng = np.random.default_rng(0)
    feeds = {n: (np.ones(dims[n], np.int32) if elem[n] == TP.INT32 else (rng.random(dims[n]) * 0.1).astype(_NP[elem[n]]))
             for n in used}  # fmt: skip
    return model, feeds


def _first_run_error(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> str | None:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    try:
        session.run(None, feeds)
    except Exception as exc:  # onnxruntime raises several pybind exception types
        return str(exc)
    return None


_NO_CC = ("qkv", "", "", "", "decay", "beta", "st", "alog", "dtb")
_CC = (*_NO_CC, "cc")
CASES: list[tuple[str, Sequence[str], dict[str, list[int]], dict[str, Any], bool]] = [
    ("valid", _FULL, {}, {}, False),
    ("missing beta", ("qkv", "", "", "", "decay", "", "st", "alog", "dtb"), {}, {}, True),
    ("missing decay", ("qkv", "", "", "", "", "beta", "st", "alog", "dtb"), {}, {}, True),
    ("gated rule without beta", ("qkv", "", "", "", "decay", "", "st", "alog", "dtb"), {}, {"update_rule": "gated"}, False),
    ("linear rule with decay", _FULL, {}, {"update_rule": "linear"}, True),
    ("softplus gate without a_log", ("qkv", "", "", "", "decay", "beta", "st", "", "dtb"), {}, {}, True),
    ("qwen gate without dt_bias", ("qkv", "", "", "", "decay", "beta", "st", "alog"), {}, {"gate_activation": "qwen"}, True),
    ("gate none without a_log / dt_bias", ("qkv", "", "", "", "decay", "beta", "st"), {}, {"gate_activation": "none"}, False),
    ("decay heads 3 (mismatched heads)", _FULL, {"decay": [1, 3, 3]}, {}, True),
    ("decay tokens 2", _FULL, {"decay": [1, 2, 4]}, {}, True),
    ("decay flattened per key [Hv * dk]", _FULL, {"decay": [1, 3, 64]}, {}, True),
    ("decay per key [.., Hv, dk]", _FULL, {"decay": [1, 3, 4, 16]}, {}, False),
    ("beta heads 3", _FULL, {"beta": [1, 3, 3]}, {}, True),
    ("beta heads 1 (no broadcast)", _FULL, {"beta": [1, 3, 1]}, {}, True),
    ("a_log [3]", _FULL, {"alog": [3]}, {}, True),
    ("a_log [1, 4]", _FULL, {"alog": [1, 4]}, {}, True),
    ("per-key dt_bias with per-head decay", _FULL, {"dtb": [64]}, {}, True),
    ("per-key dt_bias [Hv * dk] with per-key decay", _FULL, {"decay": [1, 3, 4, 16], "dtb": [64]}, {}, False),
    ("per-key dt_bias [Hv, dk] with per-key decay", _FULL, {"decay": [1, 3, 4, 16], "dtb": [4, 16]}, {}, False),
    ("dt_bias [dk] with per-key decay", _FULL, {"decay": [1, 3, 4, 16], "dtb": [16]}, {}, True),
    ("capture_count without capacity", _CC, {}, {}, True),
    ("capacity without capture_count", _NO_CC, {}, {"state_update_capacity": 2}, True),
    ("capture_count [batch] with capacity", _CC, {}, {"state_update_capacity": 2}, False),
    ("capture_count [2], batch 1", _CC, {"cc": [2]}, {"state_update_capacity": 2}, True),
    ("rank-2 packed QKV, decay [T, Hv]", _FULL, {"qkv": [3, 128], "decay": [3, 4], "beta": [3, 4]}, {}, False),
    ("rank-2 packed QKV, decay [1, T, Hv]", _FULL, {"qkv": [3, 128], "decay": [1, 3, 4], "beta": [3, 4]}, {}, True),
]  # fmt: skip


@pytest.mark.parametrize(("case", "names", "shapes", "attrs", "fails"), CASES, ids=[c[0] for c in CASES])
def test_first_run_refusals_match_onnxruntime(case: str, names: Sequence[str], shapes: dict[str, list[int]],
                                              attrs: dict[str, Any], fails: bool) -> None:  # fmt: skip
    model, feeds = _gdn(names, shapes, **attrs)
    found = graph_violations(model)
    warned = [v for v in found if v.rule_id == "GDN-RUN-001"]
    if not _V132:
        assert warned == []  # 1.31.1: no GatedDeltaNet CPU kernel (and float16 gates fail its schema) first
        return
    assert [v for v in found if v.severity == "error"] == [], found
    error = _first_run_error(model, feeds)
    assert (error is not None) == fails, error
    assert bool(warned) == fails, warned
    if fails:
        assert warned[0].severity == "warning"
        assert warned[0].message in (error or ""), (warned[0].message, error)
