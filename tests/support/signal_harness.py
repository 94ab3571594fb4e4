"""One harness for the signal tests (tests/unit/faults/test_signals.py and test_sigint.py).

Every run is a fresh ``python -m q38`` child (a fork server would hide the imports). A
``sitecustomize`` put first on the child's ``PYTHONPATH`` (:func:`write_hook`) installs two import
hooks, each idle unless its environment variable is set (:func:`child_env`):

* ``Q38_STARTED_FILE``: written when ``q38.cli`` is imported, so timers start from q38's own start
  instead of the interpreter's (a signal before Python installed its handler kills any program);
* ``Q38_SIGINT_AT=MODULE``: the child sends SIGINT to itself when ``MODULE`` starts to be imported,
  so the interrupt lands mid-way through that import (numpy's C core, onnx's and onnxruntime's
  pybind modules, q38's own lazy imports); with ``Q38_SIGINT_AS_IMPORTERROR=1`` that interruption
  becomes the ``ImportError`` a C extension raises when its own import of numpy is cut short;
* ``Q38_SIGINT_IN=MODULE`` (a C extension) with ``Q38_INIT_DONE_FILE``: the child sends SIGINT
  to itself from inside ``MODULE``'s module initialization, in Python code the init runs before
  the extension's own C init (as a pybind11 init calls back into Python), and writes the done file
  once the C init has returned -- which it never does if the interrupt cuts the init short;
* ``Q38_PAUSE_AT=enter|commit`` with ``Q38_READY_FILE``: :class:`q38.package.io.staging.StagedDirectory`
  is wrapped when q38 imports it; with ``enter`` the child writes the ready file once its staging
  directory exists and sleeps, with ``commit`` it does so as the commit starts (the whole output
  staged, not yet renamed). A signal sent then lands at that point every time, never racing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SITECUSTOMIZE = '''
import importlib.abc, importlib.machinery, importlib.util, os, signal, sys, time

_STARTED = os.environ.get("Q38_STARTED_FILE")
_SIGINT_AT = os.environ.get("Q38_SIGINT_AT")
_AS_IMPORT_ERROR = os.environ.get("Q38_SIGINT_AS_IMPORTERROR") == "1"
_SIGINT_IN = os.environ.get("Q38_SIGINT_IN")
_INIT_DONE = os.environ.get("Q38_INIT_DONE_FILE")
_PAUSE_AT = os.environ.get("Q38_PAUSE_AT")
_READY = os.environ.get("Q38_READY_FILE")


class _SignalledExtensionLoader(importlib.machinery.ExtensionFileLoader):
    def create_module(self, spec):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # Python code of the init: an unguarded handler raises here
            pass
        module = super().create_module(spec)
        with open(_INIT_DONE, "w") as fh:
            fh.write(spec.name)
        return module


class _SigintHook:
    fired = False

    def find_spec(self, name, path=None, target=None):
        if _SIGINT_IN and name == _SIGINT_IN and not _SigintHook.fired:
            _SigintHook.fired = True
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            assert isinstance(spec.loader, importlib.machinery.ExtensionFileLoader), spec
            spec.loader = _SignalledExtensionLoader(spec.loader.name, spec.loader.path)
            return spec
        if name == "q38.cli" and _STARTED:
            with open(_STARTED, "w") as fh:
                fh.write(str(os.getpid()))
        if _SIGINT_AT and name == _SIGINT_AT and not _SigintHook.fired:
            _SigintHook.fired = True
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # the handler runs at the next bytecode boundary
                    pass
            except KeyboardInterrupt:
                if _AS_IMPORT_ERROR:  # what a C extension does with a failed import of numpy
                    raise ImportError(f"{name} failed to import") from None
                raise
        return None


def _pause():
    with open(_READY, "w") as fh:
        fh.write(str(os.getpid()))
    end = time.monotonic() + 120
    while time.monotonic() < end:
        time.sleep(0.02)
        cli = sys.modules.get("q38.cli")
        # The handler's KeyboardInterrupt can land in a finalizer, which swallows it; q38 then
        # stops at its next check of the flag, as this pause does (it stands for q38's work).
        if cli is not None and cli.interrupted():
            raise KeyboardInterrupt


def _patch(module):
    cls = module.StagedDirectory
    if _PAUSE_AT == "enter":
        enter = cls.__enter__

        def __enter__(self):
            result = enter(self)
            try:  # as a signal at the first statement of the with block: __exit__ runs
                _pause()
            except BaseException:
                if not self.__exit__(*sys.exc_info()):
                    raise
            return result

        cls.__enter__ = __enter__
    elif _PAUSE_AT == "commit":
        commit = cls.commit

        def commit_paused(self):
            _pause()
            return commit(self)

        cls.commit = commit_paused


class _PauseFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "q38.package.io.staging" or not _PAUSE_AT:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PauseFinder())
sys.meta_path.insert(0, _SigintHook())
'''

_HOOK_VARS = ("Q38_STARTED_FILE", "Q38_SIGINT_AT", "Q38_SIGINT_AS_IMPORTERROR", "Q38_SIGINT_IN", "Q38_INIT_DONE_FILE",
              "Q38_PAUSE_AT", "Q38_READY_FILE")


def write_hook(directory: Path) -> Path:
    """``directory`` holding the harness's ``sitecustomize.py``."""
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return directory


def child_env(hookdir: Path, **hook: str) -> dict[str, str]:
    """The environment of a q38 child: the hook first on ``PYTHONPATH``, only the ``hook`` variables set."""
    env = {k: v for k, v in os.environ.items() if k not in _HOOK_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(hookdir), str(REPO)])
    env.update(hook)
    return env


def q38_argv(command: str, package: Path, out: Path, bundles: Path | None = None) -> list[str]:
    """The command line of ``q38 COMMAND`` reading ``package`` (``bundles`` for build) into ``out``."""
    if command == "build":
        assert bundles is not None
        return ["build", str(out), "--target", str(bundles / "target"), "--head", str(bundles / "head"),
                "--prefill", str(bundles / "prefill"), "--lib-qsa", str(bundles / "libs" / "qsa" / "libcustom_ops.so")]  # fmt: skip
    if command == "offload":
        return ["offload", str(out), "--from-package", str(package), "--offload-mode", "auto"]
    if command == "synth":
        return ["synth", str(out), "--preset", "tiny", "--variant", "cpu"]
    if command == "check":
        return ["check", str(package)]
    if command == "check-ort":  # only --ort imports onnxruntime (a plain check stays light)
        return ["check", str(package), "--ort"]
    return [command, str(package), str(out)]


def default_signals() -> None:
    """In the child before exec: SIGHUP / SIGTERM / SIGINT at their defaults, whatever the runner set.

    A suite run under ``nohup`` (or a CI runner that ignores SIGHUP) would hand its children an
    ignored SIGHUP, which q38 rightly keeps ignored; these tests are about q38's own handling.
    """
    for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)``; on a timeout the child is killed and reaped before the test fails."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
        pytest.fail(f"the child did not exit within {timeout} s: {err[-2000:]}")


def start_q38(argv: list[str], env: dict[str, str], ready: Path, *, timeout: float, what: str) -> subprocess.Popen[str]:
    """``python -m q38 ARGV`` started and waited for until it writes ``ready`` (fails the test
    when it exits first or ``timeout`` seconds pass; ``what`` names the awaited point)."""
    proc = subprocess.Popen([sys.executable, "-m", "q38", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)  # fmt: skip
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"q38 {argv[0]} never reached {what} (exit {proc.returncode}): {err[-2000:]}")
        time.sleep(0.002)
    return proc
