"""``q38 check PKG|MODEL.onnx [--ort] [--format FMT] [--select/--ignore IDS] [--baseline FILE]``: run the contracts.

Every contract runs on a package (or on one graph file: ``--provider cpu|cuda`` and repeatable
``--session-option KEY=VALUE`` give its session; a graph a package names is said to be that package's
graph) and the results are reported (text, json, sarif, github, junit;
q38.report). Exit codes: 0 no errors (warnings do not fail unless --warnings-as-errors; results suppressed by
--ignore / --select / the baseline do not count), 1 contract violations (or a failed ``--ort``
session), 2 unreadable input or a bad flag / baseline (one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from q38.commands._options import OrtVersion, comma_list, say_wrote
from q38.errors import FlagError, bound_line
from q38.progress import elapsed
from q38.report import render

__all__ = ["register", "run"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 check`` to the command line (report, selection and baseline options included)."""
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
                   help="package directory: q38 v12b (flat or layered) or an onnxruntime-genai builder package; "
                   "or one .onnx graph file (checked for the session --provider and --session-option give)")
    p.add_argument("--provider", choices=("cpu", "cuda"), default=None,
                   help="for a graph file: the session's execution provider (cuda falls back to the CPU EP; "
                   "default: cpu); a package's config names its own")
    p.add_argument("--session-option", metavar="KEY=VALUE", action="append", default=[],
                   help="for a graph file: one session config entry (repeatable; the session-config rules "
                   "apply); a package's config names its own")
    p.add_argument("--ort", action="store_true",
                   help="also create a real onnxruntime CPU session per graph; a graph with an op the "
                   "installed ORT has no CPU kernel for is SKIPPED, naming the op")
    p.add_argument("--require-sessions", action="store_true",
                   help="with --ort: a SKIPPED session fails the check (exit 1) instead of passing")
    p.add_argument("--ort-version", action=OrtVersion, default=None, metavar="VERSION",
                   help="judge by the rules of this onnxruntime release (1.31.1, 1.32.0; default: the installed one)")
    _register_report_options(p)
    p.set_defaults(run=run)


def _register_report_options(p: argparse.ArgumentParser) -> None:
    """--format / --output, rule selection and baselines (rendered by q38.report)."""
    p.add_argument("--format", dest="output_format", default="text",
                   choices=("text", "json", "sarif", "github", "junit"), metavar="FORMAT",
                   help="text (grouped, for a terminal), json, sarif (SARIF 2.1.0 for code scanning), "
                   "github (workflow annotations), junit (JUnit XML); --json is --format json")
    p.add_argument("--output", metavar="FILE", default=None,
                   help="write the report to FILE (atomically; it must not exist unless --force; default: stdout)")
    p.add_argument("--force", action="store_true", help="let --output FILE replace an existing file")
    p.add_argument("--select", metavar="IDS", type=comma_list(), action="append", default=[],
                   help="report only these rules: ids or id prefixes (ORT-SCHEMA, QSA-), comma-separated")
    p.add_argument("--ignore", metavar="IDS", type=comma_list(), action="append", default=[],
                   help="do not report these rules: ids or id prefixes, comma-separated")
    p.add_argument("--warnings-as-errors", action="store_true", help="a warning fails the check like an error")
    p.add_argument("--baseline", metavar="FILE", default=None,
                   help="suppress the results recorded in FILE: only new violations fail the check "
                   "(default: none, every result counts)")
    p.add_argument("--write-baseline", metavar="FILE", default=None,
                   help="record every reported result in FILE as the baseline; the check then passes "
                   "(default: none written)")


def run(args: argparse.Namespace) -> int:
    """Check the package, classify its violations (selection, baseline) and print or write the report.

    The report is in the chosen format. Returns 0 when no active error (and no failed session),
    else 1; a contradictory flag pair raises FlagError (exit 2) before anything runs.
    """
    # deferred: pulls numpy into q38 --help (contracts.shapes)
    from contracts.runner import check_package

    # deferred: pulls onnx into q38 --help (contracts._graph)
    from q38.report.results import (
        Selection,
        check_selectors,
        classify,
        read_baseline,
        write_atomic,
        write_baseline,
    )

    if args.require_sessions and not args.ort:
        raise FlagError("--require-sessions needs --ort (no session is created without it)")
    fmt = args.output_format
    if args.json and fmt not in ("text", "json"):
        raise FlagError(f"--json and --format {fmt} ask for two formats; give one")
    fmt = "json" if args.json else fmt
    if args.baseline and args.write_baseline:
        raise FlagError("--baseline and --write-baseline: give one (write a baseline, or gate on one)")
    if args.force and not args.output:
        raise FlagError("--force lets --output FILE replace a file; there is no --output")
    if args.output and not args.force and os.path.lexists(args.output):
        raise FlagError(f"--output {args.output}: exists (q38 never replaces a file; --force replaces it)")
    selection = Selection(tuple(s for group in args.select for s in group), tuple(s for group in args.ignore for s in group),
                          args.warnings_as_errors)  # fmt: skip
    baseline = read_baseline(args.baseline) if args.baseline else []
    label = f"q38 check {args.package}: contracts" + (" and ORT sessions" if args.ort else "")
    with elapsed(label):
        if Path(args.package).is_file():
            report = _check_graph_file(args)
        else:
            if args.provider or args.session_option:
                given = "--provider" if args.provider else "--session-option"
                raise FlagError(f"{given} applies to a graph file; {args.package} is a package, whose config "
                                "names its providers and session options")  # fmt: skip
            report = check_package(args.package, ort_version=args.ort_version, ort_sessions=args.ort)
    found = {v.rule_id for v in report.violations}
    check_selectors("--select", selection.select, found)
    check_selectors("--ignore", selection.ignore, found)
    # A hostile value quoted in a violation message stays one bounded line.
    report.violations[:] = [dataclasses.replace(v, message=bound_line(v.message)) for v in report.violations]
    options = {"require_sessions": args.require_sessions, "ort_sessions": args.ort}
    results = classify(report, selection, baseline=baseline, baseline_path=args.baseline or "", **options)
    recorded = len(results.active)
    if args.write_baseline:
        write_baseline(args.write_baseline, results)
        results = classify(report, selection, baseline=[r.fingerprint for r in results.active],
                           baseline_path=args.write_baseline, **options)  # fmt: skip
    text = render(fmt, results)
    # A machine-readable format keeps stdout parseable (or empty): the "wrote" lines go to stderr.
    machine = fmt != "text"
    if args.output:
        write_atomic(args.output, text, replace=args.force, flag="--output")
    else:
        encoding = sys.stdout.encoding or "utf-8"
        sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))  # '…' on an ASCII stdout
        sys.stdout.flush()
    if args.write_baseline:
        say_wrote("check", f"{args.write_baseline} (the baseline: {recorded} result(s) recorded)", machine=machine)
    if args.output:
        verdict = "OK" if results.ok else "FAIL"
        say_wrote("check", f"{args.output} (the {fmt} report: {verdict}, {len(results.errors)} error(s))",
                  machine=machine)
    return 0 if results.ok else 1


def _session_options(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as session config entries (a later KEY wins, as ORT's config does)."""
    from q38.errors import FlagError  # deferred: command modules import at call time; light

    entries: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FlagError(f"--session-option {item!r}: expected KEY=VALUE")
        entries[key] = value
    return entries


def _check_graph_file(args: argparse.Namespace) -> Any:
    """Check one graph file; say on stderr which package graph it is and where CUDA facts come from."""
    # deferred: pulls numpy into q38 --help (contracts.shapes)
    from contracts.model_check import check_model, cuda_facts_note, package_role

    provider = args.provider or "cpu"
    report = check_model(args.package, provider=provider, entries=_session_options(args.session_option),
                         ort_version=args.ort_version, ort_sessions=args.ort)  # fmt: skip
    role = package_role(Path(args.package))
    if role is not None:
        print(f"q38 check: {args.package}: the {role.note()}", file=sys.stderr)
    if provider == "cuda":
        print(f"q38 check: {cuda_facts_note(report.ort_version)}", file=sys.stderr)
    return report
