"""ONNX graph files: load without weights, validate external data, read bytes ourselves.

q38 never lets onnx or onnx-ir read external weight bytes: both refuse hard-linked data files
(``st_nlink > 1``, see reference/file-safety-facts.md) that ORT accepts, and loading weights
would make memory grow with weight bytes. Instead:

* :func:`load_graph` parses the protobuf only (onnx-ir keeps external tensors lazy) and checks
  every external-data reference: relative location, inside the package after resolving links,
  a regular file, and ``offset + length`` within the file.
* :func:`read_tensor` reads one tensor's byte range with ``os.pread`` after the same checks.
* :func:`save_graph` serializes the graph; external tensors stay references.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeGuard

import numpy as np
import onnx
import onnx_ir as ir

from q38.errors import GraphError, UnsafePathError, clip, quote
from q38.package.graph_memo import active_memo
from q38.package.io.files import GRAPH_LIMIT, open_regular, os_problem
from q38.package.io.paths import resolve_inside, safe_relpath

__all__ = [
    "ExternalRef",
    "all_graphs",
    "external_refs",
    "is_external",
    "iter_tensors",
    "load_graph",
    "load_graph_refs",
    "quiet_deserializer",
    "read_tensor",
    "save_graph",
    "tensor_digest",
]

_LOG = logging.getLogger(__name__)
_INLINE_LIMIT = 1024


@dataclass(frozen=True)
class ExternalRef:
    """One external-data reference of a graph."""

    name: str
    location: str
    offset: int
    length: int | None
    dtype: ir.DataType
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """The bytes the tensor occupies.

        Its ``length``, else what its dtype and shape need (as ORT and :func:`load_graph` read a
        reference without a length); 0 for a type of no fixed size.
        """
        if self.length is not None:
            return self.length
        return _expected_nbytes(self.dtype, self.shape) or 0


def all_graphs(model: ir.Model) -> Iterator[ir.Graph]:
    """The main graph and every subgraph (If/Loop/Scan bodies, nested), in a stable order."""
    yield model.graph
    yield from _subgraphs(model.graph)


def _subgraphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    for node in graph:
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield attr.value
                yield from _subgraphs(attr.value)
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.value:
                    yield sub
                    yield from _subgraphs(sub)


_TENSOR: Final = ir.AttributeType.TENSOR
_GRAPH: Final = ir.AttributeType.GRAPH
_GRAPHS: Final = ir.AttributeType.GRAPHS


def iter_tensors(model: ir.Model) -> Iterator[tuple[str, ir.TensorProtocol]]:
    """(value name, tensor) for every initializer and Constant/attribute tensor, all graphs.

    Graphs in :func:`all_graphs`' order, each in one walk of its nodes (the same walk finds its
    subgraphs); attributes through ``Attributes.data`` (the UserDict's dict: no per-key
    ``__getitem__`` of the Mapping ABC, for every attribute of every node).
    """
    yield from _graph_tensors(model.graph)


def _graph_tensors(graph: ir.Graph) -> Iterator[tuple[str, ir.TensorProtocol]]:
    for name, value in graph.initializers.items():
        if value.const_value is not None:
            yield name, value.const_value
    subs: list[ir.Graph] = []
    for node in graph:
        for attr in node.attributes.data.values():
            kind = attr.type
            if kind == _TENSOR:
                yield f"{node.name or node.op_type}.{attr.name}", attr.value
            elif kind == _GRAPH and attr.value is not None:  # a reference attribute holds no graph
                subs.append(attr.value)
            elif kind == _GRAPHS and attr.value is not None:
                subs.extend(attr.value)
    for sub in subs:
        yield from _graph_tensors(sub)


_EXTERNAL_CLASSES: dict[type, bool] = {}


def is_external(tensor: object) -> TypeGuard[ir.ExternalTensor]:
    """``isinstance(tensor, ir.ExternalTensor)``, decided once per class.

    ``ir.ExternalTensor``'s metaclass is typing's protocol metaclass: a plain ``isinstance`` of a
    non-external tensor costs ~3 us, paid for every tensor of every walk of a graph.
    """
    cls = type(tensor)
    known = _EXTERNAL_CLASSES.get(cls)
    if known is None:
        known = _EXTERNAL_CLASSES[cls] = issubclass(cls, ir.ExternalTensor)
    return known


def external_refs(model: ir.Model) -> list[ExternalRef]:
    """Every external-data tensor of ``model`` (all graphs), as file, byte range, dtype and shape.

    Only the references: no byte is read, so the cost does not grow with the weights.
    """
    refs = []
    for name, tensor in iter_tensors(model):
        if is_external(tensor):
            refs.append(
                ExternalRef(
                    name=name,
                    location=str(tensor.location),
                    offset=int(tensor.offset or 0),
                    length=None if tensor.length is None else int(tensor.length),
                    dtype=tensor.dtype,
                    shape=tuple(int(d) for d in tensor.shape.numpy()),
                )
            )
    return refs


def _expected_nbytes(dtype: ir.DataType, shape: tuple[int, ...]) -> int | None:
    count = 1
    for dim in shape:
        count *= dim
    try:
        bits = dtype.bitwidth
    except TypeError:  # STRING / UNDEFINED: no fixed element size
        return None
    if bits % 8:
        return (count * bits + 7) // 8
    return count * (bits // 8)


def _resolve_data_file(graph_path: Path, root: Path, location: str, what: str) -> tuple[Path, os.stat_result]:
    """The named path of one external-data file, after the containment checks, and its stat."""
    try:
        location = safe_relpath(location, what=what)
        # The location is relative to the graph file's directory; the containment bound is the
        # package root (a layered package's head may not reach into its sibling).
        rel_to_root = os.path.relpath(graph_path.parent / location, root)
        named = resolve_inside(root, rel_to_root, what=what)
    except UnsafePathError as exc:
        raise GraphError(str(exc)) from None
    try:
        st = named.stat()
    except OSError as exc:
        raise GraphError(f"{what}: cannot stat {quote(location)}: {os_problem(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise GraphError(f"{what}: {quote(location)} is not a regular file")
    return named, st


def _check_external(
    graph_path: Path,
    root: Path,
    ref: ExternalRef,
    files: dict[str, tuple[Path, os.stat_result]] | None = None,
) -> tuple[Path, int, int]:
    """Validate one reference; return (named path, offset, length) with length resolved.

    ``files`` caches the per-file checks (path safety, stat): a graph's thousand tensors in one
    data file resolve the path once.
    """
    what = f"{graph_path.name}: initializer {quote(ref.name)} external data"
    location = ref.location
    if files is not None and location in files:
        named, st = files[location]
    else:
        named, st = _resolve_data_file(graph_path, root, location, what)
        if files is not None:
            files[location] = (named, st)
    if ref.offset < 0 or (ref.length is not None and ref.length < 0):
        raise GraphError(f"{what}: negative offset or length ({ref.offset}, {ref.length})")
    length = st.st_size - ref.offset if ref.length is None else ref.length
    if ref.offset > st.st_size or ref.offset + length > st.st_size:
        raise GraphError(
            f"{what}: byte range [{ref.offset}, {ref.offset + length}) is past the end of "
            f"{quote(location)} ({st.st_size} bytes)"
        )
    expected = _expected_nbytes(ref.dtype, ref.shape)
    if expected is not None and length != expected and not (ref.length is None and length > expected):
        raise GraphError(
            f"{what}: {length} bytes in {quote(location)} but {ref.dtype.name} shape {quote(list(ref.shape))} needs {expected}"
        )
    return named, ref.offset, expected if ref.length is None and expected is not None else length


def _check_structure(graph: ir.Graph, path: Path, outer: frozenset[str] = frozenset()) -> None:
    """Every node input is defined before use (catches missing inputs and cycles)."""
    defined = set(outer)
    defined.update(v.name for v in graph.inputs if v.name)
    defined.update(graph.initializers)
    for node in graph:
        for value in node.inputs:
            if value is None or not value.name:
                continue
            if value.name not in defined:
                producer = value.producer()
                why = "is produced later (cycle or wrong order)" if producer is not None else "is not produced by any node"
                raise GraphError(f"{path.name}: node {quote(node.name or node.op_type)} input {quote(value.name)} {why}")
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                _check_structure(attr.value, path, frozenset(defined))
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.value:
                    _check_structure(sub, path, frozenset(defined))
        defined.update(v.name for v in node.outputs if v.name)
    for value in graph.outputs:
        if value.name and value.name not in defined:
            raise GraphError(f"{path.name}: graph output {quote(value.name)} is not produced by any node")


_DATA_TYPES: Final = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}


def _check_proto(proto: onnx.ModelProto, path: Path) -> None:
    """What onnx-ir would silently accept or refuse with a vague message, named precisely."""
    if not proto.HasField("graph") or not proto.opset_import:
        raise GraphError(f"{clip(path)}: not a valid ONNX model (empty file or no graph / opset_import)")
    graph = proto.graph
    seen: set[str] = set()
    for tensor in graph.initializer:
        what = f"{path.name}: initializer {quote(tensor.name)}"
        if tensor.name in seen:
            raise GraphError(f"{what} is defined twice (duplicate initializer name)")
        seen.add(tensor.name)
        if tensor.data_type not in _DATA_TYPES:
            raise GraphError(f"{what} has invalid data type {tensor.data_type}")
        if any(d < 0 for d in tensor.dims):
            raise GraphError(f"{what} has a negative dimension {list(tensor.dims)}")
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            if tensor.data_type == onnx.TensorProto.STRING:
                raise GraphError(f"{what}: STRING tensors cannot be stored as external data")
            for entry in tensor.external_data:
                if entry.key in ("offset", "length") and not (
                    entry.value.isascii() and entry.value.isdigit() and len(entry.value) <= 19 and int(entry.value) < 2**63
                ):
                    raise GraphError(
                        f"{what} external data: {entry.key} {quote(entry.value)} is not a non-negative int64 decimal"
                    )
    produced: set[str] = {v.name for v in graph.input} | seen
    for node in graph.node:
        for out in node.output:
            if not out:
                continue
            if out in produced:
                raise GraphError(
                    f"{path.name}: node {quote(node.name or node.op_type)} output {quote(out)} is already produced "
                    "(duplicate value name)"
                )
            produced.add(out)


class _DropWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING


@contextlib.contextmanager
def quiet_deserializer(active: bool = True) -> Iterator[None]:
    """Silence onnx-ir's deserializer warnings (an input or output no node produces) in the block.

    :func:`_check_structure` reports the same fault as one bounded error line instead of a
    warning that quotes a hostile node name in full.
    """
    if not active:
        yield
        return
    logger = logging.getLogger("onnx_ir.serde")
    drop = _DropWarnings()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def load_graph(path: Path, *, root: Path, check_structure: bool = True) -> ir.Model:
    """Load ``path`` without external weights, validating every external-data reference.

    :func:`load_graph_refs` also returns the references it checked.
    """
    return load_graph_refs(path, root=root, check_structure=check_structure)[0]


def load_graph_refs(path: Path, *, root: Path, check_structure: bool = True) -> tuple[ir.Model, list[ExternalRef]]:
    """Load ``path`` without external weights, validating every external-data reference.

    Returns the model and its external-data references (``external_refs(model)`` as loaded).

    Args:
        path: the ``.onnx`` file.
        root: the package directory that every external-data file must stay inside.
        check_structure: also require every node input to be defined before use.

    Raises:
        GraphError: one line naming the file and the problem.

    """
    _LOG.info("reading graph %s", clip(path))
    memo = active_memo()
    key = (os.path.abspath(path), os.path.abspath(root), check_structure)
    files: dict[str, tuple[Path, os.stat_result]] = {}
    fd = open_regular(path, what="graph", error=GraphError)  # never a FIFO, a device, a directory
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        size = st.st_size
        if size > GRAPH_LIMIT:
            raise GraphError(f"{clip(path)}: {size} bytes is larger than protobuf's 2 GiB limit for one graph")
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        kept = memo.take(key, identity) if memo is not None else None
        if kept is not None:  # the gate parsed and checked this very file: its model, references checked again
            for ref in kept[1]:
                _check_external(path, root, ref, files)
            return kept
        try:
            data = fh.read()
        except OSError as exc:
            raise GraphError(f"{clip(path)}: cannot read: {os_problem(exc)}") from None
        try:
            proto = onnx.load_model_from_string(data)
        except Exception as exc:  # protobuf DecodeError on truncated or corrupt files
            detail = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise GraphError(f"{clip(path)}: not a valid ONNX model (truncated or malformed protobuf): {detail}") from None
    _check_proto(proto, path)
    model = memo.written(data) if memo is not None else None
    if model is None:  # not the very bytes of a model this command wrote: parse them
        try:
            with quiet_deserializer(check_structure):
                model = ir.serde.deserialize_model(proto)
        except Exception as exc:  # onnx-ir ValueError on malformed graphs
            detail = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise GraphError(f"{clip(path)}: not a valid ONNX model (malformed graph): {detail}") from None
        if memo is not None:
            memo.parsed += 1
    ir.external_data.set_base_dir(model.graph, os.path.dirname(path))
    refs = external_refs(model)
    for ref in refs:
        _check_external(path, root, ref, files)
    if check_structure:
        _check_structure(model.graph, path)
    model.meta["q38.path"] = str(path)
    model.meta["q38.root"] = str(root)
    if memo is not None:
        memo.keep_loaded(key, identity, model, refs, data)
    return model, refs


def read_tensor(
    tensor: ir.TensorProtocol | ir.Value,
    *,
    graph_path: Path,
    root: Path,
    files: dict[str, tuple[Path, os.stat_result]] | None = None,
) -> np.ndarray:
    """The tensor's values, reading external bytes ourselves (hard-link tolerant).

    ``files``: a cache of the per-file checks (path safety, stat) shared by the reads of one
    graph (as :func:`load_graph` shares them); each read still opens the checked path afresh as a
    regular file and checks its byte range against the file's size.
    """
    if isinstance(tensor, ir.Value):
        if tensor.const_value is None:
            raise GraphError(f"{graph_path.name}: value {quote(tensor.name)} has no constant value")
        tensor = tensor.const_value
    if not is_external(tensor):
        return tensor.numpy()
    ref = ExternalRef(
        name=str(tensor.name),
        location=str(tensor.location),
        offset=int(tensor.offset or 0),
        length=None if tensor.length is None else int(tensor.length),
        dtype=tensor.dtype,
        shape=tuple(int(d) for d in tensor.shape.numpy()),
    )
    named, offset, length = _check_external(graph_path, root, ref, files)
    fd = open_regular(named, what=f"{graph_path.name}: external data of {quote(ref.name)}", error=GraphError)
    try:
        data = os.pread(fd, length, offset)
    except OSError as exc:
        raise GraphError(f"{clip(named)}: cannot read {quote(ref.name)}: {os_problem(exc)}") from None
    finally:
        os.close(fd)
    if len(data) != length:
        raise GraphError(f"{graph_path.name}: short read of {quote(ref.name)} ({len(data)} of {length} bytes)")
    np_dtype = tensor.dtype.numpy()
    if tensor.dtype.bitwidth % 8:  # packed sub-byte types: hand back the raw bytes
        return np.frombuffer(data, dtype=np.uint8).copy()
    return np.frombuffer(data, dtype=np_dtype).reshape(ref.shape).copy()


def tensor_digest(tensor: ir.TensorProtocol) -> str:
    """SHA-256 of an in-memory tensor's values, for every element type.

    A string tensor has no byte buffer (``tobytes`` raises for it): its digest covers each
    string's length and bytes, so ``["ab", "c"]`` and ``["a", "bc"]`` differ. Every other type
    (sub-byte packed, float8, complex, bool, 0-d, empty) is hashed over ``tobytes``.
    """
    h = hashlib.sha256()
    if tensor.dtype == ir.DataType.STRING:
        # A loaded graph's StringTensor has string_data(); an in-memory ir.Tensor of a str array
        # (or a lazy one) only numpy(), whose items are the strings.
        strings = tensor.string_data() if hasattr(tensor, "string_data") else tensor.numpy().reshape(-1).tolist()
        for item in strings:
            data = item if isinstance(item, bytes) else str(item).encode("utf-8", "surrogateescape")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
        return "s" + h.hexdigest()
    h.update(tensor.tobytes())
    return h.hexdigest()


def save_graph(model: ir.Model, path: Path, *, new_data: str | None = None, keep: bool = False) -> None:
    """Write ``model`` to ``path``; external tensors stay references.

    Inside a :func:`~q38.package.graph_memo.graph_memo` block the written bytes are registered
    with ``model`` when ``keep`` (the caller changes ``model`` no more), so the output check judges
    the model in memory instead of parsing the file again.

    In-memory tensors of at least 1 KiB (weights a pass created) are appended to ``new_data``
    (default ``<stem>.q38.data``) next to ``path`` and become external references. The caller
    places the referenced data files next to ``path``. The model is updated in place to point
    at the new file.
    """
    data_name = new_data or f"{path.stem}.q38.data"
    data_path = path.parent / data_name
    offset = data_path.stat().st_size if data_path.exists() else 0
    with contextlib.ExitStack() as stack:
        fh = None
        for graph in all_graphs(model):
            for value in graph.initializers.values():
                tensor = value.const_value
                if tensor is None or is_external(tensor) or tensor.dtype == ir.DataType.STRING:
                    continue  # string tensors stay inline: they have no byte buffer to place
                if tensor.nbytes < _INLINE_LIMIT:
                    continue
                if fh is None:
                    fh = stack.enter_context(open(data_path, "ab"))
                pad = (-offset) % 64
                if pad:
                    fh.write(b"\0" * pad)
                    offset += pad
                raw = tensor.tobytes()
                fh.write(raw)
                value.const_value = ir.ExternalTensor(
                    data_name,
                    offset,
                    len(raw),
                    tensor.dtype,
                    shape=ir.Shape(tensor.shape.numpy()),
                    name=value.name or "",
                    base_dir=path.parent,
                )
                offset += len(raw)
    proto = ir.serde.serialize_model(model)
    data = proto.SerializeToString()
    path.write_bytes(data)
    _LOG.info("wrote graph %s", path)
    memo = active_memo()
    if memo is not None and keep:
        memo.keep_written(model, data)
