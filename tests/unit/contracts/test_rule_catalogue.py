"""The rule catalogue behind ``q38 rules`` / ``q38 explain`` and SARIF's rule descriptors (issue 26).

Invariants guarded:
- The catalogue has one entry per registered rule id (``contracts.runner.ALL_RULES``), and each
  entry's facts are the rule records' own: summary, enforcement, surface, EP, every record's
  source, and exactly the mirrored onnxruntime versions some record of the id applies to.
- Every rule has its explanation, violating example and fix: building the catalogue refuses a
  rule without documentation, documentation for no rule, and an empty field.
- ``q38 rules --json`` prints exactly the registry, each rule with its documentation verbatim;
  each rule's name is its id in PascalCase; ``--family`` filters (``cpu-kernel``: exactly the
  rules of the CPU EP; an unknown family exits 2 with one line); ``q38 explain`` prints every
  id's full text and exits 2 with one line for an unknown id.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from contracts._rule import OrtVersions, Rule
from contracts.catalogue import FAMILIES, build_catalogue, catalogue, entry, family_of, matches
from contracts.citations import public_source, public_text
from contracts.rule_docs import DOCS, RuleDoc
from contracts.runner import ALL_RULES
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
        assert e.family == family_of(e.rule_id) != "other" and e.family in FAMILIES
        assert e.explanation.strip() and e.example.strip() and e.fix.strip(), e.rule_id


def test_every_rule_is_documented_and_no_documentation_is_orphaned() -> None:
    assert set(DOCS) == set(_IDS)
    for rule_id, doc in DOCS.items():
        for name in ("explanation", "example", "fix"):
            assert getattr(doc, name).strip(), f"{rule_id} lacks its {name}"


def test_building_the_catalogue_refuses_a_rule_without_documentation() -> None:
    extra = Rule("NEW-RULE-001", "a rule nobody documented", "somewhere", "cpu-session", "graph", lambda *a: [])
    with pytest.raises(ValueError, match=r"undocumented \['NEW-RULE-001'\]"):
        build_catalogue((*ALL_RULES, extra), DOCS)
    with pytest.raises(ValueError, match=r"documenting no rule \['NEW-RULE-001'\]"):
        build_catalogue(ALL_RULES, {**DOCS, "NEW-RULE-001": RuleDoc("x", "y", "z")})
    for name in ("explanation", "example", "fix"):
        docs = {**DOCS, "ORT-SCHEMA-003": dataclasses.replace(DOCS["ORT-SCHEMA-003"], **{name: "  "})}
        with pytest.raises(ValueError, match=f"ORT-SCHEMA-003: documentation has no {name}"):
            build_catalogue(ALL_RULES, docs)


def test_selectors_match_ids_and_prefixes_case_insensitively() -> None:
    assert matches("ORT-SCHEMA-001", ["ORT-SCHEMA-001"]) and matches("ORT-SCHEMA-001", ["ort-schema"])
    assert matches("ORT-SCHEMA-011", ["ORT-SCHEMA-01"]) and not matches("ORT-SCHEMA-001", ["ORT-SCHEMA-01"])
    assert not matches("ORT-SHAPE-001", ["ORT-SCHEMA"]) and matches("QSA-DSA-001", ["ALL"])
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
    """Each listed rule's explanation (its citations made public), violating example and fix are its RuleDoc's."""
    assert main(["rules", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == len(DOCS)
    for d in listed:
        doc = DOCS[d["id"]]
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
