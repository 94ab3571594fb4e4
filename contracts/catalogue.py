"""The rule catalogue: one entry per rule id, built from the rule records themselves.

``q38 rules``, ``q38 explain`` and the SARIF ``reportingDescriptor`` s all read this catalogue, so a
rule is described in exactly one place. An entry joins two records that live next to each other:

* the :class:`~contracts._rule.Rule` s of ``contracts.runner.ALL_RULES`` with that id (a rule built
  per mirrored onnxruntime version is several records of one id): summary, ORT source, where ORT
  enforces it, the surface it checks, the EP it concerns and the versions it exists in (the union
  of the records' spans);
* its :class:`~contracts.rule_docs.RuleDoc` (``contracts.rule_docs.DOCS``): the long explanation
  (what ORT does and the message it prints), a violating example, the fix and the default level.

:func:`catalogue` refuses a registry where the two disagree (a rule without its documentation, a
documentation entry for no rule): the test suite builds it, so such a rule cannot land.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from contracts._rule import Enforced, Ep, Rule, RuleKind, Severity, parse_version
from contracts.rule_docs import DOCS

if TYPE_CHECKING:
    from contracts.rule_docs import RuleDoc

__all__ = ["FAMILIES", "RuleEntry", "build_catalogue", "catalogue", "entry", "family_of", "matches"]

# Rule-id prefix -> family (the longest matching prefix wins). A family groups the rules of one
# surface of ORT (an op, a config section, the file layout); JUnit has one test case per
# (graph, family), and ``q38 rules --family`` filters by it.
_FAMILY_PREFIXES: tuple[tuple[str, str], ...] = (
    ("SESSION-CFG-", "session-config"),
    ("OFFLOAD-", "offload"),
    ("ORT-MODEL-", "model-load"),
    ("ORT-OPSET-", "schema"),
    ("ORT-SCHEMA-", "schema"),
    ("ORT-SHAPE-", "schema"),
    ("QSA-", "qsa"),
    ("CCONV-", "causal-conv"),
    ("VCCONV-", "causal-conv"),
    ("GDN-", "gated-delta-net"),
    ("HC-", "hyper-connection"),
    ("ORT-KERNEL-", "kernel"),
    ("CUDA-FALLBACK-", "cuda-kernel"),
    ("GQA-", "attention"),
    ("QMOE-", "qmoe"),
    ("CFG-GRAPH-", "config-graphs"),
    ("CFG-", "config"),
    ("PKG-FIT-", "fit"),
    ("PKG-", "layout"),
    ("PATH-", "layout"),
)
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(f for _, f in _FAMILY_PREFIXES))
"""Every family name, in catalogue order."""


def family_of(rule_id: str) -> str:
    """The family of ``rule_id`` (its longest known prefix); ``other`` for an unknown id."""
    best = ""
    family = "other"
    for prefix, name in _FAMILY_PREFIXES:
        if rule_id.startswith(prefix) and len(prefix) > len(best):
            best, family = prefix, name
    return family


def _tags(family: str, enforced: str, ep: str) -> tuple[str, ...]:
    """The families a rule belongs to: its own, plus ``cpu-kernel`` / ``cuda`` by where it bites."""
    tags = [family]
    if ep == "cpu":
        tags.append("cpu-kernel")
    if enforced == "cuda-only" or ep == "cuda":
        tags.append("cuda")
    if enforced == "run-time":
        tags.append("run-time")
    return tuple(tags)


@dataclass(frozen=True)
class RuleEntry:
    """One rule of the catalogue (every field is read from the rule's own records).

    ``since`` / ``until``: the onnxruntime versions the rule exists in (``None``: unbounded);
    ``families``: the rule's family first, then ``cpu-kernel`` / ``cuda`` / ``run-time`` tags.
    """

    rule_id: str
    name: str
    summary: str
    source: str
    enforced: Enforced
    kind: RuleKind
    ep: Ep
    severity: Severity
    families: tuple[str, ...]
    since: str | None
    until: str | None
    explanation: str
    example: str
    fix: str

    @property
    def family(self) -> str:
        """The rule's own family (the first of ``families``)."""
        return self.families[0]

    @property
    def versions(self) -> str:
        """The ORT versions as one phrase: ``all``, ``>= 1.32.0``, ``< 1.32.0``, ``>= a, < b``."""
        if self.since is None and self.until is None:
            return "all"
        parts = ([f">= {self.since}"] if self.since else []) + ([f"< {self.until}"] if self.until else [])
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The entry as ``q38 rules --json`` prints it."""
        return {
            "id": self.rule_id,
            "name": self.name,
            "summary": self.summary,
            "source": self.source,
            "enforced": self.enforced,
            "surface": self.kind,  # the rules output names a rule's kind "surface"
            "ep": self.ep,
            "severity": self.severity,
            "families": list(self.families),
            "ort_versions": {"since": self.since, "until": self.until},
            "explanation": self.explanation,
            "example": self.example,
            "fix": self.fix,
        }


def _name(rule_id: str) -> str:
    """A SARIF-style PascalCase name from the id (``ORT-SCHEMA-001`` -> ``OrtSchema001``)."""
    return "".join(part.capitalize() for part in rule_id.split("-"))


def _span(rules: Sequence[Rule]) -> tuple[str | None, str | None]:
    """The union of adjacent version spans (a rule built per version covers them all)."""
    since = [r.ort_versions.since for r in rules]
    until = [r.ort_versions.until for r in rules]
    lo = None if None in since else min((s for s in since if s), key=parse_version)
    hi = None if None in until else max((u for u in until if u), key=parse_version)
    return lo, hi


def build_catalogue(rules: Iterable[Rule], docs: Mapping[str, RuleDoc]) -> tuple[RuleEntry, ...]:
    """Join ``rules`` with ``docs`` (rule id -> RuleDoc), one entry per id, in registry order.

    Raises:
        ValueError: a rule id has no documentation, documentation names no rule, a doc field is
            empty, or the records of one id disagree on what they are.

    """
    by_id: dict[str, list[Rule]] = {}
    for rule in rules:
        by_id.setdefault(rule.rule_id, []).append(rule)
    missing = sorted(set(by_id) - set(docs))
    orphans = sorted(set(docs) - set(by_id))
    if missing or orphans:
        raise ValueError(f"rule documentation out of step: undocumented {missing}, documenting no rule {orphans}")
    out = []
    for rule_id, records in by_id.items():
        first = records[0]
        for other in records[1:]:
            if (other.enforced, other.kind, other.ep) != (first.enforced, first.kind, first.ep):
                raise ValueError(f"{rule_id}: its per-version records disagree on enforcement / surface / EP")
        doc = docs[rule_id]
        for field_name in ("explanation", "example", "fix"):
            if not str(getattr(doc, field_name)).strip():
                raise ValueError(f"{rule_id}: documentation has no {field_name}")
        since, until = _span(records)
        out.append(RuleEntry(
            rule_id=rule_id, name=_name(rule_id), summary=first.summary,
            source="; ".join(dict.fromkeys(r.source for r in records)),
            enforced=first.enforced, kind=first.kind, ep=first.ep, severity=doc.severity,
            families=_tags(family_of(rule_id), first.enforced, first.ep), since=since, until=until,
            explanation=doc.explanation, example=doc.example, fix=doc.fix,
        ))  # fmt: skip
    return tuple(out)


@lru_cache(maxsize=1)
def catalogue() -> tuple[RuleEntry, ...]:
    """Every registered rule (``contracts.runner.ALL_RULES``), documented, one entry per id."""
    from contracts.runner import ALL_RULES  # deferred: pulls in numpy (contracts.shapes)

    return build_catalogue(ALL_RULES, DOCS)


def entry(rule_id: str) -> RuleEntry | None:
    """The catalogue entry of ``rule_id`` (exact, case-insensitive), or ``None``."""
    wanted = rule_id.strip().upper()
    return next((e for e in catalogue() if e.rule_id == wanted), None)


def matches(rule_id: str, selectors: Iterable[str]) -> bool:
    """Whether ``rule_id`` is selected by any of ``selectors`` (case-insensitive).

    A selector is an exact id, an id prefix (``ORT-SCHEMA`` selects ``ORT-SCHEMA-001``,
    ruff-style), or ``ALL``.
    """
    rid = rule_id.upper()
    for sel in selectors:
        s = sel.strip().upper()
        if s == "ALL" or rid == s or rid.startswith(s):
            return True
    return False
