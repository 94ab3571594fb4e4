"""The source gate of the writing commands: refuse a source that ``q38 check`` fails, before writing.

A package ``check`` rejects at error level (an opset ORT refuses, a path field outside the
package, a node contract ORT would fail at session creation) cannot become a loadable package
by optimizing, offloading or exporting it; writing one anyway hands the user an output that
fails at load time on another machine. ``optimize``, ``offload`` and ``export-genai`` therefore
run the contract rules on their source first (graphs without weights, no ORT session: about
what ``q38 check`` without ``--ort`` costs) and refuse with one line naming the first rule,
exit 2, before anything is written. ``--allow-invalid-source`` writes anyway; the output then
carries the source's violations (the commands add none of their own).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from q38.errors import PackageError, clip, quote

__all__ = ["ALLOW_FLAG", "add_allow_flag", "refuse_invalid_source"]

ALLOW_FLAG = "--allow-invalid-source"
_LOG = logging.getLogger(__name__)


def add_allow_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--allow-invalid-source`` to a writing command's parser."""
    parser.add_argument(
        ALLOW_FLAG, dest="allow_invalid_source", action="store_true",
        help="write even when the source fails 'q38 check' at error level (default: refuse, exit 2, "
        "nothing written); the output then carries the source's violations",
    )  # fmt: skip


def refuse_invalid_source(source: Path | str, args: argparse.Namespace) -> None:
    """Raise PackageError naming the first error-level contract violation of ``source``.

    With ``--allow-invalid-source`` the violations are logged as one warning instead. A source
    the contract runner cannot read at all is left to the command, whose own reader names the
    fault in its own words.
    """
    from contracts.runner import check_package

    try:
        report = check_package(source)
    except PackageError:
        return  # unreadable: the command's own reader refuses it with its precise line
    errors = report.errors
    if not errors:
        return
    first = errors[0]
    where = f" [{first.graph}{' ' + first.node if first.node else ''}]" if first.graph else ""
    summary = f"{first.rule_id}{where}: {first.message}"
    if getattr(args, "allow_invalid_source", False):
        _LOG.warning("source %s fails check with %d error(s), first %s; writing anyway (%s)",
                     quote(str(source)), len(errors), summary, ALLOW_FLAG)  # fmt: skip
        return
    raise PackageError(
        f"the source fails check, {summary} ({len(errors)} error(s) in {clip(str(source), 80)}; nothing written; "
        f"{ALLOW_FLAG} writes anyway)"
    )
