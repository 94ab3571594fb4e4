"""Weights the passes create: one byte range per derived tensor, shared across graphs, pooled.

A pass creates tensors (fp32 scales and caches, concatenated projections, FP8 weights) from
source tensors. Graphs of one package share source weights by identity (the same byte range of
the same file, e.g. ``lm_head.weight`` read by the target, head and prefill graphs). A tensor
derived the same way from the same source bytes is therefore written once, in the first graph's
``<stem>.opt.data``, and every later graph of the same directory points at that byte range.

Every written derived tensor gets a ``weights_pool.txt`` entry (placement ``device``) whose
provenance lists its users (``ROLE:NAME``, as the synthetic and built pools do) followed by
``pass:PASS`` and one ``from:SOURCE`` per source tensor. Existing entries are reconciled: a
graph that no longer reads an entry's bytes is removed from its provenance, and an entry that no
graph reads any more (a weight every user replaced by its derived form) is dropped.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import onnx_ir as ir

from q38.package import ExternalRef, Placement, PoolEntry, WeightsPool, external_refs
from q38.package.graphs import is_external, tensor_digest

__all__ = ["DerivedStore", "SourceIdentity", "reconcile_pool", "source_identities", "tensor_refs"]

# save_graph keeps smaller in-memory tensors inline (q38.package.graphs._INLINE_LIMIT).
_INLINE_LIMIT = 1024

SourceIdentity = tuple[object, ...]


def source_identities(
    model: ir.Model, graph_dir: Path, refs: Sequence[ExternalRef] | None = None
) -> dict[str, SourceIdentity]:
    """Identity of every initializer of ``model``'s main graph.

    External tensors: (device, inode, offset, length), so hard links and different relative
    spellings of one file give the same identity. Inline tensors (small, one copy per graph):
    dtype, shape and the hash of their bytes, so equal copies in two graphs are one source.
    ``refs``: ``external_refs(model)`` when the caller has it already (one walk per graph).
    """
    ids: dict[str, SourceIdentity] = {}
    stats: dict[str, os.stat_result] = {}  # one stat per data file, not per tensor
    for ref in external_refs(model) if refs is None else refs:
        st = stats.get(ref.location)
        if st is None:
            st = stats[ref.location] = os.stat(graph_dir / ref.location)
        ids[ref.name] = ("file", st.st_dev, st.st_ino, ref.offset, ref.length)
    for name, value in model.graph.initializers.items():
        tensor = value.const_value
        if name in ids or tensor is None or is_external(tensor):
            continue
        digest = tensor_digest(tensor)
        ids[name] = ("inline", tensor.dtype, tuple(int(d) for d in tensor.shape.numpy()), digest)
    return ids


def tensor_refs(
    model: ir.Model, graph_dir: Path, pool_dir: Path, refs: Sequence[ExternalRef] | None = None
) -> dict[tuple[str, int], list[str]]:
    """(file relative to ``pool_dir``, offset) -> names of the tensors of ``model`` there."""
    out: dict[tuple[str, int], list[str]] = {}
    rels: dict[str, str] = {}  # one path computation per data file, not per tensor
    for ref in external_refs(model) if refs is None else refs:
        rel = rels.get(ref.location)
        if rel is None:
            rel = rels[ref.location] = Path(
                os.path.relpath(os.path.normpath(graph_dir / ref.location), pool_dir)).as_posix()
        out.setdefault((rel, ref.offset), []).append(ref.name)
    return out


@dataclasses.dataclass
class _Written:
    graph_dir: Path
    location: str  # relative to graph_dir
    offset: int
    length: int
    pool_id: str
    users: list[str]
    pass_name: str
    sources: list[str]
    dtype: ir.DataType
    shape: tuple[int, ...]


class DerivedStore:
    """Derived tensors written so far in one optimize run, keyed by how and from what."""

    def __init__(self, taken_ids: Iterable[str]) -> None:
        self._by_key: dict[tuple[object, ...], _Written] = {}
        self._pending: dict[str, tuple[tuple[object, ...], str, list[str]]] = {}
        self._taken = set(taken_ids)
        self._next = 0
        self.written: list[_Written] = []

    def share(
        self,
        model: ir.Model,
        *,
        role: str,
        graph_dir: Path,
        provenance: dict[str, list[str]],
        origins: dict[str, str],
        sources: dict[str, SourceIdentity],
    ) -> int:
        """Point derived tensors already written for another graph at their bytes; count them.

        The others are remembered, to be registered by :meth:`register` once ``save_graph`` has
        written them.
        """
        self._pending.clear()
        shared = 0
        for name in sorted(provenance):
            value = model.graph.initializers.get(name)
            tensor = value.const_value if value is not None else None
            if value is None or tensor is None or is_external(tensor):
                continue
            if tensor.nbytes < _INLINE_LIMIT:
                continue
            src_names = provenance[name]
            key = (
                graph_dir.resolve(),
                origins.get(name, ""),
                tensor.dtype,
                tuple(int(d) for d in tensor.shape.numpy()),
                tensor_digest(tensor),
                tuple(sources.get(s, ("graph", role, s)) for s in src_names),
            )
            hit = self._by_key.get(key)
            if hit is None:
                self._pending[name] = (key, origins.get(name, ""), list(src_names))
                continue
            value.const_value = ir.ExternalTensor(
                hit.location,
                hit.offset,
                hit.length,
                tensor.dtype,
                shape=ir.Shape(tensor.shape.numpy()),
                name=name,
                base_dir=graph_dir,
            )
            hit.users.append(f"{role}:{name}")
            shared += 1
        return shared

    def register(self, model: ir.Model, *, role: str, graph_dir: Path) -> None:
        """Record the derived tensors ``save_graph`` just wrote for ``model``."""
        for name, (key, pass_name, src_names) in self._pending.items():
            tensor = model.graph.initializers[name].const_value
            assert isinstance(tensor, ir.ExternalTensor)
            written = _Written(
                graph_dir, str(tensor.location), int(tensor.offset or 0), int(tensor.length or 0),
                self._fresh_id(), [f"{role}:{name}"], pass_name, src_names, tensor.dtype,
                tuple(int(d) for d in tensor.shape.numpy()),
            )
            self._by_key[key] = written
            self.written.append(written)
        self._pending.clear()

    def _fresh_id(self) -> str:
        while f"opt{self._next:04d}" in self._taken:
            self._next += 1
        pool_id = f"opt{self._next:04d}"
        self._taken.add(pool_id)
        return pool_id

    def entries(self, pool_dir: Path) -> list[PoolEntry]:
        """Pool entries of the derived tensors written under ``pool_dir``."""
        out = []
        for w in self.written:
            if w.graph_dir.resolve() != pool_dir.resolve():
                continue
            rel = Path(os.path.relpath(os.path.normpath(w.graph_dir / w.location), pool_dir)).as_posix()
            provenance = ",".join([*w.users, f"pass:{w.pass_name}", *(f"from:{s}" for s in w.sources)])
            out.append(PoolEntry(
                w.pool_id, rel, w.offset, w.length, w.dtype.name.lower(), w.shape, Placement.DEVICE, provenance,
            ))
        return out


def reconcile_pool(
    pool: WeightsPool,
    before: dict[str, dict[tuple[str, int], list[str]]],
    after: dict[str, dict[tuple[str, int], list[str]]],
) -> tuple[WeightsPool, list[str]]:
    """Drop the roles that stopped reading an entry's bytes; drop entries nobody reads now.

    ``before`` / ``after`` map each graph role (of this pool's directory) to its tensor refs.
    Entries no graph read before (bytes for another consumer) are kept as they are. Returns the
    new pool and the ids of the dropped entries.
    """
    dropped: list[str] = []

    def fix(entry: PoolEntry) -> PoolEntry | None:
        loc = (entry.file, entry.offset)
        roles_before = {r for r, refs in before.items() if loc in refs}
        roles_after = {r for r, refs in after.items() if loc in refs}
        if not roles_before or roles_before == roles_after:
            return entry
        if not roles_after:
            dropped.append(entry.pool_id)
            return None
        lost = roles_before - roles_after
        parts = [p for p in entry.provenance.split(",") if p.partition(":")[0] not in lost]
        return dataclasses.replace(entry, provenance=",".join(parts))

    return pool.replace_entries(fix), dropped
