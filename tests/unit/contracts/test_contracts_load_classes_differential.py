"""Issue 24's disagreement classes, vs real sessions on the installed onnxruntime (1.32.0 or 1.31.1).

Invariants guarded:
- A session-config key or value that is not valid Unicode (a near-miss spelling such as
  ``ep.cpu.qmoe_deferred_scale\\udcff``, even after a NUL) is refused by ORT's binding, and by
  SESSION-CFG-001.
- QMoE follows the CPU kernel each version selects: 1.32.0's shared kernel refuses mixed projection
  bit widths; the per-expert kernel (1.31.1's only one) refuses an initializer fc1 / fc2 weight of
  a rank other than 3 (below 3 ORT aborts: the session is created in a child process), which the
  1.32.0 shared kernel accepts.
- GroupQueryAttention's output_qk without qk_output is refused only with a past_key (both versions).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from support.contracts_testkit import (
    ORT_VERSION,
    E,
    H,
    I,
    _model,
    graph_violations,
    ort_error,
    qmoe_initializers,
    qmoe_node,
)

from contracts.runner import check_session_config

pytestmark = pytest.mark.differential
_V132 = ORT_VERSION >= "1.32"


@pytest.mark.parametrize(("key", "value"), [
    ("ep.cpu.qmoe_deferred_scale\udcff", "1"), ("ep.cpu.qmoe_deferred_scale\ud800", "0"),
    ("ep.cpu.qmoe_deferred_scale", "1\x00\udcff"), ("ep.cpu.qmoe_deferred_scal\xe9", "1"),
    ("ep.cpu.qmoe_deferred_scale", "1\x00x"),
])  # fmt: skip
def test_near_miss_session_keys_agree_with_the_binding(key: str, value: str) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    try:
        options.add_session_config_entry(key, value)
        refused = False
    except TypeError as exc:
        refused = True
        assert "incompatible function arguments" in str(exc)
    found = [v for v in check_session_config({key: value}, ort_version=ORT_VERSION) if v.severity == "error"]
    assert bool(found) == refused, (key, value, found)
    if refused:
        assert found[0].message.startswith("add_session_config_entry(): incompatible function arguments")


def _qmoe(reshape: dict[str, tuple[int, ...]] | None = None, **attrs: Any) -> onnx.ModelProto:
    inits = []
    for tensor in qmoe_initializers():
        array = nh.to_array(tensor)
        if reshape and tensor.name in reshape:
            array = array.reshape(reshape[tensor.name])
        inits.append(nh.from_array(array, tensor.name))
    inputs = [oh.make_tensor_value_info("x", TP.FLOAT, [2, H]), oh.make_tensor_value_info("router", TP.FLOAT, [2, E])]
    return _model([qmoe_node(**attrs)], inputs, [oh.make_tensor_value_info("y", TP.FLOAT, [2, H])], inits)


_CHILD = """
import sys, onnxruntime as ort
so = ort.SessionOptions(); so.log_severity_level = 4
try:
    ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
except Exception as exc:
    print("ERR " + " ".join(str(exc).split())); sys.exit(0)
print("OK")
"""


def _child_verdict(model: onnx.ModelProto, tmp_path: Path) -> str | None:
    """None: a session was created; else ORT's text, or 'aborted' (the process died)."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    run = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        return "aborted"
    out = run.stdout.strip().splitlines()[-1]
    return None if out == "OK" else out


_RANKS = {"fc1 rank 2": {"fc1_w": (E * 2 * I, H // 2)}, "fc1 rank 4": {"fc1_w": (E, 2 * I, H // 4, 2)},
          "fc2 rank 1": {"fc2_w": (E * H * I // 2,)}, "fc2 rank 4": {"fc2_w": (E, H, I // 4, 2)},
          "scales rank 4 (not checked)": {"fc2_s": (E, H, 1, I // 32)}}  # fmt: skip


@pytest.mark.parametrize("prepacked", [0, 1])
@pytest.mark.parametrize("label", list(_RANKS))
def test_qmoe_weight_rank_follows_the_kernel_each_version_selects(label: str, prepacked: int, tmp_path: Path) -> None:
    model = _qmoe(_RANKS[label], weights_prepacked=prepacked)
    error = _child_verdict(model, tmp_path)
    found = [v for v in graph_violations(model) if v.severity == "error"]
    assert bool(found) == (error is not None), (label, error, found)
    if error is not None and error != "aborted":
        assert found[0].message in error
    if error == "aborted":
        assert "aborts the process" in found[0].message


@pytest.mark.parametrize(("attrs", "refused"), [
    ({"fc2_expert_weight_bits": 8}, True), ({"fc2_expert_weight_bits": 4}, False),
    ({"fc2_expert_weight_bits": 8, "activation_type": "silu"}, True), ({"fc2_expert_weight_bits": 2, "weights_prepacked": 0}, False),
])  # fmt: skip
def test_shared_qmoe_refuses_mixed_projection_widths_on_1_32(attrs: dict[str, Any], refused: bool) -> None:
    model = _qmoe(**{"weights_prepacked": 1, **attrs})
    error = ort_error(model)
    found = [v for v in graph_violations(model) if v.severity == "error"]
    assert bool(found) == (error is not None), (attrs, error, found)
    if _V132:
        assert (error is not None) == refused
        if refused:
            assert found[0].message in error


def _gqa(past: bool) -> onnx.ModelProto:
    heads, kv, size = 2, 1, 8
    ins = [oh.make_tensor_value_info("q", TP.FLOAT, [1, 1, heads * size]), oh.make_tensor_value_info("k", TP.FLOAT, [1, 1, kv * size]),
           oh.make_tensor_value_info("v", TP.FLOAT, [1, 1, kv * size])]  # fmt: skip
    names = ["q", "k", "v", "", "", "sl", "tl"]
    if past:
        ins += [oh.make_tensor_value_info("pk", TP.FLOAT, [1, kv, 4, size]), oh.make_tensor_value_info("pv", TP.FLOAT, [1, kv, 4, size])]
        names[3:5] = ["pk", "pv"]
    inits = [nh.from_array(np.array([0], np.int32), "sl"), nh.from_array(np.array(1, np.int32), "tl")]
    node = oh.make_node("GroupQueryAttention", names, ["o", "pko", "pvo", "qk"], domain="com.microsoft", num_heads=heads, kv_num_heads=kv)
    outs = [oh.make_tensor_value_info(n, TP.FLOAT, None) for n in ("o", "pko", "pvo", "qk")]
    return _model([node], ins, outs, inits)


@pytest.mark.parametrize("past", [False, True])
def test_gqa_output_qk_without_qk_output_is_refused_only_with_a_past(past: bool) -> None:
    model = _gqa(past)
    error = ort_error(model)
    found = [v for v in graph_violations(model) if v.severity == "error" and v.rule_id.startswith("GQA")]
    assert (error is not None and "Output QK buffer" in error) == past, error
    assert bool(found) == past, found
