"""SIGTERM, SIGHUP and SIGINT end every writing command cleanly; SIGKILL's debris is swept (issue 24.1).

Real child processes (``python -m q38``) under the harness of tests/support/signal_harness.py, as
``test_sigint.py`` runs them; that module covers SIGINT during imports and at timer points, this one every writing command (build,
optimize, offload, export-genai, synth) and the other signals at fixed points of the staged
write. A ``sitecustomize`` first on the child's ``PYTHONPATH`` wraps
:class:`q38.package.io.staging.StagedDirectory` when q38 imports it: with ``Q38_PAUSE_AT=enter`` the
child writes a ready file once its staging directory exists and sleeps; with ``commit`` it does
so as the commit starts (the whole output staged, not yet renamed). The test then sends the
signal, so the interruption lands at that point every time, never racing the command.

Each interrupted run must exit 128+n with one bounded line (``q38 CMD: interrupted`` for SIGINT,
``... interrupted by SIGTERM`` / ``SIGHUP``), leave nothing at the destination and no staging
directory beside it, and leave its inputs byte- and inode-identical. After SIGKILL the staging
directory stays (nothing can run); the next run into the same destination succeeds and leaves
nothing stale.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fsnap import staging_debris, tree_identity
from support.signal_harness import REPO, child_env, finish, q38_argv, start_q38

from q38.errors import LINE_LIMIT

WRITING_COMMANDS = ("build", "optimize", "offload", "export-genai", "synth")


def _argv(command: str, src: dict[str, Path], out: Path) -> list[str]:
    return q38_argv(command, src["package"], out, src["bundles"])


def _env(hookdir: Path, ready: Path, at: str) -> dict[str, str]:
    return child_env(hookdir, Q38_READY_FILE=str(ready), Q38_PAUSE_AT=at)


def _run_to_pause(argv: list[str], env: dict[str, str], ready: Path) -> subprocess.Popen[str]:
    return start_q38(argv, env, ready, timeout=240, what="the pause")


@pytest.fixture(scope="module")
def sources(signal_sources: dict[str, Path]) -> dict[str, Path]:
    return signal_sources


def _inputs(sources: dict[str, Path]) -> dict[str, object]:
    return {k: tree_identity(v) for k, v in sources.items()}


_SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP, "SIGINT": signal.SIGINT}
# SIGINT of optimize, offload and export-genai: test_sigint.py.
_CASES = [
    *((c, s, "enter") for c in WRITING_COMMANDS for s in ("SIGTERM", "SIGHUP")),
    *((c, "SIGINT", "enter") for c in ("build", "synth")),
    *((c, "SIGTERM", "commit") for c in WRITING_COMMANDS),
]
# SIGKILL of build, optimize and offload at random points: test_fault_injection.py.
_KILL_COMMANDS = ("synth", "export-genai", "optimize")


@pytest.mark.slow
@pytest.mark.parametrize(("command", "signame", "at"), _CASES, ids=[f"{c}-{s}-{a}" for c, s, a in _CASES])
def test_a_signal_while_staged_is_exit_128_plus_n_one_line_and_nothing_left(
    command: str, signame: str, at: str, hookdir: Path, sources: dict[str, Path], tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    ready = tmp_path / "ready"
    before = _inputs(sources)
    proc = _run_to_pause(_argv(command, sources, work / "out"), _env(hookdir, ready, at), ready)
    assert staging_debris(work), "the pause is inside the staged write"
    signum = _SIGNALS[signame]
    proc.send_signal(signum)
    _stdout, stderr = finish(proc, 120)
    assert proc.returncode == 128 + signum, (proc.returncode, stderr[-2000:])
    expected = f"q38 {command}: interrupted" + ("" if signum == signal.SIGINT else f" by {signame}")
    assert stderr == expected + "\n", stderr[-2000:]
    assert len(expected) <= LINE_LIMIT
    assert list(work.iterdir()) == [], f"left {sorted(p.name for p in work.iterdir())}"
    assert _inputs(sources) == before


@pytest.mark.slow
@pytest.mark.parametrize("command", _KILL_COMMANDS)
def test_sigkill_while_staged_leaves_only_staging_that_the_next_run_sweeps(
    command: str, hookdir: Path, sources: dict[str, Path], tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    out = work / "out"
    ready = tmp_path / "ready"
    before = _inputs(sources)
    proc = _run_to_pause(_argv(command, sources, out), _env(hookdir, ready, "enter"), ready)
    proc.kill()
    finish(proc, 60)
    assert proc.returncode == -signal.SIGKILL
    debris = staging_debris(work)
    assert len(debris) == 1 and not out.exists(), debris
    env = dict(os.environ, PYTHONPATH=str(REPO))
    again = subprocess.run([sys.executable, "-m", "q38", *_argv(command, sources, out)], env=env,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert staging_debris(work) == []
    assert sorted(p.name for p in work.iterdir()) == ["out"]
    assert (out / "genai_config.json").is_file()
    assert _inputs(sources) == before


@pytest.mark.slow
def test_a_signal_the_caller_ignores_stays_ignored(hookdir: Path, sources: dict[str, Path], tmp_path: Path) -> None:
    """``nohup q38 ...``: SIGHUP is ignored by the caller's choice; the run goes on to a complete output."""
    work = tmp_path / "w"
    work.mkdir()
    out = work / "out"
    ready = tmp_path / "ready"
    env = _env(hookdir, ready, "enter")
    code = ("import signal, sys, runpy; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
            "sys.argv = ['q38', *sys.argv[1:]]; runpy.run_module('q38', run_name='__main__')")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code, *_argv("synth", sources, out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.005)
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert proc.poll() is None  # ignored: still sleeping in the pause
    proc.send_signal(signal.SIGTERM)
    _stdout, stderr = finish(proc, 120)
    assert proc.returncode == 128 + signal.SIGTERM and stderr == "q38 synth: interrupted by SIGTERM\n", stderr
    assert list(work.iterdir()) == []
