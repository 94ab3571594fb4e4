"""MTP routed experts moved into the aligned file land on page boundaries, whatever their lengths.

Invariant (issue 25, survivor "MTP aligned-file offsets not rounded"): with ``mtp_host_mapped``
every MTP expert tensor at an unaligned offset is copied into ``mtp_experts.aligned.data`` at a
multiple of 4096, the copies do not overlap, and each copy holds its source bytes. The lengths
here (100, 3000, 5000, 1 bytes) are not page multiples, so a cursor that is not rounded up shows
at the second move (offset 100 instead of 4096).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx_ir as ir

from q38._ops import MS_DOMAIN, QMOE
from q38.offload.placement import ALIGN, ALIGNED_FILE, plan_pool, write_moves
from q38.package.pool import Placement, PoolEntry, WeightsPool

# (offset, length) of four MTP expert tensors in model.onnx.data: none aligned, no length a page multiple
TENSORS = ((10, 100), (200, 3000), (5000, 5000), (12345, 1))


def _graph() -> ir.Graph:
    inputs: list[ir.Value | None] = [ir.Value(name="x"), ir.Value(name="router")]
    inits = []
    for i, (offset, length) in enumerate(TENSORS):
        tensor = ir.ExternalTensor("model.onnx.data", offset, length, ir.DataType.UINT8,
                                   shape=ir.Shape([length]), name=f"mtp.experts.w{i}")
        value = ir.Value(name=f"mtp.experts.w{i}", shape=tensor.shape, type=ir.TensorType(ir.DataType.UINT8),
                         const_value=tensor)
        inputs.append(value)
        inits.append(value)
    node = ir.Node(MS_DOMAIN, QMOE, inputs, name="/mtp/0/moe/QMoE", num_outputs=1)
    return ir.Graph([inputs[0], inputs[1]], node.outputs, nodes=[node], initializers=inits)  # type: ignore[list-item]


def _pool() -> WeightsPool:
    return WeightsPool.from_entries(
        PoolEntry(f"w{i:04d}", "model.onnx.data", offset, length, "uint8", (length,), Placement.DEVICE,
                  f"target:mtp.experts.w{i}")
        for i, (offset, length) in enumerate(TENSORS)
    )


def test_moved_mtp_experts_land_page_aligned_without_overlap(tmp_path: Path) -> None:
    end = max(o + n for o, n in TENSORS)
    data = np.random.default_rng(0).integers(0, 256, end, dtype=np.uint8).tobytes()
    (tmp_path / "model.onnx.data").write_bytes(data)
    plan = plan_pool(_pool(), _graph(), mtp_host_mapped=True, file_sizes={"model.onnx.data": end})
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
