"""Small read-only helpers over onnx_ir graphs, shared by the graph contract modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import onnx_ir as ir

__all__ = [
    "as_ir_model",
    "attr",
    "has_attr",
    "input_at",
    "is_constant_initializer",
    "iter_subgraph_owners",
    "node_label",
    "output_at",
    "static_dims",
]


def as_ir_model(model: Any) -> ir.Model:
    """An ``onnx_ir.Model`` for ``model`` (a ModelProto is converted; external data is not read)."""
    if isinstance(model, ir.Model):
        return model
    return ir.serde.deserialize_model(model)


def has_attr(node: ir.Node, name: str) -> bool:
    return name in node.attributes


def attr(node: ir.Node, name: str, default: Any = None) -> Any:
    """The python value of attribute ``name`` (ints, floats, strings, lists), or ``default``."""
    found = node.attributes.get(name)
    if found is None:
        return default
    value = found.value
    return value


def input_at(node: ir.Node, index: int) -> ir.Value | None:
    """Input ``index``, or None when it is absent (beyond the list or named '')."""
    if index >= len(node.inputs):
        return None
    return node.inputs[index]


def output_at(node: ir.Node, index: int) -> ir.Value | None:
    """Output ``index``, or None when it is absent (beyond the list or named '')."""
    if index >= len(node.outputs):
        return None
    value = node.outputs[index]
    return value if value.name else None


def is_constant_initializer(value: ir.Value) -> bool:
    """An initializer that is not also a graph input (ORT may not override it)."""
    return value.is_initializer() and not value.is_graph_input()


def static_dims(value: ir.Value | None) -> tuple[int, ...] | None:
    """All dims as ints, or None when the shape (or any dim) is unknown."""
    if value is None or value.shape is None:
        return None
    dims = []
    for dim in value.shape:
        if not isinstance(dim, int):
            return None
        dims.append(dim)
    return tuple(dims)


def node_label(node: ir.Node) -> str:
    return node.name or ""


def iter_subgraph_owners(graph: ir.Graph) -> Iterator[tuple[ir.Node, ir.Graph]]:
    """(node, subgraph) for each graph attribute of the nodes directly in ``graph``."""
    for node in graph:
        for attribute in node.attributes.values():
            if attribute.type == ir.AttributeType.GRAPH:
                yield node, attribute.value
            elif attribute.type == ir.AttributeType.GRAPHS:
                for sub in attribute.value:
                    yield node, sub
