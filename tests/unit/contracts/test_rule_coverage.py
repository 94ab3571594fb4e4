"""Every contract rule id has an accepted and a rejected case, evaluated (issue 16, deliverable 4).

Invariants guarded:
- The rule ids of ``contracts.runner.ALL_RULES`` and of the offload node checks are exactly the
  ids ``support.rule_cases`` covers (a new rule without cases fails here).
- A graph rule declares its examples (``GraphExamples``: models in ONNX text, every per-version
  record the same) or keeps a case in ``support.rule_cases``, never both: a graph rule with
  neither fails here.
- For each id, the accepted input yields no violation of that id and the rejected input at least
  one, evaluated directly on the rule (graph rules incl. ``cuda-only`` and ``run-time`` ones, their
  declared ONNX text parsed and run through ``Rule.check_graph``; session-config, environment and
  config rules) or through ``check_package`` on an edited package copy (package rules), for the
  onnxruntime version the case (or the declaration) names.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.offload_node_cases import NEGATIVES
from support.offload_node_kit import FORMATS, offload_model
from support.rule_cases import CASES, RuleCase

from contracts._rule import GraphExamples
from contracts.offload_nodes import NODE_CHECKS, check_offload_nodes
from contracts.runner import ALL_RULES, check_package

_REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"


def test_every_rule_id_has_cases() -> None:
    assert sorted({r.rule_id for r in ALL_RULES}) == sorted(CASES)


@pytest.mark.parametrize("rule_id", sorted({r.rule_id for r in ALL_RULES if r.kind == "graph"}))
def test_every_graph_rule_declares_its_examples_or_keeps_a_case(rule_id: str) -> None:
    declared = [r.examples for r in ALL_RULES if r.rule_id == rule_id]
    if any(isinstance(examples, GraphExamples) for examples in declared):
        assert all(examples == declared[0] for examples in declared), "per-version records declare different examples"
        assert CASES[rule_id].kind == "graph"  # read from the declaration (rule_cases raises on a second case)
    else:
        assert all(examples is None for examples in declared), "a graph rule's examples are GraphExamples"
        assert rule_id in CASES, f"{rule_id}: no declared GraphExamples and no case in support.rule_cases"


def _ids(case: RuleCase, value: object) -> set[str]:
    rules = [r for r in ALL_RULES if r.rule_id == case.rule_id and r.applies(case.version)]
    assert rules, f"{case.rule_id} has no rule for onnxruntime {case.version}"
    found: set[str] = set()
    for rule in rules:
        if case.kind == "graph":
            model, entries = value  # type: ignore[misc]
            found |= {v.rule_id for v in rule.check_graph(model, entries)}
        elif case.kind == "environment":
            env, entries = value  # type: ignore[misc]
            found |= {v.rule_id for v in rule.check_environment(env, entries)}
        elif case.kind == "session":
            found |= {v.rule_id for v in rule.check_session(value)}  # type: ignore[arg-type]
        else:
            found |= {v.rule_id for v in rule.check_config(value)}  # type: ignore[arg-type]
    return found


_DIRECT = sorted(k for k, c in CASES.items() if c.kind in {"graph", "session", "environment"})


@pytest.mark.parametrize("rule_id", _DIRECT)
def test_each_rule_accepts_and_rejects_evaluated_directly(rule_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[rule_id]
    for name, value in (case.env() if case.env else {}).items():
        monkeypatch.setenv(name, value)
    assert case.reported not in _ids(case, case.accepted()), "accepted case rejected"
    assert case.reported in _ids(case, case.rejected()), "rejected case accepted"


@pytest.mark.parametrize("rule_id", sorted(k for k, c in CASES.items() if c.kind == "config"))
def test_each_config_rule_accepts_and_rejects(rule_id: str, tiny_cpu_package: Path) -> None:
    case = CASES[rule_id]
    doc = json.loads((tiny_cpu_package / "genai_config.json").read_text())
    assert rule_id not in _ids(case, case.accepted(doc)), "accepted case rejected"
    assert rule_id in _ids(case, case.rejected(doc)), "rejected case accepted"


@pytest.fixture(scope="module")
def multidraft_package(tiny_bundles: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.cli import main

    out = tmp_path_factory.mktemp("multi") / "pkg"
    assert main(["build", str(out), "--target", str(tiny_bundles / "target"), "--head", str(tiny_bundles / "head"),
                 "--prefill", str(tiny_bundles / "prefill"), "--multidraft"]) == 0  # fmt: skip
    return out


@pytest.mark.parametrize("rule_id", sorted(k for k, c in CASES.items() if c.kind == "package"))
def test_each_package_rule_accepts_and_rejects(rule_id: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    case = CASES[rule_id]
    if rule_id == "PKG-READ-001" and os.geteuid() == 0:
        pytest.skip("root reads every file; tests/unit/faults/test_unreadable.py checks it as another user")
    source = {"v12b": lambda: request.getfixturevalue("tiny_cpu_package"), "genai": lambda: _REAL / "int4-cpu-mtp",
              "faithful": lambda: request.getfixturevalue("tiny_faithful_package"),
              "multidraft": lambda: request.getfixturevalue("multidraft_package")}[case.base]()  # fmt: skip
    if not source.is_dir():
        pytest.skip("no real fixture")
    for name, edit, present in (("accepted", case.accepted, False), ("rejected", case.rejected, True)):
        pkg = tmp_path / name / "pkg"
        shutil.copytree(source, pkg, symlinks=True)
        edit(pkg)
        ids = {v.rule_id for v in check_package(pkg, ort_version=case.version).violations}
        assert (rule_id in ids) == present, (name, sorted(ids))
        assert ids <= {r.rule_id for r in ALL_RULES}, f"ids without a Rule record: {sorted(ids)}"


def test_every_offload_node_check_accepts_a_valid_node_and_rejects_its_negative() -> None:
    covered = {row[3] for row in NEGATIVES}
    assert {rule_id for rule_id, *_ in NODE_CHECKS} <= covered
    for fmt in FORMATS:  # the accepted case of every node check: a valid node of each format
        assert check_offload_nodes(offload_model(fmt), {"session.moe.offload.mode": "required"}, cuda=True) == []
