"""Run ``q38`` commands as real child processes, fast: a fork server with q38 already imported.

A fresh ``python -m q38`` spends seconds importing onnx, onnx-ir, numpy and onnxruntime before it
looks at its input; hundreds of hostile cases cannot each pay that. :class:`ForkServer` starts
one single-threaded server process that imports every command module once, then forks one child
per case. Each child is a real process with its own stdout/stderr files, working directory,
exit status and signals; it runs ``q38.cli.main(argv)`` and exits with its return code. The
server enforces the case's timeout (SIGKILL, reported as ``timed_out``), so a command that
blocks on a FIFO fails its test instead of hanging the suite.

Optionally the child

* drops ``CAP_DAC_OVERRIDE`` / ``CAP_DAC_READ_SEARCH`` (``drop_dac``), so that root meets real
  ``EACCES`` on a ``chmod 000`` file, as any other user would;
* records every file it opens (``sys.addaudithook``, the ``open`` event of ``open()``,
  ``io.open_code()`` and ``os.open()``) with the access it asked for, for the "nothing read
  outside the inputs" checks.

Fresh interpreters are still what SIGINT-during-import tests need: use ``python -m q38`` there.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ForkServer", "Result"]

_REPO = Path(__file__).resolve().parents[2]
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_WARM = (
    "q38.cli",
    "q38.commands.build",
    "q38.commands.check",
    "q38.commands.export_genai",
    "q38.commands.offload",
    "q38.commands.optimize",
    "q38.assembly",
    "q38.export_genai",
    "q38.offload.convert",
    "q38.optimize.driver",
    "contracts.runner",
)


@dataclass(frozen=True)
class Result:
    """One child's outcome."""

    rc: int | None  # exit status; None when it was killed at the timeout
    timed_out: bool
    stdout: str
    stderr: str
    wall_s: float
    opens: list[tuple[str, bool]] = field(default_factory=list)  # (absolute path, for writing)


class ForkServer:
    """A server process that forks one q38 child per :meth:`run` (see the module docstring)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONPATH"] = os.pathsep.join([str(_REPO), str(_REPO / "tests")])
        child_env.setdefault("OPENBLAS_NUM_THREADS", "1")
        child_env.setdefault("OMP_NUM_THREADS", "1")
        self._proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env,
            cwd=_REPO,
        )
        ready = self._proc.stdout.readline() if self._proc.stdout else ""
        if ready.strip() != "ready":
            raise RuntimeError(f"fork server did not start: {ready!r}")

    def run(
        self,
        argv: list[str],
        *,
        cwd: Path,
        scratch: Path,
        timeout: float = 60.0,
        drop_dac: bool = False,
        audit: bool = False,
    ) -> Result:
        """Run ``q38 ARGV`` in a child; its stdout/stderr/open log go to files under ``scratch``."""
        scratch.mkdir(parents=True, exist_ok=True)
        request = {
            "argv": argv,
            "cwd": str(cwd),
            "stdout": str(scratch / "stdout"),
            "stderr": str(scratch / "stderr"),
            "opens": str(scratch / "opens") if audit else None,
            "timeout": timeout,
            "drop_dac": drop_dac,
        }
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        reply = json.loads(self._proc.stdout.readline())
        opens: list[tuple[str, bool]] = []
        if audit and (scratch / "opens").exists():
            for line in (scratch / "opens").read_text(encoding="utf-8", errors="replace").splitlines():
                flag, _, path = line.partition(" ")
                opens.append((path, flag == "w"))
        return Result(
            rc=reply["rc"],
            timed_out=reply["timed_out"],
            stdout=(scratch / "stdout").read_text(encoding="utf-8", errors="replace"),
            stderr=(scratch / "stderr").read_text(encoding="utf-8", errors="replace"),
            wall_s=reply["wall_s"],
            opens=opens,
        )

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()  # the server's loop ends
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


# ------------------------------------------------------------------------------ server side
_CAP_DAC_OVERRIDE = 1
_CAP_DAC_READ_SEARCH = 2
_CAP_VERSION_3 = 0x20080522


def _drop_dac() -> None:
    """Clear CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: file permissions now apply to root too."""
    if os.geteuid() != 0:
        return  # an ordinary user meets the permission bits anyway

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header = Header(_CAP_VERSION_3, 0)
    data = (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    mask = ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH)) & 0xFFFFFFFF
    data[0].effective &= mask
    data[0].permitted &= mask
    data[0].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _install_audit(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or not args:
            return
        path = args[0]
        if isinstance(path, int):
            return
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 else 0
        writing = bool((isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS))
        try:
            text = os.fsdecode(path)
            full = os.path.abspath(text)
        except (TypeError, ValueError):
            return
        os.write(fd, f"{'w' if writing else 'r'} {full}\n".encode("utf-8", "backslashreplace"))

    sys.addaudithook(hook)


def _child(request: dict[str, Any]) -> int:
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    sys.stdin.close()
    os.chdir(request["cwd"])
    if request.get("drop_dac"):
        _drop_dac()
    if request.get("opens"):
        _install_audit(request["opens"])
    from q38.cli import main

    rc = main(request["argv"])
    sys.stdout.flush()
    sys.stderr.flush()
    return rc


def _serve() -> None:
    import importlib
    import signal

    for name in _WARM:
        importlib.import_module(name)
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 97
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                code = _child(request)
            except SystemExit as exc:  # argparse's exit: what the interpreter would make of it
                sys.stderr.flush()
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # the child's traceback goes to its own stderr file
                import traceback

                traceback.print_exc()
                code = 98
            finally:
                os._exit(code)
        timed_out = False
        deadline = start + float(request["timeout"])
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                timed_out = True
                break
            time.sleep(0.005)
        rc = None if timed_out else (os.waitstatus_to_exitcode(status))
        print(json.dumps({"rc": rc, "timed_out": timed_out, "wall_s": time.monotonic() - start}), flush=True)


if __name__ == "__main__":
    _serve()
