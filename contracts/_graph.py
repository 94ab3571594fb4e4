"""Small read-only helpers over onnx_ir graphs, shared by the graph contract modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import onnx_ir as ir

__all__ = [
    "as_ir_model",
    "attr",
    "has_attr",
    "infer_elem_types",
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


# Standard ops whose every output has the element type of their first input (or, for ``Where``,
# their second). Anything not listed (and not special-cased below) is "unknown": the type rules
# then stay silent rather than guess.
_SAME_AS_INPUT0 = frozenset({
    "Abs", "Add", "AveragePool", "BatchNormalization", "Ceil", "Celu", "Clip", "Concat", "Conv",
    "Cos", "CumSum", "DepthToSpace", "Div", "Dropout", "Einsum", "Elu", "Erf", "Exp", "Expand",
    "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm",
    "GlobalAveragePool", "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization",
    "LayerNormalization", "LeakyRelu", "Log", "LogSoftmax", "MatMul", "Max", "MaxPool", "Mean",
    "Min", "Mish", "Mod", "Mul", "Neg", "Pad", "Pow", "PRelu", "Reciprocal", "ReduceL2",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare", "Relu", "Reshape", "Resize", "ReverseSequence", "Round", "ScatterElements",
    "ScatterND", "Selu", "Sigmoid", "Sign", "Sin", "Slice", "Softmax", "Softplus", "Softsign",
    "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tan", "Tanh", "Tile", "Transpose",
    "Trilu", "Unsqueeze", "RMSNormalization", "SimplifiedLayerNormalization",
})  # fmt: skip
_INT64_OUT = frozenset({"Shape", "Size", "NonZero", "ArgMax", "ArgMin"})
_BOOL_OUT = frozenset({"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or",
                       "Xor", "IsNaN", "IsInf"})  # fmt: skip


def _node_out_types(node: ir.Node, known: dict[int, ir.DataType]) -> list[ir.DataType | None]:
    def of(index: int) -> ir.DataType | None:
        value = input_at(node, index)
        return None if value is None else known.get(id(value))

    n = len(node.outputs)
    if node.domain in ("", "ai.onnx"):
        if node.op_type == "Cast":
            return [ir.DataType(int(attr(node, "to")))] if has_attr(node, "to") else [None]
        if node.op_type == "CastLike":
            return [of(1)]
        if node.op_type in _INT64_OUT:
            return [ir.DataType.INT64] * n
        if node.op_type in _BOOL_OUT:
            return [ir.DataType.BOOL] * n
        if node.op_type == "Where":
            return [of(1)]
        if node.op_type == "TopK":
            return [of(0), ir.DataType.INT64][:n]
        if node.op_type == "Constant":
            found = node.attributes.get("value")
            return [found.value.dtype if found is not None else None]
        if node.op_type in _SAME_AS_INPUT0:
            return [of(0)] * n
        return [None] * n
    # contrib ops: output 0 has the type of input 0 (T) for every op q38 emits; others unknown
    return [of(0)] + [None] * (n - 1)


def infer_elem_types(graph: ir.Graph) -> dict[int, ir.DataType]:
    """Element type of each value of ``graph`` (keyed by ``id(value)``) where it is known.

    Declared types win (graph inputs, initializers, value_info); otherwise a small forward pass
    over the standard ops that keep, fix or cast their input type. Subgraphs are not entered.
    """
    known: dict[int, ir.DataType] = {}
    for value in [*graph.inputs, *graph.initializers.values()]:
        if value.dtype is not None:
            known[id(value)] = value.dtype
    for node in graph:
        for value, inferred in zip(node.outputs, _node_out_types(node, known), strict=False):
            dtype = value.dtype if value.dtype is not None else inferred
            if dtype is not None:
                known[id(value)] = dtype
    return known
