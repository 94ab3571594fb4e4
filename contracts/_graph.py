"""Small read-only helpers over onnx_ir graphs, shared by the graph contract modules.

Attribute access is typed: :func:`attr_int` / :func:`attr_float` / :func:`attr_str` /
:func:`attr_ints` raise :class:`AttributeKindError` when the attribute is present with another kind
(``ndim=[3]``, ``k=0.5``). A rule evaluates each node through :func:`per_node`, which skips a node
whose attributes have the wrong kind: ORT's schema layer rejects that node first, and the generic
schema rule (``ORT-SCHEMA-006``, ``contracts.schema_rules``) reports it. No rule raises on a
malformed attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeAlias, TypeVar

import onnx
import onnx_ir as ir

__all__ = [
    "AttributeKindError",
    "ModelLike",
    "as_ir_model",
    "attr",
    "attr_float",
    "attr_int",
    "attr_ints",
    "attr_str",
    "has_attr",
    "input_at",
    "is_constant_initializer",
    "iter_subgraph_owners",
    "node_label",
    "output_at",
    "per_node",
    "static_dims",
]

_T = TypeVar("_T")

# What a graph rule's ``model`` argument may be: an onnx_ir model, or a ModelProto that
# :func:`as_ir_model` converts (external data is never read).
ModelLike: TypeAlias = ir.Model | onnx.ModelProto


class AttributeKindError(Exception):
    """An attribute is present with another kind than the one a check reads."""

    def __init__(self, node: ir.Node, name: str, expected: str, actual: str) -> None:
        super().__init__(f"{node_label(node)}: attribute {name} is {actual}, not {expected}")
        self.node, self.name, self.expected, self.actual = node, name, expected, actual


def as_ir_model(model: ModelLike) -> ir.Model:
    """An ``onnx_ir.Model`` for ``model`` (a ModelProto is converted; external data is not read)."""
    if isinstance(model, ir.Model):
        return model
    return ir.serde.deserialize_model(model)


def has_attr(node: ir.Node, name: str) -> bool:
    """Whether ``node`` carries attribute ``name`` at all, whatever its kind."""
    return name in node.attributes


def attr(node: ir.Node, name: str, default: object = None) -> object:
    """The raw python value of attribute ``name`` whatever its kind, or ``default``."""
    found = node.attributes.get(name)
    if found is None:
        return default
    return found.value


def _typed(node: ir.Node, name: str, kind: ir.AttributeType) -> ir.Attr | None:
    """Attribute ``name`` when present (None when absent); AttributeKindError for another kind."""
    found = node.attributes.get(name)
    if found is None:
        return None
    if found.type != kind:
        raise AttributeKindError(node, name, kind.name, found.type.name)
    return found


def attr_int(node: ir.Node, name: str, default: int) -> int:
    """INT attribute ``name`` (``default`` when absent; AttributeKindError for another kind)."""
    found = _typed(node, name, ir.AttributeType.INT)
    return int(default if found is None else found.value)


def attr_float(node: ir.Node, name: str, default: float) -> float:
    """FLOAT attribute ``name`` (``default`` when absent; AttributeKindError for another kind)."""
    found = _typed(node, name, ir.AttributeType.FLOAT)
    return float(default if found is None else found.value)


def attr_str(node: ir.Node, name: str, default: str) -> str:
    """STRING attribute ``name`` decoded as UTF-8 (undecodable bytes replaced), or ``default``.

    Raises AttributeKindError when the attribute is present with another kind.
    """
    found = _typed(node, name, ir.AttributeType.STRING)
    value = default if found is None else found.value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def attr_ints(node: ir.Node, name: str, default: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """INTS attribute ``name`` as a tuple, or ``default`` (None: absent is distinguishable).

    Raises AttributeKindError when the attribute is present with another kind.
    """
    found = _typed(node, name, ir.AttributeType.INTS)
    value = default if found is None else found.value
    return None if value is None else tuple(int(v) for v in value)


def per_node(nodes: Iterable[ir.Node], check: Callable[[ir.Node], Iterable[_T]]) -> list[_T]:
    """``check`` over ``nodes``, skipping a node whose attributes have the wrong kind."""
    found: list[_T] = []
    for node in nodes:
        try:
            found.extend(check(node))
        except AttributeKindError:
            continue
    return found


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
    """All declared dims as ints, or None when the shape (or any dim) is unknown."""
    if value is None or value.shape is None:
        return None
    dims = []
    for dim in value.shape:
        if not isinstance(dim, int):
            return None
        dims.append(dim)
    return tuple(dims)


def node_label(node: ir.Node) -> str:
    """The name a violation reports for ``node`` (its node name; "" for an unnamed node)."""
    return node.name or ""


def iter_subgraph_owners(graph: ir.Graph) -> Iterator[tuple[ir.Node, ir.Graph]]:
    """(node, subgraph) for each graph attribute of the nodes directly in ``graph``."""
    for node in graph:
        yield from subgraphs_of(node)


def subgraphs_of(node: ir.Node) -> Iterator[tuple[ir.Node, ir.Graph]]:
    """(node, subgraph) for each GRAPH / GRAPHS attribute of ``node``."""
    for attribute in node.attributes.values():
        if attribute.type == ir.AttributeType.GRAPH:
            yield node, attribute.value
        elif attribute.type == ir.AttributeType.GRAPHS:
            for sub in attribute.value:
                yield node, sub
