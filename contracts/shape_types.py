"""The vocabulary of shape inference (``contracts.shapes``): dims, shapes, the context a handler reads.

A dim is an int (static), a str (a symbolic name) or None (unknown); a shape is a tuple of dims,
or None when even the rank is unknown. A handler maps a :class:`ShapeContext` to its node's output
shapes; each handler module (``standard_shapes``, ``contrib_shapes``) keeps its own ``HANDLERS``
table, filled by :func:`registrar` as the module defines them, and ``contracts.shapes`` merges the
tables explicitly: nothing is registered by importing another module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import onnx_ir as ir

from contracts._graph import attr_ints

__all__ = [
    "Dim",
    "Handler",
    "Shape",
    "ShapeContext",
    "ShapeInferenceError",
    "ShapeSource",
    "axes_of",
    "broadcast",
    "declared_shape",
    "merge",
    "normalize_axis",
    "registrar",
]


class ShapeSource(Protocol):
    """What a :class:`ShapeContext` reads values from (``contracts.shapes.Shapes``)."""

    def shape(self, value: ir.Value | None) -> Shape | None:
        """The shape of ``value`` (None: unknown)."""

    def const(self, value: ir.Value) -> np.ndarray | None:
        """The constant data of ``value`` as onnx's inference reads it (None: not a constant)."""


Dim = int | str | None
Shape = tuple[Dim, ...]
Handler = Callable[["ShapeContext"], Sequence[Shape | None]]


class ShapeInferenceError(Exception):
    """A standard op's inference refuses its inputs, as onnx's inference function does.

    ``kind`` is the bracketed tag of ORT's text (``ShapeInferenceError`` / ``TypeInferenceError``),
    ``text`` what follows it; raised only where the dims involved are static.
    """

    def __init__(self, text: str, kind: str = "ShapeInferenceError") -> None:
        super().__init__(text)
        self.text, self.kind = text, kind


def declared_shape(value: ir.Value) -> Shape | None:
    """The shape ``value`` declares (None: no shape); a nameless symbolic dim becomes None."""
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
    """Onnx's multidirectional broadcast of shapes with symbolic dims (None: unknown rank).

    With ``strict``, two different static dims, neither 1, raise onnx's "Incompatible
    dimensions" (ShapeInferenceError); otherwise that dim is left unknown.
    """
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


# The longest 1-D shape input whose length onnx's inference turns into an output rank (see
# ShapeContext.rank_from_length).
LENGTH_RANK_LIMIT = 1024


class ShapeContext:
    """What a shape handler reads: the node, its input shapes and constant inputs."""

    def __init__(self, shapes: ShapeSource, node: ir.Node) -> None:
        self.shapes = shapes
        self.node = node

    def shape(self, index: int) -> Shape | None:
        """The shape of input ``index`` (None: absent, or unknown rank)."""
        value = self.node.inputs[index] if index < len(self.node.inputs) else None
        return None if value is None else self.shapes.shape(value)

    def present(self, index: int) -> bool:
        """Whether input ``index`` is given (not beyond the list, not an omitted optional '')."""
        return index < len(self.node.inputs) and self.node.inputs[index] is not None

    def const(self, index: int) -> np.ndarray | None:
        """The data of input ``index`` as onnx's inference reads it (ParseData).

        An initializer stored in an external data file is refused with ShapeInferenceError,
        whatever its size (probed 1.32.0: Reshape, Expand, Tile, Split, Slice, Unsqueeze,
        ReduceSum, TopK all fail the session).
        """
        value = self.node.inputs[index] if index < len(self.node.inputs) else None
        if value is None:
            return None
        if value.producer() is None and isinstance(value.const_value, ir.ExternalTensor):
            raise ShapeInferenceError("Cannot parse data from external tensors. Please load external data into raw "
                                      f"data for tensor: {value.name}")  # fmt: skip
        return self.shapes.const(value)

    def rank_from_length(self, index: int) -> int | None:
        """The output rank onnx's inference takes from 1-D shape input ``index``'s static length.

        A ``Reshape`` / ``ConstantOfShape`` / ``Expand`` whose shape input is not constant still
        gets a rank when that input's length is known. Onnx builds it only up to
        ``LENGTH_RANK_LIMIT`` dims: a longer declared length (e.g. an int64-max ``value_info``
        dim) leaves the rank unknown, and the session loads (probed on 1.32.0: 1,024 dims are
        built, 1,025 and 2**63-1 are not). None: unknown length, or beyond the limit.
        """
        length = self.shape(index)
        if length is None or len(length) != 1 or not isinstance(length[0], int):
            return None
        return length[0] if 0 <= length[0] <= LENGTH_RANK_LIMIT else None

    def ints(self, index: int) -> list[int] | None:
        """Input ``index``'s constant data flattened to ints (None: not constant, or not integer)."""
        data = self.const(index)
        if data is None or data.dtype.kind not in "iu":
            return None
        return [int(v) for v in data.reshape(-1)]

    @property
    def n_out(self) -> int:
        """How many outputs the node declares (a handler returns one shape per output)."""
        return len(self.node.outputs)


def normalize_axis(axis: int, rank: int, error: str | None = None, kind: str = "ShapeInferenceError") -> int:
    """``axis`` normalised into [0, rank).

    Out of range raises ShapeInferenceError(``error``) when ``error`` is given, else ValueError
    (the dims are then left unknown).
    """
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


def registrar(table: dict[tuple[str, str], Handler]) -> Callable[..., Callable[[Handler], Handler]]:
    """A ``@register(domain, *ops)`` decorator that files handlers in ``table`` (the module's own)."""

    def register(domain: str, *ops: str) -> Callable[[Handler], Handler]:
        def wrap(fn: Handler) -> Handler:
            for op in ops:
                table[(domain, op)] = fn
            return fn

        return wrap

    return register
