"""The rule catalogue: one entry per rule id, generated from the rule declarations themselves.

``q38 rules``, ``q38 explain``, the SARIF ``reportingDescriptor`` s and ``docs/rules.md`` all read
this catalogue. A rule is declared once, in its family module (``contracts.runner.RULE_MODULES``):
its :class:`~contracts._rule.Rule` records (a rule built per mirrored onnxruntime version is several
records of one id) carry the summary, ORT source, where ORT enforces it, the surface it checks, the
EP it concerns, the versions it exists in (the union of the records' spans), its family and its
:class:`~contracts._rule.RuleDoc` (what ORT does and the message it prints, a violating example,
the fix, the default level).

:func:`build_catalogue` refuses declarations that disagree (the records of one id with different
enforcement, surface, EP, family or documentation, an empty documentation field): the test suite
builds it, so such a rule cannot land.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from contracts._rule import (
    Enforced,
    Ep,
    GraphExample,
    GraphExamples,
    Rule,
    RuleKind,
    Severity,
    parse_version,
)
from contracts.citations import public_source, public_text

__all__ = ["RuleEntry", "build_catalogue", "catalogue", "entry", "families", "family_of", "markdown", "matches"]

def families() -> tuple[str, ...]:
    """Every family name, in catalogue order (each family module's ``FAMILY``)."""
    return tuple(dict.fromkeys(e.family for e in catalogue()))


def family_of(rule_id: str) -> str:
    """The family of ``rule_id``: its catalogue entry's, else that of the registered ids of its stem.

    The stem is the id up to its last dash (``OFFLOAD-NODE-C99`` -> ``OFFLOAD-NODE-``, the stem of
    ``OFFLOAD-NODE-001``: ``offload``); ``other`` when no registered id has that stem.
    """
    by_id = {e.rule_id: e.family for e in catalogue()}
    if rule_id in by_id:
        return by_id[rule_id]
    stems = {known.rsplit("-", 1)[0] + "-": name for known, name in reversed(by_id.items())}
    stem = rule_id.rsplit("-", 1)[0] + "-"
    return stems.get(stem, "other") if "-" in rule_id else "other"


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
    ``families``: the rule's family first, then ``cpu-kernel`` / ``cuda`` / ``run-time`` tags;
    ``graph_examples``: a graph rule's declared passing and violating models (ONNX text), shown by
    ``docs/rules.md`` (``None`` where the rule declares none).
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
    graph_examples: GraphExamples | None = field(default=None, compare=False)

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


def build_catalogue(rules: Iterable[Rule]) -> tuple[RuleEntry, ...]:
    """One entry per rule id of ``rules``, in registry order, from the records' declarations.

    Raises:
        ValueError: the records of one id disagree on what they are (enforcement, surface, EP,
            family, documentation), or a documentation field is empty.

    """
    by_id: dict[str, list[Rule]] = {}
    for rule in rules:
        by_id.setdefault(rule.rule_id, []).append(rule)
    out = []
    for rule_id, records in by_id.items():
        first = records[0]
        for other in records[1:]:
            if (other.enforced, other.kind, other.ep, other.family) != (first.enforced, first.kind, first.ep, first.family):
                raise ValueError(f"{rule_id}: its per-version records disagree on enforcement / surface / EP / family")
            if other.doc != first.doc:
                raise ValueError(f"{rule_id}: its per-version records carry different documentation")
        doc = first.doc
        if not first.family.strip():
            raise ValueError(f"{rule_id}: declared without a family")
        for field_name in ("explanation", "example", "fix"):
            if not str(getattr(doc, field_name)).strip():
                raise ValueError(f"{rule_id}: documentation has no {field_name}")
        since, until = _span(records)
        out.append(RuleEntry(
            rule_id=rule_id, name=_name(rule_id), summary=first.summary,
            source=public_source("; ".join(dict.fromkeys(r.source for r in records))),
            enforced=first.enforced, kind=first.kind, ep=first.ep, severity=doc.severity,
            families=_tags(first.family, first.enforced, first.ep), since=since, until=until,
            explanation=public_text(doc.explanation), example=doc.example, fix=doc.fix,
            graph_examples=first.examples if isinstance(first.examples, GraphExamples) else None,
        ))  # fmt: skip
    return tuple(out)


@lru_cache(maxsize=1)
def catalogue() -> tuple[RuleEntry, ...]:
    """Every registered rule (``contracts.runner.ALL_RULES``), documented, one entry per id."""
    from contracts.runner import ALL_RULES  # deferred: pulls in numpy (contracts.shapes)

    return build_catalogue(ALL_RULES)


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


def markdown(entries: Sequence[RuleEntry] | None = None) -> str:
    """``docs/rules.md``: every rule of the catalogue in full, by family (generated; never edited by hand)."""
    entries = catalogue() if entries is None else entries
    lines = [
        "# Contract rules",
        "",
        "Generated from the rule declarations (`contracts/<family>.py`) by",
        "`python -m contracts.catalogue > docs/rules.md`; `q38 rules` lists them, `q38 explain RULE-ID`",
        "prints one. Do not edit by hand: tests/unit/contracts/test_rule_catalogue.py compares this file.",
        "",
        "| rule | severity | families | ORT | enforced | summary |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        summary = e.summary.replace("|", "\\|")
        lines.append(f"| [{e.rule_id}](#{e.rule_id.lower()}) | {e.severity} | {', '.join(e.families)} | {e.versions} | "
                     f"{e.enforced} | {summary} |")  # fmt: skip
    for e in entries:
        lines += [
            "", f"## {e.rule_id}", "", f"{e.summary}", "",
            f"- severity: {e.severity}; families: {', '.join(e.families)}; surface: {e.kind}; EP: {e.ep}",
            f"- enforced: {e.enforced}; onnxruntime versions: {e.versions}",
            f"- ORT source: {e.source}", "",
            f"**What ORT does.** {e.explanation}", "",
            f"**Violating example.** `{e.example}`", "",
            f"**Fix.** {e.fix}",
        ]  # fmt: skip
        if e.graph_examples is not None:
            lines += _graph_examples_markdown(e.graph_examples)
    return "\n".join(lines) + "\n"


def _graph_examples_markdown(examples: GraphExamples) -> list[str]:
    """The lines of a graph rule's declared examples: each model's ONNX text, and its entries."""

    def one(label: str, example: GraphExample) -> list[str]:
        entries = "".join(f", `{k}={v}`" for k, v in example.entries.items())
        return ["", f"{label}{entries}:", "", "```", example.model, "```"]

    return ["", f"**Examples** (ONNX text, onnxruntime {examples.ort_version}).",
            *one("Passing", examples.passing), *one("Violating", examples.violating)]  # fmt: skip


if __name__ == "__main__":  # python -m contracts.catalogue > docs/rules.md
    import sys

    sys.stdout.write(markdown())
