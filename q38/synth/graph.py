"""A small ONNX graph builder with deterministic external data (fixed offsets, no timestamps)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from q38 import _ops

__all__ = ["EXTERNAL_THRESHOLD", "DataFile", "ExtRef", "GraphBuilder", "rng_for"]

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
    """An external data file written front to back at fixed, 64-byte aligned offsets."""

    def __init__(self, path: Path, location: str) -> None:
        self.path = path
        self.location = location
        self._fh = path.open("wb")
        self.size = 0
        self.refs: dict[str, ExtRef] = {}

    def add(self, key: str, arr: np.ndarray, *, misalign: int = 0) -> ExtRef:
        """Append ``arr``; ``misalign`` > 0 places it ``misalign`` bytes past a 64-byte boundary
        (used for deliberately unaligned expert weights)."""
        if key in self.refs:
            return self.refs[key]
        start = -(-self.size // _ALIGN) * _ALIGN + misalign
        if misalign and start % 4096 == 0:
            start += _ALIGN
        data = np.ascontiguousarray(arr).tobytes()
        if start > self.size:
            self._fh.write(b"\0" * (start - self.size))
        self._fh.write(data)
        self.size = start + len(data)
        ref = ExtRef(self.location, start, len(data), _dtype_name(arr), tuple(arr.shape))
        self.refs[key] = ref
        return ref

    def close(self) -> None:
        self._fh.close()


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
        **attrs: Any,
    ) -> list[str]:
        if name in self._names:
            raise ValueError(f"duplicate node name {name}")
        self._names.add(name)
        outs = (
            list(outputs) if outputs is not None else [f"{name}/output_{i}" for i in range(n_out)]
        )
        node = helper.make_node(
            op_type, list(inputs), outs, name=name, domain=domain or None, **attrs
        )
        if domain:
            self.domains.add(domain)
        self.nodes.append(node)
        return outs

    def op1(self, op_type: str, inputs: Sequence[str], name: str, **kw: Any) -> str:
        return self.op(op_type, inputs, name, **kw)[0]

    def const(self, name: str, value: Any, dtype: Any = np.int64) -> str:
        """An inline initializer (shape constants and other small values)."""
        arr = np.asarray(value, dtype=dtype)
        return self._add_init(name, onnx.numpy_helper.from_array(arr, name))

    def inline(self, name: str, arr: np.ndarray) -> str:
        return self._add_init(name, onnx.numpy_helper.from_array(arr, name))

    def external(self, name: str, ref: ExtRef, arr: np.ndarray) -> str:
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
        return name in self._inits

    def input(self, name: str, elem: int, shape: Sequence[int | str]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def output(self, name: str, elem: int, shape: Sequence[int | str]) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem, list(shape)))

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, self.initializers
        )
        opsets = [helper.make_opsetid(_ops.ONNX_DOMAIN, _ops.ONNX_OPSET)]
        opsets += [helper.make_opsetid(d, _ops.MS_OPSET) for d in sorted(self.domains)]
        m = helper.make_model(graph, opset_imports=opsets, ir_version=_ops.IR_VERSION)
        m.producer_name = "q38-synth"
        return m
