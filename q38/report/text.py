"""``q38 check``'s text output: a header, the active results with repeats grouped, a summary.

The ``--ort`` sessions are listed between the table and the summary line.

Grouping: results of one rule whose messages have the same words but at most one (the op, node
or key the message names) share a cause. The first :data:`SHOWN` results of a cause are rows of
the table, then one line ``… and N more nodes (same cause)``; a cause never takes more than
``SHOWN + 1`` lines, wherever its results are (every graph of a package with opset 0 fails the
same way). The other formats keep every result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from contracts._rule import OrtVersions
from contracts.catalogue import catalogue
from q38.report.results import CheckResults, Result

__all__ = ["SHOWN", "group_causes", "render_text"]

SHOWN = 3
"""Rows shown per cause before the ``… and N more`` line."""
_LOOKBACK = 64  # groups of one (rule, length) compared per result: bounded work on hostile input


@dataclass
class _Cause:
    words: list[str]
    members: list[Result] = field(default_factory=list)


def _same_cause(a: Sequence[str], b: Sequence[str]) -> bool:
    return len(a) == len(b) and sum(x != y for x, y in zip(a, b)) <= 1


def group_causes(results: Sequence[Result]) -> list[list[Result]]:
    """``results`` grouped by (rule, cause), groups in the order of their first result."""
    groups: list[_Cause] = []
    by_key: dict[tuple[str, int], list[_Cause]] = {}
    for r in results:
        words = r.violation.message.split()
        bucket = by_key.setdefault((r.rule_id, len(words)), [])
        for cause in bucket[-_LOOKBACK:]:
            if _same_cause(cause.words, words):
                cause.members.append(r)
                break
        else:
            cause = _Cause(words, [r])
            bucket.append(cause)
            groups.append(cause)
    return [g.members for g in groups]


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    header = ("RULE", "SEVERITY", "GRAPH", "NODE", "MESSAGE")
    widths = [max(len(r[i]) for r in [header, *rows] if len(r) == 5) for i in range(4)]
    lines = []
    for row in [header, *rows]:
        if len(row) == 1:  # a "… and N more" line
            lines.append(row[0])
            continue
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])
    return lines


def _rows(results: Sequence[Result]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for members in group_causes(results):
        for r in members[:SHOWN]:
            v = r.violation
            rows.append((v.rule_id, r.level, v.graph or "-", v.node or "-", v.message))
        rest = members[SHOWN:]
        if rest:
            what = "nodes" if all(r.violation.node for r in rest) else "results"
            rows.append((f"… and {len(rest)} more {what} (same cause)",))
    return rows


def _rules_line(checked: Sequence[str], version: str) -> str:
    """How many rules were applied, and which catalogue rules were not and why (``q38 rules`` lists all).

    The catalogue's rules that do not exist in ``version`` are counted.

    The environment rules judge environment variables of the process that runs onnxruntime: a
    package does not carry them, so ``check`` cannot apply them (``q38 rules`` still lists them).
    """
    skipped = sorted(e.rule_id for e in catalogue() if e.kind == "environment" and e.rule_id not in set(checked)
                     and OrtVersions(e.since, e.until).applies(version))
    absent = sum(not OrtVersions(e.since, e.until).applies(version) for e in catalogue())
    notes = []
    if skipped:
        notes.append(f"not applied: {', '.join(skipped)}: environment-variable rules, which judge the process "
                     "that runs onnxruntime, not the package")
    if absent:
        notes.append(f"{absent} more in q38 rules do not exist in onnxruntime {version}")
    return f"{len(checked)} rules applied" + (f" ({'; '.join(notes)})" if notes else "")


def render_text(results: CheckResults) -> str:
    """The text report (see the module docstring)."""
    report = results.report
    graphs = ", ".join(report.graphs) or "-"
    lines = [(f"q38 check {report.package}: onnxruntime {report.ort_version}, {_rules_line(report.rules_checked, report.ort_version)}, "
             f"graphs: {graphs}")]
    active = results.active
    if active:
        lines.extend(_table(_rows(active)))
    # A note that several sessions share (the config names a provider this onnxruntime lacks) is
    # said once, before them, not once per session.
    shared = {m for m, n in Counter(s.message for s in report.sessions if s.message).items() if n > 1}
    for note in sorted(shared):
        ids = [s.graph for s in report.sessions if s.message == note]
        lines.append(f"sessions {', '.join(ids)}: {note}")
    for s in report.sessions:
        status = s.status.upper() if s.status != "ok" else "ok"
        message = s.message if s.message and s.message not in shared else ""
        lines.append(f"session {s.graph}: {status}{': ' + message if message else ''}")
    errors = len(results.errors)
    summary = f"{'OK' if results.ok else 'FAIL'}: {errors} error(s), {len(active) - errors} warning(s)"
    if results.ort_sessions:
        skipped = sum(s.status == "skipped" for s in report.sessions)
        failed = sum(s.status == "failed" for s in report.sessions)
        opened = sum(s.status == "ok" for s in report.sessions)
        summary += f", sessions: {opened} ok, {failed} failed, {skipped} SKIPPED"
        if skipped and not results.require_sessions:
            summary += " (not run here; --require-sessions makes a skip fail)"
        elif skipped:
            summary += " (--require-sessions: a skip fails)"
    by_reason = {why: sum(r.suppressed == why for r in results.results) for why in ("baseline", "ignore", "select")}
    notes = [f"{n} in the baseline" if why == "baseline" else f"{n} by --{why}" for why, n in by_reason.items() if n]
    if notes:
        summary += f"; suppressed: {', '.join(notes)}"
    lines.append(summary)
    return "\n".join(lines) + "\n"
