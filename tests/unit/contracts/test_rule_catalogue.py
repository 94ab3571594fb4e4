"""The rule catalogue behind ``q38 rules`` / ``q38 explain`` and SARIF's rule descriptors (issue 26).

Invariants guarded:
- The catalogue has one entry per registered rule id (``contracts.runner.ALL_RULES``), and each
  entry's facts are the rule records' own: summary, enforcement, surface, EP, every record's
  source, and exactly the mirrored onnxruntime versions some record of the id applies to.
- Every rule is one declaration with its explanation, violating example and fix: building the
  catalogue refuses records of one id that disagree (documentation, family) and an empty field;
  ``docs/rules.md`` is the catalogue, generated.
- Adding a rule is one edit: a rule appended to one family module's ``RULES`` (nothing else
  changed) appears in ``q38 rules``, ``q38 explain``, SARIF's rule metadata and the rule-coverage
  test (its declared examples evaluated).
- ``q38 rules --json`` prints exactly the registry, each rule with its documentation verbatim;
  each rule's name is its id in PascalCase; ``--family`` filters (``cpu-kernel``: exactly the
  rules of the CPU EP; an unknown family exits 2 with one line); ``q38 explain`` prints every
  id's full text and exits 2 with one line for an unknown id.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contracts._rule import OrtVersions, Rule, RuleDoc
from contracts.catalogue import (
    build_catalogue,
    catalogue,
    entry,
    families,
    family_of,
    markdown,
    matches,
)
from contracts.citations import public_source, public_text
from contracts.runner import ALL_RULES, RULE_MODULES
from contracts.schema_registry import available_versions
from q38.cli import main

_IDS = list(dict.fromkeys(r.rule_id for r in ALL_RULES))


def _applies(since: str | None, until: str | None, version: str) -> bool:
    return OrtVersions(since, until).applies(version)


def test_the_catalogue_has_one_entry_per_registered_rule_with_its_records_facts() -> None:
    entries = catalogue()
    assert [e.rule_id for e in entries] == _IDS
    for e in entries:
        records = [r for r in ALL_RULES if r.rule_id == e.rule_id]
        assert e.summary == records[0].summary
        assert {(r.enforced, r.kind, r.ep) for r in records} == {(e.enforced, e.kind, e.ep)}
        assert all(set(public_source(r.source).split("; ")) <= set(e.source.split("; ")) for r in records), e.rule_id
        for version in (*available_versions(), "1.30.0", "1.40.0"):
            assert _applies(e.since, e.until, version) == any(r.applies(version) for r in records), (e.rule_id, version)
        assert e.family == family_of(e.rule_id) == records[0].family != "other" and e.family in families()
        assert e.explanation.strip() and e.example.strip() and e.fix.strip(), e.rule_id


def test_every_family_module_declares_its_family_on_each_of_its_rules() -> None:
    assert [r for m in RULE_MODULES for r in m.RULES] == list(ALL_RULES)
    for module in RULE_MODULES:
        assert {r.family for r in module.RULES} == {module.FAMILY}, module.__name__
    assert family_of("OFFLOAD-NODE-C99") == "offload" and family_of("ORT-SCHEMA") == "other"


def test_building_the_catalogue_refuses_records_that_disagree_or_an_empty_field() -> None:
    first = next(r for r in ALL_RULES if r.rule_id == "ORT-SCHEMA-003")
    other_doc = dataclasses.replace(first, doc=RuleDoc("x", "y", "z"))
    with pytest.raises(ValueError, match="ORT-SCHEMA-003: its per-version records carry different documentation"):
        build_catalogue((*ALL_RULES, other_doc))
    with pytest.raises(ValueError, match="ORT-SCHEMA-003: its per-version records disagree"):
        build_catalogue((*ALL_RULES, dataclasses.replace(first, family="qsa")))
    for name in ("explanation", "example", "fix"):
        blank = dataclasses.replace(first.doc, **{name: "  "})
        rules = [dataclasses.replace(r, doc=blank) if r.rule_id == "ORT-SCHEMA-003" else r for r in ALL_RULES]
        with pytest.raises(ValueError, match=f"ORT-SCHEMA-003: documentation has no {name}"):
            build_catalogue(rules)
    lone = Rule("NEW-RULE-001", "s", "src", "cpu-session", "graph", lambda m, e: [], family=" ", doc=first.doc)
    with pytest.raises(ValueError, match="NEW-RULE-001: declared without a family"):
        build_catalogue((lone,))


def test_docs_rules_md_is_the_generated_catalogue() -> None:
    path = Path(__file__).resolve().parents[3] / "docs" / "rules.md"
    assert path.read_text(encoding="utf-8") == markdown(), "regenerate: python -m contracts.catalogue > docs/rules.md"


def test_selectors_match_ids_and_prefixes_case_insensitively() -> None:
    assert matches("ORT-SCHEMA-001", ["ORT-SCHEMA-001"]) and matches("ORT-SCHEMA-001", ["ort-schema"])
    assert matches("ORT-SCHEMA-011", ["ORT-SCHEMA-01"]) and not matches("ORT-SCHEMA-001", ["ORT-SCHEMA-01"])
    assert not matches("ORT-SHAPE-001", ["ORT-SCHEMA"]) and matches("QSA-DSA-001", ["ALL"])
    # as a comma-separated option spells them: spaces around a selector, `all` in any case, the
    # first selector that matches among several; none selects nothing
    assert matches("ORT-SCHEMA-001", [" ort-schema "]) and matches("QSA-DSA-001", ["all"])
    assert matches("ORT-SCHEMA-001", ["PKG", "ORT-SCHEMA-001"])
    assert not matches("ORT-SCHEMA-001", [])
    assert entry("ort-schema-001") is entry("ORT-SCHEMA-001") is not None
    assert entry("NOPE-001") is None


def test_rules_json_lists_exactly_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in listed] == _IDS
    by_id = {d["id"]: d for d in listed}
    for rule in ALL_RULES:
        d = by_id[rule.rule_id]
        first = next(r for r in ALL_RULES if r.rule_id == rule.rule_id)
        assert (d["enforced"], d["surface"], d["ep"], d["summary"]) == (rule.enforced, rule.kind, rule.ep, first.summary)
        assert set(public_source(rule.source).split("; ")) <= set(d["source"].split("; "))
        versions = d["ort_versions"]
        assert all(_applies(versions["since"], versions["until"], v) for v in available_versions() if rule.applies(v))
    assert by_id["PKG-HARDLINK-001"]["severity"] == "warning" and by_id["ORT-SCHEMA-001"]["severity"] == "error"
    assert by_id["QSA-DSA-CUDA-001"]["families"] == ["qsa", "cuda"]
    assert by_id["ORT-SCHEMA-001"]["name"] == "OrtSchema001" and by_id["GQA-CPU-001"]["name"] == "GqaCpu001"


def test_rules_json_carries_each_rules_documentation(capsys: pytest.CaptureFixture[str]) -> None:
    """Each listed rule's explanation (its citations made public), violating example and fix are its declaration's RuleDoc's."""
    assert main(["rules", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == len(_IDS)
    for d in listed:
        doc = next(r for r in ALL_RULES if r.rule_id == d["id"]).doc
        assert (d["explanation"], d["example"], d["fix"]) == (public_text(doc.explanation), doc.example, doc.fix), d["id"]


def test_rules_family_filters_and_an_unknown_family_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--family", "qsa", "--json"]) == 0
    ids = [d["id"] for d in json.loads(capsys.readouterr().out)]
    assert ids == [i for i in _IDS if i.startswith("QSA-")]
    assert main(["rules", "--family", "cuda"]) == 0
    out = capsys.readouterr().out.splitlines()
    cuda = [e.rule_id for e in catalogue() if "cuda" in e.families]
    assert [line.split()[0] for line in out[1:-1]] == cuda and "OFFLOAD-NODE-001" in cuda
    assert out[-1] == f"{len(cuda)} rule(s); q38 explain RULE-ID for one rule's full text"
    assert main(["rules", "--family", "cpu-kernel", "--json"]) == 0
    cpu = [d["id"] for d in json.loads(capsys.readouterr().out)]
    assert cpu == list(dict.fromkeys(r.rule_id for r in ALL_RULES if r.ep == "cpu")) and "GQA-CPU-001" in cpu
    assert main(["rules", "--family", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("q38 rules: error: --family 'nope': no such family; one of ")


@pytest.mark.parametrize("rule_id", _IDS)
def test_explain_prints_every_rules_full_text(rule_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", rule_id.lower()]) == 0
    out = capsys.readouterr().out
    e = entry(rule_id)
    assert e is not None
    assert out.startswith(f"{rule_id} ({e.name}): {e.summary}\n")
    flat = " ".join(out.split())
    for text in (e.source, e.example, e.explanation, e.fix, e.enforced):
        assert " ".join(text.split()) in flat, (rule_id, text)
    assert "What ORT does:" in out and "Violating example:" in out and "Fix:" in out


def test_explain_an_unknown_rule_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "ORT-SCHEMA-999"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "q38 explain: error: unknown rule 'ORT-SCHEMA-999' (q38 rules lists them)\n"
    assert main(["explain", "QSA-DSA-001", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == entry("QSA-DSA-001").to_dict()  # type: ignore[union-attr]


# One edit: a rule appended to session_config.RULES in a copy of the sources, nothing else touched.
_NEW_RULE = """
    Rule("SESSION-CFG-900", "no config key is named session.forbidden (a rule added in one edit)",
         "tests/unit/contracts/test_rule_catalogue.py", "cpu-session", "session-config",
         lambda entries: [Violation("SESSION-CFG-900", "forbidden key")] if "session.forbidden" in entries else [],
         family=FAMILY, doc=RuleDoc("ORT refuses the key session.forbidden.", '"session.forbidden": "1"', "Drop the key."),
         examples=Examples({"session.allowed": "1"}, {"session.forbidden": "1"})),
"""
_PROBE = """
import importlib.util, io, json, sys, contextlib
from q38.cli import main
from q38.report.sarif import sarif_log
from q38.report.results import CheckResults
from contracts.runner import CheckReport

out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert main(["rules", "--json"]) == 0
listed = {d["id"]: d for d in json.loads(out.getvalue())}
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert main(["explain", "SESSION-CFG-900"]) == 0
results = CheckResults(CheckReport(package="p", ort_version="1.32.0"))
sarif = [d["id"] for d in sarif_log(results)["runs"][0]["tool"]["driver"]["rules"]]
sys.path.append(sys.argv[1])  # the real tests/ (support.rule_cases), after the edited sources
spec = importlib.util.spec_from_file_location("coverage", sys.argv[2])
cov = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cov)
cov.test_every_rule_id_has_cases()
cov.test_each_rule_accepts_and_rejects_evaluated_directly("SESSION-CFG-900", None)
print(json.dumps({"listed": listed["SESSION-CFG-900"], "explain": out.getvalue(), "sarif": "SESSION-CFG-900" in sarif,
                  "cases": "SESSION-CFG-900" in cov.CASES}))
"""


# It copies contracts/ and runs the copy in a child: under mutmut the sources are its mutation
# trampolines, which run only inside mutmut's own process (nox -s mutation's stats died on it).
@pytest.mark.skipif("MUTANT_UNDER_TEST" in os.environ, reason="copies the sources; under mutmut they are trampolines")
def test_a_rule_added_in_one_edit_appears_everywhere(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    for package in ("q38", "contracts"):
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    module = tmp_path / "contracts" / "session_config.py"
    text = module.read_text(encoding="utf-8")
    head = "RULES: tuple[Rule, ...] = (\n"
    assert text.count(head) == 1
    module.write_text(text.replace(head, head + _NEW_RULE.lstrip("\n")), encoding="utf-8")
    if "Examples" not in text.split(head)[0]:
        module.write_text(module.read_text().replace("from contracts._rule import ", "from contracts._rule import Examples, "))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-P", "-c", _PROBE, str(root / "tests"), str(Path(__file__).with_name("test_rule_coverage.py"))],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["listed"]["explanation"] == "ORT refuses the key session.forbidden."
    assert found["listed"]["families"] == ["session-config"] and found["listed"]["fix"] == "Drop the key."
    assert "SESSION-CFG-900 (SessionCfg900): no config key is named session.forbidden" in found["explain"]
    assert found["sarif"] and found["cases"]
