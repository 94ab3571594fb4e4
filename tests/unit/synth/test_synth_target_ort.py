"""``q38 synth --target-ort`` and ``q38 check --ort-version`` (issue 28, deliverable 2).

Invariants guarded:
* a package synthesized for the installed onnxruntime (when the table lists it) creates CPU
  sessions and runs a prefill and a decode step there -- under ``nox -s contracts-1.31.1`` that
  is 1.31.1, under the CPU suite 1.32.0;
* for 1.31.1 the cpu variant carries no GatedDeltaNet (no CPU kernel there) but the
  LinearAttentionGate + LinearAttention form on the same float32 state, and the faithful
  variant's GatedDeltaNet gets float32 decay / beta; the default stays the 1.32.0 forms;
* ``check --ort-version 1.31.1`` of a 1.32.0-targeted package names every GatedDeltaNet node
  1.31.1 cannot read (ORT-SCHEMA-002 with ORT's type text) and an IR version 14 graph
  (ORT-MODEL-001 with ORT's text); the 1.31.1-targeted package passes;
* an unknown version is one ``q38 synth: error:`` line, exit 2, nothing written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from q38.ort_targets import ORT_TARGETS

TESTS_GPU = Path(__file__).resolve().parents[2] / "gpu"


def _q38(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "q38", *map(str, args)], capture_output=True, text=True, check=False)


def _synth(out: Path, version: str, variant: str = "cpu") -> Path:
    proc = _q38("synth", out, "--variant", variant, "--target-ort", version)
    assert proc.returncode == 0, proc.stderr
    return out


def _ops(path: Path) -> dict[str, list[onnx.NodeProto]]:
    model = onnx.load(str(path), load_external_data=False)
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        found.setdefault(node.op_type, []).append(node)
    return found


@pytest.fixture(scope="module")
def targeted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("target-ort")
    return {v: _synth(root / f"cpu-{v}", v) for v in ORT_TARGETS}


@pytest.mark.skipif(ort.__version__ not in ORT_TARGETS, reason=f"onnxruntime {ort.__version__} is not a target")
def test_a_package_for_the_installed_release_runs_there(targeted: dict[str, Path]) -> None:
    sys.path.insert(0, str(TESTS_GPU))
    import q38gpu_run as grun

    pkg = targeted[ort.__version__]
    for graph in ("model.onnx", "prefill.onnx", "head_r2.onnx"):
        ort.InferenceSession(str(pkg / graph), providers=["CPUExecutionProvider"])
    sess = grun.session(ort, pkg / "model.onnx", providers=grun.CPU_PROVIDERS)
    steps = grun.Stepper(sess, grun.vocab_of(sess)).steps(prefill=5, decode=1)
    assert [s["logits"].shape for s in steps] == [(1, 5, 512), (1, 1, 512)]
    assert all(np.isfinite(s["logits"]).all() for s in steps)
    assert steps[1]["present.0.recurrent"].dtype == np.float32


def test_1_31_1_forms(targeted: dict[str, Path], tmp_path: Path) -> None:
    old, new = _ops(targeted["1.31.1"] / "model.onnx"), _ops(targeted["1.32.0"] / "model.onnx")
    assert "GatedDeltaNet" not in old and len(old["LinearAttention"]) == len(new["GatedDeltaNet"]) == 6
    assert {a.name: a for a in old["LinearAttention"][0].attribute}["update_rule"].s == b"gated_delta"
    assert "LinearAttention" not in new
    faithful = _ops(_synth(tmp_path / "faithful", "1.31.1", "faithful") / "model.onnx")
    casts = {n.output[0] for n in faithful["Cast"]}
    for node in faithful["GatedDeltaNet"]:
        assert node.input[4] in casts and node.input[5] in casts, node.name


@pytest.mark.slow
def test_check_ort_version_names_what_1_31_1_cannot_read(targeted: dict[str, Path], tmp_path: Path) -> None:
    proc = _q38("check", targeted["1.32.0"], "--ort-version", "1.31.1", "--json")
    assert proc.returncode == 1, proc.stderr
    found = json.loads(proc.stdout)["violations"]
    gdn = {(v["graph"], v["node"]) for v in found if v["rule_id"] == "ORT-SCHEMA-002"}
    assert ("target", "/model/layers.0/linear_attn/GatedDeltaNet") in gdn and len(gdn) == 12
    assert all("tensor(float16)" in v["message"] for v in found if v["rule_id"] == "ORT-SCHEMA-002")
    assert _q38("check", targeted["1.31.1"], "--ort-version", "1.31.1").returncode == 0

    head = targeted["1.31.1"] / "head_r2.onnx"
    model = onnx.load(str(head), load_external_data=False)
    model.ir_version = 14
    edited = tmp_path / "ir14"
    edited.mkdir()
    onnx.save(model, str(edited / "head.onnx"))
    from contracts.model_load import RULES

    rule = next(r for r in RULES if r.rule_id == "ORT-MODEL-001" and r.applies("1.31.1"))
    assert [v.message for v in rule.check(model, {})] == [
        "Unsupported model IR version: 14, max supported IR version: 13"]
    assert next(r for r in RULES if r.rule_id == "ORT-MODEL-001" and r.applies("1.32.0")).check(model, {}) == []


def test_unknown_target_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _q38("synth", tmp_path / "x", "--target-ort", "1.30.0")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("q38 synth: error: --target-ort 1.30.0: unknown onnxruntime version "
                                   "(known: 1.31.1, 1.32.0)")
    assert not (tmp_path / "x").exists()
