"""CUDA Graph decode only where ORT allows it (tests/gpu/q38gpu_graph.py), exercised on the CPU EP.

Invariants guarded (issue 41 item 2):
* a decode whose KV cache grows by concatenation (the synthetic packages: ``past_*`` with a symbolic
  past length) is never captured: the plan says "not attempted" with the growing inputs named, the
  fixed-state loop refuses to bind it, and the suite's tier record carries that reason;
* a session with nodes on the CPU EP is not captured either (ORT refuses capture then);
* the fixed-state loop binds every buffer once, shares each past buffer with its present output,
  updates the token in place, and refuses a step whose shape differs from the captured one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

GPU_DIR = Path(__file__).resolve().parents[2] / "gpu"
sys.path.insert(0, str(GPU_DIR))
import q38gpu_graph as ggraph  # noqa: E402
import q38gpu_run as grun  # noqa: E402


def test_a_growing_kv_loop_is_never_captured(tiny_cpu_package: Path) -> None:
    sess = grun.session(ort, grun.target_graph(tiny_cpu_package), providers=grun.CPU_PROVIDERS)
    verdict = ggraph.plan(sess)
    assert not verdict.ok and verdict.record()["status"] == "not attempted"
    assert "past_key_values.3.key['batch_size', 2, 'past_sequence_length', 16]" in verdict.reason
    assert "grow with the sequence" in verdict.reason
    feeds = grun.Stepper(sess, grun.vocab_of(sess)).feeds(seq=1, past=8)
    with pytest.raises(ggraph.GraphRefused, match="grow with the sequence"):
        ggraph.FixedStateDecode(ort, sess, device="cpu", feeds=feeds, present_of=_presents(feeds))


def test_the_bench_records_not_attempted_and_creates_no_graph_session(tiny_cpu_package: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import test_throughput_bench as bench

    model = grun.target_graph(tiny_cpu_package)
    sess = grun.session(ort, model, providers=grun.CPU_PROVIDERS)
    made: list[object] = []
    monkeypatch.setattr(grun, "session", lambda *a, **k: made.append(k))  # any new session would show here
    note = bench.cuda_graph_decode(sess, model)
    assert note["status"] == "not attempted" and "grow with the sequence" in note["reason"] and made == []


def _presents(feeds: dict[str, np.ndarray]) -> dict[str, str]:
    return {p: grun.present_name(p) for p in feeds if p.startswith("past")}


def _fixed_state_model() -> bytes:
    """present.0.state = past.0.state + input_ids (fixed [1, 4]); logits = the new state, twice."""
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["past.0.state", "ids_f"], ["present.0.state"]),
             helper.make_node("Concat", ["present.0.state", "present.0.state"], ["logits"], axis=-1)]
    graph = helper.make_graph(nodes, "fixed", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1]),
                                               helper.make_tensor_value_info("past.0.state", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8]),
                               helper.make_tensor_value_info("present.0.state", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return model.SerializeToString()


def test_the_fixed_state_loop_updates_in_place_at_fixed_addresses() -> None:
    sess = ort.InferenceSession(_fixed_state_model(), providers=["CPUExecutionProvider"])
    assert ggraph.plan(sess).ok
    assert not ggraph.plan(sess, ["n (MatMul)"]).ok  # a CPU-EP node: ORT would refuse the capture
    feeds = {"input_ids": np.zeros((1, 1), np.int64), "past.0.state": np.zeros((1, 4), np.float32)}
    loop = ggraph.FixedStateDecode(ort, sess, device="cpu", feeds=feeds, present_of=_presents(feeds))
    layout = dict(loop.layout)
    for token in (1, 2, 3):
        values = loop.step({"input_ids": np.full((1, 1), token, np.int64)})
        assert loop.layout == layout
    assert values["past.0.state"].numpy().tolist() == [[6.0] * 4]  # the state accumulated in its own buffer
    assert values["logits"].numpy().tolist() == [[6.0] * 8]
    with pytest.raises(ggraph.GraphRefused, match="differs from the captured"):
        loop.step({"input_ids": np.zeros((1, 2), np.int64)})
