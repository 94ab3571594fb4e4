"""Shape handlers of the standard (ai.onnx) ops, following onnx's inference functions.

Each handler returns the output shapes of one node from its input shapes and constant inputs
(``contracts.shapes.ShapeContext``); a dim it cannot determine is None, a shape it cannot
determine (not even the rank) is None. Ops without a handler leave their outputs unknown.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from contracts._graph import attr_int, attr_ints
from contracts.shape_types import (
    Dim,
    Handler,
    Shape,
    ShapeContext,
    ShapeInferenceError,
    axes_of,
    broadcast,
    normalize_axis,
    registrar,
)

__all__ = ["HANDLERS"]

# (domain, op type) -> handler, filled by the @register decorators below as this module is defined.
HANDLERS: dict[tuple[str, str], Handler] = {}
register = registrar(HANDLERS)

_UNARY = (
    "Abs", "Neg", "Sigmoid", "Sqrt", "Reciprocal", "Exp", "Log", "Tanh", "Relu", "Erf", "Softplus",
    "Softsign", "Cos", "Sin", "Tan", "Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf",
    "Identity", "Cast", "CastLike", "Softmax", "LogSoftmax", "Gelu", "HardSigmoid", "LeakyRelu",
    "Elu", "Selu", "Celu", "Mish", "HardSwish", "Clip", "LpNormalization", "Trilu", "CumSum",
    "Hardmax", "Swish", "Shrink", "ThresholdedRelu", "Acos", "Asin", "Atan", "Cosh", "Sinh",
    "Asinh", "Acosh", "Atanh", "BitwiseNot", "MeanVarianceNormalization", "InstanceNormalization",
    "BatchNormalization", "PRelu",
)  # fmt: skip
_BROADCAST = (
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Greater",
    "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Mod", "Where", "BitShift",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor",
)  # fmt: skip
_REDUCE = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")  # fmt: skip


_AXIS_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})


@register("", *_UNARY)
def _unary(ctx: ShapeContext) -> Sequence[Shape | None]:
    shape = ctx.shape(0)
    if ctx.node.op_type in _AXIS_OPS and shape is not None:
        rank, axis = len(shape), attr_int(ctx.node, "axis", -1)
        if not -rank <= axis < rank:
            raise ShapeInferenceError(f"'axis' must be in [{-rank} , {rank - 1}]. Its actual value is: {axis}")
    return [shape] * max(ctx.n_out, 1)


@register("", "Dropout")
def _dropout(ctx: ShapeContext) -> Sequence[Shape | None]:
    return [ctx.shape(0), ctx.shape(0)]


@register("", *_BROADCAST)
def _broadcast(ctx: ShapeContext) -> Sequence[Shape | None]:
    shapes = [ctx.shape(i) for i in range(len(ctx.node.inputs)) if ctx.present(i)]
    return [broadcast(*shapes, strict=True)]


@register("", "MatMul", "MatMulInteger")
def _matmul(ctx: ShapeContext) -> Sequence[Shape | None]:
    a, b = ctx.shape(0), ctx.shape(1)
    if a is None or b is None or not a or not b:
        return [None]
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    k_a, k_b = a2[-1], b2[-2]
    if isinstance(k_a, int) and isinstance(k_b, int) and k_a != k_b:
        raise ShapeInferenceError("Incompatible dimensions for matrix multiplication")
    batch = broadcast(a2[:-2], b2[:-2], strict=True)
    if batch is None:
        return [None]
    out: list[Dim] = [*batch]
    if len(a) > 1:
        out.append(a2[-2])
    if len(b) > 1:
        out.append(b2[-1])
    return [tuple(out)]


@register("", "Gemm")
def _gemm(ctx: ShapeContext) -> Sequence[Shape | None]:
    a, b = ctx.shape(0), ctx.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [None]
    m = a[1] if attr_int(ctx.node, "transA", 0) else a[0]
    n = b[0] if attr_int(ctx.node, "transB", 0) else b[1]
    return [(m, n)]


def _numel(shape: Shape) -> int | None:
    total = 1
    for dim in shape:
        if not isinstance(dim, int):
            return None
        total *= dim
    return total


@register("", "Reshape")
def _reshape(ctx: ShapeContext) -> Sequence[Shape | None]:
    target = ctx.ints(1)
    data = ctx.shape(0)
    if target is None:
        rank = ctx.rank_from_length(1)
        return [None if rank is None else (None,) * rank]
    allowzero = attr_int(ctx.node, "allowzero", 0)
    if target.count(-1) > 1:
        raise ShapeInferenceError("Target shape may not have multiple -1 dimensions.")
    out: list[Dim] = []
    infer_at = None
    for axis, want in enumerate(target):
        if want == 0 and not allowzero:
            if data is not None and axis >= len(data):
                raise ShapeInferenceError("Invalid position of 0.")
            out.append(data[axis] if data is not None else None)
        elif want == -1:
            infer_at = axis
            out.append(None)
        else:
            out.append(want)
    if infer_at is not None and data is not None:
        total, rest = _numel(data), _numel(tuple(d for i, d in enumerate(out) if i != infer_at))
        if total is not None and rest:
            if total % rest:
                raise ShapeInferenceError("Dimension could not be inferred: incompatible shapes")
            out[infer_at] = total // rest
    return [tuple(out)]


@register("", "Flatten")
def _flatten(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    if data is None:
        return [None]
    axis, rank = attr_int(ctx.node, "axis", 1), len(data)
    # onnx adds rank (not rank + 1: axis -1 of a rank-2 input is 1, the split before the last dim)
    # to a negative axis, then wants it in [0, rank]; its message names the axis after the addition
    at = axis + rank if axis < 0 else axis
    if not 0 <= at <= rank:
        raise ShapeInferenceError(f"Invalid value({at}) for attribute 'axis'")
    return [(_numel(data[:at]), _numel(data[at:]))]


@register("", "Transpose")
def _transpose(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    if data is None:
        return [None]
    perm = attr_ints(ctx.node, "perm", None) or tuple(reversed(range(len(data))))
    seen: set[int] = set()
    for p in perm:  # onnx checks each value against the rank (not the length), then duplicates
        if p in seen:
            raise ShapeInferenceError(f"Attribute perm for Transpose has repeated value: {p}", "TypeInferenceError")
        seen.add(p)
    if any(not 0 <= p < len(data) for p in perm):
        shown = ", ".join(str(p) for p in perm)
        dims = ", ".join(str(d) if isinstance(d, int) else "0" for d in data)
        raise ShapeInferenceError(f"Invalid attribute perm {{{shown}}}, input shape = {{{dims}}}", "TypeInferenceError")
    return [tuple(data[p] for p in perm)]


@register("", "Concat")
def _concat(ctx: ShapeContext) -> Sequence[Shape | None]:
    shapes = [ctx.shape(i) for i in range(len(ctx.node.inputs)) if ctx.present(i)]
    if not shapes or any(s is None for s in shapes):
        return [None]
    rank = len(shapes[0])  # type: ignore[arg-type]
    axis = normalize_axis(attr_int(ctx.node, "axis", 0), rank, "axis must be in [-rank, rank-1].")
    for index, shape in enumerate(shapes[1:], start=1):
        if shape is not None and len(shape) != rank:
            raise ShapeInferenceError(f"All inputs to Concat must have same rank. Input {index} has rank {len(shape)} != {rank}")
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[i] for s in shapes if s is not None]
        if i == axis:
            out.append(sum(d for d in dims if isinstance(d, int)) if all(isinstance(d, int) for d in dims) else None)
        else:
            ints = {d for d in dims if isinstance(d, int)}
            if len(ints) > 1:
                raise ShapeInferenceError("Can't merge shape info. Both inferred and declared dimension have values but they differ.")
            syms = {d for d in dims if isinstance(d, str)}
            out.append(ints.pop() if ints else (syms.pop() if len(syms) == 1 else None))
    return [tuple(out)]


@register("", "Split")
def _split(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    if data is None:
        return [None] * ctx.n_out
    raw_axis = attr_int(ctx.node, "axis", 0)
    axis = normalize_axis(raw_axis, len(data), f"Invalid value of attribute 'axis'. Rank={len(data)} Value={raw_axis}",
                          "TypeInferenceError")
    sizes: list[int] | None
    if ctx.present(1):
        sizes = ctx.ints(1)
    elif "split" in ctx.node.attributes:
        found = attr_ints(ctx.node, "split", None)
        sizes = None if found is None else list(found)
    else:
        total = data[axis]
        n = attr_int(ctx.node, "num_outputs", ctx.n_out) if "num_outputs" in ctx.node.attributes else ctx.n_out
        if not isinstance(total, int) or n <= 0:
            return [tuple(None if i == axis else d for i, d in enumerate(data))] * ctx.n_out
        # onnx's chunks: ceil(total / n) each, the last one what is left; it never checks their
        # sum here (5 into 4 outputs is 2, 2, 2, -1 and loads), so neither does this handler
        chunk = -(-total // n)
        last = total - chunk * (n - 1)
        return [tuple((chunk if k < n - 1 else (last if last >= 0 else None)) if i == axis else d
                      for i, d in enumerate(data)) for k in range(n)]  # fmt: skip
    if sizes is None:
        return [None] * ctx.n_out
    total = data[axis]
    if isinstance(total, int) and sum(sizes) != total:
        raise ShapeInferenceError(f"Mismatch between the sum of 'split' ({sum(sizes)}) and the split dimension of the input ({total})")
    return [tuple(s if i == axis else d for i, d in enumerate(data)) for s in sizes]


def _slice_len(dim: Dim, start: int, end: int, step: int) -> Dim:
    if not isinstance(dim, int) or step == 0:
        return None
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = max(0, min(start, dim)), max(0, min(end, dim))
        return max(0, -(-(end - start) // step))
    start, end = max(-1, min(start, dim - 1)), max(-1, min(end, dim - 1))
    return max(0, -(-(start - end) // -step))


@register("", "Slice")
def _slice(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    if data is None:
        return [None]
    starts, ends = ctx.ints(1), ctx.ints(2)
    axes = ctx.ints(3) if ctx.present(3) else (list(range(len(starts))) if starts is not None else None)
    steps = ctx.ints(4) if ctx.present(4) else ([1] * len(starts) if starts is not None else None)
    if starts is None or ends is None or axes is None or steps is None:
        return [(None,) * len(data)]
    out = list(data)
    rank = len(data)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=False):
        at = normalize_axis(axis, rank, f"Unexpected axis value: {axis}. Expected range [{-rank}, {rank})")
        out[at] = _slice_len(data[at], start, end, step)
    return [tuple(out)]


@register("", "Gather")
def _gather(ctx: ShapeContext) -> Sequence[Shape | None]:
    data, indices = ctx.shape(0), ctx.shape(1)
    if data is None:
        return [None]
    axis = normalize_axis(attr_int(ctx.node, "axis", 0), len(data), "axis must be in [-r, r-1]")
    if indices is None:
        return [None]
    return [(*data[:axis], *indices, *data[axis + 1 :])]


@register("", "GatherElements")
def _gather_elements(ctx: ShapeContext) -> Sequence[Shape | None]:
    return [ctx.shape(1)]


@register("", "Unsqueeze")
def _unsqueeze(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    axes = axes_of(ctx, input_index=1)
    if data is None or axes is None:
        return [None]
    rank = len(data) + len(axes)
    at = sorted(normalize_axis(a, rank, f"Unexpected axis value: {a}. Expected range [{-rank}, {rank})") for a in axes)
    out: list[Dim] = []
    source = iter(data)
    for i in range(rank):
        out.append(1 if i in at else next(source))
    return [tuple(out)]


@register("", "Squeeze")
def _squeeze(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    axes = axes_of(ctx, input_index=1)
    if data is None or axes is None:
        return [None]
    if not axes:
        if any(not isinstance(d, int) for d in data):
            return [None]
        return [tuple(d for d in data if d != 1)]
    rank = len(data)
    drop = {normalize_axis(a, rank, f"Unexpected axis value: {a}. Expected range [{-rank}, {rank})") for a in axes}
    for axis in sorted(drop):
        if isinstance(data[axis], int) and data[axis] != 1:
            raise ShapeInferenceError(f"Dimension of input {axis} must be 1 instead of {data[axis]}")
    return [tuple(d for i, d in enumerate(data) if i not in drop)]


@register("", "Shape")
def _shape(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    if data is None:
        return [(None,)]
    rank = len(data)
    start = attr_int(ctx.node, "start", 0)
    end = attr_int(ctx.node, "end", rank) if "end" in ctx.node.attributes else rank
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    return [(max(0, end - start),)]


@register("", "Size")
def _size(ctx: ShapeContext) -> Sequence[Shape | None]:
    return [()]


@register("", "Constant")
def _constant(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shapes.const(ctx.node.outputs[0])
    if data is not None:
        return [tuple(int(d) for d in data.shape)]
    found = ctx.node.attributes.get("value")
    tensor = None if found is None else found.value
    dims = getattr(tensor, "shape", None)
    return [None if dims is None else tuple(int(d) for d in dims)]


@register("", "ConstantOfShape")
def _constant_of_shape(ctx: ShapeContext) -> Sequence[Shape | None]:
    dims = ctx.ints(0)
    if dims is not None:
        return [tuple(dims)]
    rank = ctx.rank_from_length(0)
    return [None if rank is None else (None,) * rank]


@register("", "Expand")
def _expand(ctx: ShapeContext) -> Sequence[Shape | None]:
    data, target = ctx.shape(0), ctx.ints(1)
    if target is not None:
        return [broadcast(data, tuple(target), strict=True)]
    length = ctx.rank_from_length(1)
    if data is None or length is None:
        return [None]
    rank = max(len(data), length)
    padded = (None,) * (rank - len(data)) + data
    return [tuple(d if isinstance(d, int) and d != 1 else None for d in padded)]


@register("", "Tile")
def _tile(ctx: ShapeContext) -> Sequence[Shape | None]:
    data, repeats = ctx.shape(0), ctx.ints(1)
    if data is None:
        return [None]
    if repeats is not None and len(repeats) != len(data):
        raise ShapeInferenceError("'Repeats' input has incorrect number of values. The number of values in 'repeats' "
                                  "must be equal to the number of input dimensions.")  # fmt: skip
    if repeats is None:
        return [(None,) * len(data)]
    return [tuple(d * r if isinstance(d, int) else None for d, r in zip(data, repeats, strict=True))]


def _reduced(data: Shape, axes: list[int], keepdims: bool) -> Shape:
    error = f"axis must be in [-rank, rank-1]. Input rank was {len(data)}"
    drop = {normalize_axis(a, len(data), error) for a in axes} if axes else set(range(len(data)))
    if keepdims:
        return tuple(1 if i in drop else d for i, d in enumerate(data))
    return tuple(d for i, d in enumerate(data) if i not in drop)


@register("", *_REDUCE)
def _reduce(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    axes = axes_of(ctx, input_index=1)
    if data is None or axes is None:
        return [None]
    keepdims = bool(attr_int(ctx.node, "keepdims", 1))
    if not axes and attr_int(ctx.node, "noop_with_empty_axes", 0):
        return [data]
    return [_reduced(data, axes, keepdims)]


@register("", "ArgMax", "ArgMin")
def _argmax(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    if data is None:
        return [None]
    return [_reduced(data, [attr_int(ctx.node, "axis", 0)], bool(attr_int(ctx.node, "keepdims", 1)))]


@register("", "TopK")
def _topk(ctx: ShapeContext) -> Sequence[Shape | None]:
    data, k = ctx.shape(0), ctx.ints(1)
    if data is None:
        return [None, None]
    axis = normalize_axis(attr_int(ctx.node, "axis", -1), len(data))
    out = tuple((k[0] if k else None) if i == axis else d for i, d in enumerate(data))
    return [out, out]


@register("", "Range")
def _range(ctx: ShapeContext) -> Sequence[Shape | None]:
    start, limit, delta = ctx.const(0), ctx.const(1), ctx.const(2)
    if start is None or limit is None or delta is None or float(delta.reshape(-1)[0]) == 0:
        return [(None,)]
    count = int(np.ceil((float(limit.reshape(-1)[0]) - float(start.reshape(-1)[0])) / float(delta.reshape(-1)[0])))
    return [(max(0, count),)]


@register("", "LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization")
def _layer_norm(ctx: ShapeContext) -> Sequence[Shape | None]:
    data = ctx.shape(0)
    if data is None:
        return [None] * ctx.n_out
    raw, rank = attr_int(ctx.node, "axis", -1), len(data)
    if not -rank <= raw < rank and ctx.node.op_type == "LayerNormalization":  # onnx's text names the axis + rank
        shown = raw + rank if raw < 0 else raw
        raise ShapeInferenceError(f"Unexpected axis value ({shown}) rank of first input is {rank} in .")
    if not -rank <= raw < rank and ctx.node.op_type == "SimplifiedLayerNormalization":  # ORT's own schema's text
        raise ShapeInferenceError(f"axis {raw} is not in valid range [{-rank},{rank - 1}]")
    axis = normalize_axis(raw, rank)
    stats = tuple(1 if i >= axis else d for i, d in enumerate(data))
    return [data, stats, stats]


@register("", "If")
def _if(ctx: ShapeContext) -> Sequence[Shape | None]:
    """As onnx's IfInferenceFunction: both branches and the node agree on the number of outputs."""
    counts = []
    for key in ("then_branch", "else_branch"):
        attr = ctx.node.attributes.get(key)
        graph = attr.value if attr is not None else None
        if not isinstance(graph, ir.Graph):
            return [None] * ctx.n_out  # a missing or mistyped branch is the schema rules' to report
        counts.append(len(graph.outputs))
    then_n, else_n = counts
    if then_n != else_n:
        raise ShapeInferenceError(f"then_branch and else_branch produce different number of outputs. {then_n} != {else_n}",
                                  "TypeInferenceError")
    if then_n != ctx.n_out:
        raise ShapeInferenceError(f"If node has {ctx.n_out} but subgraphs produce {then_n}", "TypeInferenceError")
    return [None] * ctx.n_out


@register("", "Einsum", "Resize", "Conv", "ConvTranspose", "Pad", "NonZero", "Compress", "Loop", "Scan")
def _unknown(ctx: ShapeContext) -> Sequence[Shape | None]:
    return [None] * ctx.n_out
