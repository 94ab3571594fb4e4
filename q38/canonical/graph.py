"""The canonical form of an ONNX graph: what a golden stores and ``q38 diff`` compares.

* ``format`` and ``version`` (:data:`q38.canonical.VERSION`);
* ``ir_version``, ``producer_name``, ``producer_version`` (masked), ``opset_imports`` (domain ->
  version, sorted), ``metadata`` (normalized);
* ``inputs`` / ``outputs`` / ``value_info``: name, dtype, shape (ints, dim_param strings, null);
* ``nodes`` in graph order: domain, op, name, attributes (sorted by name; floats as the
  shortest text of float32, tensors as dtype/shape/sha256 plus the values of tiny tensors,
  subgraphs recursively), inputs, outputs;
* ``initializers`` in graph order: name, dtype, shape, the sha256 of the tensor bytes, and for
  external data its ``location``. External bytes are read with a plain ``os.pread`` (never through
  onnx's external-data loader, which refuses hard links); a location that escapes the package
  is refused; an unreadable file is recorded with ``offset``/``length`` and the reason.

Graphs are parsed from the protobuf without external data: memory does not grow with weights.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import onnx
from onnx import numpy_helper

from q38.canonical.digests import FileIdentity, TensorDigest
from q38.canonical.normalize import MASK, Normalizer
from q38.canonical.values import shortest_float, shortest_floats
from q38.canonical.version import VERSION
from q38.errors import GraphError, UnsafePathError
from q38.package.io.files import GRAPH_LIMIT, read_bounded
from q38.package.io.paths import resolve_inside

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = ["GRAPH_FORMAT", "TINY_TENSOR_VALUES", "LazyNode", "canonical_graph", "load_proto"]

GRAPH_FORMAT: Final = "q38-graph"
TINY_TENSOR_VALUES: Final = 16
"""Tensors (attributes) with at most this many numeric elements also record their values."""


_DTYPE_NAMES: Final = {int(v): str(k) for k, v in onnx.TensorProto.DataType.items()}


def _dtype(elem_type: int) -> str:
    return _DTYPE_NAMES.get(elem_type, str(elem_type))


def _shape_of(dims: Iterable[onnx.TensorShapeProto.Dimension]) -> list[int | str | None]:
    out: list[int | str | None] = []
    for d in dims:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def _type(tp: onnx.TypeProto) -> dict[str, Any]:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tt = tp.tensor_type if kind == "tensor_type" else tp.sparse_tensor_type
        rec: dict[str, Any] = {"dtype": _dtype(tt.elem_type)}
        rec["shape"] = _shape_of(tt.shape.dim) if tt.HasField("shape") else None
        if kind == "sparse_tensor_type":
            rec["sparse"] = True
        return rec
    if kind == "sequence_type":
        return {"sequence": _type(tp.sequence_type.elem_type)}
    if kind == "optional_type":
        return {"optional": _type(tp.optional_type.elem_type)}
    if kind == "map_type":
        return {"map": [_dtype(tp.map_type.key_type), _type(tp.map_type.value_type)]}
    return {"dtype": None}


def _value_info(vi: onnx.ValueInfoProto) -> dict[str, Any]:
    return {"name": vi.name, **_type(vi.type)}


def _tensor_values(t: onnx.TensorProto) -> list[Any] | None:
    """The values of a tiny numeric tensor, floats in their dtype's shortest text."""
    try:
        arr = numpy_helper.to_array(t).reshape(-1)
    except (ValueError, TypeError):
        return None
    name = _dtype(t.data_type)
    if name.startswith("COMPLEX"):
        part = arr.real.dtype
        return [[shortest_float(v.real, part), shortest_float(v.imag, part)] for v in arr]
    if "FLOAT" in name or name == "DOUBLE":
        return shortest_floats(arr, arr.dtype)
    return [int(v) if not isinstance(v, (bool, np.bool_)) else bool(v) for v in arr]


NODE_KEYS: Final = ("domain", "op", "name", "attributes", "inputs", "outputs")


class LazyNode(Mapping[str, object]):
    """A node record built only when it must be; reads like the dict :meth:`_Canonicalizer.node` returns.

    Two nodes whose protobuf bytes are equal are equal without building either (``q38 diff`` on
    two 10 000-node graphs that differ in one attribute builds two records).
    """

    __slots__ = ("_canon", "_full", "_proto", "_wire")

    def __init__(self, proto: onnx.NodeProto, canon: _Canonicalizer) -> None:
        self._proto = proto
        self._canon = canon
        self._wire: bytes | None = None
        self._full: dict[str, Any] | None = None

    def full(self) -> dict[str, Any]:
        """The whole canonical record, built on first use and cached."""
        if self._full is None:
            self._full = self._canon.node(self._proto)
        return self._full

    def wire(self) -> bytes:
        """The node's deterministic protobuf bytes (cached): equal bytes mean equal records."""
        if self._wire is None:
            self._wire = self._proto.SerializeToString(deterministic=True)
        return self._wire

    def __getitem__(self, key: str) -> object:
        p = self._proto
        if key == "name":
            return p.name
        if key == "outputs":
            return list(p.output)
        if key == "op":
            return p.op_type
        if key == "domain":
            return p.domain
        return self.full()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(NODE_KEYS)

    def __len__(self) -> int:
        return len(NODE_KEYS)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyNode):
            return self.wire() == other.wire() or self.full() == other.full()
        if isinstance(other, Mapping):
            return self.full() == dict(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]


class _Canonicalizer:
    """One graph file's canonicalization: its base directory, normalizer and digest mode."""

    def __init__(
        self,
        base_dir: Path | None,
        root: Path | None,
        norm: Normalizer,
        *,
        lazy_digests: bool,
        recorded: Mapping[str, str] | None,
        source: str = "",
        data_files: set[str] | None = None,
    ) -> None:
        self.source = source
        self.data_files = data_files
        self.top: onnx.GraphProto | None = None
        self.base_dir = base_dir
        self.root = root
        self.norm = norm
        self.lazy = lazy_digests
        self.recorded = recorded
        self._files: dict[str, FileIdentity | str] = {}

    # Tensors ---------------------------------------------------------------------------------
    def tensor(self, t: onnx.TensorProto, *, values: bool) -> dict[str, Any]:
        rec: dict[str, Any] = {"dtype": _dtype(t.data_type), "shape": [int(d) for d in t.dims]}
        if t.data_location == onnx.TensorProto.EXTERNAL:
            rec.update(self._external(t))
            return rec
        if t.HasField("raw_data"):
            payload = t.raw_data
        elif t.data_type == onnx.TensorProto.STRING:
            payload = b"\0".join(bytes(s) for s in t.string_data)
        else:
            payload = numpy_helper.to_array(t).tobytes()
        rec["sha256"] = hashlib.sha256(payload).hexdigest()
        if values and t.data_type != onnx.TensorProto.STRING:
            count = 1
            for d in t.dims:
                count *= int(d)
            if count <= TINY_TENSOR_VALUES:
                found = _tensor_values(t)
                if found is not None:
                    rec["values"] = found
        return rec

    def _file(self, location: str) -> FileIdentity | str:
        """The data file of ``location`` (checked inside the package), or why it is unreadable."""
        if location in self._files:
            return self._files[location]
        found: FileIdentity | str
        if self.base_dir is None:
            found = "no base directory"
        else:
            try:
                if self.root is not None:
                    rel = os.path.relpath(self.base_dir / location, self.root)
                    path = resolve_inside(self.root, rel, what=f"{self.source}external data {location!r}")
                else:
                    path = self.base_dir / location
                found = FileIdentity.of(path, self.recorded)
                if self.data_files is not None and self.root is not None:
                    self.data_files.add(os.path.relpath(path, self.root))
            except UnsafePathError as exc:
                if self.lazy:
                    raise GraphError(str(exc)) from None
                found = f"unsafe location: {exc}"
            except (OSError, GraphError) as exc:
                found = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
        self._files[location] = found
        return found

    def _external(self, t: onnx.TensorProto) -> dict[str, Any]:
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else None
        rec: dict[str, Any] = {"location": self.norm.text(location)}
        file = self._file(location)
        reason: str
        if isinstance(file, str):
            reason = file
        else:
            size = file.size - offset if length is None else length
            if offset + size > file.size:
                reason = f"short read: {max(file.size - offset, 0)} of {size} bytes"
            else:
                digest = TensorDigest(file, offset, size)
                if self.lazy:
                    rec["sha256"] = digest
                    return rec
                try:
                    rec["sha256"] = digest.hexdigest()
                    return rec
                except (OSError, GraphError) as exc:
                    reason = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
        if self.lazy:
            raise GraphError(f"{self.source}initializer {t.name!r}: external data {location!r} unreadable: {reason}")
        rec.update({"offset": offset, "length": length, "unreadable": reason})
        return rec

    # Attributes, nodes and graphs --------------------------------------------------------------
    def attribute(self, a: onnx.AttributeProto) -> object:
        if a.ref_attr_name:
            return {"ref": a.ref_attr_name}
        A = onnx.AttributeProto
        kind = a.type
        if kind == A.INT:
            return int(a.i)
        if kind == A.FLOAT:
            return shortest_float(np.float32(a.f))
        if kind == A.STRING:
            return self.norm.text(a.s.decode("utf-8", errors="backslashreplace"))
        if kind == A.INTS:
            return [int(v) for v in a.ints]
        if kind == A.FLOATS:
            return shortest_floats(np.asarray(a.floats, dtype=np.float32), np.float32)
        if kind == A.STRINGS:
            return [self.norm.text(s.decode("utf-8", errors="backslashreplace")) for s in a.strings]
        if kind == A.TENSOR:
            return {"tensor": self.tensor(a.t, values=True)}
        if kind == A.TENSORS:
            return {"tensors": [self.tensor(t, values=True) for t in a.tensors]}
        if kind == A.GRAPH:
            return {"graph": self.graph(a.g)}
        if kind == A.GRAPHS:
            return {"graphs": [self.graph(g) for g in a.graphs]}
        if kind == A.SPARSE_TENSOR:
            return {
                "sparse_tensor": {
                    "dims": [int(d) for d in a.sparse_tensor.dims],
                    "values": self.tensor(a.sparse_tensor.values, values=False),
                    "indices": self.tensor(a.sparse_tensor.indices, values=False),
                }
            }
        if kind == A.TYPE_PROTO:
            return {"type": _type(a.tp)}
        return {"unsupported_attribute_type": int(kind)}

    def node(self, n: onnx.NodeProto) -> dict[str, Any]:
        return {
            "domain": n.domain,
            "op": n.op_type,
            "name": n.name,
            "attributes": {a.name: self.attribute(a) for a in sorted(n.attribute, key=lambda a: a.name)},
            "inputs": list(n.input),
            "outputs": list(n.output),
        }

    def graph(self, g: onnx.GraphProto) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "name": g.name,
            "inputs": [_value_info(v) for v in g.input],
            "outputs": [_value_info(v) for v in g.output],
            "nodes": [LazyNode(n, self) for n in g.node] if self.lazy and g is self.top else [self.node(n) for n in g.node],
            "initializers": [{"name": t.name, **self.tensor(t, values=False)} for t in g.initializer],
        }
        if g.sparse_initializer:
            rec["sparse_initializers"] = [
                {"name": s.values.name, "dims": [int(d) for d in s.dims]} for s in g.sparse_initializer
            ]
        if g.value_info:
            rec["value_info"] = [_value_info(v) for v in g.value_info]
        return rec


def load_proto(path: Path) -> onnx.ModelProto:
    """Parse a ``.onnx`` file without its external data; a bad file is one GraphError line."""
    data = read_bounded(path, what="graph", limit=GRAPH_LIMIT, error=GraphError)
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as exc:  # protobuf DecodeError on truncated or corrupt files
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise GraphError(f"{path}: not a valid ONNX model (truncated or malformed protobuf): {detail}") from None
    if not model.HasField("graph"):
        raise GraphError(f"{path}: not a valid ONNX model (no graph)")
    return model


def _as_proto(model: str | os.PathLike[str] | onnx.ModelProto | ir.Model) -> tuple[onnx.ModelProto, Path | None]:
    """Returns a ModelProto and the directory its external data is relative to."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        return load_proto(path), path.parent
    if isinstance(model, onnx.ModelProto):
        return model, None
    import onnx_ir as ir  # deferred: not imported by q38.canonical; loaded if model is an ir.Model

    if isinstance(model, ir.Model):
        base_dir: Path | None = None
        for value in model.graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                base_dir = Path(tensor.base_dir)
                break
        return ir.to_proto(model), base_dir
    raise TypeError(f"canonical_graph takes a .onnx path, onnx.ModelProto or onnx_ir.Model, not {type(model).__name__}")


def canonical_graph(
    model: str | os.PathLike[str] | onnx.ModelProto | ir.Model,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] | None = None,
    normalizer: Normalizer | None = None,
    lazy_digests: bool = False,
    recorded: Mapping[str, str] | None = None,
    source: str | None = None,
    data_files: set[str] | None = None,
) -> dict[str, Any]:
    """Canonical, JSON-ready form of a model (a path, ``onnx.ModelProto`` or ``onnx_ir.Model``).

    Args:
        model: the graph to describe; a path is parsed without external data.
        base_dir: where relative external-data locations resolve (defaults to the model's
            directory for a path, the tensors' base_dir for an onnx_ir model).
        root: the package directory external data must stay inside (checked when given).
        normalizer: path normalizer (defaults to one rooted at ``base_dir``).
        lazy_digests: external initializers carry a :class:`TensorDigest` computed when
            compared (``q38 diff``) instead of a hex string, and the top graph's nodes are
            :class:`LazyNode` records; unreadable data raises.
        recorded: whole-file digests a manifest vouches for (:func:`recorded_digests`).
        source: how messages name the graph (defaults to the path, when ``model`` is one).
        data_files: collects the external-data files the graph reads (relative to ``root``).

    """
    proto, found_dir = _as_proto(model)
    if source is None:
        source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else ""
    source = f"{source}: " if source else ""
    base = Path(base_dir) if base_dir is not None else found_dir
    norm = normalizer or Normalizer({base: "<package>"} if base is not None else None)
    canon = _Canonicalizer(
        base, Path(root) if root is not None else None, norm, lazy_digests=lazy_digests, recorded=recorded,
        source=source, data_files=data_files,
    )
    out: dict[str, Any] = {
        "format": GRAPH_FORMAT,
        "version": VERSION,
        "ir_version": int(proto.ir_version),
        "producer_name": proto.producer_name,
        "producer_version": MASK if proto.producer_version else "",
        "opset_imports": {o.domain: int(o.version) for o in sorted(proto.opset_import, key=lambda o: o.domain)},
        "metadata": norm.data({p.key: p.value for p in proto.metadata_props}),
    }
    canon.top = proto.graph
    out.update(canon.graph(proto.graph))
    if proto.functions:
        out["functions"] = [
            {
                "domain": f.domain,
                "name": f.name,
                "inputs": list(f.input),
                "outputs": list(f.output),
                "attributes": list(f.attribute),
                "opset_imports": {o.domain: int(o.version) for o in sorted(f.opset_import, key=lambda o: o.domain)},
                "nodes": [canon.node(n) for n in f.node],
            }
            for f in proto.functions
        ]
    return out

