"""A small ONNX graph builder with deterministic external data (fixed offsets, no timestamps)."""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

from q38 import _ops

__all__ = ["EXTERNAL_THRESHOLD", "AttrValue", "DataFile", "ExtRef", "GraphBuilder", "known_sha256", "rng_for"]

AttrValue: TypeAlias = (
    int | float | str | bytes | TensorProto | onnx.GraphProto | Sequence[int] | Sequence[float] | Sequence[str]
)
"""A node attribute as ``onnx.helper.make_node`` takes it (its type is inferred from the value)."""

# sha256 of data files taken while they were written (DataFile), keyed by the file's identity
# (device, inode, size, mtime): the manifest need not read GBs back. A stale key never matches.
_WRITTEN: dict[tuple[int, int, int, int], str] = {}


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def known_sha256(path: Path) -> str | None:
    """The sha256 a DataFile of this process computed while writing ``path``, else None.

    Only while the file is still what was written (same device, inode, size and mtime; a hard
    link to it counts): a manifest then need not read GBs back. A changed or missing file: None.
    """
    try:
        return _WRITTEN.get(_identity(path))
    except OSError:
        return None

EXTERNAL_THRESHOLD = 1024  # bytes; initializers at least this large live in external data
_ALIGN = 64


def rng_for(seed: int, name: str) -> np.random.Generator:
    """A generator that depends only on (seed, name), so weights do not depend on build order."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


@dataclass(frozen=True)
class ExtRef:
    """Where one tensor's bytes lie in an external data file."""

    location: str
    offset: int
    length: int
    dtype: str
    shape: tuple[int, ...]


class DataFile:
    """An external data file written front to back at fixed, 64-byte aligned offsets.

    Writes go through one background thread behind a short queue (at most ``_QUEUE`` pieces in
    flight), so generating the next piece overlaps writing this one and memory stays bounded.
    """

    _QUEUE = 3

    def __init__(self, path: Path, location: str) -> None:
        self.path = path
        self.location = location
        self._fh = path.open("wb")
        self.size = 0
        self.refs: dict[str, ExtRef] = {}
        self._q: queue.Queue[np.ndarray | bytes | None] = queue.Queue(self._QUEUE)
        self._error: BaseException | None = None
        self._sha = hashlib.sha256()  # fed by the writer thread (hashlib releases the GIL)
        self._thread = threading.Thread(target=self._drain, name=f"q38-synth-{location}")
        self._thread.daemon = True
        self._thread.start()

    def _drain(self) -> None:
        while (item := self._q.get()) is not None:
            if self._error is None:
                try:
                    buf = item if isinstance(item, bytes) else item.data
                    self._fh.write(buf)
                    self._sha.update(buf)
                except BaseException as exc:  # reported by the next put or by close()
                    self._error = exc

    def _put(self, item: np.ndarray | bytes) -> None:
        if self._error is not None:
            raise self._error
        self._q.put(item)

    def add(self, key: str, arr: np.ndarray, *, misalign: int = 0) -> ExtRef:
        """Append ``arr`` at the next 64-byte boundary and return where its bytes lie.

        ``misalign`` > 0 places it that many bytes past a boundary, never on a 4096-byte one
        (the deliberately unaligned expert weights).
        """
        return self.add_chunks(key, [arr], arr.dtype, tuple(arr.shape), misalign=misalign)

    def add_chunks(
        self,
        key: str,
        chunks: Iterable[np.ndarray],
        dtype: np.dtype,
        shape: tuple[int, ...],
        *,
        misalign: int = 0,
    ) -> ExtRef:
        """Append one tensor given as consecutive pieces of its C-order bytes, never held whole.

        Placement as in :meth:`add`; a key already added returns its first :class:`ExtRef`. The
        pieces must total ``shape`` x the dtype's item size, else ValueError.
        """
        if key in self.refs:
            return self.refs[key]
        start = -(-self.size // _ALIGN) * _ALIGN + misalign
        if misalign and start % 4096 == 0:
            start += _ALIGN
        if start > self.size:
            self._put(b"\0" * (start - self.size))
        length = 0
        for chunk in chunks:
            c = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
            self._put(c)
            length += c.size
        want = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if length != want:
            raise ValueError(f"{key}: chunks hold {length} bytes, shape {shape} needs {want}")
        self.size = start + length
        ref = ExtRef(self.location, start, length, _dtype_name(np.empty(0, dtype)), shape)
        self.refs[key] = ref
        return ref

    def close(self) -> None:
        """Wait for the queued writes, close the file, raise the first write error if any."""
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join()
        self._fh.close()
        if self._error is not None:
            raise self._error
        _WRITTEN[_identity(self.path)] = self._sha.hexdigest()


def _onnx_dtype(arr: np.ndarray) -> int:
    return int(helper.np_dtype_to_tensor_dtype(arr.dtype))


def _dtype_name(arr: np.ndarray) -> str:
    return str(TensorProto.DataType.Name(_onnx_dtype(arr))).lower()


@dataclass
class GraphBuilder:
    """Collects nodes, initializers and I/O of one graph."""

    name: str
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[TensorProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    outputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)
    _inits: dict[str, TensorProto] = field(default_factory=dict)
    domains: set[str] = field(default_factory=set)

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        name: str,
        *,
        n_out: int = 1,
        outputs: Sequence[str] | None = None,
        domain: str = "",
        **attrs: AttrValue,
    ) -> list[str]:
        """Append one node; return its output names (``outputs``, else ``{name}/output_{i}``).

        Node names are unique in a graph (a repeat raises ValueError); a non-empty ``domain`` is
        recorded so :meth:`model` imports its opset; ``attrs`` become the node's attributes.
        """
        if name in self._names:
            raise ValueError(f"duplicate node name {name}")
        self._names.add(name)
        outs = (
            list(outputs) if outputs is not None else [f"{name}/output_{i}" for i in range(n_out)]
        )
        # doc_string and overload are named (their defaults) so that no attribute can fill them.
        node = helper.make_node(
            op_type, list(inputs), outs, name=name, doc_string=None, domain=domain or None,
            overload=None, **attrs,
        )
        if domain:
            self.domains.add(domain)
        self.nodes.append(node)
        return outs

    def op1(self, op_type: str, inputs: Sequence[str], name: str, *, domain: str = "", **attrs: AttrValue) -> str:
        """Append a node with a single output (see :meth:`op`) and return that output's name."""
        return self.op(op_type, inputs, name, n_out=1, outputs=None, domain=domain, **attrs)[0]

    def const(self, name: str, value: npt.ArrayLike, dtype: npt.DTypeLike = np.int64) -> str:
        """An inline initializer (shape constants and other small values)."""
        arr = np.asarray(value, dtype=dtype)
        return self._add_init(name, onnx.numpy_helper.from_array(arr, name))

    def inline(self, name: str, arr: np.ndarray) -> str:
        """Add ``arr`` as an initializer stored inside the model; a name already added keeps its first tensor."""
        return self._add_init(name, onnx.numpy_helper.from_array(arr, name))

    def external(self, name: str, ref: ExtRef, arr: np.ndarray) -> str:
        """Add an initializer whose bytes lie at ``ref`` in an external data file.

        ``arr`` gives only the dtype and shape (its bytes were written by a :class:`DataFile`).
        """
        t = TensorProto()
        t.name = name
        t.data_type = _onnx_dtype(arr)
        t.dims.extend(arr.shape)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (
            ("location", ref.location),
            ("offset", str(ref.offset)),
            ("length", str(ref.length)),
        ):
            e = t.external_data.add()
            e.key, e.value = k, v
        return self._add_init(name, t)

    def _add_init(self, name: str, t: TensorProto) -> str:
        if name in self._inits:
            return name
        self._inits[name] = t
        self.initializers.append(t)
        return name

    def has_init(self, name: str) -> bool:
        """Whether an initializer ``name`` exists already (shared weights are generated once)."""
        return name in self._inits

    def input(self, name: str, elem: int, shape: Sequence[int | str]) -> str:
        """Declare a graph input of ONNX element type ``elem`` (dims: ints or symbols); return its name."""
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def output(self, name: str, elem: int, shape: Sequence[int | str]) -> None:
        """Declare a graph output of ONNX element type ``elem`` (dims: ints or symbols)."""
        self.outputs.append(helper.make_tensor_value_info(name, elem, list(shape)))

    def model(self) -> onnx.ModelProto:
        """The ModelProto of everything added, with q38's pinned IR version and opsets.

        The ONNX opset is always imported, and each custom domain used at the Microsoft opset
        version; producer ``q38-synth``. Nothing time- or host-dependent is written (goldens compare bytes).
        """
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, self.initializers
        )
        opsets = [helper.make_opsetid(_ops.ONNX_DOMAIN, _ops.ONNX_OPSET)]
        opsets += [helper.make_opsetid(d, _ops.MS_OPSET) for d in sorted(self.domains)]
        m = helper.make_model(graph, opset_imports=opsets, ir_version=_ops.IR_VERSION)
        m.producer_name = "q38-synth"
        return m
