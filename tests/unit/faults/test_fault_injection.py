"""Fault injection for the writing commands: ``build``, ``optimize``, ``offload``, ``export-genai``.

Invariants guarded, for every trial:

* **errno at every write step** (in-process): the k-th write operation (open for writing,
  os.open with a write flag, os.write, os.link, os.symlink, os.replace, os.rename,
  os.copy_file_range, os.mkdir, truncate, and the staging commit rename) raises ENOSPC, EIO, EPERM
  or EXDEV (cycled over k), for every k of a clean run. Afterwards the command either exited 0
  with a complete destination that ``open_package`` accepts (EXDEV/EPERM on a link falls back to a
  copy), or exited 2 with one stderr line and left no destination; never a traceback or internal
  error; no staging debris; the sources byte-identical.
* **SIGKILL at random points** (subprocess, seeded): the destination is either absent or complete
  (``open_package`` accepts it); the next run succeeds and leaves no staging debris (stale staging
  directories of dead writers are swept); the sources byte-identical.

Trial counts are recorded with ``record_property`` (``trials``) and printed with ``-s``.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.faultfs import WriteFaults
from support.fsnap import staging_debris, tree_snapshot

from q38.cli import main

ERRNOS = (errno.ENOSPC, errno.EIO, errno.EPERM, errno.EXDEV)
COMMANDS = ("build", "optimize", "offload", "export-genai")
KILL_COMMANDS = ("build", "optimize", "offload")
KILL_TRIALS = 18  # per command: 54 in all
SEED = 20261130


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from q38.synth import synthesize

    root = tmp_path_factory.mktemp("fault_sources")
    return {
        "package": synthesize(root / "pkg", preset="tiny", variant="cpu"),
        "bundles": synthesize(root / "bundles", preset="tiny", variant="cpu", bundles=True),
    }


def _argv(command: str, src: dict[str, Path], out: Path) -> list[str]:
    pkg, b = src["package"], src["bundles"]
    if command == "build":
        return ["build", str(out), "--target", str(b / "target"), "--head", str(b / "head"),
                "--prefill", str(b / "prefill"), "--lib-qsa", str(b / "libs" / "qsa" / "libcustom_ops.so")]
    if command == "optimize":
        return ["optimize", str(pkg), str(out), "--target", "cpu"]
    if command == "offload":
        return ["offload", str(out), "--from-package", str(pkg)]
    return ["export-genai", str(pkg), str(out)]


def _valid(command: str, out: Path) -> None:
    if command == "export-genai":
        import json

        doc = json.loads((out / "genai_config.json").read_text())
        assert (out / doc["model"]["decoder"]["filename"]).is_file()
        return
    from q38.package import open_package

    package = open_package(out)
    for role in package.roles():
        package.load(role)


def _snapshots(src: dict[str, Path]) -> dict[str, object]:
    return {k: tree_snapshot(v) for k, v in src.items()}


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_errno_at_every_write_step(
    command: str,
    sources: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
) -> None:
    before = _snapshots(sources)
    out = tmp_path / "out"
    counter = WriteFaults()
    with counter.installed():
        assert main(_argv(command, sources, out)) == 0
    steps = counter.calls
    assert steps > 0
    shutil.rmtree(out)
    capsys.readouterr()
    outcomes: dict[str, int] = {"refused": 0, "completed": 0}
    for k in range(1, steps + 1):
        err_no = ERRNOS[k % len(ERRNOS)]
        faults = WriteFaults(fail_at=k, err=err_no)
        with faults.installed():
            rc = main(_argv(command, sources, out))
        captured = capsys.readouterr()
        where = f"step {k}/{steps} ({faults.fired}) {errno.errorcode[err_no]}"
        assert faults.fired is not None, where
        if rc == 0:
            _valid(command, out)
            shutil.rmtree(out)
            outcomes["completed"] += 1
        else:
            assert rc == 2, f"{where}: exit {rc}: {captured.err!r}"
            assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, f"{where}: {captured.err!r}"
            assert not os.path.lexists(out), f"{where}: destination left behind"
            outcomes["refused"] += 1
        assert staging_debris(tmp_path) == [], where
        assert sorted(p.name for p in tmp_path.iterdir()) == [], where
    assert _snapshots(sources) == before
    record_property("trials", steps)
    print(f"\nfault injection {command}: {steps} trials, {outcomes}")


def _wait_staging(parent: Path, proc: subprocess.Popen[bytes], limit: float) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        if staging_debris(parent):
            return True
        time.sleep(0.002)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("command", KILL_COMMANDS)
def test_sigkill_at_random_points(
    command: str,
    sources: dict[str, Path],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    rng = random.Random(f"{SEED}-{command}")
    before = _snapshots(sources)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "q38", *_argv(command, sources, out)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    start = time.monotonic()
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    duration = time.monotonic() - start
    shutil.rmtree(out)
    outcomes = {"absent": 0, "complete": 0, "killed_mid_write": 0}
    for trial in range(KILL_TRIALS):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if trial % 2 == 0:  # anywhere in the run, imports included
            time.sleep(rng.uniform(0.2 * duration, duration))
        elif _wait_staging(tmp_path, proc, duration * 3):  # inside the write phase
            time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if staging_debris(tmp_path):
            outcomes["killed_mid_write"] += 1
        if os.path.lexists(out):
            _valid(command, out)
            shutil.rmtree(out)
            outcomes["complete"] += 1
        else:
            outcomes["absent"] += 1
    # The next run sweeps every staging directory a killed writer left behind.
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    _valid(command, out)
    assert staging_debris(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert _snapshots(sources) == before
    record_property("trials", KILL_TRIALS)
    print(f"\nSIGKILL {command}: {KILL_TRIALS} trials, {outcomes}")
