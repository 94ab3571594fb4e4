"""Every rule id ``q38 check`` can report has a Rule record (issue 26 follow-up).

A result whose id has no record reaches SARIF without a rule descriptor, ``q38 explain`` does not
know it and ``--ignore`` cannot name it. Invariants guarded:
- Static: every rule-id literal in ``contracts/`` and ``q38/`` (a string of a known family's
  shape: ``CFG-SURFACE-002``, ``OFFLOAD-NODE-C07``, ...) is a registered id of
  ``contracts.runner.ALL_RULES``, bar the listed ids no Violation carries. The scanner itself
  is shown to catch an unregistered ``Violation("ID", ...)`` literal.
- Dynamic: the ids the runner's own entry points (``check_session_config``,
  ``check_environment``, ``check_graph`` on CPU and CUDA, ``check_genai_config``) emit over every
  accepted and rejected rule case and every offload node negative (mode required and auto) are
  registered (package cases: test_rule_coverage.py asserts it on ``check_package``).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from support.offload_node_cases import NEGATIVES
from support.offload_node_kit import offload_model
from support.rule_cases import CASES

from contracts.catalogue import family_of
from contracts.config_surface import check_genai_config
from contracts.runner import ALL_RULES, check_environment, check_graph, check_session_config

_ROOT = Path(__file__).resolve().parents[3]
_REGISTERED = frozenset(r.rule_id for r in ALL_RULES)
_ID = re.compile(r"[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\Z")
# Rule-id-shaped literals no Violation carries, and why.
_NOT_EMITTED = {
    "OFFLOAD-NODE-SM80": "offload_eligibility's reason for a device below SM80; check never passes a compute capability",
}


def _rule_id_literals(source: str) -> set[str]:
    """The string constants of ``source`` shaped like a rule id of a known family."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        value = node.value if isinstance(node, ast.Constant) else None
        if isinstance(value, str) and _ID.match(value) and family_of(value) != "other":
            found.add(value)
    return found


def test_the_scanner_finds_an_unregistered_violation_literal() -> None:
    source = 'found.append(Violation("CFG-SURFACE-009", "x"))\nRULE = "OFFLOAD-NODE-C99"\nname = "ORT-SCHEMA"\n'
    assert _rule_id_literals(source) - _REGISTERED == {"CFG-SURFACE-009", "OFFLOAD-NODE-C99"}


def test_every_rule_id_literal_in_the_code_is_registered() -> None:
    literals: dict[str, list[str]] = {}
    for package in ("contracts", "q38"):
        for path in sorted((_ROOT / package).rglob("*.py")):
            for rule_id in _rule_id_literals(path.read_text(encoding="utf-8")):
                literals.setdefault(rule_id, []).append(path.relative_to(_ROOT).as_posix())
    unregistered = {k: v for k, v in literals.items() if k not in _REGISTERED and k not in _NOT_EMITTED}
    assert not unregistered, f"rule ids without a Rule record in contracts.runner.ALL_RULES: {unregistered}"
    for rule_id in _NOT_EMITTED:  # the exemptions stay true: still in the code, still unregistered
        assert rule_id in literals and rule_id not in _REGISTERED, rule_id


def _emitted(kind: str, value: object, version: str) -> set[str]:
    if kind == "session":
        return {v.rule_id for v in check_session_config(value, ort_version=version)}  # type: ignore[arg-type]
    if kind == "environment":
        env, entries = value  # type: ignore[misc]
        return {v.rule_id for v in check_environment(env, entries=entries, ort_version=version)}
    model, entries = value  # type: ignore[misc]
    eps = frozenset({"cpu", "cuda"})
    return {v.rule_id for v in check_graph(model, entries=entries, eps=eps, ort_version=version)}


@pytest.mark.parametrize("rule_id", sorted(k for k, c in CASES.items() if c.kind in {"graph", "session", "environment"}))
def test_the_ids_emitted_over_each_rule_case_are_registered(rule_id: str) -> None:
    case = CASES[rule_id]
    for value in (case.accepted(), case.rejected()):
        assert _emitted(case.kind, value, case.version) <= _REGISTERED


def test_the_ids_emitted_over_the_config_cases_are_registered(tiny_cpu_package: Path) -> None:
    doc = json.loads((tiny_cpu_package / "genai_config.json").read_text())
    for case in (c for c in CASES.values() if c.kind == "config"):
        for value in (case.accepted(doc), case.rejected(doc)):
            assert {v.rule_id for v in check_genai_config(value)} <= _REGISTERED, case.rule_id


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_the_ids_emitted_over_the_offload_node_negatives_are_registered(mode: str) -> None:
    seen = set()
    for name, fmt, kwargs, expected, _reason in NEGATIVES:
        model = offload_model(fmt, **kwargs)
        ids = _emitted("graph", (model, {"session.moe.offload.mode": mode}), "1.32.0")
        assert expected in ids and ids <= _REGISTERED, (name, sorted(ids))
        seen.add(expected)
    assert len(seen) == 20  # C01..C18, MOE, SHARED: the negatives cover each per-check id
