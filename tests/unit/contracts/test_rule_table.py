"""The rule table itself: every rule is well-formed and exists for exactly the versions it mirrors.

Invariants guarded:
- Every rule of ``contracts.runner.ALL_RULES`` names an enforcement, a kind and an EP of the
  documented vocabularies (the runner filters on them: a misspelt ``cuda-only`` would run a CUDA
  rule on CPU graphs), and a non-empty summary and source.
- Each rule applies to at least one mirrored onnxruntime version (no dead span), and no version
  is matched by two rules of one id (a per-version rule is bound to one dump each).
- ``version_spans`` splits the committed dumps into adjacent spans, ``since`` clipping them
  (a span ending where ``since`` starts is dropped, not kept empty).
- A rule built per version checks with its own version's registry: the 1.31.1 GatedDeltaNet
  schema refuses float16 decay where the 1.32.0 one accepts it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import get_args

from onnx import TensorProto as TP
from support.contracts_testkit import gdn_model

from contracts._rule import Enforced, Ep, OrtVersions, RuleKind
from contracts._versions import version_spans
from contracts.runner import ALL_RULES, check_graph
from contracts.schema_registry import available_versions


def test_every_rule_uses_the_documented_vocabularies() -> None:
    for rule in ALL_RULES:
        assert rule.enforced in get_args(Enforced), rule
        assert rule.kind in get_args(RuleKind), rule
        assert rule.ep in get_args(Ep), rule
        assert rule.summary.strip() and rule.source.strip(), rule


def test_every_rule_applies_to_some_version_and_each_version_to_one_rule_per_id() -> None:
    versions = available_versions()
    per_id: dict[str, list[list[str]]] = defaultdict(list)
    for rule in ALL_RULES:
        matched = [v for v in versions if rule.applies(v)]
        assert matched, f"{rule.rule_id} {rule.ort_versions} applies to none of {versions}"
        per_id[rule.rule_id].append(matched)
    for rule_id, spans in per_id.items():
        flat = [v for span in spans for v in span]
        assert len(flat) == len(set(flat)), (rule_id, spans)


def test_version_spans_split_the_dumps_and_clip_at_since() -> None:
    assert list(available_versions()) == ["1.31.1", "1.32.0"]
    assert version_spans() == [("1.31.1", OrtVersions(None, "1.32.0")), ("1.32.0", OrtVersions("1.32.0", None))]
    assert version_spans("1.32.0") == [("1.32.0", OrtVersions("1.32.0", None))]
    assert version_spans("1.31.5") == [("1.31.1", OrtVersions("1.31.5", "1.32.0")), ("1.32.0", OrtVersions("1.32.0", None))]
    assert version_spans("1.31.1") == [("1.31.1", OrtVersions("1.31.1", "1.32.0")), ("1.32.0", OrtVersions("1.32.0", None))]
    assert version_spans("1.33.0") == [("1.32.0", OrtVersions("1.33.0", None))]


def test_per_version_rules_check_with_their_own_versions_registry() -> None:
    model = gdn_model(decay=TP.FLOAT16)
    by_version = {}
    for version in available_versions():
        rules = [r for r in ALL_RULES if r.rule_id == "ORT-SCHEMA-002" and r.applies(version)]
        assert len(rules) == 1
        by_version[version] = [v.rule_id for v in rules[0].check(model, {})]
    assert by_version == {"1.31.1": ["ORT-SCHEMA-002"], "1.32.0": []}


def test_a_version_older_than_every_dump_is_checked_with_the_oldest_schemas() -> None:
    """onnxruntime older than the oldest mirrored dump still gets the schema rules, judged by that oldest dump."""
    model = gdn_model(decay=TP.FLOAT16)
    assert [v.rule_id for v in check_graph(model, ort_version="1.30.0")] == ["ORT-SCHEMA-002"]
    assert [v.rule_id for v in check_graph(model, ort_version="1.32.0")] == []
