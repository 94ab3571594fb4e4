"""The ``q38`` console script: argument parsing and error reporting only.

Exit codes: 0 success; 1 ``q38 check`` found contract violations; 2 a user error (one line on
stderr naming the file, node, rule or flag at fault, never a traceback); 130 interrupted.

Errors: a :class:`q38.errors.Q38Error` is its own bounded line; any ``OSError`` that reaches the
CLI is a user error too (the path and the errno text), never an ``internal error``, which is
left for genuine bugs.

SIGINT: the first Ctrl-C records that the run was interrupted and raises ``KeyboardInterrupt``;
a second one during the clean-up (staged outputs being removed) is ignored so the clean-up
finishes. Whatever exception the interruption turns into - a ``KeyboardInterrupt``, or the
``ImportError`` a C extension raises when its own import of numpy was interrupted mid-way - the
run ends with exit 130 and the one line ``q38 CMD: interrupted``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType, ModuleType

from q38 import __version__
from q38.commands import COMMAND_MODULES

__all__ = ["build_parser", "interrupted", "main"]

_LOG = logging.getLogger("q38")
_INTERRUPTED = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _INTERRUPTED
    if _INTERRUPTED:  # a second Ctrl-C while cleaning up: let the clean-up finish
        return
    _INTERRUPTED = True
    raise KeyboardInterrupt


def _install_sigint() -> object:
    """Install q38's SIGINT handler for one run; returns the handler to restore afterwards."""
    global _INTERRUPTED
    _INTERRUPTED = False
    try:
        return signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread (main() called from a worker): leave it alone
        return None


def _restore_sigint(previous: object) -> None:
    if previous is not None:
        try:
            signal.signal(signal.SIGINT, previous)  # type: ignore[arg-type]
        except (ValueError, TypeError):
            pass


def interrupted() -> bool:
    """Whether this run received SIGINT (whatever exception it turned into)."""
    return _INTERRUPTED


class _Parser(argparse.ArgumentParser):
    """argparse with q38's one-line, exit-2 error contract."""

    def error(self, message: str) -> None:  # type: ignore[override]
        from q38.errors import bound_line

        self.exit(2, f"{bound_line(f'{self.prog}: error: {message}')}\n")


def _command_modules() -> list[tuple[str, ModuleType]]:
    found = []
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"q38.commands.{name}")
        except ModuleNotFoundError as exc:
            # A command whose module has not landed yet is simply not offered.
            if exc.name == f"q38.commands.{name}":
                continue
            raise
        found.append((name, module))
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="q38",
        description=(
            "Build, optimize, convert and qualify ONNX Runtime GenAI packages for the "
            "Qwen3.8-Flash hybrid LLM."
        ),
    )
    parser.add_argument("--version", action="version", version=f"q38 {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=0, help="log detail (-vv: debug)")
    common.add_argument("--json", action="store_true", help="print a machine-readable summary")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for _name, module in _command_modules():
        module.register(sub, common)
    return parser


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _say(command: str, text: str) -> None:
    """Print ``q38 COMMAND: text`` as one bounded line on stderr (never raising on encoding)."""
    from q38.errors import bound_line

    line = bound_line(f"q38 {command}: {text}")
    try:
        sys.stderr.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed or gone: nothing left to tell
        pass


def _os_error_text(exc: OSError) -> str:
    from q38.errors import clip
    from q38.package.files import os_problem

    where = ""
    if exc.filename is not None:
        where = f"{clip(exc.filename)}: "
        if exc.filename2 is not None:
            where = f"{clip(exc.filename)} -> {clip(exc.filename2)}: "
    return f"{where}{os_problem(exc)}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one q38 command; returns the exit code (see the module docstring)."""
    previous = _install_sigint()
    try:
        return _main(argv)
    finally:
        _restore_sigint(previous)


def _main(argv: Sequence[str] | None) -> int:
    command = "?"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = str(getattr(args, "command", "?"))
        _configure_logging(getattr(args, "verbose", 0))
        return _run(args, command)
    except KeyboardInterrupt:
        _say(command, "interrupted")
        return 130
    except BaseException as exc:  # an interruption that surfaced as another exception
        if _INTERRUPTED and not isinstance(exc, SystemExit):
            _say(command, "interrupted")
            return 130
        raise


def _run(args: argparse.Namespace, command: str) -> int:
    from q38.errors import Q38Error  # stdlib-only module

    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        raise
    except Q38Error as exc:
        if _INTERRUPTED:
            raise KeyboardInterrupt from None
        _say(command, f"error: {exc}")
        return exc.exit_code
    except BrokenPipeError:  # `q38 check --json | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 141
    except ModuleNotFoundError as exc:
        if _INTERRUPTED:
            raise KeyboardInterrupt from None
        _say(command, f"error: missing dependency {exc.name!r}; install q38 with its dependencies (pip install .)")
        return 2
    except OSError as exc:  # the filesystem refused something: a user error, not a q38 bug
        if _INTERRUPTED:
            raise KeyboardInterrupt from None
        _say(command, f"error: {_os_error_text(exc)}")
        return 2
    except Exception as exc:  # a q38 bug: one line unless -v asks for the traceback
        if _INTERRUPTED:
            raise KeyboardInterrupt from None
        if getattr(args, "verbose", 0):
            raise
        _say(command, f"internal error: {type(exc).__name__}: {exc} (rerun with -v for the traceback)")
        return 70
