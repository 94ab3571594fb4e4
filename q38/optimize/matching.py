"""The matching helpers a pass's guards read the graph with: constants, producers, attributes, privacy.

A pass's ``match`` answers with its match or a :class:`Decline`; these helpers are the questions it
asks on the way (is this input a constant, and which; what produces this value; is this
intermediate read by anything outside the pattern). They only read the graph; the rewrite side
(:class:`q38.optimize._common.RewriteContext`) is the one that changes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import overload

import numpy as np
import onnx_ir as ir

__all__ = [
    "Decline",
    "TensorReader",
    "attr_float",
    "attr_int",
    "attr_ints",
    "captured_by_subgraph",
    "check_private",
    "const_array",
    "const_ints",
    "const_scalar",
    "default_reader",
    "first_dtype",
    "inp",
    "is_output_of",
    "producer_of",
    "rank_of",
    "slice_args",
]

TensorReader = Callable[[ir.Value], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Decline:
    """A guard's verdict: this candidate is not rewritten, and why."""

    reason: str


def default_reader(value: ir.Value) -> np.ndarray:
    """Read an in-memory (or onnx-ir external) constant; package code passes its own reader."""
    tensor = value.const_value
    if tensor is None:
        raise ValueError(f"value {value.name!r} has no constant")
    return tensor.numpy()


def first_dtype(*values: ir.Value | None) -> ir.DataType | None:
    """The dtype of the first typed value among ``values``; None when none is typed.

    A rewritten producer may have left its output untyped; a value_info with elem_type 0
    declares ``UNDEFINED``, which says no more than no type, so it is skipped too.
    """
    return next((v.dtype for v in values if v is not None and v.dtype not in (None, ir.DataType.UNDEFINED)), None)


def captured_by_subgraph(value: ir.Value) -> bool:
    """True when a node of a subgraph (at any depth) reads ``value`` from an enclosing scope."""
    home = value.graph
    return any(use.node.graph is not home for use in value.uses())


def is_output_of(value: ir.Value, graph: ir.Graph) -> bool:
    """True when ``value`` is one of ``graph``'s outputs (by identity)."""
    # ``in`` on the outputs list is a C-level identity scan (ir.Value defines no __eq__); a Python
    # loop over them per replaced output grew with layers x outputs.
    return value.is_graph_output() and value in graph.outputs


def check_private(
    intermediates: Iterable[ir.Value], matched: Sequence[ir.Node], graph: ir.Graph
) -> Decline | None:
    """Every intermediate must be read only by matched nodes (no escape, no subgraph capture)."""
    matched_ids = {id(n) for n in matched}
    for value in intermediates:
        if captured_by_subgraph(value):
            return Decline(f"intermediate {value.name!r} is captured by a subgraph")
        if is_output_of(value, graph):
            return Decline(f"intermediate {value.name!r} is a graph output")
        for use in value.uses():
            if id(use.node) not in matched_ids:
                return Decline(
                    f"intermediate {value.name!r} has another consumer "
                    f"({use.node.op_type} {use.node.name!r})"
                )
    return None


def const_array(value: ir.Value | None, reader: TensorReader) -> np.ndarray | None:
    """The constant behind ``value`` (an initializer or a Constant node), or None."""
    if value is None:
        return None
    if value.const_value is not None and value.is_initializer():
        return reader(value)
    node = value.producer()
    if node is not None and node.op_type == "Constant" and node.domain == "":
        attr = node.attributes.get("value")
        if attr is not None and isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
            return attr.as_tensor().numpy()
        for key in ("value_int", "value_float"):
            attr = node.attributes.get(key)
            if isinstance(attr, ir.Attr):
                return np.asarray(attr.value)
        for key in ("value_ints", "value_floats"):
            attr = node.attributes.get(key)
            if isinstance(attr, ir.Attr):
                return np.asarray(list(attr.value))
    if value.const_value is not None:
        return reader(value)
    return None


def const_ints(value: ir.Value | None, reader: TensorReader) -> list[int] | None:
    """An integer constant's values flattened (None: not a constant, or not an integer tensor)."""
    arr = const_array(value, reader)
    if arr is None or arr.dtype.kind not in "iu":
        return None
    return [int(x) for x in arr.reshape(-1)]


def const_scalar(value: ir.Value | None, reader: TensorReader) -> float | None:
    """A one-element constant's value as a float (None: not a constant, or more than one element)."""
    arr = const_array(value, reader)
    if arr is None or arr.size != 1:
        return None
    return float(np.asarray(arr, dtype=np.float64).reshape(-1)[0])


def producer_of(value: ir.Value | None, *op_types: str, domain: str = "") -> ir.Node | None:
    """The producer of ``value`` when it is one of ``op_types`` in ``domain``."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.op_type not in op_types:
        return None
    if node.domain != domain:  # onnx_ir spells the default domain "" (it maps "ai.onnx" to "")
        return None
    return node


@overload
def attr_int(node: ir.Node, key: str, default: int) -> int: ...
@overload
def attr_int(node: ir.Node, key: str, default: None = None) -> int | None: ...
def attr_int(node: ir.Node, key: str, default: int | None = None) -> int | None:
    """Attribute ``key`` of ``node`` as an int, or ``default`` when the node does not set it."""
    attr = node.attributes.get(key)
    return int(attr.value) if isinstance(attr, ir.Attr) else default


def attr_float(node: ir.Node, key: str, default: float | None = None) -> float | None:
    """Attribute ``key`` of ``node`` as a float, or ``default`` when the node does not set it."""
    attr = node.attributes.get(key)
    return float(attr.value) if isinstance(attr, ir.Attr) else default


def attr_ints(node: ir.Node, key: str) -> list[int] | None:
    """Attribute ``key`` of ``node`` as a list of ints (None: not set)."""
    attr = node.attributes.get(key)
    return [int(x) for x in attr.value] if isinstance(attr, ir.Attr) else None


def inp(node: ir.Node, index: int) -> ir.Value | None:
    """Input ``index`` of ``node``; None when it is omitted or beyond the node's inputs."""
    return node.inputs[index] if index < len(node.inputs) else None


def slice_args(node: ir.Node, reader: TensorReader) -> tuple[int, int, int] | None:
    """(start, end, axis) of a one-axis, unit-step ``Slice`` whose arguments are constants.

    None when it is not that: a dynamic argument, several axes or a step other than 1. Omitted
    ``axes`` are the leading axes and omitted ``steps`` are 1, as ONNX and ORT read them.
    """
    starts, ends = const_ints(inp(node, 1), reader), const_ints(inp(node, 2), reader)
    axes = const_ints(inp(node, 3), reader) if inp(node, 3) is not None else list(range(len(starts or [])))
    steps = const_ints(inp(node, 4), reader) if inp(node, 4) is not None else [1]
    if not starts or not ends or not axes or steps != [1] or len(starts) != 1 or len(axes) != 1:
        return None
    return starts[0], ends[0], axes[0]


def rank_of(value: ir.Value | None) -> int | None:
    """The declared rank of ``value`` (None: no value, or no shape declared)."""
    if value is None or value.shape is None:
        return None
    return len(value.shape)
