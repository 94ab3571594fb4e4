"""``q38 fit``: the device and host memory of a package per tier and runtime profile (issue 29).

Exact bytes come from :mod:`q38.package.memory` (shapes and dtypes; no weight byte is read).
What the package cannot say — the CUDA context, cuBLAS / cuBLASLt workspaces, the CUDA-graph
pool of one step's activations, the arena's slack — is an :class:`Estimate`, reported on its own
line and never added to the exact sum; a verdict reads both (docs/fit.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from q38.errors import FlagError
from q38.package.memory import (
    MemoryBreakdown,
    PackageFacts,
    breakdown,
    load_memory,
    read_package_facts,
)
from q38.sizes import parse_byte_size

__all__ = ["GPU_CLASSES", "Estimate", "FitReport", "FitRow", "estimate", "fit_package", "parse_gpu", "parse_size"]

GIB: Final = 1 << 30
MIB: Final = 1 << 20
# Named device classes (total device memory as the driver reports it, rounded down to MiB).
GPU_CLASSES: Final = {
    "rtx3090": 24 * GIB, "rtx4090": 24 * GIB, "rtx5090": 32 * GIB, "a10": 24 * GIB, "l4": 24 * GIB,
    "rtx4080": 16 * GIB, "a100-40gb": 40 * GIB, "a100-80gb": 80 * GIB, "h100": 80 * GIB,
    "h200": 143771 * MIB, "l40s": 48 * GIB,
}  # fmt: skip
# Estimates (docs/fit.md): cuBLAS's default workspace (CUBLAS_WORKSPACE_CONFIG :4096:8 = 32 MiB)
# plus cuBLASLt's (32 MiB on Hopper); a CUDA 12 context with ORT's kernels loaded.
CUBLAS_WORKSPACE: Final = 64 * MIB
CUDA_CONTEXT: Final = 512 * MIB
VERIFY_ROWS: Final = 4  # the widest step a v12b offload package runs (model_s4: 4 verify rows)
Verdict = Literal["fits", "tight", "over", "n/a"]


def parse_size(text: str, *, flag: str) -> int:
    """``24GiB`` / ``24GB`` / ``512MiB`` -> bytes (GB = 10^9, GiB = 2^30); a bare number is refused.

    ``--gpu 24`` used to be a 24-byte device; a size now needs its unit (:mod:`q38.sizes`).
    """
    try:
        value = parse_byte_size(text)
    except ValueError as exc:
        raise FlagError(f"{flag} {exc}") from None
    if value < 1:
        raise FlagError(f"{flag} {text!r}: must be at least one byte")
    return value


def parse_gpu(text: str) -> tuple[str, int]:
    """``--gpu``: a named class (``rtx4090``) or a size with a unit; returns (label, bytes)."""
    named = GPU_CLASSES.get(text.strip().lower())
    if named is not None:
        return text.strip().lower(), named
    try:
        parse_byte_size(text)
    except ValueError as exc:
        raise FlagError(f"--gpu {exc}, or a class ({', '.join(sorted(GPU_CLASSES))})") from None
    return text.strip(), parse_size(text, flag="--gpu")


@dataclass(frozen=True)
class Estimate:
    """What cannot be known without the device (docs/fit.md), in bytes, by part."""

    cuda_context: int
    cublas_workspace: int
    cuda_graph_pool: int
    arena_slack: int

    @property
    def total(self) -> int:
        """Sum of the estimated parts (context, cuBLAS workspace, CUDA-graph pool, arena slack)."""
        return self.cuda_context + self.cublas_workspace + self.cuda_graph_pool + self.arena_slack

    def to_dict(self) -> dict[str, int]:
        """The parts and their total as JSON (``q38 fit --json``)."""
        return {"cuda_context": self.cuda_context, "cublas_workspace": self.cublas_workspace,
                "cuda_graph_pool": self.cuda_graph_pool, "arena_slack": self.arena_slack, "total": self.total}  # fmt: skip


def estimate(facts: PackageFacts, entries_strategy: str | None, exact_device: int, batch: int) -> Estimate:
    """The labelled estimate for one configuration (formulas in docs/fit.md)."""
    # One step's activations held by a captured CUDA graph: float32 logits of VERIFY_ROWS rows,
    # and ~32 hidden-sized float32 temporaries per row (attention, MoE gather / scatter).
    rows = batch * VERIFY_ROWS
    pool = rows * 4 * (facts.vocab_size + 32 * facts.hidden_size)
    # kSameAsRequested: the arena allocates what is asked; the default (kNextPowerOfTwo) may round
    # the last extension up to twice its size: count an eighth of the exact bytes.
    slack = 0 if entries_strategy == "kSameAsRequested" else exact_device // 8
    return Estimate(CUDA_CONTEXT, CUBLAS_WORKSPACE, pool, slack)


@dataclass(frozen=True)
class FitRow:
    """One (budget, context tier): its exact bytes, the estimate, and a verdict."""

    name: str  # a runtime profile id, ``gpu <label>``, or ``decoder`` (no budget)
    decoder: str
    context: int
    memory: MemoryBreakdown
    estimate: Estimate
    budget: int | None

    @property
    def exact(self) -> int:
        """Device bytes known exactly from the graphs and the options (weights, resident experts, state)."""
        return self.memory.device_total

    @property
    def headroom(self) -> int | None:
        """Budget minus exact device bytes minus the estimate (None without a budget)."""
        return None if self.budget is None else self.budget - self.exact - self.estimate.total

    @property
    def verdict(self) -> Verdict:
        """``over``: exact bytes exceed the budget; ``tight``: exact plus the estimate do; else ``fits``.

        ``n/a`` without a budget.
        """
        if self.budget is None:
            return "n/a"
        if self.exact > self.budget:
            return "over"
        return "fits" if self.exact + self.estimate.total <= self.budget else "tight"

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON: verdict and headroom, device and host bytes by part, state, the estimate."""
        m = self.memory
        return {
            "name": self.name, "decoder": self.decoder, "context": self.context, "batch": m.batch,
            "budget": self.budget, "verdict": self.verdict, "headroom": self.headroom,
            "device": {"weights": m.weights_device, "experts_resident": m.expert_device,
                       "state": m.state_total, "state_fixed": m.fixed_state, "exact_total": m.device_total},
            "host": {"weights": m.weights_host, "experts": m.expert_host, "total": m.host_total},
            "state": dict(sorted(m.state.items())),
            "estimate": self.estimate.to_dict(),
            "unresolved_state": list(m.unresolved),
        }  # fmt: skip


@dataclass(frozen=True)
class FitReport:
    """Everything ``q38 fit`` prints: weight bytes per file and class, experts, and the rows."""

    package: str
    surface: str
    base: MemoryBreakdown  # the default decoder at the first tier (files, classes, experts)
    rows: tuple[FitRow, ...]

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (``q38 fit --json``): files, weight classes, routed experts, then the rows."""
        b = self.base
        return {
            "package": self.package, "surface": self.surface,
            "files": dict(sorted(b.files.items())),
            "weights": {k: dict(sorted(v.items())) for k, v in sorted(b.weights.items())},
            "routed_experts": [{"graph": e.graph, "node": e.node, "experts": e.experts,
                                "bytes_per_expert": e.bytes_per_expert, "total": e.total} for e in b.experts],
            "rows": [r.to_dict() for r in self.rows],
        }  # fmt: skip

    def lines(self) -> list[str]:
        """The text table."""
        b = self.base
        out = [f"q38 fit: {self.package} ({self.surface})", "", "weights by file (exact, from shapes and dtypes):"]
        for name, n in sorted(b.files.items()):
            out.append(f"  {name:<40} {_fmt(n):>12}")
        out += ["", "weights by class and placement (shared tensors once; routed experts below):"]
        for cls, places in sorted(b.weights.items()):
            out.append(f"  {cls:<14} " + ", ".join(f"{p} {_fmt(n)}" for p, n in sorted(places.items())))
        if b.experts:
            total = sum(e.total for e in b.experts)
            per = sorted({e.bytes_per_expert for e in b.experts})
            out.append(f"  routed_expert  {len(b.experts)} QMoE nodes, {_fmt(total)} "
                       f"(bytes per expert: {', '.join(_fmt(p) for p in per)})")  # fmt: skip
        out += ["", "state at each tier (exact; batch " + str(b.batch) + "):"]
        header = (f"  {'row':<22} {'context':>8} {'weights':>10} {'experts':>10} {'state':>10} {'exact':>10} "
                  f"{'estimate':>10} {'budget':>10} {'headroom':>10}  verdict")  # fmt: skip
        out.append(header)
        for r in self.rows:
            m = r.memory
            out.append(
                f"  {r.name:<22} {r.context:>8} {_fmt(m.weights_device):>10} {_fmt(m.expert_device):>10} "
                f"{_fmt(m.state_total):>10} {_fmt(r.exact):>10} {_fmt(r.estimate.total):>10} "
                f"{_fmt(r.budget) if r.budget is not None else '-':>10} "
                f"{_fmt(r.headroom) if r.headroom is not None else '-':>10}  {r.verdict}"
            )
        if self.rows:
            r0 = self.rows[0]
            kinds = ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(r0.memory.state.items()))
            out.append(f"  state of {r0.name} at {r0.context}: {kinds} (fixed per sequence {_fmt(r0.memory.fixed_state)})")
            e = r0.estimate
            out.append(f"  estimate (not exact, never in the sum): CUDA context {_fmt(e.cuda_context)}, cuBLAS/cuBLASLt "
                       f"workspaces {_fmt(e.cublas_workspace)}, CUDA-graph pool {_fmt(e.cuda_graph_pool)}, "
                       f"arena slack {_fmt(e.arena_slack)}")  # fmt: skip
            host = r0.memory
            out.append(f"  host: weights {_fmt(host.weights_host)}, routed experts {_fmt(host.expert_host)}")
            if r0.memory.unresolved:
                out.append(f"  state not sized (a dim q38 cannot resolve): {', '.join(r0.memory.unresolved)}")
        return out


def _fmt(n: int) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GIB:
        return f"{sign}{n / GIB:.2f} GiB"
    if n >= MIB:
        return f"{sign}{n / MIB:.2f} MiB"
    if n >= 1 << 10:
        return f"{sign}{n / (1 << 10):.1f} KiB"
    return f"{sign}{n} B"


def fit_package(
    path: Path | str,
    *,
    contexts: Sequence[int] = (),
    gpu: tuple[str, int] | None = None,
    batch: int = 1,
) -> FitReport:
    """The fit report of the package at ``path``.

    Rows: each runtime profile at each of ``contexts`` (default: its own tier); with ``gpu``, the
    default decoder against that device; without profiles or ``gpu``, the default decoder at each
    tier with no budget.
    """
    facts = read_package_facts(path)
    rels = sorted({facts.decoder, *facts.companions, *facts.state_graphs, *(p.decoder for p in facts.profiles)})
    graphs = load_memory(facts, rels)
    tiers = list(dict.fromkeys(contexts)) or [facts.context_length]
    rows: list[FitRow] = []

    def add(name: str, decoder: str, entries: Mapping[str, str], context: int, budget: int | None) -> None:
        m = breakdown(facts, graphs, decoder=decoder, entries=entries, context=context, batch=batch)
        strategy = _arena_strategy(facts, name)
        rows.append(FitRow(name, decoder, context, m, estimate(facts, strategy, m.device_total, batch), budget))

    for profile in facts.profiles:
        for context in list(dict.fromkeys(contexts)) or [profile.context]:
            add(profile.id, profile.decoder, profile.entries, context, profile.device_budget)
    if gpu is not None:
        for context in tiers:
            add(f"gpu {gpu[0]}", facts.decoder, facts.entries, context, gpu[1])
    if not facts.profiles and gpu is None:
        for context in tiers:
            add("decoder", facts.decoder, facts.entries, context, None)
    base = breakdown(facts, graphs, decoder=facts.decoder, entries=facts.entries, context=tiers[0], batch=batch)
    return FitReport(str(path), facts.surface, base, tuple(rows))


def _arena_strategy(facts: PackageFacts, name: str) -> str | None:
    """The CUDA arena's extend strategy under a row's options (profiles: kSameAsRequested by q38 offload)."""
    for profile in facts.profiles:
        if profile.id == name:
            return profile.arena_strategy
    return facts.arena_strategy
