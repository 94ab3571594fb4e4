"""Pool placements of routed experts, and MTP experts moved into the aligned file on page boundaries.

Invariants guarded:
- (issue 25, survivor "MTP aligned-file offsets not rounded") with ``mtp_host_mapped`` every MTP
  expert tensor at an unaligned offset is copied into ``mtp_experts.aligned.data`` at a multiple
  of 4096, the copies do not overlap, and each copy holds its source bytes. The lengths here
  (100, 3000, 5000, 1 bytes) are not page multiples, so a cursor that is not rounded up shows at
  the second move (offset 100 instead of 4096); an entry read to the end of its file (``-``)
  moves exactly the bytes up to that end;
- pool entries are matched to graph tensors by location (offset 0 included), else by provenance
  name (any name of a comma-separated provenance, cut at its first ``:`` only): a matched routed expert is ``cpu_mmap`` and gets
  no second entry; an expert the pool does not list gets exactly one new entry per distinct byte
  range, its length kept (``-`` included).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

from q38._ops import MS_DOMAIN, QMOE
from q38.offload.placement import ALIGN, ALIGNED_FILE, plan_pool, write_moves
from q38.package.v12b.pool import Placement, PoolEntry, WeightsPool

# (offset, length) of four MTP expert tensors in model.onnx.data: none aligned, no length a page multiple
TENSORS = ((10, 100), (200, 3000), (5000, 5000), (12345, 1))
EOF = max(o + n for o, n in TENSORS)  # size of model.onnx.data


def _graph(tensors: Sequence[tuple[int, int | None]] = TENSORS, prefix: str = "mtp.experts.w") -> ir.Graph:
    """The MTP draft's QMoE node, its expert slots reading ``tensors`` ((offset, length); length
    None: to the end of model.onnx.data) as initializers named ``{prefix}{i}``."""
    inputs: list[ir.Value | None] = [ir.Value(name="x"), ir.Value(name="router")]
    inits = []
    for i, (offset, length) in enumerate(tensors):
        size = length if length is not None else EOF - offset
        tensor = ir.ExternalTensor("model.onnx.data", offset, length, ir.DataType.UINT8,
                                   shape=ir.Shape([size]), name=f"{prefix}{i}")
        value = ir.Value(name=f"{prefix}{i}", shape=tensor.shape, type=ir.TensorType(ir.DataType.UINT8),
                         const_value=tensor)
        inputs.append(value)
        inits.append(value)
    node = ir.Node(MS_DOMAIN, QMOE, inputs, name="/mtp/0/moe/QMoE", num_outputs=1)
    return ir.Graph([inputs[0], inputs[1]], node.outputs, nodes=[node], initializers=inits)  # type: ignore[list-item]


def _entry(pool_id: str, offset: int, length: int | None, provenance: str) -> PoolEntry:
    return PoolEntry(pool_id, "model.onnx.data", offset, length, "uint8",
                     (length if length is not None else EOF - offset,), Placement.DEVICE, provenance)


def _pool() -> WeightsPool:
    return WeightsPool.from_entries(
        _entry(f"w{i:04d}", offset, length, f"target:mtp.experts.w{i}") for i, (offset, length) in enumerate(TENSORS)
    )


def test_moved_mtp_experts_land_page_aligned_without_overlap(tmp_path: Path) -> None:
    data = np.random.default_rng(0).integers(0, 256, EOF, dtype=np.uint8).tobytes()
    (tmp_path / "model.onnx.data").write_bytes(data)
    plan = plan_pool(_pool(), _graph(), mtp_host_mapped=True, file_sizes={"model.onnx.data": EOF})
    assert len(plan.moves) == len(TENSORS)
    spans = sorted((m.dst_offset, m.dst_offset + m.length) for m in plan.moves)
    assert all(start % ALIGN == 0 for start, _ in spans), spans
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans)), spans
    moved = {e.pool_id: e for e in plan.pool.entries}
    for move in plan.moves:
        entry = moved[move.pool_id]
        assert (entry.file, entry.offset, entry.placement) == (ALIGNED_FILE, move.dst_offset, Placement.HOST_MAPPED)
    write_moves(plan.moves, src_root=tmp_path, dst=tmp_path / ALIGNED_FILE)
    aligned = (tmp_path / ALIGNED_FILE).read_bytes()
    for move in plan.moves:
        src = data[move.src_offset:move.src_offset + move.length]
        assert aligned[move.dst_offset:move.dst_offset + move.length] == src, move


def test_an_unaligned_mtp_entry_read_to_the_end_of_its_file_moves_exactly_those_bytes(tmp_path: Path) -> None:
    """A ``-`` length (to EOF) becomes the file's size less the offset: the move copies the tail, no more."""
    data = np.random.default_rng(1).integers(0, 256, EOF, dtype=np.uint8).tobytes()
    (tmp_path / "model.onnx.data").write_bytes(data)
    pool = WeightsPool.from_entries([_entry("tail", 200, None, "target:mtp.experts.w0")])
    plan = plan_pool(pool, _graph([(200, None)]), mtp_host_mapped=True, file_sizes={"model.onnx.data": EOF})
    (move,) = plan.moves
    assert (move.src_offset, move.length, move.dst_offset) == (200, EOF - 200, 0)
    (entry,) = plan.pool.entries
    assert (entry.file, entry.offset, entry.length) == (ALIGNED_FILE, 0, EOF - 200)
    write_moves(plan.moves, src_root=tmp_path, dst=tmp_path / ALIGNED_FILE)
    assert (tmp_path / ALIGNED_FILE).read_bytes() == data[200:]


@pytest.mark.parametrize("mtp_host_mapped", [False, True])
def test_pool_entries_are_matched_to_expert_tensors_by_location(mtp_host_mapped: bool) -> None:
    """Entries whose provenance names no graph tensor still match by (file, offset), offset 0
    included: the MTP experts are ``cpu_mmap`` (``host_mapped`` when asked, the unaligned one
    moved), and no entry is added for them."""
    pool = WeightsPool.from_entries([_entry("a", 0, 64, "target:renamed.a"), _entry("b", 4106, 100, "target:renamed.b")])
    plan = plan_pool(pool, _graph([(0, 64), (4106, 100)]), mtp_host_mapped=mtp_host_mapped,
                     file_sizes={"model.onnx.data": EOF})
    want = Placement.HOST_MAPPED if mtp_host_mapped else Placement.CPU_MMAP
    assert [(e.pool_id, e.placement) for e in plan.pool.entries] == [("a", want), ("b", want)]
    assert plan.counts["added"] == 0
    assert [(m.pool_id, m.src_offset) for m in plan.moves] == ([("b", 4106)] if mtp_host_mapped else [])


def test_an_expert_the_pool_names_at_another_location_gets_no_new_entry() -> None:
    """Matching falls back to the provenance name: an expert the pool lists by name is placed, not
    listed a second time under a new id."""
    pool = WeightsPool.from_entries([_entry("w0", 4096, 100, "target:mtp.experts.w0")])
    plan = plan_pool(pool, _graph([(10, 100)]), mtp_host_mapped=False, file_sizes={"model.onnx.data": EOF})
    assert [(e.pool_id, e.placement) for e in plan.pool.entries] == [("w0", Placement.CPU_MMAP)]
    assert plan.counts["added"] == 0


def test_unlisted_experts_get_one_entry_per_byte_range_with_their_length() -> None:
    """Experts the pool does not list are added in graph order as ``expert.NNNN`` (ids free of the
    pool's): two tensors over the same bytes share one entry, and a tensor without a length keeps
    ``-`` (to the end of its file)."""
    pool = WeightsPool.from_entries([_entry("expert.0000", 8192, 16, "target:dense")])
    plan = plan_pool(pool, _graph([(10, 100), (10, 100), (200, None)]), mtp_host_mapped=False, file_sizes={"model.onnx.data": EOF})
    added = [(e.pool_id, e.offset, e.length, e.placement, e.provenance) for e in plan.pool.entries[1:]]
    assert added == [
        ("expert.0001", 10, 100, Placement.CPU_MMAP, "target:mtp.experts.w0"),
        ("expert.0002", 200, None, Placement.CPU_MMAP, "target:mtp.experts.w2"),
    ]
    assert plan.counts == {"cpu_mmap": 2, "host_mapped": 1, "moved": 0, "added": 2}


def test_a_provenance_listing_several_names_matches_any_of_them() -> None:
    """A pool entry shared by several tensors lists them comma-separated (``role:A,role:B``): the
    expert named second is matched by name (placed ``cpu_mmap``, not listed a second time)."""
    pool = WeightsPool.from_entries([_entry("w0", 4096, 100, "target:mtp.shared.bias,target:mtp.experts.w0")])
    plan = plan_pool(pool, _graph([(10, 100)]), mtp_host_mapped=False, file_sizes={"model.onnx.data": EOF})
    assert [(e.pool_id, e.placement) for e in plan.pool.entries] == [("w0", Placement.CPU_MMAP)]
    assert plan.counts["added"] == 0


def test_a_provenance_name_holding_colons_matches_the_whole_name() -> None:
    """Only the first ``:`` ends the role: an exporter's name such as ``onnx::QMoE_w0`` (torch
    writes these) is matched whole, so its entry is placed ``cpu_mmap`` and not listed twice."""
    pool = WeightsPool.from_entries([_entry("w0", 4096, 100, "target:onnx::QMoE_w0")])
    plan = plan_pool(pool, _graph([(10, 100)], prefix="onnx::QMoE_w"), mtp_host_mapped=False,
                     file_sizes={"model.onnx.data": EOF})
    assert [(e.pool_id, e.placement) for e in plan.pool.entries] == [("w0", Placement.CPU_MMAP)]
    assert plan.counts["added"] == 0
