"""weights_pool.txt placements for offload packages, and the aligned MTP-expert file.

- Routed experts (QMoE expert inputs: slots 2-13, 15, 16) are ``cpu_mmap``: ORT streams them.
- Every other pooled tensor (dense weights, the token embedding) is ``host_mapped``.
- ``mtp_host_mapped=True`` (``--mtp-moe-placement host_mapped``): the MTP draft's expert pool
  entries are ``host_mapped`` instead; those starting at an offset that is not a multiple of
  :data:`ALIGN` are moved, in pool order, into one aligned file (:data:`ALIGNED_FILE`) next to
  the output, and every graph reference to the same bytes is moved with them.

Pool entries are matched to graph tensors by their bytes' location ``(file, offset)``, falling
back to the provenance names (``role:NAME``), never by pool id: synthetic and real pools name
their ids freely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import onnx_ir as ir

from q38._ops import MS_DOMAIN, QMOE
from q38.errors import PoolError
from q38.package.io.copying import copy_range
from q38.package.v12b.pool import Placement, PoolEntry, WeightsPool

__all__ = [
    "ALIGN",
    "ALIGNED_FILE",
    "EXPERT_SLOTS",
    "Move",
    "PoolPlan",
    "expert_initializers",
    "plan_pool",
    "retarget_graph",
    "write_moves",
]

ALIGN: Final = 4096  # host_mapped entries are mmapped: page alignment
ALIGNED_FILE: Final = "mtp_experts.aligned.data"
EXPERT_SLOTS: Final = frozenset({2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16})


def expert_initializers(graph: ir.Graph) -> tuple[dict[str, ir.Value], dict[str, ir.Value]]:
    """(routed experts of decoder layers, routed experts of the MTP draft) by initializer name."""
    layers: dict[str, ir.Value] = {}
    mtp: dict[str, ir.Value] = {}
    for node in graph:
        if node.domain != MS_DOMAIN or node.op_type != QMOE:
            continue
        into = mtp if (node.name or "").startswith("/mtp/") else layers
        for slot, value in enumerate(node.inputs):
            if slot in EXPERT_SLOTS and value is not None and value.is_initializer() and value.name:
                into[value.name] = value
    return layers, mtp


@dataclass(frozen=True)
class Move:
    """Bytes of one pool entry copied into the aligned file."""

    pool_id: str
    src_file: str
    src_offset: int
    length: int
    dst_offset: int


@dataclass(frozen=True)
class PoolPlan:
    """The converted pool: entries re-placed, the byte moves into the aligned file, and counts.

    ``relocated`` maps (old file, old offset) to (new file, new offset) for the graph's
    references; ``counts``: entries made ``cpu_mmap`` / ``host_mapped``, moved, added.
    """

    pool: WeightsPool
    moves: tuple[Move, ...]
    # (old file, old offset) -> (new file, new offset) for graph references
    relocated: dict[tuple[str, int], tuple[str, int]]
    counts: dict[str, int]


def _location(value: ir.Value) -> tuple[str, int] | None:
    tensor = value.const_value
    if isinstance(tensor, ir.ExternalTensor):
        return (str(tensor.location), int(tensor.offset or 0))
    return None


def _provenance_names(entry: PoolEntry) -> set[str]:
    names = set()
    for part in entry.provenance.split(","):
        _role, sep, name = part.strip().partition(":")
        if sep and name:
            names.add(name)
    return names


def _matches(entry: PoolEntry, by_loc: set[tuple[str, int]], names: Iterable[str]) -> bool:
    return (entry.file, entry.offset) in by_loc or bool(_provenance_names(entry) & set(names))


def plan_pool(
    pool: WeightsPool,
    graph: ir.Graph,
    *,
    mtp_host_mapped: bool,
    file_sizes: Mapping[str, int],
    align: int = ALIGN,
    aligned_file: str = ALIGNED_FILE,
) -> PoolPlan:
    """New placements (and moves) for ``pool`` given the converted target ``graph``.

    ``file_sizes`` maps each pool file to its size (for ``-`` lengths to EOF). Pure: nothing is
    read or written.
    """
    layer_experts, mtp_experts = expert_initializers(graph)
    layer_locs = {loc for v in layer_experts.values() if (loc := _location(v)) is not None}
    mtp_locs = {loc for v in mtp_experts.values() if (loc := _location(v)) is not None}
    moves: list[Move] = []
    relocated: dict[tuple[str, int], tuple[str, int]] = {}
    counts = {"cpu_mmap": 0, "host_mapped": 0, "moved": 0}
    cursor = 0

    def place(entry: PoolEntry) -> PoolEntry:
        nonlocal cursor
        is_mtp = _matches(entry, mtp_locs, mtp_experts)
        is_expert = is_mtp or _matches(entry, layer_locs, layer_experts)
        if is_expert and not (is_mtp and mtp_host_mapped):
            counts["cpu_mmap"] += 1
            return dataclasses.replace(entry, placement=Placement.CPU_MMAP)
        counts["host_mapped"] += 1
        entry = dataclasses.replace(entry, placement=Placement.HOST_MAPPED)
        if not (is_mtp and mtp_host_mapped) or entry.offset % align == 0:
            return entry
        length = entry.length
        if length is None:
            if entry.file not in file_sizes:
                raise PoolError(f"weights_pool.txt: entry {entry.pool_id}: file {entry.file!r} is missing")
            length = file_sizes[entry.file] - entry.offset
        key = (entry.file, entry.offset)
        if key in relocated:  # two entries aliasing the same bytes share one copy
            _new_file, dst = relocated[key]
        else:
            dst = -(-cursor // align) * align
            moves.append(Move(entry.pool_id, entry.file, entry.offset, length, dst))
            relocated[key] = (aligned_file, dst)
            cursor = dst + length
        counts["moved"] += 1
        return dataclasses.replace(entry, file=aligned_file, offset=dst, length=length)

    placed = pool.replace_entries(place)
    added = [place(e) for e in _missing_expert_entries(pool, {**layer_experts, **mtp_experts})]
    counts["added"] = len(added)
    return PoolPlan(WeightsPool(placed.records + tuple(added)), tuple(moves), relocated, counts)


def _missing_expert_entries(pool: WeightsPool, experts: Mapping[str, ir.Value]) -> list[PoolEntry]:
    """Pool entries for routed-expert tensors the source pool does not list, in graph order.

    So every offloaded expert has a placement; ids ``expert.NNNN`` avoid existing ids.
    """
    known_locs = {(e.file, e.offset) for e in pool.entries}
    known_names = set().union(*(_provenance_names(e) for e in pool.entries)) if pool.entries else set()
    ids = {e.pool_id for e in pool.entries}
    out: list[PoolEntry] = []
    seen: set[tuple[str, int]] = set()
    counter = 0
    for name, value in experts.items():
        tensor = value.const_value
        loc = _location(value)
        if loc is None or loc in known_locs or loc in seen or name in known_names:
            continue
        assert isinstance(tensor, ir.ExternalTensor)
        seen.add(loc)
        while f"expert.{counter:04d}" in ids:
            counter += 1
        pool_id = f"expert.{counter:04d}"
        ids.add(pool_id)
        out.append(
            PoolEntry(
                pool_id, loc[0], loc[1], int(tensor.length) if tensor.length is not None else None,
                tensor.dtype.name.lower(), tuple(int(d) for d in tensor.shape.numpy()), Placement.DEVICE,
                f"target:{name}",
            )
        )
    return out


def retarget_graph(model: ir.Model, relocated: Mapping[tuple[str, int], tuple[str, int]]) -> int:
    """Point external tensors at their moved bytes (in place on a model q38 owns); count."""
    if not relocated:
        return 0
    count = 0
    for value in model.graph.initializers.values():
        tensor = value.const_value
        loc = _location(value)
        if loc is None or loc not in relocated:
            continue
        assert isinstance(tensor, ir.ExternalTensor)
        new_file, new_offset = relocated[loc]
        value.const_value = ir.ExternalTensor(
            new_file,
            new_offset,
            tensor.length,
            tensor.dtype,
            shape=tensor.shape,
            name=tensor.name or value.name or "",
            base_dir=tensor.base_dir,
        )
        count += 1
    return count


def write_moves(moves: Iterable[Move], *, src_root: Path, dst: Path) -> None:
    """Copy each move's byte range into ``dst`` (created) by the shared kernel copy.

    copy_file_range, else sendfile across filesystems, else read/write: no buffering of weight
    bytes in Python; holes between aligned entries stay sparse zeros.
    """
    with open(dst, "xb") as out:
        end = 0
        for move in moves:
            with open(src_root / move.src_file, "rb") as src:
                _method, sent = copy_range(src.fileno(), out.fileno(), move.length,
                                           src_offset=move.src_offset, dst_offset=move.dst_offset)
                if sent < move.length:
                    raise PoolError(
                        f"weights_pool.txt: entry {move.pool_id}: {move.src_file} ends before "
                        f"offset {move.src_offset + move.length}"
                    )
            end = max(end, move.dst_offset + move.length)
        out.truncate(end)
