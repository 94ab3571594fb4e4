"""Rules that exist once per mirrored onnxruntime version (one per committed schema dump).

A check that reads version-specific facts (the registry, the CPU kernels, a constructor that
changed between releases) is written as ``check(model, entries, version)``; :func:`per_version`
turns it into one :class:`~contracts._rule.Rule` per dump, each bound to its version span, so the
runner's version filter picks the right one and every rule keeps the ``(model, entries)`` form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from contracts._graph import ModelLike
from contracts._rule import (
    Enforced,
    Ep,
    GraphExamples,
    ModelCheck,
    OrtVersions,
    Rule,
    RuleDoc,
    RuleKind,
    Violation,
    parse_version,
)
from contracts.schema_registry import available_versions

__all__ = ["per_version", "version_spans"]


def version_spans(since: str | None = None) -> list[tuple[str, OrtVersions]]:
    """(dump version, the ORT versions it mirrors), oldest first; ``since`` drops older spans."""
    versions = available_versions()
    out = []
    for i, version in enumerate(versions):
        lo = version if i > 0 else None
        hi = versions[i + 1] if i + 1 < len(versions) else None
        if since is not None and hi is not None and parse_version(hi) <= parse_version(since):
            continue
        if since is not None and (lo is None or parse_version(lo) < parse_version(since)):
            lo = since
        out.append((version, OrtVersions(since=lo, until=hi)))
    return out


def _bind(check: Callable[[ModelLike, Mapping[str, str], str], list[Violation]], version: str) -> ModelCheck:
    def bound(model: ModelLike, entries: Mapping[str, str]) -> list[Violation]:
        return check(model, entries, version)

    return bound


def per_version(rule_id: str, summary: str, source: str, enforced: Enforced, kind: RuleKind,
                check: Callable[[ModelLike, Mapping[str, str], str], list[Violation]], *, ep: Ep = "any",
                since: str | None = None, family: str, doc: RuleDoc,
                examples: GraphExamples | None = None) -> tuple[Rule, ...]:  # fmt: skip
    """One Rule per dump span (from ``since`` on) running ``check(model, entries, version)``.

    The records share one declaration: its ``family``, ``doc`` and ``examples`` (see
    :class:`~contracts._rule.Rule`).
    """
    return tuple(Rule(rule_id, summary, source, enforced, kind, _bind(check, version), span, ep, family=family, doc=doc,
                      examples=examples)
                 for version, span in version_spans(since))  # fmt: skip
