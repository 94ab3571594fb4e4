"""Resident-slot caps for the QMoE nodes of a package, whatever its surface.

:func:`plan_caps` turns the slot flags into one cap per offloaded site (QMoE node, keyed by
``(graph file, node name)``):

- ``--target-resident-slots N``: ``N`` for every offloaded node (refused above a node's expert
  count);
- ``--expert-profile P --total-resident-slots N``: exactly ``N`` slots over the offloaded sites
  the profile covers, most popular experts first (:func:`q38.offload.slots.plan_from_profile`);
  sites the profile leaves out get no cap (named in a note);
- neither: no caps (ORT sizes residency from its budgets).

Every graph the package emits then holds exactly these caps, and their sum is ``N``: chained
drafts of the verify graphs share ``/mtp/0/``'s expert bank and get ``0`` slots of their own
under a total (:func:`chained_caps`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from q38.errors import OffloadError
from q38.offload.options import OffloadOptions
from q38.offload.rows import ProfileRows, Site
from q38.offload.slots import plan_from_profile, uniform_caps

__all__ = ["SlotPlan", "chained_caps", "check_emitted", "plan_caps"]

Key = tuple[str, str]


@dataclass(frozen=True)
class SlotPlan:
    """The resident-slot cap of every capped site, by (graph file, node name), and notes for the report.

    ``total``: the requested ``--total-resident-slots`` (None under a per-node cap or none);
    ``kept``: the sites kept on the GPU.
    """

    caps: dict[Key, int]
    notes: tuple[str, ...] = ()
    rows: ProfileRows | None = None
    total: int | None = None  # the requested --total-resident-slots
    kept: tuple[Key, ...] = field(default=())


def plan_caps(
    options: OffloadOptions,
    sites: Sequence[Site],
    offloaded: set[Key],
    kept: Sequence[Key],
    rows: ProfileRows | None,
) -> SlotPlan:
    """The caps of every offloaded site; raises (one line naming the flag) when unmet."""
    notes: list[str] = []
    planned = [s for s in sites if (s.graph, s.name) in offloaded]
    if options.target_resident_slots is not None:
        caps = uniform_caps(options.target_resident_slots, [s.experts for s in planned])
        return SlotPlan({(s.graph, s.name): c for s, c in zip(planned, caps)}, (), rows, None, tuple(kept))
    if options.total_resident_slots is None:
        return SlotPlan({}, (), rows, None, tuple(kept))
    assert rows is not None
    index = {(s.graph, s.name): i for i, s in enumerate(rows.sites)}
    covered = [s for s in planned if rows.rows[index[(s.graph, s.name)]] is not None]
    if not covered:
        raise OffloadError("--total-resident-slots: no offloaded QMoE node is covered by the profile")

    matrix = np.stack([rows.profile.counts[rows.rows[index[(s.graph, s.name)]] or 0] for s in covered])
    caps = plan_from_profile(
        matrix,
        options.total_resident_slots,
        uniform=options.uniform_profile_slots,
        min_per_layer=options.min_slots_per_layer,
    )
    uncovered = [s.label for s in planned if s not in covered]
    if uncovered:
        notes.append(f"no profile row (uncapped): {', '.join(uncovered)}")
    return SlotPlan({(s.graph, s.name): c for s, c in zip(covered, caps)}, tuple(notes), rows,
                    options.total_resident_slots, tuple(kept))  # fmt: skip


def chained_caps(plan: SlotPlan, graph: str, draft_nodes: Sequence[str]) -> dict[str, int]:
    """Caps for the chained drafts ``/mtp/j/...`` of a verify graph built from ``graph``.

    Under a per-node cap, the cap of the ``/mtp/0/`` node they copy; under a total, ``0`` (they
    share draft 0's expert bank: the total stays exact in every verify graph).
    """
    out: dict[str, int] = {}
    for name in draft_nodes:
        parts = name.split("/", 3)
        if len(parts) < 4 or parts[1] != "mtp" or parts[2] == "0":
            continue
        base = (graph, f"/mtp/0/{parts[3]}")
        if base in plan.caps:
            out[name] = 0 if plan.total is not None else plan.caps[base]
    return out


def check_emitted(entries: Mapping[str, str]) -> None:
    """The emitted ``session.moe.offload.*`` entries pass ``contracts.offload_config``."""
    try:
        # deferred: the except lets q38.offload run without contracts
        from contracts.offload_config import check_offload_config
    except ModuleNotFoundError:  # pragma: no cover - contracts ship with q38
        return
    violations = check_offload_config(dict(entries))
    if violations:
        first = violations[0]
        raise OffloadError(
            f"emitted offload options break contract {getattr(first, 'rule_id', '')}: "
            f"{getattr(first, 'message', first)}"
        )
