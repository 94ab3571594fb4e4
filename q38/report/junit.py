"""``q38 check --format junit``: JUnit XML, one test case per (graph, rule family).

``<testsuites>`` holds one ``<testsuite>`` for the package. Its test cases are named by rule
family with the graph as class name (``q38.check.target`` / ``layout``): every family of the
rules checked on that graph (graph rules on each graph, config rules on the config file, layout
rules on the package), plus any (graph, family) a result names. A case with active errors has
one ``<failure>`` whose text lists every error; warnings and suppressed results are in its
``<system-out>``. With ``--ort``, each graph has a ``session`` case: ``<failure>`` when it
failed, ``<skipped>`` when it was skipped.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from contracts.catalogue import catalogue, entry, family_of
from q38.report.results import CheckResults, Result

if TYPE_CHECKING:
    from contracts.runner import CheckReport

__all__ = ["render_junit"]


def _case_key(report: CheckReport, r: Result, family: str) -> tuple[str, str]:
    """The (case graph, family) a result is reported under in the JUnit document.

    A graph's own results go on that graph, config rules on the config file, package-wide results
    on ``package``.
    """
    v = r.violation
    if v.graph in report.graphs:
        return v.graph, family

    e = entry(v.rule_id)
    if e is not None and e.kind == "package":
        return "package", family
    return str(getattr(report, "config_file", "") or "genai_config.json"), family


def _line(r: Result) -> str:
    v = r.violation
    where = "/".join(p for p in (v.graph, v.node) if p) or "-"
    note = f" [suppressed: {r.suppressed}]" if r.suppressed else ""
    return f"{v.rule_id} {r.level} {where}: {v.message}{note}"


def render_junit(results: CheckResults) -> str:
    """The JUnit XML document (UTF-8 declaration), newline-ended."""
    report = results.report
    checked = set(report.rules_checked)
    entries = [e for e in catalogue() if e.rule_id in checked]
    graph_families = list(dict.fromkeys(e.family for e in entries if e.kind == "graph"))
    config_families = list(dict.fromkeys(e.family for e in entries if e.kind in ("genai-config", "session-config")))
    package_families = list(dict.fromkeys(e.family for e in entries if e.kind == "package"))
    config = str(getattr(report, "config_file", "") or "genai_config.json")
    cases: dict[tuple[str, str], list[Result]] = {}
    for graph in report.graphs:
        for fam in graph_families:
            cases[(graph, fam)] = []
    for fam in config_families:
        cases[(config, fam)] = []
    for fam in package_families:
        cases[("package", fam)] = []
    for r in results.results:
        cases.setdefault(_case_key(report, r, family_of(r.rule_id)), []).append(r)

    suite = ET.Element("testsuite", name=f"q38 check {report.package}")
    tests = failures = skipped = 0
    for (graph, fam), members in cases.items():
        case = ET.SubElement(suite, "testcase", classname=f"q38.check.{graph}", name=fam)
        tests += 1
        errors = [r for r in members if r.suppressed is None and r.level == "error"]
        others = [r for r in members if r not in errors]
        if errors:
            failures += 1
            ids = sorted({r.rule_id for r in errors})
            failure = ET.SubElement(case, "failure", message=f"{len(errors)} error(s): {', '.join(ids)}",
                                    type=ids[0])  # fmt: skip
            failure.text = "\n".join(_line(r) for r in errors)
        if others:
            ET.SubElement(case, "system-out").text = "\n".join(_line(r) for r in others)
    for s in report.sessions:
        case = ET.SubElement(suite, "testcase", classname=f"q38.check.{s.graph}", name="session")
        tests += 1
        if s.status == "failed":
            failures += 1
            ET.SubElement(case, "failure", message=s.message[:200] or "session failed", type="session").text = s.message
        elif s.status == "skipped":
            skipped += 1
            ET.SubElement(case, "skipped", message=s.message or "skipped")
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="q38 check", tests=str(tests), failures=str(failures), errors="0",
                      skipped=str(skipped))  # fmt: skip
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
