"""The ``q38`` console script: argument parsing and error reporting only.

Exit codes: 0 success; 1 ``q38 check`` found contract violations; 2 a user error (one line on
stderr naming the file, node, rule or flag at fault, never a traceback); 128+n ended by signal n
(130 Ctrl-C / SIGINT, 143 SIGTERM, 129 SIGHUP).

Errors: a :class:`q38.errors.Q38Error` is its own bounded line; any ``OSError`` that reaches the
CLI is a user error too (the path and the errno text), never an ``internal error``, which is
left for genuine bugs.

Signals: SIGTERM (CI runners, ``timeout``, container stops) and SIGHUP (a closed terminal) are
handled exactly as SIGINT, with exit 128+n and the line ``q38 CMD: interrupted by SIGTERM``.
SIGINT: the first Ctrl-C records that the run was interrupted and raises ``KeyboardInterrupt``;
a second one during the clean-up (staged outputs being removed) is ignored so the clean-up
finishes. Whatever exception the interruption turns into - a ``KeyboardInterrupt``, or the
``ImportError`` a C extension raises when its own import of numpy was interrupted mid-way - the
run ends with exit 130 and the one line ``q38 CMD: interrupted``. A signal that arrives while a
C extension initializes (onnx's pybind11 module crashed on one) waits until the init has returned
(:mod:`q38.extension_guard`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import Any, Final, NoReturn

from q38 import __version__
from q38.commands import COMMAND_MODULES
from q38.commands._options import HelpFormatter
from q38.commands._suggest import suggest
from q38.errors import Q38Error, bound_line, clip
from q38.extension_guard import defer_interrupt, guarded_extension_imports, initializing

__all__ = ["HANDLED_SIGNALS", "build_parser", "configure_logging", "interrupt_exit_code", "interrupted", "main", "verbosity"]

_LOG = logging.getLogger("q38")
_INTERRUPTED = False
_SIGNUM = int(signal.SIGINT)

HANDLED_SIGNALS: Final = tuple(
    s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None
)
"""The signals that end a run as Ctrl-C does: one line, exit 128+n, staged output removed."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _INTERRUPTED, _SIGNUM
    if _INTERRUPTED:  # a second signal while cleaning up: let the clean-up finish
        return
    _INTERRUPTED = True
    _SIGNUM = signum
    if initializing():  # inside a C extension's init: raised once the init has returned
        defer_interrupt()
        return
    raise KeyboardInterrupt


def _install_sigint() -> object:
    """Install q38's handler of SIGINT, SIGTERM and SIGHUP for one run; returns what to restore.

    A signal the caller set to be ignored (``nohup`` ignores SIGHUP) stays ignored.
    """
    global _INTERRUPTED, _SIGNUM
    _INTERRUPTED = False
    _SIGNUM = int(signal.SIGINT)
    previous: dict[int, object] = {}
    try:
        for signum in HANDLED_SIGNALS:
            current = signal.getsignal(signum)
            if signum != signal.SIGINT and current == signal.SIG_IGN:
                continue
            previous[signum] = signal.signal(signum, _on_signal)
    except ValueError:  # not the main thread (main() called from a worker): leave them alone
        return None
    return previous


def _restore_sigint(previous: object) -> None:
    if not isinstance(previous, dict):
        return
    for signum, handler in previous.items():
        try:
            signal.signal(signum, handler)
        except (ValueError, TypeError):
            pass


def _ignore_signals(previous: object) -> None:
    if not isinstance(previous, dict):
        return
    for signum in previous:
        try:
            signal.signal(signum, signal.SIG_IGN)
        except (ValueError, TypeError):
            pass


def interrupted() -> bool:
    """Whether this run received SIGINT, SIGTERM or SIGHUP (whatever exception it turned into)."""
    return _INTERRUPTED


def interrupt_exit_code() -> int:
    """128 + the number of the signal that ended the run (130 for Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
    return 128 + _SIGNUM


def _interrupt_text() -> str:
    if _SIGNUM == signal.SIGINT:
        return "interrupted"
    try:
        name = signal.Signals(_SIGNUM).name
    except ValueError:
        name = f"signal {_SIGNUM}"
    return f"interrupted by {name}"


class _Parser(argparse.ArgumentParser):
    """argparse with q38's one-line, exit-2 error contract and defaults shown in ``--help``.

    No prefix matching (``allow_abbrev=False``): ``--form`` is not ``--format``, so a flag added
    later can never change what an old command line means. An error names the closest known
    command, choice or flag ("did you mean"; :mod:`q38.commands._suggest`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}
        self.argv: list[str] = []

    def error(self, message: str) -> NoReturn:

        message = suggest(message, self.argv, self._option_string_actions)
        self.exit(2, f"{bound_line(f'{self.prog}: error: {message}')}\n")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self.argv = list(sys.argv[1:] if args is None else args)
        ns, extras = super().parse_known_args(args, namespace)
        if extras and self.commands:
            # argparse reports a subcommand's unknown flags from the top-level parser ("q38:");
            # the subcommand's own parser names it ("q38 synth: error: ...").
            command = self.commands.get(str(getattr(ns, "command", "")))
            if command is not None:
                command.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras


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
    """The ``q38`` parser: global -v/-q/--version and one subcommand per landed command module.

    Each ``q38.commands.<name>`` module registers its own subparser (``register(sub, common)``);
    ``common`` gives every subcommand -v/-q/--json, so they work before or after the command.
    """
    parser = _Parser(
        prog="q38",
        description=(
            "Build, optimize, convert and qualify ONNX Runtime GenAI packages for the "
            "Qwen3.8-Flash hybrid LLM."
        ),
    )
    parser.add_argument("--version", action="version", version=f"q38 {__version__}")
    # -v / -q are accepted before the subcommand (q38 -v synth) and after it (q38 synth -v).
    parser.add_argument("-v", "--verbose", dest="verbose_first", action="count", default=0, help=_VERBOSE_HELP)
    parser.add_argument("-q", "--quiet", dest="quiet_first", action="count", default=0, help=_QUIET_HELP)
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    common.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    common.add_argument("-q", "--quiet", action="count", default=0, help=_QUIET_HELP)
    common.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for _name, module in _command_modules():
        module.register(sub, common)
    parser.commands = dict(sub.choices)
    return parser


class _BoundedFormatter(logging.Formatter):
    """Every log record is one bounded line too (a library may quote a hostile name in full)."""

    def format(self, record: logging.LogRecord) -> str:

        return bound_line(super().format(record))


_VERBOSE_HELP = (
    "log q38's steps on stderr: -v what is read, each pass, each file placed; -vv q38 debug detail; "
    "-vvv also the libraries' (onnx_ir, onnxruntime ...) debug logs"
)
_QUIET_HELP = "log errors only (no warnings)"
_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
OWN_LOGGERS = ("q38", "contracts")
"""The loggers whose level -v/-q set; every other logger (a library's) stays at WARNING unless -vvv."""
_handler: logging.Handler | None = None


def verbosity(args: argparse.Namespace) -> int:
    """-v count minus -q count, wherever they were given (before or after the subcommand)."""
    up = int(getattr(args, "verbose", 0) or 0) + int(getattr(args, "verbose_first", 0) or 0)
    down = int(getattr(args, "quiet", 0) or 0) + int(getattr(args, "quiet_first", 0) or 0)
    return up - down


def configure_logging(level: int) -> None:
    """One stderr handler on the root logger; q38's own loggers at the level -v/-q chose.

    0: warnings; 1 (-v): q38 INFO; 2 (-vv): q38 DEBUG; 3 (-vvv): every logger at DEBUG;
    negative (-q): errors only. Libraries' loggers (``onnx_ir.serde`` ...) inherit the root's
    WARNING below -vvv, so -vv is q38's detail, not a thousand lines of a serializer's.
    """
    global _handler
    root = logging.getLogger()
    if _handler is not None:  # main() runs several times in one process (q38 demo, tests)
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(_BoundedFormatter(_LOG_FORMAT))
    root.addHandler(_handler)
    own = logging.ERROR if level < 0 else (logging.WARNING, logging.INFO, logging.DEBUG)[min(level, 2)]
    root.setLevel(logging.DEBUG if level >= 3 else logging.ERROR if level < 0 else logging.WARNING)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(own)


# Optional runtimes: the import name -> the extra of q38 that installs it (pyproject.toml).
OPTIONAL_EXTRAS: Final = {"onnxruntime": "cpu", "onnxruntime_genai": "genai"}


def missing_dependency_text(name: str | None) -> str:
    """The one line for a module that is not installed: the extra that brings it, when it has one."""
    extra = OPTIONAL_EXTRAS.get((name or "").split(".")[0])
    if extra is not None:
        return f"missing dependency {name!r}; install it with q38's {extra!r} extra (pip install '.[{extra}]')"
    return f"missing dependency {name!r}; install q38 with its dependencies (pip install .)"


def _say(command: str, text: str) -> None:
    """Print ``q38 COMMAND: text`` as one bounded line on stderr (never raising on encoding)."""
    line = bound_line(f"q38 {command}: {text}")
    try:
        sys.stderr.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed or gone: nothing left to tell
        pass


def _os_error_text(exc: OSError) -> str:

    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.package.io.files import os_problem

    where = ""
    if exc.filename is not None:
        where = f"{clip(exc.filename)}: "
        if exc.filename2 is not None:
            where = f"{clip(exc.filename)} -> {clip(exc.filename2)}: "
    return f"{where}{os_problem(exc)}"


def _user_cause(exc: BaseException) -> BaseException | None:
    """The Q38Error or OSError a library exception wraps (``raise ... from``), if any.

    Only explicit causes count: an exception raised while *handling* an OSError is a bug.
    """
    seen: set[int] = set()
    current: BaseException | None = exc.__cause__
    while current is not None and id(current) not in seen:
        if isinstance(current, (Q38Error, OSError)):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


def main(argv: Sequence[str] | None = None, *, last_run: bool = False) -> int:
    """Run one q38 command; returns the exit code (see the module docstring).

    ``last_run``: the process exits after this run (the console script). The signals q38 handles
    are then ignored once the run's outcome is settled, instead of restored: a Ctrl-C that lands
    after the output is committed, while Python shuts down (where CPython puts back the default
    action and the signal would kill the process with no message, status -2), can undo nothing,
    so the process exits with the run's own status.
    """
    previous = _install_sigint()
    errors = _stdout_paths_as_bytes()
    try:
        if not isinstance(previous, dict):  # not the main thread: q38 handles no signal
            return _main(argv)
        with guarded_extension_imports(tuple(previous)):
            return _main(argv)
    finally:
        if last_run:
            _ignore_signals(previous)
        else:
            _restore_sigint(previous)
        _restore_stdout(errors)


def _stdout_paths_as_bytes() -> str | None:
    """Let stdout print any path: a non-UTF-8 name (bytes on Linux) goes out as its own bytes.

    A strict UTF-8 stdout raises UnicodeEncodeError on the surrogate escapes ``os.fsdecode``
    makes of such a name (a summary line naming the package), after the output was written.
    Returns the error handler to restore (None: left as it was).
    """
    stream = sys.stdout
    current = getattr(stream, "errors", None)
    if current != "strict" or not hasattr(stream, "reconfigure"):
        return None
    try:
        stream.reconfigure(errors="surrogateescape")
    except (ValueError, OSError, AttributeError):
        return None
    return str(current)


def _restore_stdout(errors: str | None) -> None:
    if errors is not None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            sys.stdout.reconfigure(errors=errors)  # type: ignore[union-attr]


def _main(argv: Sequence[str] | None) -> int:
    command = "?"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = str(getattr(args, "command", "?"))
        configure_logging(verbosity(args))
        return _run(args, command)
    except KeyboardInterrupt:
        _say_interrupted(command)
        return interrupt_exit_code()
    except BaseException as exc:  # an interruption that surfaced as another exception
        if _INTERRUPTED and not isinstance(exc, SystemExit):
            _say_interrupted(command)
            return interrupt_exit_code()
        raise


def _say_interrupted(command: str) -> None:
    global _INTERRUPTED
    _INTERRUPTED = True  # also when KeyboardInterrupt came from elsewhere (a test, a signal sent by hand)
    if command == "?":  # before the command line was parsed
        try:
            sys.stderr.write(f"q38: {_interrupt_text()}\n")
        except (OSError, ValueError):
            pass
    else:
        _say(command, _interrupt_text())


def _run(args: argparse.Namespace, command: str) -> int:
    # deferred: q38 --help never loads it; only a command run defers sympy
    from q38._deferred import defer_sympy

    defer_sympy()  # onnx-ir imports sympy eagerly; a command pays for it only if it uses it

    try:
        code = int(args.run(args))
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
        _say(command, f"error: {missing_dependency_text(exc.name)}")
        return 2
    except OSError as exc:  # the filesystem refused something: a user error, not a q38 bug
        if _INTERRUPTED:
            raise KeyboardInterrupt from None
        _say(command, f"error: {_os_error_text(exc)}")
        return 2
    except Exception as exc:  # a q38 bug: one line unless -v asks for the traceback
        if _INTERRUPTED:
            raise KeyboardInterrupt from None
        cause = _user_cause(exc)
        if isinstance(cause, Q38Error):  # wrapped by a library (onnx-ir's PassError, ...)
            _say(command, f"error: {cause}")
            return cause.exit_code
        if isinstance(cause, OSError):
            _say(command, f"error: {_os_error_text(cause)}")
            return 2
        if verbosity(args) > 0:
            raise
        _say(command, f"internal error: {type(exc).__name__}: {exc} (rerun with -v for the traceback)")
        return 70
    if _INTERRUPTED:  # a library swallowed the KeyboardInterrupt (``except ImportError`` around an import)
        raise KeyboardInterrupt
    return code
