"""The GPU suite's machinery (tests/gpu/q38gpu_env.py, q38gpu_run.py), exercised on the CPU EP.

Invariants guarded (so that a GPU run fails only for GPU reasons):
* the one-node op probe tells a kernel that exists from one that does not, with the ORT message;
* the offload probe detects whether the build parses session.moe.offload.* (1.32.0 does);
* prefill + decode steps feed every present.* back as the matching past input, and the state
  shapes follow docs/synthetic-model.md;
* compare_steps passes identical runs and names the output and step that goes beyond tolerance;
* the profile reader counts the CUDA EP nodes of the last run only.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))
import q38gpu_env as genv
import q38gpu_run as grun


def test_op_probe_tells_present_from_absent_kernels_on_cpu() -> None:
    assert genv.op_session(ort, "GatedAdd", ep=genv.CPU_EP) == (genv.PRESENT, "session created")
    status, why = genv.op_session(ort, "HyperConnectionLowRankMix", ep=genv.CPU_EP)
    assert status == genv.ABSENT
    assert why.startswith("no CPUExecutionProvider kernel for com.microsoft::HyperConnectionLowRankMix: ")
    assert "NOT_IMPLEMENTED" in why
    assert genv.op_session(ort, "NoSuchOp", ep=genv.CPU_EP) == (
        genv.ABSENT, f"onnxruntime {ort.__version__} has no schema for com.microsoft::NoSuchOp")


def test_offload_probe_matches_the_installed_build() -> None:
    ok, why = genv.offload_config(ort)
    if ort.__version__.startswith("1.32."):
        assert (ok, why) == (True, "session.moe.offload.* is parsed")
    else:
        assert not ok and "ignores session.moe.offload.*" in why


def test_present_names_pair_with_past_names() -> None:
    assert grun.present_name("past.3.conv") == "present.3.conv"
    assert grun.present_name("past_key_values.3.key") == "present.3.key"
    with pytest.raises(ValueError, match="input_ids: not a past-state input name"):
        grun.present_name("input_ids")


def test_prefill_and_decode_steps_carry_state_and_compare(tiny_cpu_package: Path) -> None:
    sess = grun.session(ort, grun.target_graph(tiny_cpu_package), providers=grun.CPU_PROVIDERS)
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    steps = stepper.steps(prefill=8, decode=2)
    assert [s["logits"].shape for s in steps] == [(1, 8, 512), (1, 1, 512), (1, 1, 512)]
    assert steps[0]["present.0.conv"].shape == (1, 128, 3)
    assert steps[0]["present.0.recurrent"].shape == (1, 4, 16, 16)
    assert [s["present.3.key"].shape for s in steps] == [(1, 2, 8, 16), (1, 2, 9, 16), (1, 2, 10, 16)]
    again = stepper.steps(prefill=8, decode=2)
    diffs = grun.compare_steps(steps, again, comparison="cuda_vs_cpu")
    assert all(d.ok for d in diffs) and {d.name for d in diffs} == set(steps[0])
    again[2]["logits"] = again[2]["logits"] + np.float16(0.5)
    bad = [d for d in grun.compare_steps(steps, again, comparison="cuda_vs_cpu") if not d.ok]
    assert [(d.step, d.name, d.dtype) for d in bad] == [(2, "logits", "float16")]
    assert bad[0].line().startswith("BAD step 2 logits")


def test_offload_entries_come_from_the_config_with_the_mode_overridden(tmp_path: Path, tiny_cpu_package: Path) -> None:
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    config = json.loads((pkg / "genai_config.json").read_text())
    config["model"]["decoder"]["session_options"]["config_entries"] = {
        "session.moe.offload.mode": "required", "session.moe.offload.placement": "static"}
    (pkg / "genai_config.json").write_text(json.dumps(config))
    assert grun.offload_entries(pkg, mode="auto") == {
        "session.moe.offload.mode": "auto", "session.moe.offload.placement": "static"}


def test_profile_reader_counts_cuda_nodes_of_the_last_run(tmp_path: Path) -> None:
    def node(ts: int, provider: str) -> dict[str, object]:
        return {"cat": "Node", "name": f"n{ts}_kernel_time", "ts": ts, "dur": 1, "args": {"provider": provider}}

    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
        node(10, genv.CUDA_EP),
        {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
        node(210, genv.CUDA_EP), node(220, genv.CUDA_EP), node(230, genv.CPU_EP),
    ]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(events))
    assert grun.kernels_in_profile(path) == (2, "CUDA EP node executions (no CUPTI events in this build)")
    path.write_text(json.dumps([*events, {"cat": "Kernel", "name": "k", "ts": 250, "dur": 1}]))
    assert grun.kernels_in_profile(path) == (1, "CUDA kernels (CUPTI)")
