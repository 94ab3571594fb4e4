"""Every package `q38 build` emits from `q38 synth --bundles` passes `q38 check` (issue 3/4 acceptance).

Invariants guarded, for the folded, layered and folded+libs+cuda builds of both variants
(cpu from the shared `tiny_bundles`, faithful synthesized here; always built into tmp_path):
- `q38 check OUT --ort-version 1.32.0` exits 0 (q38 targets onnxruntime 1.32.0): no contract
  error; hard-linked data only warns.
- Against the installed onnxruntime, `q38 check OUT --ort --json`:
  * 1.32.0: exit 0; every graph's real CPU session is created, or skipped only for a missing CPU
    kernel (the faithful variant's QSA ops); the cpu variant's sessions are all created.
  * 1.31.1: exit 1 with only ORT-SCHEMA-002 (fp16 GatedDeltaNet decay/beta), on exactly the
    graphs whose real session fails with that violation's text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnxruntime as ort
import pytest

from q38.cli import main

_V132 = ort.__version__ >= "1.32"
BUILDS = {
    "folded": [],
    "layered": ["--layout", "layered"],
    "folded_libs_cuda": [
        "--lib-qsa", "{b}/libs/qsa/libcustom_ops.so", "--provider", "cuda",
        "--cuda-option", "gpu_mem_limit=25769803776", "--cuda-option=enable_cuda_graph=1",
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def faithful_bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("synth") / "faithful_bundles", preset="tiny", variant="faithful", bundles=True)


def _build(bundles: Path, out: Path, extra: list[str], variant: str) -> int:
    args = ["build", os.fspath(out), "--target", f"{bundles}/target", "--head", f"{bundles}/head",
            "--prefill", f"{bundles}/prefill", *(a.format(b=bundles) for a in extra)]  # fmt: skip
    if variant == "faithful" and "--provider" not in args:
        args += ["--provider", "cuda"]  # the faithful QSA ops have no CPU kernel: build refuses cpu
    return main(args)


@pytest.mark.parametrize("variant", ["cpu", "faithful"])
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_built_packages_pass_check(
    build: str, variant: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundles = request.getfixturevalue("tiny_bundles" if variant == "cpu" else "faithful_bundles")
    out = tmp_path / build
    assert _build(bundles, out, BUILDS[build], variant) == 0
    capsys.readouterr()

    assert main(["check", os.fspath(out), "--ort-version", "1.32.0"]) == 0
    assert "OK: 0 error(s)" in capsys.readouterr().out

    assert main(["check", os.fspath(out), "--ort", "--json"]) == (0 if _V132 else 1)
    report = json.loads(capsys.readouterr().out)
    assert report["graphs"] == ["target", "head", "prefill"]
    errors = [v for v in report["violations"] if v["severity"] == "error"]
    assert {v["rule_id"] for v in report["violations"] if v["severity"] == "warning"} <= {"PKG-HARDLINK-001"}
    sessions = {s["graph"]: s for s in report["sessions"]}
    assert sorted(sessions) == ["head", "prefill", "target"]
    if _V132:
        assert report["ok"] is True and errors == []
        for s in sessions.values():
            assert s["status"] == "ok" or (s["status"] == "skipped" and s["message"].startswith("op ") and " has no CPU kernel" in s["message"]), s
        if variant == "cpu":
            assert all(s["status"] == "ok" for s in sessions.values()), sessions
        return
    assert {v["rule_id"] for v in errors} == {"ORT-SCHEMA-002"}
    failing = {v["graph"] for v in errors}
    assert failing == {"target", "prefill"}
    for graph, session in sessions.items():
        if graph in failing:
            first = next(v for v in errors if v["graph"] == graph)
            assert session["status"] == "failed" and first["message"] in session["message"]
        else:
            assert session["status"] in {"ok", "skipped"}, session
