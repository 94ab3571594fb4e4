"""Replay a measured selection trace against resident-set policies (``q38 profile --plan``, issue 29).

The trace is, per profile row (QMoE node), the experts its router picked in run order:
``[selections, k]`` (docs/offload.md, "Selection trace"). Each policy holds ``c`` experts on the
device, ``c`` the plan's resident slots of that row, and serves the trace's requests in order
(the ``k`` experts of one token one after the other):

* ``static``: q38's plan — the ``c`` most selected experts of the row (ties: lower index), never
  changed; a miss is served from the host. Its hits equal the plan's expected hit count when the
  plan's profile was measured on the same trace.
* ``lru`` / ``lfu``: demand caches of ``c`` experts, started warm with the plan's resident set (as
  a runtime with the popularity file starts); a miss loads the expert, evicting the least
  recently / least frequently (so far; ties: least recently) used one.
* ``belady``: the offline optimum with bypass (MIN), preloaded for free with the first ``c``
  distinct experts requested: on a miss, the expert whose next use is farthest — the requested
  one included, which is then not loaded — leaves. Every other policy here is a feasible schedule
  of the same cache from some preload, so Belady's hits are the ceiling (a test checks it
  against an exhaustive search over every schedule and preload).

Host-to-device bytes per token: a demand policy's loads, and for ``static`` (and Belady's
bypasses) the misses served from the host, times the row's bytes per expert, over the tokens the
row's graph processed. The coverage curve: (layer, expert) pairs by selections per byte, the
fraction of expert bytes resident against the fraction of selections served.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from q38.errors import ProfileError
from q38.package.io.files import read_text_bounded
from q38.package.memory import load_memory, read_package_facts

if TYPE_CHECKING:
    import os

    from q38.offload.hitrate import HitReport

__all__ = [
    "POLICIES", "PolicyResult", "ReplayReport", "RowReplay", "coverage_curve", "plot_coverage", "read_trace", "replay",
    "replay_plan", "replay_row", "trace_bytes", "trace_document",
]

POLICIES: Final = ("static", "lru", "lfu", "belady")


@dataclass(frozen=True)
class PolicyResult:
    """One policy on one row: hits of the row's selections, and bytes moved to the device."""

    hits: int
    transfers: int  # experts moved host -> device (loads, or misses served from the host)


@dataclass(frozen=True)
class RowReplay:
    """One profile row replayed under every policy with ``capacity`` resident experts."""

    row: int
    label: str
    capacity: int
    selections: int
    tokens: int
    bytes_per_expert: int
    results: Mapping[str, PolicyResult]
    experts: int = 0

    def share(self, policy: str) -> float:
        """The hit rate of ``policy``: selections served by resident experts (1.0 for a row never selected)."""
        return self.results[policy].hits / self.selections if self.selections else 1.0

    def bytes_per_token(self, policy: str) -> float:
        """Host->device expert bytes per processed token under ``policy`` (0 when no token ran)."""
        return self.results[policy].transfers * self.bytes_per_expert / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The row's JSON record: identity, capacity, counts and each policy's hit rate and bytes per token."""
        return {"row": self.row, "node": self.label, "capacity": self.capacity, "selections": self.selections,
                "tokens": self.tokens, "bytes_per_expert": self.bytes_per_expert,
                "policies": {p: {"hits": r.hits, "hit_rate": round(self.share(p), 6),
                                 "h2d_bytes_per_token": round(self.bytes_per_token(p), 3)}
                             for p, r in self.results.items()}}  # fmt: skip


@dataclass(frozen=True)
class ReplayReport:
    """Every replayed row and the totals per policy."""

    rows: tuple[RowReplay, ...]
    coverage: tuple[tuple[float, float], ...]

    def total(self, policy: str) -> tuple[int, int, float]:
        """(hits, selections, host->device bytes per token summed over rows)."""
        hits = sum(r.results[policy].hits for r in self.rows)
        sel = sum(r.selections for r in self.rows)
        return hits, sel, sum(r.bytes_per_token(policy) for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        """The replay's JSON document: overall totals per policy, each row, and the coverage curve."""
        overall = {}
        for p in POLICIES:
            hits, sel, per_token = self.total(p)
            overall[p] = {"hits": hits, "selections": sel, "hit_rate": round(hits / sel if sel else 1.0, 6),
                          "h2d_bytes_per_token": round(per_token, 3)}  # fmt: skip
        return {"overall": overall, "layers": [r.to_dict() for r in self.rows],
                "coverage": [{"resident_bytes": round(b, 6), "selections_served": round(s, 6)} for b, s in self.coverage]}  # fmt: skip

    def lines(self) -> list[str]:
        """The text report: one line per policy overall, then each row's hit rate under every policy."""
        out = ["replay of the measured trace (hit rate, host->device bytes per token):"]
        for p in POLICIES:
            hits, sel, per_token = self.total(p)
            out.append(f"  {p:<7} {100 * hits / sel if sel else 100.0:5.1f}%  ({hits} of {sel})  {per_token:,.0f} B/token")
        for r in self.rows:
            cells = "  ".join(f"{p} {100 * r.share(p):5.1f}%" for p in POLICIES)
            out.append(f"  {r.label}: c={r.capacity}  {cells}")
        return out


def _static(seq: np.ndarray, capacity: int, counts: np.ndarray) -> PolicyResult:
    from q38.offload.hitrate import resident_experts  # deferred: pulls in onnx (q38.offload.router)

    resident = {int(e) for e in resident_experts(counts, capacity)}
    hits = sum(1 for e in seq if int(e) in resident)
    return PolicyResult(hits, len(seq) - hits)


def _warm(counts: np.ndarray, capacity: int) -> list[int]:
    """The plan's resident set, least popular first (the start of a warm LRU / LFU)."""
    from q38.offload.hitrate import resident_experts  # deferred: pulls in onnx (q38.offload.router)

    chosen = [int(e) for e in resident_experts(counts, capacity)]
    return sorted(chosen, key=lambda e: (int(counts[e]), -e))


def _lru(seq: np.ndarray, capacity: int, warm: Sequence[int]) -> PolicyResult:
    cache: OrderedDict[int, None] = OrderedDict((e, None) for e in warm)
    hits = loads = 0
    for e in map(int, seq):
        if e in cache:
            hits += 1
            cache.move_to_end(e)
            continue
        loads += 1
        if capacity > 0:
            if len(cache) >= capacity:
                cache.popitem(last=False)
            cache[e] = None
    return PolicyResult(hits, loads)


def _lfu(seq: np.ndarray, capacity: int, warm: Sequence[int]) -> PolicyResult:
    freq: dict[int, int] = {}
    last: dict[int, int] = {e: -len(warm) + i for i, e in enumerate(warm)}
    cache: set[int] = set(warm)
    hits = loads = 0
    for t, e in enumerate(map(int, seq)):
        freq[e] = freq.get(e, 0) + 1
        if e in cache:
            hits += 1
        else:
            loads += 1
            if capacity > 0:
                if len(cache) >= capacity:
                    cache.remove(min(cache, key=lambda x: (freq.get(x, 0), last[x])))
                cache.add(e)
        last[e] = t
    return PolicyResult(hits, loads)


def _belady(seq: np.ndarray, capacity: int) -> PolicyResult:
    items = [int(e) for e in seq]
    n = len(items)
    next_use = [n] * n
    seen: dict[int, int] = {}
    for t in range(n - 1, -1, -1):
        next_use[t] = seen.get(items[t], n + t + 1)  # never again: farther than any real use
        seen[items[t]] = t
    cache: dict[int, int] = {}  # expert -> its next use
    for t, e in enumerate(items):  # free preload: the first `capacity` distinct experts requested
        if len(cache) >= capacity:
            break
        cache.setdefault(e, t)
    hits = transfers = 0
    for t, e in enumerate(items):
        if e in cache:
            hits += 1
            cache[e] = next_use[t]
            continue
        transfers += 1
        if capacity <= 0:
            continue
        if len(cache) < capacity:
            cache[e] = next_use[t]
            continue
        victim = max(cache, key=lambda x: cache[x])
        if cache[victim] > next_use[t]:
            del cache[victim]
            cache[e] = next_use[t]
    return PolicyResult(hits, transfers)


def replay_row(seq: np.ndarray, capacity: int, counts: np.ndarray) -> dict[str, PolicyResult]:
    """Every policy on one row's flat request sequence (``seq``: expert ids in order)."""
    flat = np.asarray(seq).reshape(-1)
    warm = _warm(counts, capacity)
    return {"static": _static(flat, capacity, counts), "lru": _lru(flat, capacity, warm),
            "lfu": _lfu(flat, capacity, warm), "belady": _belady(flat, capacity)}  # fmt: skip


def coverage_curve(counts: np.ndarray, bytes_per_expert: Sequence[int], points: int = 20) -> tuple[tuple[float, float], ...]:
    """(fraction of expert bytes resident, fraction of selections served), greedy by selections per byte."""
    pairs = []
    for row, per in enumerate(bytes_per_expert):
        for c in counts[row]:
            pairs.append((int(c), max(int(per), 1)))
    pairs.sort(key=lambda p: -p[0] / p[1])
    total_bytes = sum(b for _c, b in pairs) or 1
    total_sel = sum(c for c, _b in pairs) or 1
    cum_b = np.cumsum([0] + [b for _c, b in pairs]) / total_bytes
    cum_s = np.cumsum([0] + [c for c, _b in pairs]) / total_sel
    out = []
    for i in range(points + 1):
        f = i / points
        j = int(np.searchsorted(cum_b, f + 1e-12, side="right")) - 1  # the most pairs within f of the bytes
        out.append((f, float(cum_s[max(j, 0)])))
    return tuple(out)


def replay(
    trace: Sequence[np.ndarray],
    counts: np.ndarray,
    capacities: Mapping[int, int],
    labels: Sequence[str],
    tokens: Sequence[int],
    bytes_per_expert: Sequence[int],
) -> ReplayReport:
    """Replay each row in ``capacities`` (row -> resident experts) under every policy."""
    rows = []
    for row, capacity in sorted(capacities.items()):
        seq = np.asarray(trace[row]).reshape(-1)
        rows.append(RowReplay(row, labels[row], capacity, int(seq.size), int(tokens[row]), int(bytes_per_expert[row]),
                              replay_row(seq, capacity, counts[row]), int(counts.shape[1])))  # fmt: skip
    return ReplayReport(tuple(rows), coverage_curve(counts, bytes_per_expert))


def plot_coverage(report: ReplayReport, path: str | os.PathLike[str], title: str) -> None:
    """The coverage curve as a PNG, with each policy's overall hit rate at the plan's resident bytes."""
    import matplotlib  # deferred: heavy; only q38 profile --coverage needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: heavy; after matplotlib.use("Agg")

    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
    xs = [100 * b for b, _s in report.coverage]
    ys = [100 * s for _b, s in report.coverage]
    ax.plot(xs, ys, marker="o", markersize=3, label="static top-k by popularity (coverage)")
    ax.plot([0, 100], [0, 100], linestyle=":", color="grey", label="uniform routing")
    planned = sum(r.capacity * r.bytes_per_expert for r in report.rows)
    total = sum(r.experts * r.bytes_per_expert for r in report.rows)
    if total:
        for policy, marker in zip(("static", "lru", "lfu", "belady"), ("s", "v", "^", "*"), strict=True):
            hits, sel, _bpt = report.total(policy)
            ax.plot(100 * planned / total, 100 * hits / sel if sel else 100, marker=marker, linestyle="none",
                    markersize=8, label=f"{policy} at the plan ({100 * hits / sel if sel else 100:.1f}%)")  # fmt: skip
    ax.set_xlabel("expert bytes resident (%)")
    ax.set_ylabel("selections served on the device (%)")
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 101)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


TRACE_FORMAT: Final = "q38-selection-trace"


def trace_document(trace: Sequence[np.ndarray], labels: Sequence[str], tokens: Sequence[int], experts: int) -> dict[str, Any]:
    """The JSON document of a selection trace (docs/offload.md, "Selection trace")."""
    return {
        "format": TRACE_FORMAT, "version": 1, "experts": experts,
        "rows": [{"row": i, "node": labels[i], "tokens": int(tokens[i]),
                  "selections": np.asarray(t).astype(int).tolist()} for i, t in enumerate(trace)],
    }  # fmt: skip


def trace_bytes(document: Mapping[str, Any]) -> bytes:
    """The trace as compact JSON bytes (the caller writes them atomically)."""
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


def read_trace(path: Path, *, rows: int, experts: int) -> tuple[list[np.ndarray], list[int]]:
    """A trace file written by ``q38 profile --trace-out``: per row the picks and the tokens processed.

    Raises:
        ProfileError: not a trace, another version, or rows / experts that do not match the profile.

    """
    try:
        doc = json.loads(read_text_bounded(path, limit=1 << 30, what="--trace"))
    except ValueError as exc:
        raise ProfileError(f"--trace {path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != TRACE_FORMAT or doc.get("version") != 1:
        raise ProfileError(f"--trace {path}: not a {TRACE_FORMAT} version 1 file")
    raw = doc.get("rows")
    if not isinstance(raw, list) or len(raw) != rows or doc.get("experts") != experts:
        raise ProfileError(f"--trace {path}: {len(raw) if isinstance(raw, list) else 0} rows of "
                           f"{doc.get('experts')} experts; the profile has {rows} rows of {experts}")  # fmt: skip
    trace, tokens = [], []
    for i, row in enumerate(raw):
        try:
            picks = np.asarray(row["selections"], dtype=np.int64).reshape(len(row["selections"]), -1)
            tokens.append(int(row["tokens"]))
        except (KeyError, TypeError, ValueError):
            raise ProfileError(f"--trace {path}: row {i}: expected selections [[e, ...], ...] and tokens") from None
        if picks.size and (picks.min() < 0 or picks.max() >= experts):
            raise ProfileError(f"--trace {path}: row {i}: an expert index outside 0..{experts - 1}")
        trace.append(picks)
    return trace, tokens


def expert_bytes_by_node(root: Path | str) -> dict[tuple[str, str], int]:
    """(graph file name, QMoE node) -> bytes per expert, from shapes and dtypes (q38.package.memory)."""
    facts = read_package_facts(root)
    graphs = load_memory(facts, [facts.decoder, *facts.companions, *facts.state_graphs])
    out: dict[tuple[str, str], int] = {}
    for rel, gm in graphs.items():
        per: dict[str, list[int]] = {}
        for t in gm.tensors:
            if t.kind == "routed_expert":
                slot = per.setdefault(t.node, [t.experts, 0])
                slot[1] += t.nbytes
        for node, (experts, total) in per.items():
            out[(Path(rel).name, node)] = total // max(experts, 1)
    return out


def replay_plan(root: Path | str, hit_report: HitReport, counts: np.ndarray, trace: Sequence[np.ndarray],
                tokens: Sequence[int]) -> ReplayReport:  # fmt: skip
    """Replay ``trace`` with the capacities of one plan tier (a :class:`q38.offload.hitrate.HitReport`).

    Rows the runtime keeps on the GPU hold every expert; uncapped rows (ORT sizes them) are left out.
    """
    per_node = expert_bytes_by_node(root)
    rows = counts.shape[0]
    labels = [f"row {i}" for i in range(rows)]
    sizes = [0] * rows
    capacities: dict[int, int] = {}
    for layer in hit_report.layers:
        labels[layer.row] = f"{layer.graph}:{layer.node}" if layer.graph else layer.node
        sizes[layer.row] = per_node.get((Path(layer.graph).name, layer.node), 0)
        if layer.resident is not None:
            capacities[layer.row] = int(layer.resident)
    return replay(trace, counts, capacities, labels, tokens, sizes)
