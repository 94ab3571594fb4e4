"""The source gate of the writing commands: refuse a source that ``q38 check`` fails, before writing.

A package ``check`` rejects at error level (an opset ORT refuses, a path field outside the
package, a node contract ORT would fail at session creation) cannot become a loadable package
by optimizing, offloading or exporting it; writing one anyway hands the user an output that
fails at load time on another machine. ``optimize``, ``offload`` and ``export-genai`` therefore
run the contract rules on their source first (graphs without weights, no ORT session: about
what ``q38 check`` without ``--ort`` costs) and refuse with one line naming the first rule,
exit 2, before anything is written. ``--allow-invalid-source`` writes anyway; the output then
carries the source's violations (the commands add none of their own).

The output is held to the same bar: :func:`gated` checks every staged output just before it is
renamed into place, and refuses one with an error-level violation of a rule the source did not
break (a q38 defect, reported as one line; nothing reaches the destination).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from q38.errors import PackageError, bound_line, clip, quote

if TYPE_CHECKING:
    from contracts import Violation
    from q38.package.graph_memo import GraphMemo

__all__ = ["ALLOW_FLAG", "add_allow_flag", "gated", "refuse_invalid_source"]

ALLOW_FLAG = "--allow-invalid-source"
_MESSAGE_LIMIT = 260  # of the violation's text: the line, with its frame, stays within LINE_LIMIT
_LOG = logging.getLogger(__name__)


def add_allow_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--allow-invalid-source`` to a writing command's parser."""
    parser.add_argument(
        ALLOW_FLAG, dest="allow_invalid_source", action="store_true",
        help="write even when the source fails 'q38 check' at error level (default: refuse, exit 2, "
        "nothing written); the output then carries the source's violations",
    )  # fmt: skip


def refuse_invalid_source(source: Path | str, args: argparse.Namespace) -> frozenset[str]:
    """Raise PackageError naming the first error-level contract violation of ``source``.

    With ``--allow-invalid-source`` the violations are logged as one warning instead. A source
    the contract runner cannot read at all is left to the command, whose own reader names the
    fault in its own words.
    """
    # deferred: pulls numpy into q38 --help (contracts.shapes)
    from contracts.runner import check_package

    try:
        report = check_package(source)
    except PackageError:
        return frozenset()  # unreadable: the command's own reader refuses it with its precise line
    errors = report.errors
    if not errors:
        return frozenset()
    summary = _summary(errors[0])
    if getattr(args, "allow_invalid_source", False):
        _LOG.warning("source %s fails check with %d error(s), first %s; writing anyway (%s)",
                     quote(str(source)), len(errors), summary, ALLOW_FLAG)  # fmt: skip
        return frozenset(v.rule_id for v in errors)
    raise PackageError(
        f"the source fails check, {summary} ({len(errors)} error(s); nothing written; {ALLOW_FLAG} writes anyway)"
    )


def _summary(first: Violation) -> str:
    """``RULE [graph node]: message``, the message bounded so the whole line keeps its tail."""
    where = f" [{first.graph}{' ' + first.node if first.node else ''}]" if first.graph else ""
    return f"{first.rule_id}{where}: {bound_line(first.message, _MESSAGE_LIMIT)}"


@contextlib.contextmanager
def gated(source: Path | str, args: argparse.Namespace) -> Iterator[None]:
    """Refuse an invalid source now (see :func:`refuse_invalid_source`); check the output at commit.

    Inside the block every staged output (:data:`q38.package.io.staging.COMMIT_CHECKS`) must pass
    the contract rules except those the source already broke (``--allow-invalid-source``).
    Each graph is parsed once (:mod:`q38.package.graph_memo`): the command's loads take the
    models the gate parsed, and the output check judges the models a writer registered with the
    bytes it wrote instead of parsing them again.
    """
    # deferred: pulls numpy into q38 --help (q38.package.graphs)
    from q38.package.graph_memo import graph_memo

    with graph_memo() as memo:
        allowed = refuse_invalid_source(source, args)
        memo.stop_recording()  # the command's own loads take the models the gate parsed
        with _output_checked(allowed, memo):
            yield


@contextlib.contextmanager
def _output_checked(allowed: frozenset[str], memo: GraphMemo) -> Iterator[None]:
    """Register the commit-time output check of the block (see :func:`gated`)."""
    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.package.io.staging import COMMIT_CHECKS

    def check_output(tree: Path, dest: Path) -> None:
        # deferred: pulls numpy into q38 --help (contracts.shapes)
        from contracts.runner import check_package

        try:
            with memo.judge():  # the written models, judged in memory
                report = check_package(tree)
        except PackageError as exc:
            raise PackageError(f"{dest}: the output q38 staged cannot be read back ({exc}); nothing written") from None
        new = [v for v in report.errors if v.rule_id not in allowed]
        if new:
            raise PackageError(
                f"the output would fail check, {_summary(new[0])} ({len(new)} error(s) the source does not "
                f"have; a q38 defect, please report it; nothing written to {clip(str(dest), 60)})"
            )

    COMMIT_CHECKS.append(check_output)
    try:
        yield
    finally:
        COMMIT_CHECKS.remove(check_output)
