"""The ``q38`` console script: argument parsing and error reporting only.

Exit codes: 0 success; 1 ``q38 check`` found contract violations; 2 a user error (one line on
stderr naming the file, node, rule or flag at fault, never a traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from q38 import __version__
from q38.commands import COMMAND_MODULES

__all__ = ["build_parser", "main"]

_LOG = logging.getLogger("q38")


class _Parser(argparse.ArgumentParser):
    """argparse with q38's one-line, exit-2 error contract."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(getattr(args, "verbose", 0))
    from q38.errors import Q38Error  # stdlib-only module

    try:
        return int(args.run(args))
    except Q38Error as exc:
        print(f"q38 {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `q38 check --json | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 141
    except KeyboardInterrupt:
        print(f"q38 {args.command}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        print(
            f"q38 {args.command}: error: missing dependency {exc.name!r}; "
            "install q38 with its dependencies (pip install .)",
            file=sys.stderr,
        )
        return 2
    except Exception as exc:  # a q38 bug: one line unless -v asks for the traceback
        if getattr(args, "verbose", 0):
            raise
        print(
            f"q38 {args.command}: internal error: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())} (rerun with -v for the traceback)",
            file=sys.stderr,
        )
        return 70
