"""The pool bookkeeping of optimize's derived weights (q38/optimize/derived_weights.py), unit by unit.

Invariants guarded (each test fails when the named defect comes back):
* ``reconcile_pool`` removes exactly the roles that stopped reading an entry's bytes from its
  provenance (a role is the text before the FIRST ``:`` -- tensor names may contain ``:``), keeps
  the ``pass:`` / ``from:`` parts and the roles that still read it, drops an entry no graph reads
  any more (and names it), and leaves alone entries no graph read before and entries whose
  readers did not change;
* ``source_identities`` identifies an inline initializer by dtype, shape and the hash of its
  bytes: equal copies in two graphs are one source, a copy of another dtype, shape or value is not.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx_ir as ir

from q38.optimize.derived_weights import DerivedStore, reconcile_pool, source_identities
from q38.package import Placement, PoolEntry, WeightsPool, save_graph

Refs = dict[str, dict[tuple[str, int], list[str]]]


def _entry(pool_id: str, offset: int, provenance: str) -> PoolEntry:
    return PoolEntry(pool_id, "model.data", offset, 64, "float16", (32,), Placement.DEVICE, provenance)


def _reconcile(entries: list[PoolEntry], before: Refs, after: Refs) -> tuple[dict[str, str], list[str]]:
    pool, dropped = reconcile_pool(WeightsPool.from_entries(entries), before, after)
    assert [r for r in pool.records if isinstance(r, str)] == list(WeightsPool.from_entries([]).records)  # header kept
    return {e.pool_id: e.provenance for e in pool.entries}, dropped


def test_a_role_that_stopped_reading_an_entry_leaves_its_provenance_and_the_rest_stays() -> None:
    entry = _entry("w0", 0, "target:lm:head.w,head:lm:head.w,prefill:lm:head.w,pass:fp8_head,from:lm:head.w")
    reads = {("model.data", 0): ["lm:head.w"]}
    before = {"target": reads, "head": reads, "prefill": reads}
    after = {"target": reads, "head": {}, "prefill": reads}
    prov, dropped = _reconcile([entry], before, after)
    assert prov == {"w0": "target:lm:head.w,prefill:lm:head.w,pass:fp8_head,from:lm:head.w"}
    assert dropped == []


def test_an_entry_every_reader_stopped_reading_is_dropped_and_named() -> None:
    gone, kept = _entry("w0", 0, "target:a,pass:p,from:x"), _entry("w1", 64, "target:b")
    before = {"target": {("model.data", 0): ["a"], ("model.data", 64): ["b"]}}
    after = {"target": {("model.data", 64): ["b"]}}
    prov, dropped = _reconcile([gone, kept], before, after)
    assert prov == {"w1": "target:b"}
    assert dropped == ["w0"]


def test_entries_no_graph_read_before_or_with_the_same_readers_are_kept_verbatim() -> None:
    foreign = _entry("w0", 0, "other:x")  # bytes for another consumer: no graph of this pool read them
    same = _entry("w1", 64, "target:b,head:b,pass:p")
    before = {"target": {("model.data", 64): ["b"]}, "head": {("model.data", 64): ["b"]}}
    after = {"target": {("model.data", 0): ["x"], ("model.data", 64): ["b"]}, "head": {("model.data", 64): ["b"]}}
    prov, dropped = _reconcile([foreign, same], before, after)
    assert prov == {"w0": "other:x", "w1": "target:b,head:b,pass:p"}
    assert dropped == []


def _inline_model(arrays: dict[str, np.ndarray]) -> ir.Model:
    graph = ir.Graph([], [], nodes=[], name="g")
    for name, arr in arrays.items():
        value = ir.Value(name=name, shape=ir.Shape(arr.shape), type=ir.TensorType(ir.tensor(arr).dtype))
        value.const_value = ir.tensor(arr, name=name)
        graph.register_initializer(value)
    return ir.Model(graph, ir_version=10)


def test_inline_initializers_are_identified_by_dtype_shape_and_bytes(tmp_path: Path) -> None:
    a = np.arange(6, dtype=np.float16).reshape(2, 3)
    ids = source_identities(_inline_model({"a": a, "a_copy": a.copy(), "a_f32": a.astype(np.float32),
                                           "a_flat": a.reshape(6), "b": a + 1}), tmp_path)
    assert ids["a"] == ("inline", ir.DataType.FLOAT16, (2, 3), hashlib.sha256(a.tobytes()).hexdigest())
    assert ids["a_copy"] == ids["a"]
    assert len({ids[n] for n in ("a", "a_f32", "a_flat", "b")}) == 4
    other_graph = source_identities(_inline_model({"w": a.copy()}), tmp_path)
    assert other_graph["w"] == ids["a"]


def _derived(name: str, seed: int = 0) -> ir.Model:
    """A model holding one derived tensor ``name`` (2 KiB: above the inline limit)."""
    return _inline_model({name: np.random.default_rng(seed).standard_normal(512).astype(np.float32)})


def test_a_derived_tensor_is_shared_only_with_one_made_by_the_same_pass_from_the_same_sources(
    tmp_path: Path,
) -> None:
    """The first graph's derived tensor is written (register); a later graph's tensor with the
    same bytes, made by the same pass from the same source, points at those bytes instead; one
    made by another pass, or from another source, is written anew. Provenance names that are no
    initializer with a tensor (gone, or holding none) are skipped, and so are tensors under 1 KiB
    (save_graph keeps them inline); one of exactly 1 KiB is written, so pooled."""
    sources = {"w": ("file", 1, 2, 0, 2048), "v": ("file", 1, 2, 2048, 2048)}
    store = DerivedStore(["opt0000"])
    first = _inline_model({"a": np.random.default_rng(0).standard_normal(512).astype(np.float32),
                           "edge": np.ones(256, np.float32), "small": np.ones(255, np.float32)})
    first.graph.initializers["hollow"] = ir.Value(name="hollow")  # an initializer with no tensor
    kw = {"graph_dir": tmp_path, "sources": sources}
    provenance = {name: ["w"] for name in ("a", "edge", "small", "gone", "hollow")}
    origins = dict.fromkeys(provenance, "fp8_head")
    assert store.share(first, role="target", provenance=provenance, origins=origins, **kw) == 0
    save_graph(first, tmp_path / "m.onnx", new_data="m.opt.data")
    store.register(first, role="target", graph_dir=tmp_path)
    written = first.graph.initializers["a"].const_value
    assert isinstance(written, ir.ExternalTensor)

    def share(name: str, origin: str, source: str) -> int:
        model = _derived(name)
        shared = store.share(model, role="head", provenance={name: [source]}, origins={name: origin}, **kw)
        tensor = model.graph.initializers[name].const_value
        if shared:
            assert isinstance(tensor, ir.ExternalTensor)
            assert (tensor.location, tensor.offset) == (written.location, written.offset)
        return shared

    assert share("b", "shared_expert", "w") == 0
    assert share("c", "fp8_head", "v") == 0
    assert share("d", "fp8_head", "w") == 1
    assert [(e.pool_id, e.provenance) for e in store.entries(tmp_path)] == [
        ("opt0001", "target:a,head:d,pass:fp8_head,from:w"),
        ("opt0002", "target:edge,pass:fp8_head,from:w"),
    ]
