"""Shapes as onnxruntime's graph resolve sees them, derived once per model.

No producer needs to carry a declared shape: ORT infers every value's shape at session creation
(onnx's inference functions for standard ops, its own for contrib ops) and the contrib ops' shape
checks (rank, divisibility) read those shapes. This module does the same, in one forward pass per
graph, cached in the model's facts:

* a value's shape is its producer's inferred shape merged with its declared one (graph inputs and
  initializers are declared only);
* constant inputs (``Reshape`` targets, ``Split`` sizes, axes) are what ORT's inference sees as
  input data: inline initializers and ``Constant`` node outputs only (an initializer in an
  external data file is refused, as onnx's ParseData refuses it). ORT's load-time resolve does no
  data propagation (a ``Shape -> Gather -> Concat`` target leaves the dims unknown, probed), so
  neither does this module;
* standard ops follow onnx's inference functions (broadcasting with symbolic dims, MatMul,
  Reshape with 0 / -1, Slice, Split, Gather, Concat, Transpose, Squeeze / Unsqueeze, reductions,
  Expand, Tile, ...); contrib ops use ``contracts.contrib_shapes``; anything else is unknown.

A dim is an int (static), a str (a symbolic name) or None (unknown); a shape is a tuple of dims,
or None when even the rank is unknown.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from contracts import contrib_shapes, standard_shapes
from contracts._facts import ModelFacts, model_facts
from contracts._graph import AttributeKindError, ModelLike, as_ir_model
from contracts.shape_types import (
    Handler,
    Shape,
    ShapeContext,
    ShapeInferenceError,
    broadcast,
    declared_shape,
    merge,
)

# The vocabulary (Dim, Shape, ShapeContext, broadcast, ...) is contracts.shape_types'; Shape and
# broadcast are re-exported for the rule modules that read shapes.
__all__ = ["Shape", "ShapeInferenceError", "Shapes", "broadcast", "shapes_of"]

_CONST_LIMIT = 4096  # elements: larger constants are never shape-like inputs
# Every shape handler, by (domain, op type): the two handler modules' tables, merged here explicitly.
HANDLERS: dict[tuple[str, str], Handler] = {**contrib_shapes.HANDLERS, **standard_shapes.HANDLERS}


class Shapes:
    """The shape of every value of a model, for one onnxruntime version's handlers."""

    def __init__(self, facts: ModelFacts) -> None:
        self.facts = facts
        self._shapes: dict[int, Shape | None] = {}
        self._done: set[int] = set()
        self._consts: dict[int, np.ndarray | None] = {}
        self._ran = False
        self._problems: list[tuple[ir.Node, str]] = []

    @property
    def problems(self) -> list[tuple[ir.Node, str]]:
        """(node, ORT's text) of every standard op whose inference refuses its inputs."""
        if not self._ran:
            self._run()
        return self._problems

    def shape(self, value: ir.Value | None) -> Shape | None:
        """The shape ORT infers for ``value``, merged with its declared one (None: unknown rank)."""
        if value is None:
            return None
        if not self._ran:
            self._run()
        key = id(value)
        if key in self._shapes:
            return self._shapes[key]
        found = declared_shape(value) if value.producer() is None else None
        self._shapes[key] = found
        return found

    def rank(self, value: ir.Value | None) -> int | None:
        """The rank of ``value`` when its shape is known, else None."""
        found = self.shape(value)
        return None if found is None else len(found)

    def dim(self, value: ir.Value | None, axis: int) -> int | None:
        """Dim ``axis`` (negative counts from the end) when static, else None."""
        found = self.shape(value)
        if found is None or not -len(found) <= axis < len(found):
            return None
        dim = found[axis]
        return dim if isinstance(dim, int) else None

    def const(self, value: ir.Value) -> np.ndarray | None:
        """The data ORT's inference sees for ``value``: an initializer's or a Constant's."""
        key = id(value)
        if key not in self._consts:
            self._consts[key] = _const_data(value)
        return self._consts[key]

    def _run(self) -> None:
        self._ran = True
        for scope in self.facts.scopes:
            for node in scope.graph:
                if id(node) not in self._done:
                    self._visit(node)

    def _visit(self, start: ir.Node) -> None:
        done = self._done
        if all(v is None or (p := v.producer()) is None or id(p) in done for v in start.inputs):
            self._infer(start)
            return
        stack: list[tuple[ir.Node, bool]] = [(start, False)]
        visiting: set[int] = set()
        while stack:
            node, expanded = stack.pop()
            if id(node) in self._done:
                continue
            if expanded:
                self._infer(node)
                visiting.discard(id(node))
                continue
            if id(node) in visiting:
                continue
            visiting.add(id(node))
            stack.append((node, True))
            for value in node.inputs:
                producer = None if value is None else value.producer()
                if producer is not None and id(producer) not in self._done and id(producer) not in visiting:
                    stack.append((producer, False))

    def _infer(self, node: ir.Node) -> None:
        self._done.add(id(node))
        handler = _handler(node)
        inferred: Sequence[Shape | None] = ()
        if handler is not None:
            try:
                inferred = handler(ShapeContext(self, node))
            except ShapeInferenceError as exc:
                self._problems.append((node, f"Node ({node.name}) Op ({node.op_type}) [{exc.kind}] {exc.text}"))
                inferred = ()
            except (AttributeKindError, ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
                inferred = ()
        for index, out in enumerate(node.outputs):
            got = inferred[index] if index < len(inferred) else None
            self._shapes[id(out)] = merge(got, declared_shape(out))


_CONSTANT_NUMBERS = {ir.AttributeType.INT: np.int64, ir.AttributeType.INTS: np.int64,
                     ir.AttributeType.FLOAT: np.float32, ir.AttributeType.FLOATS: np.float32}  # fmt: skip


def _const_data(value: ir.Value) -> np.ndarray | None:
    """Initializer or Constant-node data of ``value`` when it is small (never large weights)."""
    producer = value.producer()
    tensor: ir.TensorProtocol | None = None
    if producer is not None:
        if producer.op_type != "Constant" or producer.domain != "":
            return None
        # ORT makes a Constant's data from its first attribute, whatever its name (see _facts)
        found = next(iter(producer.attributes.values()), None)
        if found is None:
            return None
        if found.type == ir.AttributeType.TENSOR:
            tensor = found.value
        elif found.type in _CONSTANT_NUMBERS:
            return np.asarray(found.value, dtype=_CONSTANT_NUMBERS[found.type])
        else:
            return None
    elif value.is_initializer():
        tensor = value.const_value
    if tensor is None:
        return None
    dims = [d for d in tensor.shape if isinstance(d, int)]
    if len(dims) != len(tensor.shape):
        return None  # a symbolic dim: no data a shape could be read from
    count = int(np.prod(dims))
    if count > _CONST_LIMIT:
        return None
    if isinstance(tensor, ir.ExternalTensor):
        return None  # onnx's inference never reads external data (ShapeContext.const refuses it)
    try:
        return np.asarray(tensor.numpy())
    except Exception:  # malformed inline data: the layout rules name it; no shape here
        return None


def _handler(node: ir.Node) -> Handler | None:
    return HANDLERS.get((node.domain, node.op_type))


def shapes_of(model: ModelLike) -> Shapes:
    """The (cached) shapes of ``model``."""
    facts = model_facts(as_ir_model(model))
    found = facts.extra.get("shapes")
    if not isinstance(found, Shapes):
        found = facts.extra["shapes"] = Shapes(facts)
    return found
