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
    p.add_argument("package", metavar="PKG",
                   help="package directory: q38 v12b (flat or layered) or an onnxruntime-genai builder package")
    p.add_argument("--ort", action="store_true",
                   help="also create a real onnxruntime CPU session per graph; a graph with an op the "
                   "installed ORT has no CPU kernel for is SKIPPED, naming the op")
    p.add_argument("--require-sessions", action="store_true",
                   help="with --ort: a SKIPPED session fails the check (exit 1) instead of passing")
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
    from q38.errors import FlagError, bound_line
    from q38.progress import elapsed

    if args.require_sessions and not args.ort:
        raise FlagError("--require-sessions needs --ort (no session is created without it)")
    label = f"q38 check {args.package}: contracts" + (" and ORT sessions" if args.ort else "")
    with elapsed(label):
        report = check_package(args.package, ort_version=args.ort_version, ort_sessions=args.ort)
    skipped = [s for s in report.sessions if s.status == "skipped"]
    ok = report.ok and not (args.require_sessions and skipped)
    # A hostile value quoted in a violation message stays one bounded line.
    report.violations[:] = [dataclasses.replace(v, message=bound_line(v.message)) for v in report.violations]
    if args.json:
        doc = report.to_dict()
        doc["ok"] = ok
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0 if ok else 1
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
        status = s.status.upper() if s.status != "ok" else "ok"
        print(f"session {s.graph}: {status}{': ' + s.message if s.message else ''}", file=out)
    errors, warnings = len(report.errors), len(report.violations) - len(report.errors)
    summary = f"{'OK' if ok else 'FAIL'}: {errors} error(s), {warnings} warning(s)"
    if args.ort:
        failed = sum(s.status == "failed" for s in report.sessions)
        opened = sum(s.status == "ok" for s in report.sessions)
        summary += f", sessions: {opened} ok, {failed} failed, {len(skipped)} SKIPPED"
        if skipped and not args.require_sessions:
            summary += " (not run here; --require-sessions makes a skip fail)"
        elif skipped:
            summary += " (--require-sessions: a skip fails)"
    print(summary, file=out)
    return 0 if ok else 1
