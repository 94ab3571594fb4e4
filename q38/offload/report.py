"""What a conversion did: :class:`OffloadReport` (the ``--json`` summary of ``q38 offload``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from q38.offload.hitrate import HitReport, format_reports

__all__ = ["OffloadReport"]


@dataclass
class OffloadReport:
    """What a conversion did, for either surface.

    ``offloaded`` / ``kept_resident`` / ``resident_slots`` name nodes (``graph:node`` on the genai
    surface, where the decoder and the MTP graph may hold nodes of the same name); ``graphs`` are
    the verify graphs written (``s2`` -> ``model_s2.onnx``, empty without an MTP); ``hit_rates``
    one report per tier when a profile was given.
    """

    out: str
    surface: str
    layout: str
    router_weights_cleared: int
    offloaded: list[str]
    kept_resident: list[tuple[str, str]]
    resident_slots: dict[str, int]
    graphs: dict[str, str]
    pool: dict[str, int]
    hit_rates: list[HitReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """The report as JSON (``--json``): kept nodes as {node, reason}, hit rates per tier."""
        d = dataclasses.asdict(self)
        d["kept_resident"] = [{"node": n, "reason": r} for n, r in self.kept_resident]
        d["hit_rates"] = [h.to_dict() for h in self.hit_rates]
        return d

    def _slots_line(self) -> str:
        """``resident slots: 16 over the 9 offloaded nodes`` and, apart, the chained drafts' own caps.

        The chained drafts (``/mtp/1/``, ``/mtp/2/`` of the verify graphs) are copies of
        ``/mtp/0/`` that share its expert bank; they are not among the offloaded nodes counted
        above, nor rows of the hit-rate report, so their caps are shown as theirs.
        """
        offloaded = set(self.offloaded)
        own = {n: c for n, c in self.resident_slots.items() if n in offloaded}
        copies = {n: c for n, c in self.resident_slots.items() if n not in offloaded}
        over = f"the {len(own)}" if len(own) == len(offloaded) else f"{len(own)} of the {len(offloaded)}"
        line = f"  resident slots: {sum(own.values())} over {over} offloaded nodes"
        if copies:
            caps = sorted(set(copies.values()))
            each = f"{caps[0]} each" if len(caps) == 1 else ", ".join(str(copies[n]) for n in copies)
            line += (f"; chained drafts {', '.join(copies)} of the verify graphs share /mtp/0/'s experts: "
                     f"{each} of their own")  # fmt: skip
        return line

    def summary(self) -> list[str]:
        """The lines ``q38 offload`` prints."""
        graphs = ", ".join(self.graphs.values()) if self.graphs else "none (no MTP draft)"
        head = (
            f"q38 offload: wrote {self.out} ({self.surface}): {len(self.offloaded)} QMoE nodes offloaded, "
            f"{len(self.kept_resident)} kept resident, {self.router_weights_cleared} router_weights cleared, "
            f"verify graphs {graphs}"
        )
        lines = [head]
        if self.resident_slots:
            lines.append(self._slots_line())
        by_reason: dict[str, list[str]] = {}
        for name, reason in self.kept_resident:
            by_reason.setdefault(reason, []).append(name)
        for reason, names in by_reason.items():
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            lines.append(f"  kept resident ({len(names)}): {shown}: {reason}")
        lines += [f"  note: {n}" for n in self.notes if not n.startswith("kept resident: ")]
        lines += ["  " + line for line in format_reports(self.hit_rates)]
        return lines
