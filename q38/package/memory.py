"""Exact memory of a package from shapes and dtypes: weights per file and class, state per context.

This is the memory model ``q38 fit`` prints and the runtime-profile fit contract checks
(``contracts/profile_fit.py``); it lives here, in the package layer, because both read it and it
is a reading of the package: graphs are loaded with ``onnx.load(..., load_external_data=False)``
and no weight byte is ever read. docs/fit.md gives the formulas.

* **Weights**: every initializer of every graph the runtime loads (the decoder a profile selects,
  and the graphs that run beside it), ``ceil(prod(shape) * bits(dtype) / 8)`` bytes, stored either
  in an external data file (keyed by file and offset, so a tensor shared by several graphs counts
  once) or inline in the graph file. Classes: ``routed_expert`` (QMoE expert inputs 2-13, 15, 16),
  ``embedding`` (the data of a ``Gather`` on ``input_ids``), ``head`` (``lm_head``), ``mtp`` (the
  MTP draft's tensors), ``dense`` (the rest). Placement: the weights pool's (v12b), else ``device``.
* **State**: the graph outputs the runtime carries from step to step (``present.*``), their
  element type and shape with ``batch_size`` -> B, the sequence dims -> the context length T,
  ``kv_cache_dim`` -> the config's head size, a paged pool's ``num_blocks x block_size`` -> B x T.
  Kinds from the node that produces the output: attention KV (GroupQueryAttention, the QSA / DSA
  ops, PagedAttention), indexer caches, Gated DeltaNet recurrent state, conv state.
* **Profiles**: each ``runtime_profiles`` entry's device budget (the smallest device it admits,
  capped by the CUDA arena's ``gpu_mem_limit``), its decoder and offload entries; routed experts
  of an offloaded node count ``max_resident_slots x bytes per expert`` on the device.

Surface differences (which graphs run together, where placements come from) stay in this
module: callers see one :class:`PackageFacts` whatever the surface.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from q38.errors import GraphError, PackageError
from q38.package.io.paths import resolve_inside
from q38.package.readers import reader_for
from q38.package.surface import list_graphs

if TYPE_CHECKING:  # onnx loads when a graph is read, not at import
    import onnx

__all__ = [
    "EXPERT_INPUTS",
    "ExpertNode",
    "GraphMemory",
    "MemoryBreakdown",
    "PackageFacts",
    "ProfileFacts",
    "StateTensor",
    "TensorBytes",
    "breakdown",
    "dtype_bits",
    "graph_memory",
    "load_graph_header",
    "load_memory",
    "parse_caps",
    "pool_placements",
    "profile_breakdowns",
    "read_package_facts",
    "tensor_nbytes",
]

GIB: Final = 1 << 30
OFFLOAD_PREFIX: Final = "session.moe.offload."
# The QMoE inputs that hold routed-expert bytes (docs/offload.md: slots 2-13, 15, 16).
EXPERT_INPUTS: Final = frozenset({*range(2, 14), 15, 16})
# Bits per element of each onnx TensorProto data type.
_BITS: Final = {
    1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 8: 0, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64,
    14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8,
}  # fmt: skip
_DTYPE_NAMES: Final = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
    10: "float16", 11: "double", 12: "uint32", 13: "uint64", 16: "bfloat16", 17: "float8e4m3fn",
    19: "float8e5m2", 21: "uint4", 22: "int4", 23: "float4e2m1", 24: "float8e8m0",
}  # fmt: skip
_KV_OPS: Final = frozenset({
    "GroupQueryAttention", "PagedAttention", "DynamicSparseAttention", "PackedSparseAttention",
    "SparseAttention", "MultiHeadAttention", "Attention", "QSAAttention",
})  # fmt: skip
_RECURRENT_OPS: Final = frozenset({"GatedDeltaNet", "LinearAttention"})
_CONV_OPS: Final = frozenset({"CausalConvWithState", "VarlenCausalConvWithState"})

StateKind = Literal["kv", "indexer", "recurrent", "conv", "other"]
WeightClass = Literal["routed_expert", "embedding", "head", "mtp", "dense"]


def dtype_bits(elem_type: int) -> int:
    """Bits per element of an onnx data type (0: a type without a fixed size, e.g. string)."""
    return _BITS.get(int(elem_type), 0)


def tensor_nbytes(elem_type: int, dims: Iterable[int]) -> int:
    """``ceil(prod(dims) * bits / 8)``: the bytes a tensor of this type and shape occupies."""
    return (math.prod(int(d) for d in dims) * dtype_bits(elem_type) + 7) // 8


@dataclass(frozen=True)
class TensorBytes:
    """One initializer: where its bytes live, how many, and what it is for."""

    name: str
    graph: str  # the graph file (relative to the package root) that names it
    file: str  # the file holding its bytes (external data file, or the graph file itself)
    offset: int | None  # external offset; None for an inline tensor
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    kind: WeightClass
    node: str = ""  # the QMoE node of a routed-expert tensor
    experts: int = 0  # that node's expert count

    @property
    def key(self) -> tuple[str, object]:
        """Identity of the bytes: (file, offset), or (graph, name) for inline tensors."""
        return (self.file, self.offset) if self.offset is not None else (self.graph, self.name)


@dataclass(frozen=True)
class StateTensor:
    """One per-sequence state buffer the runtime carries between steps (a ``present.*`` output)."""

    graph: str
    name: str
    kind: StateKind
    op: str  # the op type that produces it
    dtype: str
    bits: int
    dims: tuple[int | str, ...]  # ints, or "B" (batch), "T" (context), "BT" (paged: batch x context)

    @property
    def grows(self) -> bool:
        """Whether it grows with the context length."""
        return any(d in ("T", "BT") for d in self.dims)

    def nbytes(self, context: int, batch: int = 1) -> int:
        """Bytes at ``context`` tokens for ``batch`` sequences."""
        count = 1
        for d in self.dims:
            count *= {"B": batch, "T": context, "BT": batch * context}.get(d, 1) if isinstance(d, str) else d
        return (count * self.bits + 7) // 8


@dataclass(frozen=True)
class GraphMemory:
    """The initializers and state outputs of one graph file."""

    rel: str
    tensors: tuple[TensorBytes, ...]
    states: tuple[StateTensor, ...]
    unresolved: tuple[str, ...] = ()  # state outputs with a dim q38 cannot size (named in the output)


def _rel(root: Path, path: Path) -> str:
    try:
        return Path(os.path.normpath(path)).relative_to(os.path.normpath(root)).as_posix()
    except ValueError:
        return path.as_posix()


def load_graph_header(path: Path) -> onnx.ModelProto:
    """The graph's ModelProto without external data (``onnx.load(..., load_external_data=False)``)."""
    import onnx  # deferred: heavy; only reading a graph header needs it

    try:
        return onnx.load(str(path), load_external_data=False)
    except OSError:
        raise
    except Exception as exc:  # a truncated or foreign file: one line naming it
        raise GraphError(f"{path}: not a readable ONNX graph: {type(exc).__name__}: {exc}") from None


def _classify_dim(dim: onnx.TensorShapeProto.Dimension, head_size: int) -> int | str | None:
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    name = dim.dim_param.lower()
    if "batch" in name:
        return "B"
    if name in ("num_blocks",):
        return "BT"
    if name in ("block_size",):
        return 1
    if "sequence" in name or name in ("past_len", "total_len", "context", "max_seq_len"):
        return "T"
    if name == "kv_cache_dim" and head_size > 0:
        return head_size
    return None


def _state_kind(name: str, op: str) -> StateKind:
    if "indexer" in op.lower() or "indexer" in name:
        return "indexer"
    if op in _KV_OPS or name.endswith((".key", ".value")):
        return "kv"
    if op in _RECURRENT_OPS or name.endswith(".recurrent"):
        return "recurrent"
    if op in _CONV_OPS or name.endswith(".conv"):
        return "conv"
    return "other"


def graph_memory(path: Path, root: Path, *, head_size: int = 0, state: bool = True) -> GraphMemory:
    """Initializers (by class and storage) and state outputs of the graph at ``path``.

    ``root``: the package root (files are named relative to it). Reads the graph's protobuf only.
    """
    model = load_graph_header(path)
    graph = model.graph
    rel = _rel(root, path)
    base = path.parent
    expert_of: dict[str, tuple[str, int]] = {}
    embedding: set[str] = set()
    inputs = {v.name for v in graph.input}
    for node in graph.node:
        if node.op_type == "QMoE":
            for index, name in enumerate(node.input):
                if name and index in EXPERT_INPUTS:
                    expert_of[name] = (node.name, 0)
        elif node.op_type in ("Gather", "GatherBlockQuantized") and len(node.input) > 1 and node.input[1] in inputs:
            embedding.add(node.input[0])
    tensors = []
    for init in graph.initializer:
        dims = tuple(int(d) for d in init.dims)
        nbytes = tensor_nbytes(init.data_type, dims)
        file, offset = rel, None
        if init.data_location == 1:  # EXTERNAL
            info = {e.key: e.value for e in init.external_data}
            file = _rel(root, base / info.get("location", ""))
            offset = int(info.get("offset", "0") or 0)
        name = init.name
        node, experts = "", 0
        kind: WeightClass
        if name in expert_of:
            kind, node, experts = "routed_expert", expert_of[name][0], (dims[0] if dims else 1)
        elif name in embedding or "embed_tokens" in name:
            kind = "embedding"
        elif "lm_head" in name:
            kind = "head"
        elif name.startswith(("mtp.", "mtp/", "/mtp/", "model.mtp")):
            kind = "mtp"
        else:
            kind = "dense"
        tensors.append(TensorBytes(name, rel, file, offset, nbytes, _DTYPE_NAMES.get(init.data_type, str(init.data_type)),
                                   dims, kind, node, experts))  # fmt: skip
    states: list[StateTensor] = []
    unresolved: list[str] = []
    if state:
        producer = {out: n.op_type for n in graph.node for out in n.output}
        for out in graph.output:
            if not out.name.startswith("present"):
                continue
            tt = out.type.tensor_type
            dims_out = [_classify_dim(d, head_size) for d in tt.shape.dim]
            if any(d is None for d in dims_out):
                unresolved.append(out.name)
                continue
            op = producer.get(out.name, "")
            states.append(StateTensor(rel, out.name, _state_kind(out.name, op), op,
                                      _DTYPE_NAMES.get(tt.elem_type, str(tt.elem_type)), dtype_bits(tt.elem_type),
                                      tuple(d for d in dims_out if d is not None)))  # fmt: skip
    return GraphMemory(rel, tuple(tensors), tuple(states), tuple(unresolved))


# ------------------------------------------------------------------------------ package facts
@dataclass(frozen=True)
class ProfileFacts:
    """One runtime profile as the fit reads it."""

    id: str
    min_device: int
    max_device: int | None
    min_host: int | None
    max_host: int | None
    decoder: str  # the decoder graph it selects (relative to the package root)
    entries: Mapping[str, str]  # the decoder's session entries with the overlay applied
    gpu_mem_limit: int | None
    context: int  # its context tier (the overlay's search.max_length, else the model's context_length)
    arena_strategy: str | None = None  # the CUDA arena's arena_extend_strategy

    @property
    def device_budget(self) -> int:
        """The device bytes the profile may use: its smallest admitted device, capped by the arena limit."""
        if self.gpu_mem_limit is not None and self.gpu_mem_limit > 0:
            return min(self.min_device, self.gpu_mem_limit)
        return self.min_device


@dataclass(frozen=True)
class PackageFacts:
    """What the memory model needs of a package, whatever its surface."""

    root: Path
    surface: str
    decoder: str  # the default decoder graph (relative to root)
    companions: tuple[str, ...]  # graphs loaded beside the decoder (head, prefill, mtp ...)
    state_graphs: tuple[str, ...]  # companions whose present.* outputs are state of their own
    entries: Mapping[str, str]  # the decoder's session entries
    gpu_mem_limit: int | None
    context_length: int
    head_size: int
    mtp_graphs: tuple[str, ...] = ()  # companions that are an MTP draft (their dense tensors count as mtp)
    hidden_size: int = 0
    vocab_size: int = 0
    placements: Mapping[tuple[str, int], str] = field(default_factory=dict)  # (file, offset) -> placement
    profiles: tuple[ProfileFacts, ...] = ()
    arena_strategy: str | None = None  # the decoder's CUDA arena_extend_strategy

    def path(self, rel: str) -> Path:
        """The absolute path of a graph named relative to the root."""
        return self.root / rel


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str_entries(so: object) -> dict[str, str]:
    return {str(k): v for k, v in _obj(so).items() if isinstance(v, str)} | {
        str(k): v for k, v in _obj(_obj(so).get("config_entries")).items() if isinstance(v, str)
    }


def _cuda_option(so: object, key: str) -> object:
    for entry in _obj(so).get("provider_options") or []:
        for name, options in _obj(entry).items():
            if str(name).lower() == "cuda" and key in _obj(options):
                return _obj(options)[key]
    return None


def _mem_limit(so: object) -> int | None:
    return _int(_cuda_option(so, "gpu_mem_limit"), None)


def _strategy(so: object) -> str | None:
    value = _cuda_option(so, "arena_extend_strategy")
    return value if isinstance(value, str) else None


def _int(value: object, default: int | None) -> int | None:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return default


def read_package_facts(path: Path | str, *, document: Mapping[str, Any] | None = None,
                       placements: Mapping[tuple[str, int], str] | None = None) -> PackageFacts:  # fmt: skip
    """The facts of the package at ``path`` (either surface).

    ``document`` / ``placements``: a config and pool placements planned but not yet written
    (``q38 offload`` checks its profiles before writing); default: the package's own.
    """
    root = Path(path)
    listing = list_graphs(root)
    doc = dict(document) if document is not None else listing.document
    config_dir = listing.config_dir
    model = _obj(doc.get("model"))
    decoder = _obj(model.get("decoder"))
    refs = listing.graphs
    if not refs:
        raise PackageError(f"{root}: the config names no graph")
    decoder_rel = _rel(root, refs[0].path)
    alternates = {"s2", "s3", "s4"}
    companions = tuple(
        dict.fromkeys(_rel(root, r.path) for r in refs[1:]
                      if r.role not in alternates and not r.role.startswith("profile:")
                      and _rel(root, r.path) != decoder_rel)
    )  # fmt: skip
    layout = reader_for(listing.surface).state_layout(config_dir, doc, refs)
    state_graphs = tuple(_rel(root, p) for p in layout.state_graphs)
    mtp_graphs = tuple(_rel(root, p) for p in layout.mtp_graphs)
    pool = {(_rel(root, p), o): placement for (p, o), placement in layout.placements.items()}
    so = decoder.get("session_options")
    entries = _str_entries(so)
    context = _int(model.get("context_length"), 0) or 0
    profiles = []
    raw_profiles = doc.get("runtime_profiles")
    for index, raw in enumerate(raw_profiles if isinstance(raw_profiles, list) else []):
        profile = _obj(raw)
        elig = _obj(profile.get("eligibility"))
        overlay = _obj(profile.get("overlay"))
        over_dec = _obj(_obj(overlay.get("model")).get("decoder"))
        over_so = over_dec.get("session_options")
        filename = over_dec.get("filename")
        rel = _rel(root, config_dir / filename) if isinstance(filename, str) else decoder_rel
        tier = _int(_obj(overlay.get("search")).get("max_length"), None) or context
        limit = _mem_limit(over_so)
        profiles.append(ProfileFacts(
            id=str(profile.get("id", index)),
            min_device=_int(elig.get("minimum_total_device_memory_bytes"), 0) or 0,
            max_device=_int(elig.get("maximum_total_device_memory_bytes"), None),
            min_host=_int(elig.get("minimum_effective_host_memory_bytes"), None),
            max_host=_int(elig.get("maximum_effective_host_memory_bytes"), None),
            decoder=rel,
            entries={**entries, **_str_entries(over_so)},
            gpu_mem_limit=limit if limit is not None else _mem_limit(so),
            context=tier,
            arena_strategy=_strategy(over_so) or _strategy(so),
        ))  # fmt: skip
    return PackageFacts(
        root=root, surface=listing.surface, decoder=decoder_rel, companions=companions,
        state_graphs=state_graphs, mtp_graphs=mtp_graphs, entries=entries, gpu_mem_limit=_mem_limit(so), context_length=context,
        head_size=_int(decoder.get("head_size"), 0) or 0, hidden_size=_int(decoder.get("hidden_size"), 0) or 0,
        vocab_size=_int(model.get("vocab_size"), 0) or 0,
        placements=dict(placements) if placements is not None else pool, profiles=tuple(profiles),
        arena_strategy=_strategy(so),
    )  # fmt: skip


def pool_placements(root: Path, config_dir: Path, entries: Iterable[tuple[str, int, str]]) -> dict[tuple[str, int], str]:
    """``(file relative to root, offset) -> placement`` of pool entries ``(file, offset, placement)``."""
    return {(_rel(root, config_dir / f), int(o)): p for f, o, p in entries}


# ------------------------------------------------------------------------------ breakdown
def parse_caps(text: str) -> dict[str, int]:
    """``node -> max_resident_slots`` of a ``session.moe.offload.node_overrides`` value."""
    caps: dict[str, int] = {}
    for entry in text.split(";"):
        name, sep, settings = entry.strip().rpartition(":")
        if not sep:
            continue
        for setting in settings.split(","):
            key, _, value = setting.strip().partition("=")
            if key.strip() == "max_resident_slots" and value.strip().isdigit():
                caps[name.strip()] = int(value)
    return caps


@dataclass(frozen=True)
class ExpertNode:
    """One QMoE node's routed experts under a set of session entries."""

    graph: str
    node: str
    experts: int
    bytes_per_expert: int
    resident: int | None  # experts on the device (None: ORT sizes it from its budget)

    @property
    def total(self) -> int:
        """Bytes of all the node's routed experts, wherever they are placed."""
        return self.experts * self.bytes_per_expert


@dataclass(frozen=True)
class MemoryBreakdown:
    """Device and host bytes of one configuration (decoder + companions, entries, context, batch)."""

    weights: Mapping[str, Mapping[str, int]]  # class -> placement -> bytes (routed experts excluded)
    experts: tuple[ExpertNode, ...]
    offloaded: bool
    device_expert_budget: int | None
    state: Mapping[str, int]  # kind -> bytes at the context
    fixed_state: int  # the part that does not grow with context
    context: int
    batch: int
    files: Mapping[str, int]  # file -> weight bytes it stores (every tensor once)
    unresolved: tuple[str, ...] = ()

    @property
    def expert_device(self) -> int:
        """Routed-expert bytes on the device: resident slots (offloaded) or every expert."""
        if not self.offloaded:
            return sum(e.total for e in self.experts)
        capped = sum(min(e.resident, e.experts) * e.bytes_per_expert for e in self.experts if e.resident is not None)
        uncapped = sum(e.total for e in self.experts if e.resident is None)
        return capped + min(uncapped, self.device_expert_budget or 0)

    @property
    def expert_host(self) -> int:
        """Routed-expert bytes that stay on the host (offloaded nodes' non-resident experts)."""
        return sum(e.total for e in self.experts) - self.expert_device if self.offloaded else 0

    @property
    def weights_device(self) -> int:
        """Device bytes of the non-expert weights (every class's ``device`` placement)."""
        return sum(p.get("device", 0) for p in self.weights.values())

    @property
    def weights_host(self) -> int:
        """Host bytes of the non-expert weights (every placement but ``device``)."""
        return sum(v for p in self.weights.values() for k, v in p.items() if k != "device")

    @property
    def state_total(self) -> int:
        """Bytes of every state tensor (KV, recurrent, conv, indexer) at this context and batch."""
        return sum(self.state.values())

    @property
    def device_total(self) -> int:
        """Exact device bytes: device weights, device experts, state."""
        return self.weights_device + self.expert_device + self.state_total

    @property
    def host_total(self) -> int:
        """Exact host bytes: host-placed weights and the experts that stay on the host."""
        return self.weights_host + self.expert_host


def breakdown(facts: PackageFacts, graphs: Mapping[str, GraphMemory], *, decoder: str,
              entries: Mapping[str, str], context: int, batch: int = 1) -> MemoryBreakdown:  # fmt: skip
    """The memory of ``decoder`` and the package's companions under ``entries`` at ``context``.

    ``graphs``: :func:`graph_memory` of every graph named (the caller loads each once).
    """
    used = [decoder, *(c for c in facts.companions if c != decoder)]
    seen: set[tuple[str, object]] = set()
    weights: dict[str, dict[str, int]] = {}
    files: dict[str, int] = {}
    expert_bytes: dict[tuple[str, str], list[int]] = {}
    for rel in used:
        gm = graphs[rel]
        for t in gm.tensors:
            if t.key in seen:
                continue
            seen.add(t.key)
            files[t.file] = files.get(t.file, 0) + t.nbytes
            if t.kind == "routed_expert":
                slot = expert_bytes.setdefault((rel, t.node), [t.experts, 0])
                slot[1] += t.nbytes
                continue
            kind = "mtp" if t.kind == "dense" and rel in facts.mtp_graphs else t.kind
            placement = facts.placements.get((t.file, t.offset), "device") if t.offset is not None else "device"
            by = weights.setdefault(kind, {})
            by[placement] = by.get(placement, 0) + t.nbytes
    offloaded = (OFFLOAD_PREFIX + "mode") in entries
    caps = parse_caps(entries.get(OFFLOAD_PREFIX + "node_overrides", ""))
    budget = _int(entries.get(OFFLOAD_PREFIX + "device_expert_bytes"), None)
    experts = tuple(
        ExpertNode(g, n, e, b // max(e, 1), caps.get(n) if offloaded else e)
        for (g, n), (e, b) in expert_bytes.items()
    )
    state: dict[str, int] = {}
    fixed = 0
    unresolved: list[str] = []
    for rel in dict.fromkeys([decoder, *facts.state_graphs]):
        gm = graphs[rel]
        unresolved += [f"{rel}:{n}" for n in gm.unresolved]
        for s in gm.states:
            n = s.nbytes(context, batch)
            state[s.kind] = state.get(s.kind, 0) + n
            if not s.grows:
                fixed += n
    return MemoryBreakdown(weights, experts, offloaded, budget, state, fixed, context, batch, files, tuple(unresolved))


def load_memory(facts: PackageFacts, rels: Iterable[str]) -> dict[str, GraphMemory]:
    """:func:`graph_memory` of each graph in ``rels`` (each loaded once)."""
    out: dict[str, GraphMemory] = {}
    for rel in rels:
        if rel not in out:
            # a graph the config names outside the package is refused, never read
            path = resolve_inside(facts.root, rel, what="graph")
            if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device would block or never end
                raise PackageError(f"{path}: graph is not a regular file")
            out[rel] = graph_memory(path, facts.root, head_size=facts.head_size)
    return out


def profile_breakdowns(facts: PackageFacts, *, batch: int = 1) -> list[tuple[ProfileFacts, MemoryBreakdown]]:
    """Each runtime profile's memory at its own context tier."""
    rels = {facts.decoder, *facts.companions, *facts.state_graphs, *(p.decoder for p in facts.profiles)}
    graphs = load_memory(facts, sorted(rels))
    return [(p, breakdown(facts, graphs, decoder=p.decoder, entries=p.entries, context=p.context, batch=batch))
            for p in facts.profiles]  # fmt: skip
