"""ONNX graph access for the builder: external-data references and tensor bytes.

Graphs are loaded with ``load_external_data=False``: weight bytes are never read to rewrite a
location. Tensor values (QSA constants, content hashes) are read by q38's own reader, which works
on hard-linked files (onnx / onnx-ir refuse them) after a path-safety check, reads to EOF when an
external reference has no ``length``, and decodes 16- and 8-bit types stored in ``int32_data``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import ml_dtypes
import numpy as np
import onnx

from q38.errors import GraphError, UnsafePathError
from q38.package.io.paths import resolve_inside, safe_relpath

__all__ = [
    "ExtRef",
    "dtype_name",
    "external_refs",
    "iter_tensors",
    "load_proto",
    "range_sha256",
    "read_array",
    "save_proto",
    "set_external",
]

_TP = onnx.TensorProto
_NP: Final[dict[int, type[np.generic]]] = {
    _TP.FLOAT: np.float32, _TP.DOUBLE: np.float64, _TP.FLOAT16: np.float16,
    _TP.BFLOAT16: ml_dtypes.bfloat16, _TP.INT8: np.int8, _TP.UINT8: np.uint8,
    _TP.INT16: np.int16, _TP.UINT16: np.uint16, _TP.INT32: np.int32, _TP.UINT32: np.uint32,
    _TP.INT64: np.int64, _TP.UINT64: np.uint64, _TP.BOOL: np.bool_,
    _TP.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, _TP.FLOAT8E5M2: ml_dtypes.float8_e5m2,
}
# Types whose typed-field storage is int32_data holding one value per element (bit pattern).
_IN_INT32: Final = frozenset(
    {_TP.INT8, _TP.UINT8, _TP.INT16, _TP.UINT16, _TP.INT32, _TP.BOOL, _TP.FLOAT16, _TP.BFLOAT16,
     _TP.FLOAT8E4M3FN, _TP.FLOAT8E5M2}
)


def dtype_name(data_type: int) -> str:
    """ONNX dtype name in lower case (``float16``, ``bfloat16``, ``float``)."""
    return str(_TP.DataType.Name(data_type)).lower()


@dataclass
class ExtRef:
    """One tensor stored as external data (``tensor`` is the live proto, edited in place)."""

    tensor: onnx.TensorProto
    name: str
    location: str
    offset: int
    length: int | None
    dtype: str
    shape: tuple[int, ...]


def load_proto(path: Path, *, what: str) -> onnx.ModelProto:
    """Load the graph proto at ``path`` without its external data; any failure is one GraphError line."""
    try:
        return onnx.load(os.fspath(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ValueError...
        raise GraphError(f"{what}: {path}: cannot read ONNX graph: {exc}") from None


def save_proto(model: onnx.ModelProto, path: Path) -> str:
    """Write the proto only (external-data entries kept as references); return its sha256."""
    data = model.SerializeToString()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the model: initializers and Constant values, subgraphs included."""
    for graph in _graphs(model.graph):
        yield from graph.initializer
        for sp in graph.sparse_initializer:
            yield sp.values
            yield sp.indices
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.SPARSE_TENSOR:
                    yield attr.sparse_tensor.values
                    yield attr.sparse_tensor.indices


def _external_fields(t: onnx.TensorProto, what: str) -> tuple[str, int, int | None]:
    info = {e.key: e.value for e in t.external_data}
    if "location" not in info:
        raise GraphError(f"{what}: tensor {t.name!r}: external data without a location")
    try:
        offset = int(info.get("offset", "0") or "0")
        length = int(info["length"]) if info.get("length", "") != "" else None
    except ValueError:
        raise GraphError(f"{what}: tensor {t.name!r}: non-numeric external offset/length") from None
    if offset < 0 or (length is not None and length < 0):
        raise GraphError(f"{what}: tensor {t.name!r}: negative external offset/length")
    loc = safe_relpath(info["location"], what=f"{what}: tensor {t.name!r} location")
    return loc, offset, length


def external_refs(model: onnx.ModelProto, *, what: str) -> list[ExtRef]:
    """The external-data references of ``model``, locations validated as relative paths."""
    refs = []
    for t in iter_tensors(model):
        if t.data_location != _TP.EXTERNAL:
            continue
        loc, offset, length = _external_fields(t, what)
        refs.append(ExtRef(t, t.name, loc, offset, length, dtype_name(t.data_type), tuple(t.dims)))
    return refs


def set_external(t: onnx.TensorProto, location: str, offset: int, length: int | None) -> None:
    """Point ``t`` at a new byte range; other entries (checksum excluded) are kept."""
    kept = [(e.key, e.value) for e in t.external_data if e.key not in ("location", "offset", "length", "checksum")]
    del t.external_data[:]
    entries = [("location", location), ("offset", str(offset))]
    if length is not None:
        entries.append(("length", str(length)))
    for key, value in entries + kept:
        e = t.external_data.add()
        e.key, e.value = key, value


def range_sha256(path: Path, offset: int, length: int | None) -> str:
    """sha256 of ``length`` bytes of ``path`` from ``offset`` (None: to the end), read in 8 MiB chunks.

    How the builder compares tensors stored in different files without loading them.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        remaining = length
        while remaining is None or remaining > 0:
            chunk = f.read(8 << 20 if remaining is None else min(8 << 20, remaining))
            if not chunk:
                break
            h.update(chunk)
            if remaining is not None:
                remaining -= len(chunk)
    return h.hexdigest()


def _np_type(t: onnx.TensorProto, what: str) -> type[np.generic]:
    try:
        return _NP[t.data_type]
    except KeyError:
        raise GraphError(f"{what}: tensor {t.name!r}: unsupported dtype {dtype_name(t.data_type)}") from None


def read_array(t: onnx.TensorProto, *, base: Path, what: str) -> np.ndarray:
    """Decode ``t`` (inline raw, typed fields, or external data) without onnx's loaders."""
    np_type = _np_type(t, what)
    shape = tuple(t.dims)
    count = int(np.prod(shape, dtype=np.int64))
    if t.data_location == _TP.EXTERNAL:
        loc, offset, length = _external_fields(t, what)
        try:
            path = resolve_inside(base, loc, what=f"{what}: tensor {t.name!r}")
        except UnsafePathError as exc:
            raise GraphError(str(exc)) from None
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read() if length is None else f.read(length)  # no length: read to EOF
        arr = np.frombuffer(raw, dtype=np_type)
    elif t.HasField("raw_data"):
        arr = np.frombuffer(t.raw_data, dtype=np_type)
    elif t.data_type in _IN_INT32:
        ints = np.asarray(t.int32_data, dtype=np.int32)
        size = np.dtype(np_type).itemsize
        arr = ints.astype(np.uint16 if size == 2 else np.uint8 if size == 1 else np.int32).view(np_type)
    elif t.data_type in (_TP.FLOAT,):
        arr = np.asarray(t.float_data, dtype=np.float32)
    elif t.data_type == _TP.DOUBLE:
        arr = np.asarray(t.double_data, dtype=np.float64)
    elif t.data_type == _TP.INT64:
        arr = np.asarray(t.int64_data, dtype=np.int64)
    elif t.data_type in (_TP.UINT32, _TP.UINT64):
        arr = np.asarray(t.uint64_data, dtype=np.uint64).astype(np_type)
    else:  # pragma: no cover - every type in _NP is handled above
        raise GraphError(f"{what}: tensor {t.name!r}: unsupported storage")
    if arr.size != count:
        raise GraphError(
            f"{what}: tensor {t.name!r}: {arr.size} elements stored, shape {list(shape)} needs {count}"
        )
    return arr.reshape(shape)
