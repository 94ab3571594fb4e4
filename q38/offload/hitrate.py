"""The expected hit rate of a resident-slot plan: the share of a profile's selections on resident experts.

Resident experts are those that stay on the device.

For one QMoE node (a profile row) with ``c`` resident slots, the resident experts are the ``c``
most selected experts of its row (ties: the lower expert index), which is what a popularity file
asks the runtime to keep resident; its hits are the selections of those experts. A node the
runtime keeps on the GPU (``--offload-mode auto``, not eligible) has every expert resident. An
offloaded node without a cap (no ``node_overrides`` entry: ORT sizes it from its budgets) has no
predictable hit count and is left out of the totals, by name.

The share is hits / selections, per node and in total; a tier is one set of session options
(a runtime profile's overlay, or a graph's own session options).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from q38.offload.rows import ProfileRows

__all__ = ["HitReport", "LayerHit", "format_reports", "hit_report", "resident_experts"]

State = Literal["offloaded", "kept", "uncapped"]


def resident_experts(counts: np.ndarray, slots: int) -> np.ndarray:
    """Indices of the ``slots`` most selected experts of one row (ties: lower index first)."""
    order = np.argsort(-np.asarray(counts, dtype=np.float64), kind="stable")
    return np.sort(order[: max(0, int(slots))])


@dataclass(frozen=True)
class LayerHit:
    """One QMoE node's (profile row's) expected hits: selections, resident experts, hits.

    ``state``: ``offloaded`` (capped), ``kept`` on the GPU (every expert resident) or
    ``uncapped`` (ORT sizes it: ``resident`` and ``hits`` None, left out of totals).
    """

    graph: str
    node: str
    row: int
    state: State
    selections: int
    resident: int | None  # resident experts (slots, or E when kept on the GPU); None: uncapped
    hits: int | None

    @property
    def share(self) -> float | None:
        """Hits / selections (1.0 for a row with no selections); None when uncapped."""
        if self.hits is None:
            return None
        return self.hits / self.selections if self.selections else 1.0

    def to_dict(self) -> dict[str, object]:
        """The row as JSON (manifest ``hit_rates``, ``--json``), the share rounded."""
        return {"graph": self.graph, "node": self.node, "row": self.row, "state": self.state,
                "selections": self.selections, "resident": self.resident, "hits": self.hits,
                "share": _round(self.share)}  # fmt: skip


@dataclass(frozen=True)
class HitReport:
    """One tier's expected hit rates, per profile row and in total (rows with a known outcome)."""

    tier: str
    layers: tuple[LayerHit, ...]

    @property
    def selections(self) -> int:
        """Expert selections of the rows with a known outcome (uncapped rows left out)."""
        return sum(h.selections for h in self.layers if h.hits is not None)

    @property
    def hits(self) -> int:
        """Expected hits on resident experts, summed over rows with a known outcome."""
        return sum(h.hits or 0 for h in self.layers)

    @property
    def share(self) -> float | None:
        """Total hits / selections over rows with a known outcome; None when no row has one."""
        known = [h for h in self.layers if h.hits is not None]
        if not known:
            return None
        return self.hits / self.selections if self.selections else 1.0

    @property
    def uncapped(self) -> list[str]:
        """Offloaded nodes without a cap (ORT sizes them): named, since no hit count can be predicted."""
        return [h.node for h in self.layers if h.state == "uncapped"]

    def to_dict(self) -> dict[str, object]:
        """The tier as JSON (manifest ``hit_rates``, ``--json``): totals, uncapped nodes, every row."""
        return {"tier": self.tier, "selections": self.selections, "hits": self.hits,
                "share": _round(self.share), "uncapped": self.uncapped,
                "layers": [h.to_dict() for h in self.layers]}  # fmt: skip

    def lines(self) -> list[str]:
        """Human-readable lines: the total, then one per row.

        When no row has a cap (no slot count was given: onnxruntime sizes residency from its
        budgets), there is no hit rate to predict: one line says so, and how many selections the
        profile holds, instead of a row of ``n/a`` per node and a total of 0 of 0.
        """
        if self.layers and all(h.state == "uncapped" for h in self.layers):
            every = sum(h.selections for h in self.layers)
            return [(f"expected hit rate [{self.tier}]: not predicted: no resident-slot count was given, so "
                    f"onnxruntime sizes each node's residency from its budgets (the profile, {every} selections "
                    f"over {len(self.layers)} nodes, is written as session.moe.offload.popularity_file); "
                    "--total-resident-slots N or "
                    "--target-resident-slots N caps the nodes and predicts the rate")]  # fmt: skip
        total = "n/a" if self.share is None else f"{100 * self.share:.1f}%"
        left_out = f"; {len(self.uncapped)} uncapped node(s) left out" if self.uncapped else ""
        out = [(f"expected hit rate [{self.tier}]: {total} ({self.hits} of {self.selections} selections on resident "
               f"experts{left_out})")]  # fmt: skip
        for h in self.layers:
            share = "n/a (uncapped)" if h.share is None else f"{100 * h.share:5.1f}%"
            where = f"{h.graph}:{h.node}" if h.graph else h.node
            resident = "-" if h.resident is None else str(h.resident)
            out.append(f"  {where}: {share}  resident {resident}  ({h.state})")
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def hit_report(
    tier: str,
    rows: ProfileRows,
    caps: Mapping[tuple[str, str], int],
    kept: Sequence[tuple[str, str]],
) -> HitReport:
    """The hit report of one tier: ``caps`` / ``kept`` are keyed by (graph, node name)."""
    kept_set = set(kept)
    layers = []
    for index in rows.covered:
        site = rows.sites[index]
        counts = rows.counts(index)
        assert counts is not None
        key = (site.graph, site.name)
        row = rows.rows[index]
        assert row is not None
        total = int(counts.sum())
        if key in kept_set:
            layers.append(LayerHit(site.graph, site.name, row, "kept", total, site.experts, total))
        elif key in caps:
            slots = min(int(caps[key]), site.experts)
            hits = int(counts[resident_experts(counts, slots)].sum())
            layers.append(LayerHit(site.graph, site.name, row, "offloaded", total, slots, hits))
        else:
            layers.append(LayerHit(site.graph, site.name, row, "uncapped", total, None, None))
    return HitReport(tier, tuple(layers))


def format_reports(reports: Sequence[HitReport]) -> list[str]:
    """Lines for several tiers; tiers with the same per-row outcome are printed once, named together."""
    groups: list[tuple[list[str], HitReport]] = []
    for report in reports:
        for tiers, first in groups:
            if first.layers == report.layers:
                tiers.append(report.tier)
                break
        else:
            groups.append(([report.tier], report))
    out: list[str] = []
    for tiers, report in groups:
        out += HitReport(", ".join(tiers), report.layers).lines()
    return out
