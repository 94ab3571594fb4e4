"""Shapes as onnxruntime's graph resolve sees them, derived once per model: no producer needs to
carry a declared shape.

ORT infers every value's shape at session creation (onnx's inference functions for standard ops,
its own for contrib ops) and the contrib ops' shape checks (rank, divisibility) read those shapes.
This module does the same, in one forward pass per graph, cached in the model's facts:

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

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from contracts._facts import ModelFacts, model_facts
from contracts._graph import AttributeKindError, as_ir_model, attr_ints

__all__ = ["Dim", "Shape", "ShapeContext", "ShapeInferenceError", "Shapes", "broadcast", "shapes_of"]

Dim = int | str | None
Shape = tuple[Dim, ...]
Handler = Callable[["ShapeContext"], Sequence[Shape | None]]
_CONST_LIMIT = 4096  # elements: larger constants are never shape-like inputs


class ShapeInferenceError(Exception):
    """A standard op's inference refuses its inputs, as onnx's inference function does.

    ``kind`` is the bracketed tag of ORT's text (``ShapeInferenceError`` / ``TypeInferenceError``),
    ``text`` what follows it; raised only where the dims involved are static.
    """

    def __init__(self, text: str, kind: str = "ShapeInferenceError") -> None:
        super().__init__(text)
        self.text, self.kind = text, kind


def _declared(value: ir.Value) -> Shape | None:
    shape = value.shape
    if shape is None:
        return None
    dims: list[Dim] = []
    for dim in shape:
        if isinstance(dim, int):
            dims.append(dim)
        else:
            name = getattr(dim, "value", None)
            dims.append(name if isinstance(name, str) and name else None)
    return tuple(dims)


def merge(inferred: Shape | None, declared: Shape | None) -> Shape | None:
    """The inferred shape, with dims it leaves unknown taken from the declared one."""
    if inferred is None:
        return declared
    if declared is None or len(declared) != len(inferred):
        return inferred
    return tuple(d if isinstance(d, int) or (d is not None and not isinstance(e, int)) else e
                 for d, e in zip(inferred, declared, strict=True))  # fmt: skip


def broadcast(*shapes: Shape | None, strict: bool = False) -> Shape | None:
    """onnx's multidirectional broadcast of shapes with symbolic dims (None: unknown rank);
    ``strict``: two different static dims, neither 1, are onnx's "Incompatible dimensions"."""
    if any(s is None for s in shapes):
        return None
    known = [s for s in shapes if s is not None]
    rank = max((len(s) for s in known), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in known if axis - rank + len(s) >= 0]
        values = {d for d in dims if isinstance(d, int) and d != 1}
        if values:
            if len(values) > 1 and strict:
                raise ShapeInferenceError("Incompatible dimensions")
            out.append(values.pop() if len(values) == 1 else None)
            continue
        if all(d == 1 for d in dims):
            out.append(1)
            continue
        symbols = {d for d in dims if d != 1}
        out.append(symbols.pop() if len(symbols) == 1 and None not in symbols else None)
    return tuple(out)


class ShapeContext:
    """What a shape handler reads: the node, its input shapes and constant inputs."""

    def __init__(self, shapes: Shapes, node: ir.Node) -> None:
        self.shapes = shapes
        self.node = node

    def shape(self, index: int) -> Shape | None:
        value = self.node.inputs[index] if index < len(self.node.inputs) else None
        return None if value is None else self.shapes.shape(value)

    def present(self, index: int) -> bool:
        return index < len(self.node.inputs) and self.node.inputs[index] is not None

    def const(self, index: int) -> np.ndarray | None:
        """The data of input ``index`` as onnx's inference reads it (ParseData): an initializer stored
        in an external data file is refused, whatever its size (probed 1.32.0: Reshape, Expand,
        Tile, Split, Slice, Unsqueeze, ReduceSum, TopK all fail the session)."""
        value = self.node.inputs[index] if index < len(self.node.inputs) else None
        if value is None:
            return None
        if value.producer() is None and isinstance(value.const_value, ir.ExternalTensor):
            raise ShapeInferenceError("Cannot parse data from external tensors. Please load external data into raw "
                                      f"data for tensor: {value.name}")  # fmt: skip
        return self.shapes.const(value)

    def ints(self, index: int) -> list[int] | None:
        data = self.const(index)
        if data is None or data.dtype.kind not in "iu":
            return None
        return [int(v) for v in data.reshape(-1)]

    @property
    def n_out(self) -> int:
        return len(self.node.outputs)


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
        if value is None:
            return None
        if not self._ran:
            self._run()
        key = id(value)
        if key in self._shapes:
            return self._shapes[key]
        found = _declared(value) if value.producer() is None else None
        self._shapes[key] = found
        return found

    def rank(self, value: ir.Value | None) -> int | None:
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
            self._shapes[id(out)] = merge(got, _declared(out))


_CONSTANT_NUMBERS = {ir.AttributeType.INT: np.int64, ir.AttributeType.INTS: np.int64,
                     ir.AttributeType.FLOAT: np.float32, ir.AttributeType.FLOATS: np.float32}  # fmt: skip


def _const_data(value: ir.Value) -> np.ndarray | None:
    """Initializer or Constant-node data of ``value`` when it is small (never large weights)."""
    producer = value.producer()
    tensor: Any = None
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
    try:
        count = int(np.prod([int(d) for d in tensor.shape]))
    except (TypeError, ValueError):
        return None
    if count > _CONST_LIMIT:
        return None
    if isinstance(tensor, ir.ExternalTensor):
        return None  # onnx's inference never reads external data (ShapeContext.const refuses it)
    try:
        return np.asarray(tensor.numpy())
    except Exception:  # malformed inline data: the layout rules name it; no shape here
        return None


_HANDLERS: dict[tuple[str, str], Handler] = {}


def register(domain: str, *ops: str) -> Callable[[Handler], Handler]:
    def wrap(fn: Handler) -> Handler:
        for op in ops:
            _HANDLERS[(domain, op)] = fn
        return fn

    return wrap


def _handler(node: ir.Node) -> Handler | None:
    from contracts import contrib_shapes, standard_shapes  # noqa: F401  (they register handlers)

    return _HANDLERS.get((node.domain, node.op_type))


def shapes_of(model: Any) -> Shapes:
    """The (cached) shapes of ``model``."""
    facts = model_facts(as_ir_model(model))
    found = facts.extra.get("shapes")
    if not isinstance(found, Shapes):
        found = facts.extra["shapes"] = Shapes(facts)
    return found


def normalize_axis(axis: int, rank: int, error: str | None = None, kind: str = "ShapeInferenceError") -> int:
    """``axis`` in [0, rank); out of range raises ShapeInferenceError(``error``) when given, else
    ValueError (the dims are then left unknown)."""
    if not -rank <= axis < max(rank, 1):
        if error is not None:
            raise ShapeInferenceError(error, kind)
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def axes_of(ctx: ShapeContext, *, input_index: int, attr_name: str = "axes") -> list[int] | None:
    """Axes from an INTS attribute (older opsets) or a constant input (newer); None: not known."""
    if attr_name in ctx.node.attributes:
        found = attr_ints(ctx.node, attr_name, None)
        return None if found is None else list(found)
    if ctx.present(input_index):
        return ctx.ints(input_index)
    return []


__all__ += ["axes_of", "merge", "normalize_axis", "register"]
