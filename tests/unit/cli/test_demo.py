"""`q38 demo`: the main job end to end, through the subcommands' own entry points, explained.

Invariants: every step exits 0 and every produced package passes `q38 check` with real ORT
sessions; the cpu demo ends with onnxruntime-genai generating tokens from the export; each
step's line says what it made and its figures; warnings are spelled out; the output path and
the next commands are printed; a rerun adds run-2 and deletes nothing; a directory the demo did
not make is used only when empty; the faithful variant builds for CUDA and stops before ORT
sessions with a note; the elapsed-time ticker draws only on a terminal.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from q38.cli import main
from q38.demo import MARKER, prepare_workdir, q38_command
from q38.progress import elapsed


@pytest.mark.slow
def test_demo_runs_every_step_explains_it_and_reruns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workdir = tmp_path / "demo"
    assert main(["demo", "--workdir", str(workdir), "--preset", "tiny"]) == 0
    out = capsys.readouterr().out.splitlines()
    run = workdir / "run-1"
    assert out[0] == f"q38 demo: the main job on the tiny synthetic package (cpu variant), in {run}"
    steps = [line for line in out if line.startswith("[")]
    assert [line.split()[1] for line in steps] == [
        "synth", "build", "optimize", "offload", "check", "check", "check", "export-genai"]
    by = {" ".join(line.split("]", 1)[1].split()[:2]) if "check" in line else line.split()[1]: line for line in steps}
    assert "29 exporter patterns fused into com.microsoft contrib ops" in by["optimize"]
    assert "target cpu: the package is the cpu variant" in by["optimize"]
    assert "9 QMoE expert nodes left for ORT to offload" in by["offload"]
    assert "router_weights cleared on 17 QMoE nodes" in by["offload"]
    for name in ("check build", "check optimize", "check offload"):
        assert "0 error(s)" in by[name] and "real onnxruntime CPU sessions:" in by[name] and " created" in by[name]
    assert "it generated 8 tokens greedily from prompt ids 1,5,9,17: " in by["export-genai"]
    # The default placement never hard-links (issue 14): no check step warns about hard links.
    assert not any("PKG-HARDLINK-001" in line for line in out)
    header = [i for i, line in enumerate(out) if line.startswith("warnings (")]
    assert all(out[i + 1].startswith("  ") for i in header)
    assert f"output: {run / 'offloaded'} (the QMoE-offload package; every step's output is in {run})" in out
    assert f"next: {q38_command()} diff {run / 'built'} {run / 'optimized'}   # what optimize changed, node by node" in out
    assert sorted(p.name for p in run.iterdir()) == ["built", "bundles", "exported", "offloaded", "optimized"]

    # A rerun writes run-2 next to run-1, which stays as it was.
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    assert main(["demo", "--workdir", str(workdir), "--preset", "tiny", "--json", "--no-ort"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["run"] == str(workdir / "run-2")
    facts = {s["step"]: s["facts"] for s in report["steps"]}
    assert facts["optimize"]["rewrites"] == 29 and facts["offload"]["router_weights_cleared"] == 17
    assert facts["check offload"]["errors"] == 0 and facts["check offload"]["sessions_ok"] == 0
    assert len(facts["export-genai"]["tokens"]) == 8
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before


@pytest.mark.slow
def test_faithful_demo_builds_for_cuda_and_stops_before_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--workdir", str(tmp_path / "d"), "--preset", "tiny", "--variant", "faithful"]) == 0
    out = capsys.readouterr().out
    assert "target cuda: the package is the faithful variant with a CUDA provider" in out
    assert "no ORT session (not run on this build)" in out and "export-genai" not in out
    assert "note: the faithful variant uses QSA ops that no ORT CPU build has kernels for" in out
    config = json.loads((tmp_path / "d" / "run-1" / "built" / "genai_config.json").read_text())
    assert "cuda" in json.dumps(config["model"]["decoder"]["session_options"]["provider_options"])


def test_demo_refuses_a_directory_it_did_not_make_unless_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "keep.txt").write_text("mine")
    assert main(["demo", "--workdir", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workdir" in err[0] and "was not made by q38 demo" in err[0]
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["keep.txt"]
    assert (tmp_path / "demo" / "keep.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert prepare_workdir(tmp_path / "empty") == tmp_path / "empty" / "run-1"
    assert (tmp_path / "empty" / MARKER).is_file()
    assert prepare_workdir(tmp_path / "empty") == tmp_path / "empty" / "run-2"
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="exists and is not a directory"):
        prepare_workdir(tmp_path / "file")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_ticker_draws_elapsed_seconds_on_a_terminal_only() -> None:
    tty, pipe = _Tty(), io.StringIO()
    for stream in (tty, pipe):
        with elapsed("[1/8] synth", stream=stream):
            time.sleep(1.7)
    assert "\r[1/8] synth ... 1 s" in tty.getvalue() and tty.getvalue().endswith("\r\x1b[K")
    assert pipe.getvalue() == ""


def test_demo_runs_in_a_fresh_process_as_the_console_script(tmp_path: Path) -> None:
    """``python -m q38 demo`` in its own interpreter: each step's run sits inside the demo's run and
    imports its modules fresh (the in-process test above finds them imported by earlier tests)."""
    done = subprocess.run([sys.executable, "-m", "q38", "demo", "--workdir", str(tmp_path / "w"), "--preset", "tiny",
                           "--no-ort"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "FAILED" not in done.stdout and (tmp_path / "w" / "run-1" / "offloaded" / "genai_config.json").is_file()


def test_the_printed_q38_command_runs_as_printed() -> None:
    # After the README's commands `q38` need not be on PATH (nox -s demo installs it in .nox/demo):
    # the demo's next steps name a command that runs as printed.
    command = q38_command()
    done = subprocess.run([*shlex.split(command), "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("q38 "), done.stderr


def test_q38_command_is_q38_only_where_path_finds_this_installation(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    bindir = tmp_path / "venv dir" / "bin"
    bindir.mkdir(parents=True)
    python = bindir / "python"
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setenv("PATH", str(tmp_path))  # no q38 there
    assert q38_command() == f"'{python}' -m q38"  # no script beside the interpreter
    script = bindir / "q38"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert q38_command() == f"'{script}'"  # the full path, quoted for the shell
    monkeypatch.setenv("PATH", str(bindir))
    assert q38_command() == "q38"
    # under nox -s demo the session's bin is first on PATH, but the caller's shell has no q38:
    monkeypatch.setenv("Q38_USER_PATH", str(tmp_path))
    assert q38_command() == f"'{script}'"
    monkeypatch.setenv("Q38_USER_PATH", str(bindir))
    assert q38_command() == "q38"
