"""``q38 check --format sarif``: a SARIF 2.1.0 log for code scanning.

Read by GitHub, Azure DevOps and VS Code's SARIF viewer.

One run. ``tool.driver`` is q38 with its version and the whole rule catalogue as
``reportingDescriptor`` s (id, name, short / full description, help with the violating example
and fix, default level; properties: the ORT versions, where ORT enforces the rule, its ORT
source, surface, EP and families as ``tags``). One result per violation, suppressed ones
included with a ``suppressions`` entry (``external``: the baseline or ``--ignore`` /
``--select``), each with a location: the package file (``artifactLocation``, relative to the
working directory when the package is inside it, as code scanning resolves paths against the
repository root) and the node or config key path as a logical location. ``--ort`` sessions
that failed or were skipped are tool execution notifications of the invocation.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from contracts.catalogue import catalogue
from q38 import __version__
from q38.report.locations import artifact_uri, locate, package_prefix
from q38.report.results import CheckResults, Result

if TYPE_CHECKING:
    from contracts.catalogue import RuleEntry
    from contracts.runner import CheckReport

__all__ = ["SARIF_SCHEMA", "SARIF_VERSION", "render_sarif", "sarif_log"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_FINGERPRINT = "q38/v1"


def _descriptor(entry: RuleEntry) -> dict[str, Any]:
    help_text = f"{entry.explanation}\n\nViolating example: {entry.example}\n\nFix: {entry.fix}"
    markdown = (f"{entry.explanation}\n\n**Violating example:** `{entry.example}`\n\n**Fix:** {entry.fix}\n\n"
                f"ORT source: {entry.source}")  # fmt: skip
    return {
        "id": entry.rule_id,
        "name": entry.name,
        "shortDescription": {"text": entry.summary},
        "fullDescription": {"text": entry.explanation},
        "help": {"text": help_text, "markdown": markdown},
        "defaultConfiguration": {"level": entry.severity},
        "properties": {
            "ortVersions": {"since": entry.since, "until": entry.until, "text": entry.versions},
            "enforcement": entry.enforced,
            "ortSource": entry.source,
            "surface": entry.kind,
            "ep": entry.ep,
            "tags": list(entry.families),
        },
    }


def _result(r: Result, report: CheckReport, prefix: str, index: dict[str, int], why: dict[str, str]) -> dict[str, Any]:
    v = r.violation
    where = locate(report, v)
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(prefix, where.file)}}}
    if where.logical:
        name = v.node if where.kind == "element" else where.logical.rsplit(".", 1)[-1]
        location["logicalLocations"] = [{"name": name or where.logical, "fullyQualifiedName": where.logical,
                                         "kind": where.kind}]  # fmt: skip
    out: dict[str, Any] = {
        "ruleId": v.rule_id,
        "level": r.level,
        "message": {"text": v.message},
        "locations": [location],
        "partialFingerprints": {_FINGERPRINT: r.fingerprint},
        "properties": {"graph": v.graph, "node": v.node},
    }
    if v.folded:  # the dependents of one missing or unreadable file (contracts.root_cause)
        out["properties"]["folded"] = v.folded
    if v.rule_id in index:
        out["ruleIndex"] = index[v.rule_id]
    if r.suppressed is not None:
        out["suppressions"] = [{"kind": "external", "status": "accepted", "justification": why[r.suppressed]}]
    return out


def _notifications(report: CheckReport) -> list[dict[str, Any]]:
    out = []
    for s in report.sessions:
        if s.status == "ok":
            continue
        level = "error" if s.status == "failed" else "note"
        out.append({"level": level, "message": {"text": f"session {s.graph}: {s.status}: {s.message}".rstrip(": ")},
                    "descriptor": {"id": f"session-{s.status}"}})  # fmt: skip
    return out


def sarif_log(results: CheckResults) -> dict[str, Any]:
    """The SARIF log of ``results`` as a JSON-ready dict."""
    report = results.report
    entries = catalogue()
    index = {e.rule_id: i for i, e in enumerate(entries)}
    why = {
        "baseline": f"in the baseline {results.baseline_path}".rstrip(),
        "ignore": "ignored by --ignore",
        "select": "not selected by --select",
    }
    prefix = package_prefix(report.package)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": "q38",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": "https://onnxruntime.ai/docs/genai/",
                "rules": [_descriptor(e) for e in entries],
            }},
            "invocations": [{
                "executionSuccessful": True,
                "exitCode": 0 if results.ok else 1,
                "toolExecutionNotifications": _notifications(report),
            }],
            "results": [_result(r, report, prefix, index, why) for r in results.results],
            "properties": {
                "package": report.package,
                "ortVersion": report.ort_version,
                "surface": report.surface,
                "graphs": list(report.graphs),
                "ok": results.ok,
            },
        }],
    }  # fmt: skip


def render_sarif(results: CheckResults) -> str:
    """The SARIF log as indented JSON, newline-ended."""
    return json.dumps(sarif_log(results), indent=2) + "\n"
