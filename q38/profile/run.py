"""Run a workload over a package and count, per QMoE node, how often each expert is selected.

Which graphs run, per surface:

- v12b: the target graph (``model.onnx``): decoder layers and, inside it, the MTP draft
  ``/mtp/0/``, which runs on every row the decoder runs;
- genai: the decoder graph, and the MTP graph (``mtp.onnx``) after each decoder step on the
  same rows: the decoder's ``hidden_states`` of each row with the token that follows it (the
  next prompt token, or the greedy token for the last row), positions as the decoder's, its own
  KV cache — the draft step of speculative decoding. Engram / vision graphs are not run.

Per prompt: one step over the prompt, then ``tokens - 1`` one-token steps, each feeding the
greedy (argmax) token of the last; ``tokens`` tokens are generated, ``len(prompt) + tokens - 1``
rows processed per graph. Every QMoE node selects ``k`` experts per row, so each profile row
sums to rows processed x k (``ProfileRun.check_sums``).

Refused in one line, before anything runs: a QMoE node the CPU kernel cannot run (expert
weights other than uint8, SwiGLU without ``swiglu_fusion=1``), any other node without a CPU
kernel in the installed onnxruntime, QMoE nodes of different expert counts (one STRP profile has
one count), a verify graph of an offload package.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from q38.errors import ProfileError
from q38.offload.router import qmoe_nodes
from q38.offload.rows import Site, qmoe_sites
from q38.ort_kernels import cpu_kernels
from q38.package.profile import ExpertProfile
from q38.package.surface import open_any
from q38.profile.stepper import StateNames, Stepper
from q38.profile.taps import TappedGraph, select_experts, tapped_graph
from q38.profile.workload import Workload
from q38.progress import Progress

__all__ = ["ProfileRun", "RunnablePackage", "check_cpu_runnable", "open_runnable", "profile_package"]


@dataclass(frozen=True)
class ProfileRun:
    """What a profiling run counted: ``counts[row, expert]`` (rows as :mod:`q38.offload.rows`)."""

    counts: np.ndarray  # uint64 [rows, E]
    sites: tuple[Site, ...]
    rows_processed: dict[str, int]  # graph file -> rows it ran
    prompts: int
    generated: int
    seconds: float
    surface: str
    trace: tuple[np.ndarray, ...] = ()  # per row: the experts picked, [selections in run order, k] (issue 29)

    @property
    def profile(self) -> ExpertProfile:
        """The counts as the STRP expert profile ``q38 offload`` plans from (uint64 counters)."""
        return ExpertProfile(self.counts.astype(np.uint64))

    def check_sums(self) -> None:
        """Every row sums to rows processed x k of its node (an internal invariant)."""
        for site, row in zip(self.sites, self.counts):
            want = self.rows_processed[site.graph] * site.k
            if int(row.sum()) != want:
                raise ProfileError(f"internal: {site.label} counted {int(row.sum())} selections, expected {want}")

    def to_dict(self) -> dict[str, Any]:
        """The run's JSON summary: workload, rows processed, timing and per-row expert counts."""
        return {
            "surface": self.surface,
            "prompts": self.prompts,
            "generated_tokens": self.generated,
            "rows_processed": dict(self.rows_processed),
            "seconds": round(self.seconds, 3),
            "layers": [
                {"row": i, "graph": s.graph, "node": s.name, "k": s.k, "experts": s.experts,
                 "selections": int(c.sum()), "counts": [int(x) for x in c]}
                for i, (s, c) in enumerate(zip(self.sites, self.counts))
            ],
        }  # fmt: skip


@dataclass
class RunnablePackage:
    """The graphs a profile runs, in run order, with what stepping them needs from the config.

    Each graph is (role, package-relative file, its directory, model); with them the config's
    state names and symbolic dims, and the vocabulary size.
    """

    surface: str
    root: Path
    graphs: list[tuple[str, str, Path, ir.Model]]
    names: dict[str, StateNames]
    dims: dict[str, int]
    vocab: int
    main_hidden: str = "hidden_states"


def _decoder_dims(head_size: int | None) -> dict[str, int]:
    return {"kv_cache_dim": head_size} if head_size else {}


def open_runnable(path: Path) -> RunnablePackage:
    """Open a package of either surface and load the graphs a profile runs (no weights)."""
    pkg = open_any(path)
    decode = pkg.decode_graphs()
    graphs = [(g.role, g.rel, g.root, g.model) for g in decode.graphs]
    names = {g.role: StateNames.from_sections(g.inputs, g.outputs) for g in decode.graphs}
    return RunnablePackage(pkg.surface, pkg.root, graphs, names, _decoder_dims(decode.head_size), decode.vocab_size,
                           decode.main_hidden)  # fmt: skip


def check_cpu_runnable(pkg: RunnablePackage) -> None:
    """Refuse, naming the node, a graph the installed onnxruntime cannot run on the CPU."""
    for _role, rel, _dir, model in pkg.graphs:
        for node in qmoe_nodes(model.graph):
            weights = node.inputs[2] if len(node.inputs) > 2 else None
            dtype = weights.dtype if weights is not None else None
            if dtype is not None and dtype != ir.DataType.UINT8:
                raise ProfileError(f"{pkg.root / rel}: QMoE node {node.name!r} cannot run on the CPU: its expert weights "
                                   f"are {dtype.name.lower()} (the CPU QMoE kernel takes uint8 only)")  # fmt: skip
            act = node.attributes.get("activation_type")
            fusion = node.attributes.get("swiglu_fusion")
            if act is not None and act.value == "swiglu" and (fusion is None or fusion.value != 1):
                raise ProfileError(f"{pkg.root / rel}: QMoE node {node.name!r} cannot run on the CPU: SwiGLU with "
                                   "swiglu_fusion != 1 (the CPU kernel takes interleaved SwiGLU only)")  # fmt: skip
    kernels = cpu_kernels()
    for _role, rel, _dir, model in pkg.graphs:
        missing = kernels.missing(ir.traversal.RecursiveGraphIterator(model.graph))
        if missing:
            first = missing[0]
            raise ProfileError(f"{pkg.root / rel}: node {first.node!r} ({first.domain}::{first.describe()}) has no CPU "
                               f"kernel in onnxruntime {kernels.ort_version}: q38 profile runs the package on the CPU "
                               "(its cpu variant)")  # fmt: skip


def _sites(pkg: RunnablePackage) -> list[Site]:
    sites: list[Site] = []
    for role, rel, _dir, model in pkg.graphs:
        sites += qmoe_sites(model, rel, draft_graph=role == "mtp")
    if not sites:
        raise ProfileError(f"{pkg.root}: no com.microsoft::QMoE node to profile")
    experts = sorted({s.experts for s in sites})
    if len(experts) > 1:
        raise ProfileError(f"{pkg.root}: QMoE nodes with {' and '.join(map(str, experts))} experts: an STRP v1 "
                           "profile has one expert count for every layer")  # fmt: skip
    return sites


def _count(graph: TappedGraph, result: dict[str, np.ndarray], counts: np.ndarray, first_row: int,
           trace: list[list[np.ndarray]] | None = None) -> None:  # fmt: skip
    for i, tap in enumerate(graph.taps):
        picked = select_experts(result[tap.output], tap.k)
        if trace is not None:
            trace[first_row + i].append(picked.astype(np.int32))
        counts[first_row + i] += np.bincount(picked.reshape(-1), minlength=tap.experts)[: tap.experts].astype(np.uint64)


def _prompt_steps(prompt: tuple[int, ...], tokens: int, decoder: Stepper,
                  logits_name: str) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray], int]]:  # fmt: skip
    """(ids, decoder outputs, greedy next token) per step of one prompt."""
    ids = np.array([prompt], dtype=np.int64)
    for step in range(tokens):
        out = decoder.step(ids)
        token = int(np.asarray(out[logits_name][0, -1], dtype=np.float32).argmax())
        yield ids, out, token
        if step + 1 < tokens:
            ids = np.array([[token]], dtype=np.int64)


def profile_package(
    path: Path | str | RunnablePackage,
    workload: Workload,
    *,
    threads: int = 1,
    progress: Callable[[int], Progress] | None = None,
) -> ProfileRun:
    """Run ``workload`` on the CPU over a package and count every QMoE node's expert selections.

    ``path`` is the package directory or what :func:`open_runnable` opened. Refuses
    (ProfileError) a package the CPU cannot run and token ids outside the vocabulary.
    """
    start = time.perf_counter()
    pkg = path if isinstance(path, RunnablePackage) else open_runnable(Path(path))
    check_cpu_runnable(pkg)
    sites = _sites(pkg)
    bad = [t for p in workload.prompts for t in p if pkg.vocab and t >= pkg.vocab]
    if bad:
        raise ProfileError(f"{workload.source}: token id {bad[0]} is outside the vocabulary (vocab_size {pkg.vocab})")
    steppers: list[tuple[str, Stepper, int]] = []
    first = 0
    for role, rel, graph_dir, model in pkg.graphs:
        tapped = tapped_graph(model, graph_dir, where=str(pkg.root / rel), threads=threads)
        steppers.append((rel, Stepper(tapped, pkg.names[role], pkg.dims), first))
        first += len(tapped.taps)
    counts = np.zeros((len(sites), sites[0].experts), dtype=np.uint64)
    trace: list[list[np.ndarray]] = [[] for _ in sites]
    rows = {rel: 0 for rel, _s, _f in steppers}
    (dec_rel, decoder, _), *drafts = steppers
    logits = "logits"
    generated = 0
    bar = progress(len(workload.prompts)) if progress is not None else Progress(len(workload.prompts), "profile: prompts")
    with bar:
        for prompt in workload.prompts:
            decoder.reset()
            for _rel, draft, _f in drafts:
                draft.reset()
            for ids, out, token in _prompt_steps(prompt, workload.tokens, decoder, logits):
                _count(decoder.graph, out, counts, 0, trace)
                rows[dec_rel] += ids.shape[1]
                generated += 1
                for rel, draft, row0 in drafts:  # the MTP on the same rows, with the tokens that follow them
                    following = np.concatenate([ids[:, 1:], np.array([[token]], dtype=np.int64)], axis=1)
                    hidden = out.get(pkg.main_hidden)
                    if hidden is None:
                        raise ProfileError(f"{pkg.root / dec_rel}: no output {pkg.main_hidden!r} to feed {rel}")
                    _count(draft.graph, draft.step(following, hidden), counts, row0, trace)
                    rows[rel] += ids.shape[1]
            bar.advance()
    steps = tuple(np.concatenate(t) if t else np.zeros((0, s.k), np.int32) for t, s in zip(trace, sites))
    run = ProfileRun(counts, tuple(sites), rows, len(workload.prompts), generated,
                     time.perf_counter() - start, pkg.surface, steps)  # fmt: skip
    run.check_sums()
    return run
