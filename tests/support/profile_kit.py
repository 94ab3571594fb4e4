"""Test support for ``q38 profile``: packages whose routers are skewed on purpose, and an
expert-selection count written independently of ``q38.profile`` (onnx-level taps, its own
decode loop), to check the profiler's counts and the hit rates offload reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

__all__ = ["independent_selections", "ort_counter_records", "ort_counter_runs", "skew_routers"]


def skew_routers(model_path: Path, bias_for: Callable[[int, str], np.ndarray | None]) -> int:
    """Add a constant bias to the router logits (QMoE input 1) of each QMoE node: node i gets
    ``bias_for(i, name)`` ([E] float, or None: left alone). Rewrites ``model_path`` in place
    (a test's private copy); returns how many nodes were skewed."""
    model = onnx.load(model_path, load_external_data=False)
    skewed = 0
    nodes = list(model.graph.node)
    qmoe = [n for n in nodes if n.op_type == "QMoE"]
    elem = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    for index, node in enumerate(qmoe):
        bias = bias_for(index, node.name)
        if bias is None:
            continue
        logits = node.input[1]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem.get(logits, onnx.TensorProto.FLOAT16))
        const = numpy_helper.from_array(np.asarray(bias, dtype=dtype), f"{node.name}/q38_test_skew/bias")
        model.graph.initializer.append(const)
        out = f"{node.name}/q38_test_skew/output_0"
        add = helper.make_node("Add", [logits, const.name], [out], name=f"{node.name}/q38_test_skew/Add")
        nodes.insert(nodes.index(node), add)
        node.input[1] = out
        skewed += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, model_path)
    return skewed


def _tapped(model_path: Path) -> tuple[bytes, list[tuple[str, int]]]:
    model = onnx.load(model_path, load_external_data=False)
    taps = []
    for node in [n for n in model.graph.node if n.op_type == "QMoE"]:
        k = next((a.i for a in node.attribute if a.name == "k"), 1)
        name = f"test_tap_{len(taps)}"
        model.graph.node.append(helper.make_node("Identity", [node.input[1]], [name]))
        model.graph.output.append(helper.make_empty_tensor_value_info(name))
        taps.append((name, int(k)))
    return model.SerializeToString(), taps


def independent_selections(model_path: Path, prompts: Sequence[Sequence[int]], tokens: int,
                           *, kv_dim: int = 16) -> list[list[np.ndarray]]:
    """Per QMoE node of the decoder graph at ``model_path``: the ``[rows, k]`` experts it selects
    over the workload (prompt step, then ``tokens - 1`` greedy one-token steps per prompt, the
    presents fed back as pasts by name: ``present.`` -> ``past_key_values.`` for KV,
    ``past.`` otherwise)."""
    data, taps = _tapped(model_path)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model_path.parent))
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    picked: list[list[np.ndarray]] = [[] for _ in taps]
    for prompt in prompts:
        state = {}
        for name, arg in inputs.items():
            if name.startswith("past"):
                shape = [1 if d == "batch_size" else kv_dim if d == "kv_cache_dim" else 0 if isinstance(d, str) else d
                         for d in arg.shape]
                state[name] = np.zeros(shape, np.float16 if "float16" in arg.type else np.float32)
        ids, start = np.array([list(prompt)], np.int64), 0
        for step in range(tokens):
            rows = ids.shape[1]
            pos = np.arange(start, start + rows, dtype=np.int64)[None]
            feeds = {"input_ids": ids, "attention_mask": np.ones((1, start + rows), np.int64), **state}
            if "position_ids" in inputs:
                feeds["position_ids"] = pos if len(inputs["position_ids"].shape) == 2 else np.stack([pos] * 3)
            out = dict(zip(names, sess.run(names, feeds)))
            for i, (tap, k) in enumerate(taps):
                logits = out[tap].astype(np.float32)
                picked[i].append(np.argsort(-logits, axis=1, kind="stable")[:, :k])
            state = {}
            for name, value in out.items():
                if name.startswith("present."):
                    past = name.replace("present.", "past_key_values." if name.endswith((".key", ".value")) else "past.", 1)
                    if past in inputs:
                        state[past] = value
            start += rows
            ids = np.array([[int(out["logits"][0, -1].astype(np.float32).argmax())]], np.int64)
            if step + 1 == tokens:
                break
    return [[*p] for p in picked]


def ort_counter_runs(model_path: Path, steps: Sequence[np.ndarray], *, kv_dim: int = 16
                     ) -> tuple[list[list[np.ndarray]], list[str]]:  # fmt: skip
    """Run the decoder at ``model_path`` over ``steps`` (input ids per step, state carried) with
    ORT's own expert counting and statistics on (``session.enable_moe_expert_counting`` /
    ``_statistics``): returns the router-tap selections per QMoE node per step. ORT's
    ``moe_expert_counters`` records go to its C++ logger on stderr: run this in a child process
    and read them there (:func:`ort_counter_records`)."""
    data, taps = _tapped(model_path)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model_path.parent))
    so.add_session_config_entry("session.enable_moe_expert_counting", "1")
    so.add_session_config_entry("session.enable_moe_expert_statistics", "1")
    so.log_severity_level = 1
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    state = {}
    for name, arg in inputs.items():
        if name.startswith("past"):
            shape = [1 if d == "batch_size" else kv_dim if d == "kv_cache_dim" else 0 if isinstance(d, str) else d
                     for d in arg.shape]
            state[name] = np.zeros(shape, np.float16 if "float16" in arg.type else np.float32)
    picked: list[list[np.ndarray]] = [[] for _ in taps]
    start = 0
    for ids in steps:
        rows = ids.shape[1]
        pos = np.arange(start, start + rows, dtype=np.int64)[None]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, start + rows), np.int64), **state,
                 "position_ids": pos if len(inputs["position_ids"].shape) == 2 else np.stack([pos] * 3)}
        ro = ort.RunOptions()
        ro.log_severity_level = 1
        out = dict(zip(names, sess.run(names, feeds, ro)))
        for i, (tap, k) in enumerate(taps):
            picked[i].append(np.argsort(-out[tap].astype(np.float32), axis=1, kind="stable")[:, :k])
        state = {}
        for name, value in out.items():
            if name.startswith("present."):
                past = name.replace("present.", "past_key_values." if name.endswith((".key", ".value")) else "past.", 1)
                if past in inputs:
                    state[past] = value
        start += rows
    return picked, [n.name for n in onnx.load(model_path, load_external_data=False).graph.node if n.op_type == "QMoE"]


def ort_counter_records(stderr: str) -> list[dict[str, object]]:
    """The ``moe_expert_counters`` JSON records of an ORT log, in order."""
    import json

    marker = "moe_expert_counters "
    return [json.loads(line.split(marker, 1)[1]) for line in stderr.splitlines() if marker in line]
