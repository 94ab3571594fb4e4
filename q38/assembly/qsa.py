"""QSA normalization and rotary constants, read from a packaged graph (never hard-coded).

Recognised sites: the exporter chain ``ReduceMean -> Add(eps) -> Sqrt -> Div|Reciprocal*Mul ->
Mul(w)`` (``docs/synthetic-model.md`` pattern 1), the fused ``RMSNormRotary`` (``epsilon``), and
the attention ops that carry the norm/rotary inputs (``DynamicSparseAttention``:
``qk_norm_epsilon``, q_norm/k_norm 14/15, cos/sin 11/12; ``GroupQueryAttention``: cos/sin 7/8).
Rotary caches in the unfused chain are the rank-2 constants gathered by position and unsqueezed.
Values are decoded by :func:`q38.assembly.proto_io.read_array` (external data with or without a
length, inline BF16 in ``int32_data``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from q38._ops import DYNAMIC_SPARSE_ATTENTION, GROUP_QUERY_ATTENTION, RMS_NORM_ROTARY
from q38.assembly.proto_io import dtype_name, read_array

__all__ = ["qsa_constants"]


class _Graph:
    def __init__(self, model: onnx.ModelProto, base: Path, what: str) -> None:
        g = model.graph
        self.base, self.what = base, what
        self.inits = {t.name: t for t in g.initializer}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in g.node:
            for out in node.output:
                self.producer[out] = node
            for inp in node.input:
                self.consumers.setdefault(inp, []).append(node)
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                        self.inits.setdefault(node.output[0], attr.t)
        self.nodes = list(g.node)

    def const(self, name: str) -> onnx.TensorProto | None:
        return self.inits.get(name)

    def array(self, t: onnx.TensorProto) -> np.ndarray:
        return read_array(t, base=self.base, what=self.what)

    def only(self, name: str, op: str) -> onnx.NodeProto | None:
        for node in self.consumers.get(name, []):
            if node.op_type == op:
                return node
        return None

    def describe(self, name: str) -> dict[str, Any] | None:
        t = self.const(name)
        if t is None:
            return None
        arr = self.array(t)
        return {
            "dtype": dtype_name(t.data_type),
            "shape": list(arr.shape),
            "sha256": hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest(),
        }


def _other(node: onnx.NodeProto, name: str) -> str | None:
    rest = [i for i in node.input if i != name]
    return rest[0] if len(rest) == 1 else None


def _norm_chain(g: _Graph, rm: onnx.NodeProto) -> tuple[float, str] | None:
    add = g.only(rm.output[0], "Add")
    if add is None:
        return None
    eps_name = _other(add, rm.output[0])
    eps_t = g.const(eps_name) if eps_name else None
    sqrt = g.only(add.output[0], "Sqrt")
    if eps_t is None or sqrt is None:
        return None
    norm = g.only(sqrt.output[0], "Div")
    if norm is None:
        recip = g.only(sqrt.output[0], "Reciprocal")
        norm = g.only(recip.output[0], "Mul") if recip is not None else None
    if norm is None:
        return None
    scale = g.only(norm.output[0], "Mul")
    w = _other(scale, norm.output[0]) if scale is not None else None
    cast = g.producer.get(w) if w is not None else None
    if cast is not None and cast.op_type == "Cast" and g.const(cast.input[0]) is not None:
        w = cast.input[0]  # a BF16/FP16 weight cast up for the CPU graph
    if w is None or g.const(w) is None:
        return None
    eps = float(np.asarray(g.array(eps_t), dtype=np.float64).reshape(-1)[0])
    return eps, w


def _rotary_cache(g: _Graph, node: onnx.NodeProto) -> str | None:
    if node.op_type != "Gather" or not node.input or g.const(node.input[0]) is None:
        return None
    if len(g.const(node.input[0]).dims) != 2 or g.only(node.output[0], "Unsqueeze") is None:  # type: ignore[union-attr]
        return None
    return str(node.input[0])


def qsa_constants(model: onnx.ModelProto, *, base: Path, what: str) -> dict[str, Any]:
    """Norm epsilons, norm weights and rotary caches of ``model`` (bytes summarized by sha256)."""
    g = _Graph(model, base, what)
    eps: set[float] = set()
    weights: set[str] = set()
    caches: set[str] = set()
    sites = 0
    for node in g.nodes:
        if node.op_type == "ReduceMean":
            found = _norm_chain(g, node)
            if found is not None:
                sites += 1
                eps.add(found[0])
                weights.add(found[1])
        elif (name := _rotary_cache(g, node)) is not None:
            caches.add(name)
        elif node.op_type in (RMS_NORM_ROTARY, DYNAMIC_SPARSE_ATTENTION, GROUP_QUERY_ATTENTION):
            attrs = {a.name: a for a in node.attribute}
            key = {RMS_NORM_ROTARY: "epsilon", DYNAMIC_SPARSE_ATTENTION: "qk_norm_epsilon"}.get(node.op_type)
            if key and key in attrs:
                sites += 1
                eps.add(float(np.float32(attrs[key].f)))
            slots = {
                RMS_NORM_ROTARY: ((1,), (3, 4)),
                DYNAMIC_SPARSE_ATTENTION: ((14, 15), (11, 12)),
                GROUP_QUERY_ATTENTION: ((), (7, 8)),
            }[node.op_type]
            weights.update(node.input[i] for i in slots[0] if i < len(node.input) and g.const(node.input[i]))
            caches.update(node.input[i] for i in slots[1] if i < len(node.input) and g.const(node.input[i]))
    rotary: dict[str, Any] = {}
    for name in sorted(caches):
        d = g.describe(name)
        assert d is not None
        arr = g.array(g.const(name))  # type: ignore[arg-type]
        # Row 0 (position 0) of a cos cache is all ones, of a sin cache all zeros.
        d["kind"] = "cos" if np.allclose(np.asarray(arr[0], dtype=np.float64), 1.0) else "sin"
        rotary[name] = d
    dims = {(v["shape"][0], 2 * v["shape"][1]) for v in rotary.values()}
    return {
        "norm_sites": sites,
        "epsilon": sorted(eps),
        "norm_weights": {n: g.describe(n) for n in sorted(weights)},
        "rotary_caches": rotary,
        "rotary_dim": sorted({d[1] for d in dims}),
        "rotary_positions": sorted({d[0] for d in dims}),
    }
