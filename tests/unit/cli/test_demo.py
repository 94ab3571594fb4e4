"""`q38 demo`: the main job end to end, through the subcommands' own entry points.

Invariants: every step exits 0 and every produced package passes `q38 check` with real ORT
sessions; the offload step clears router_weights and adds the runtime profiles; an existing
workdir is refused with one line and exit 2 (nothing overwritten).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from q38.cli import main


@pytest.mark.slow
def test_demo_runs_every_step_and_every_check_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workdir = tmp_path / "demo"
    assert main(["demo", "--workdir", str(workdir), "--preset", "tiny", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    names = [s["step"] for s in report["steps"]]
    assert names == ["synth", "build", "optimize", "offload", "check build", "check optimize", "check offload"]
    assert all(s["exit_code"] == 0 for s in report["steps"])
    by = {s["step"]: s["facts"] for s in report["steps"]}
    assert by["optimize"]["rewrites"] > 0
    assert by["offload"]["runtime profiles"] == 4
    assert by["offload"]["router_weights cleared"] == 17
    assert by["offload"]["graphs"] == 6
    for name in ("check build", "check optimize", "check offload"):
        assert by[name]["errors"] == 0
        assert by[name]["ort sessions"] >= 3
    assert sorted(p.name for p in workdir.iterdir()) == ["built", "bundles", "offloaded", "optimized"]


def test_demo_refuses_an_existing_workdir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "keep.txt").write_text("mine")
    assert main(["demo", "--workdir", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workdir" in err[0] and "exists" in err[0]
    assert (tmp_path / "demo" / "keep.txt").read_text() == "mine"
