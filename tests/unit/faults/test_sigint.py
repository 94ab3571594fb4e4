"""SIGINT anywhere: exit 130, one line, nothing written (issue 13.7), with real signals.

Real child processes under the harness of tests/support/signal_harness.py: its import hook
interrupts the child at the start of a module's import (``Q38_SIGINT_AT``, optionally as the
``ImportError`` of a C extension, the issue's ``internal error: ImportError``), or a timer
started when ``q38.cli`` is imported sends SIGINT at a point in the run.

Each interrupted run must exit 130 with the single line ``q38 CMD: interrupted`` (or ``q38:
interrupted`` before the command line is parsed), leave no output and no staging debris, and
a rerun must succeed. A run that finished before the signal must have written its whole output.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fsnap import staging_debris, tree_identity
from support.signal_harness import child_env, finish, q38_argv, start_q38


def _env(hookdir: Path, ready: Path, **extra: str) -> dict[str, str]:
    return child_env(hookdir, Q38_STARTED_FILE=str(ready), **extra)


def _argv(command: str, src: Path, out: Path) -> list[str]:
    return q38_argv(command, src, out)


@pytest.fixture(scope="module")
def source(signal_sources: dict[str, Path]) -> Path:
    return signal_sources["package"]


def _assert_interrupted(proc: subprocess.CompletedProcess[str], command: str, work: Path) -> None:
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr in (f"q38 {command.removesuffix('-ort')}: interrupted\n", "q38: interrupted\n"), proc.stderr[-2000:]
    assert list(work.iterdir()) == [], f"left {sorted(p.name for p in work.iterdir())}"


# (command, module whose import the interrupt cuts short, surfaced as the ImportError of a C
# extension): q38's own lazy imports, numpy's C core, onnx's and onnxruntime's pybind modules.
IMPORT_POINTS = (
    ("offload", "q38.offload.convert", False),
    ("offload", "numpy._core._multiarray_umath", False),
    ("offload", "numpy._core._multiarray_umath", True),
    ("offload", "onnx.onnx_cpp2py_export", True),
    ("offload", "onnx_ir", False),
    ("optimize", "ml_dtypes", True),
    ("check", "contracts.runner", False),
    ("check-ort", "onnxruntime.capi.onnxruntime_pybind11_state", False),
    ("check-ort", "onnxruntime.capi.onnxruntime_pybind11_state", True),
)


@pytest.mark.parametrize(("command", "module", "as_import_error"), [
    pytest.param(c, m, e, id=f"{c}-{m}-{'ImportError' if e else 'KeyboardInterrupt'}",
                 marks=[pytest.mark.slow] * (c == "check-ort"))  # onnxruntime's import: over ~5 s
    for c, m, e in IMPORT_POINTS])
def test_sigint_during_an_import_is_exit_130_and_one_line(
    command: str, module: str, as_import_error: bool, hookdir: Path, source: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    before = tree_identity(source)
    extra = {"Q38_SIGINT_AT": module}
    if as_import_error:
        extra["Q38_SIGINT_AS_IMPORTERROR"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "q38", *_argv(command, source, work / "out")],
        env=_env(hookdir, tmp_path / "ready", **extra), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if proc.returncode == 0:  # pragma: no cover - diagnostic
        pytest.fail(f"{module} was never imported by q38 {command}: the hook did not fire")
    _assert_interrupted(proc, command, work)
    assert tree_identity(source) == before


# (command, C extension whose module init the interrupt lands in): onnx's pybind11 module (the
# one that crashed with SIGSEGV on a Ctrl-C mid-init), ml_dtypes' (half a second of init), numpy's
# C core, onnxruntime's pybind module.
INIT_POINTS = (
    ("offload", "onnx.onnx_cpp2py_export"),
    ("optimize", "ml_dtypes._ml_dtypes_ext"),
    ("offload", "numpy._core._multiarray_umath"),
    ("check-ort", "onnxruntime.capi.onnxruntime_pybind11_state"),
)


@pytest.mark.parametrize(("command", "module"), [
    pytest.param(c, m, id=f"{c}-{m}", marks=[pytest.mark.slow] * (c == "check-ort")) for c, m in INIT_POINTS])
def test_sigint_inside_a_c_extension_init_waits_for_the_init_then_is_exit_130(
    command: str, module: str, hookdir: Path, source: Path, tmp_path: Path
) -> None:
    """The interrupt is held off until the extension's init has returned (the done file exists),
    then ends the run as any other: exit 130, one line, nothing written."""
    work = tmp_path / "w"
    work.mkdir()
    done = tmp_path / "init-done"
    before = tree_identity(source)
    proc = subprocess.run(
        [sys.executable, "-m", "q38", *_argv(command, source, work / "out")],
        env=_env(hookdir, tmp_path / "ready", Q38_SIGINT_IN=module, Q38_INIT_DONE_FILE=str(done)),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    _assert_interrupted(proc, command, work)
    assert done.read_text() == module, f"the interrupt cut {module}'s init short"
    assert tree_identity(source) == before


def _start(command: str, source: Path, out: Path, env: dict[str, str], ready: Path) -> subprocess.Popen[str]:
    return start_q38(_argv(command, source, out), env, ready, timeout=120, what="its start")


@pytest.mark.parametrize(("command", "delay", "rerun"), [
    ("offload", 0.0, False), pytest.param("offload", 1.5, True, marks=pytest.mark.slow),  # slow: two runs
    ("optimize", 0.5, False), pytest.param("optimize", 2.5, True, marks=pytest.mark.slow),
    ("export-genai", 1.0, False), ("check", 0.8, False),
])  # fmt: skip
def test_sigint_at_a_timer_point_is_exit_130_or_a_complete_output(
    command: str, delay: float, rerun: bool, hookdir: Path, source: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    out = work / "out"
    ready = tmp_path / "ready"
    before = tree_identity(source)
    proc = _start(command, source, out, _env(hookdir, ready), ready)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    stdout, stderr = finish(proc, 300)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert tree_identity(source) == before
    if done.returncode == 130:
        _assert_interrupted(done, command, work)
        if rerun:  # no debris blocks the next run: it succeeds
            again = subprocess.run([sys.executable, "-m", "q38", *_argv(command, source, out)],
                                   env=_env(hookdir, ready), capture_output=True, text=True, timeout=300)  # fmt: skip
            assert again.returncode == 0, again.stderr[-2000:]
            assert staging_debris(work) == []
        return
    # The command finished before the signal reached it: a complete, committed output.
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert staging_debris(work) == []
    if command != "check":
        assert sorted(p.name for p in work.iterdir()) == ["out"]
        assert (out / "genai_config.json").is_file()
    shutil.rmtree(work)


def test_a_signal_after_the_run_is_settled_cannot_kill_the_exiting_process() -> None:
    """Once the console script's run has its outcome (output committed or removed), SIGINT,
    SIGTERM and SIGHUP are ignored rather than restored: CPython's shutdown puts back the default
    action of a restored handler, so a Ctrl-C landing then killed the process silently (status -2,
    no line) after a complete run -- seen as a flaky timer-point case of the test above."""
    code = ("import os, signal, sys\n"
            "from q38.__main__ import entry\n"
            "sys.argv = ['q38', 'rules']\n"
            "code = entry()\n"
            "print(code, [signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)])\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "sys.exit(code)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.splitlines()[-1] == "0 [True, True, True]"
    assert "Traceback" not in done.stderr
