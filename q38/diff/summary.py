"""What changed in each graph, in a line, and the order a reviewer reads a graph's differences in.

A rewrite such as ``q38 optimize`` changes a few dozen nodes and initializers and, with them,
hundreds of ``value_info`` records (the shape annotations of the values it renamed or added).
Listed in graph order the annotations bury the change: on the demo's tiny package the first
changed node came after hundreds of lines. Here each graph's differences are sorted into
sections, in the order a reviewer wants them: nodes, initializers, graph inputs / outputs, the
rest (opsets, header, metadata, functions), and ``value_info`` last; a graph's summary line
counts each section by change (``+`` added, ``-`` removed, ``~`` changed, one per report line).
``value_info`` lines are listed only when asked (``q38 diff --value-info``); otherwise the graph
shows their count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from q38.diff.model import SYMBOLS, Difference

__all__ = ["SECTIONS", "GraphSummary", "graph_lines", "section_of", "summarize"]

SECTIONS: Final = ("nodes", "initializers", "inputs/outputs", "other", "value_info")
"""A graph's sections, in the order its differences are shown."""
_SECTION_OF_FACT: Final = {
    "node": "nodes",
    "initializer": "initializers",
    "input": "inputs/outputs",
    "output": "inputs/outputs",
    "value_info": "value_info",
}


def section_of(difference: Difference) -> str:
    """The section of a graph difference (a subgraph's differences count as what they are)."""
    return _SECTION_OF_FACT.get(str(difference.facts.get("section")), "other")


@dataclass(frozen=True)
class GraphSummary:
    """The differences of one graph file, counted per section and change."""

    file: str
    role: str = ""
    counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def count(self, section: str) -> int:
        """How many differences (report lines) ``section`` has."""
        return sum(self.counts.get(section, {}).values())

    def line(self) -> str:
        """``model.onnx (target): nodes +18 -39 ~42, initializers +18 -45, value_info +362``."""
        name = f"{self.file} ({self.role})" if self.role else self.file
        parts = []
        for section in SECTIONS:
            by_change = self.counts.get(section, {})
            if by_change:
                shown = " ".join(f"{SYMBOLS[c]}{by_change[c]}" for c in ("added", "removed", "changed") if by_change.get(c))
                parts.append(f"{section} {shown}")
        only = "" if any(self.count(s) for s in SECTIONS if s != "value_info") else " (shape annotations only)"
        return f"{name}: {', '.join(parts)}{only}"

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` record: file, role and per section the counts by change."""
        return {
            "file": self.file,
            "role": self.role,
            **{s: {c: self.counts.get(s, {}).get(c, 0) for c in ("added", "removed", "changed")} for s in SECTIONS},
        }


def summarize(groups: Iterable[tuple[str, Sequence[Difference]]], graphs: Iterable[str],
              roles: Mapping[str, str]) -> list[GraphSummary]:  # fmt: skip
    """A summary per graph file of ``groups`` (file, its differences) that is one of ``graphs``."""
    names = set(graphs)
    out = []
    for file, diffs in groups:
        if file not in names:
            continue
        counts: dict[str, dict[str, int]] = {}
        for d in diffs:
            by_change = counts.setdefault(section_of(d), {})
            by_change[d.change] = by_change.get(d.change, 0) + 1
        out.append(GraphSummary(file, roles.get(file, ""), counts))
    return out


def graph_lines(diffs: Sequence[Difference], *, value_info: bool) -> list[str]:
    """A graph's difference lines, section by section; ``value_info`` as a count unless asked for."""
    by_section: dict[str, list[Difference]] = {s: [] for s in SECTIONS}
    for d in diffs:
        by_section[section_of(d)].append(d)
    out = []
    for section in SECTIONS:
        found = by_section[section]
        if section == "value_info" and found and not value_info:
            counts = {c: sum(1 for d in found if d.change == c) for c in ("added", "removed", "changed")}
            shown = " ".join(f"{SYMBOLS[c]}{n}" for c, n in counts.items() if n)
            out.append(f"  value_info: {shown} (shape annotations; q38 diff --value-info lists them)")
            continue
        out.extend(d.line() for d in found)
    return out
