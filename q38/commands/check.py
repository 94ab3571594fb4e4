"""``q38 check PKG [--ort] [--json]``: run every contract on a package.

Exit codes: 0 no errors (warnings do not fail), 1 contract violations (or a failed ``--ort``
session), 2 unreadable input (one line on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

__all__ = ["register", "run"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "check",
        parents=[common],
        help="run every contract (ORT session rules, config surface, file layout) on a package",
        description=(
            "Run every contract of contracts/ on the package's graphs, config and files; with "
            "--ort also create real onnxruntime sessions where the installed ORT has kernels. "
            "Exit 1 on violations, 2 on unreadable input."
        ),
    )
    p.add_argument("package", metavar="PKG", help="package directory (flat or layered)")
    p.add_argument("--ort", action="store_true", help="also create real onnxruntime CPU sessions")
    p.add_argument("--ort-version", default=None, help="mirror this onnxruntime version (default: the installed one)")
    p.set_defaults(run=run)


def _table(rows: list[tuple[str, ...]]) -> str:
    header = ("RULE", "SEVERITY", "GRAPH", "NODE", "MESSAGE")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = []
    for row in [header, *rows]:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from contracts.runner import check_package
    from q38.errors import bound_line

    report = check_package(args.package, ort_version=args.ort_version, ort_sessions=args.ort)
    # A hostile value quoted in a violation message stays one bounded line.
    report.violations[:] = [dataclasses.replace(v, message=bound_line(v.message)) for v in report.violations]
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        return 0 if report.ok else 1
    out = sys.stdout
    print(
        f"q38 check {report.package}: onnxruntime {report.ort_version}, {len(report.rules_checked)} rules, "
        f"graphs: {', '.join(report.graphs) or '-'}",
        file=out,
    )
    if report.violations:
        rows: list[tuple[str, ...]] = [(v.rule_id, v.severity, v.graph or "-", v.node or "-", v.message) for v in report.violations]
        print(_table(rows), file=out)
    for s in report.sessions:
        print(f"session {s.graph}: {s.status}{': ' + s.message if s.message else ''}", file=out)
    errors, warnings = len(report.errors), len(report.violations) - len(report.errors)
    failed = sum(s.status == "failed" for s in report.sessions)
    print(f"{'FAIL' if not report.ok else 'OK'}: {errors} error(s), {warnings} warning(s)"
          + (f", {failed} failed session(s)" if args.ort else ""), file=out)  # fmt: skip
    return 0 if report.ok else 1
