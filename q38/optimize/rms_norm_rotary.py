"""RMSNorm + rotary embedding -> ``com.microsoft::RMSNormRotary``.

Matched subgraph (docs/synthetic-model.md, pattern 1)::

    r ──Mul(r,r)|Pow(r,2)──ReduceMean(-1)──Add(eps)──Sqrt──┐
    └───────────────────────────── Div(r, ·) | Mul(r, Reciprocal(·)) ── Mul(w) = nw
    nw ─Slice[0:D/2]=x1 ─┐      cos_cache─Gather(pos)─Unsqueeze(2)=c
    nw ─Slice[D/2:D]=x2 ─┤      sin_cache─Gather(pos)─Unsqueeze(2)=s
    o1 = Sub(Mul(x1,c), Mul(x2,s)),  o2 = Add(Mul(x2,c), Mul(x1,s))
    out = Reshape(Concat(o1, o2, -1), [0,0,N*D])

Replacement::

    out = RMSNormRotary(r, w_fp32, pos, cos, sin, rotary_embedding_dim=D, epsilon=eps,
                        output_fp16=1 for fp16 input)

The scale becomes an FP32 initializer and fp16 caches become FP32 (the op accepts FP32 or BF16
caches); each converted tensor is created once per source tensor, so q and k keep sharing.
"""

from __future__ import annotations

import dataclasses
import math

import onnx_ir as ir

from q38._ops import M_ROTARY_EMBEDDING, MS_DOMAIN, RMS_NORM_ROTARY
from q38.optimize._common import Produced, RewriteContext, RewritePass, copy_type, replace_value
from q38.optimize.matching import (
    Decline,
    attr_int,
    attr_ints,
    check_private,
    const_array,
    const_ints,
    const_scalar,
    inp,
    producer_of,
    rank_of,
    slice_args,
)

__all__ = ["FuseRMSNormRotaryPass"]

_INT64_MAX = 2**63 - 1
_HALF_TYPES = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


@dataclasses.dataclass
class _Match:
    x: ir.Value
    scale: ir.Value
    positions: ir.Value
    cos_cache: ir.Value
    sin_cache: ir.Value
    epsilon: float
    head_size: int
    out: ir.Value
    private: list[ir.Node]
    shared: list[ir.Node]
    dtype: ir.DataType  # the activation dtype (RMSNormRotary's compute dtype)


def _mul_operands(value: ir.Value | None) -> tuple[ir.Node, ir.Value, ir.Value] | None:
    node = producer_of(value, "Mul")
    if node is None or len(node.inputs) != 2 or node.inputs[0] is None or node.inputs[1] is None:
        return None
    return node, node.inputs[0], node.inputs[1]


def _same_dim(a: object, b: object) -> bool | None:
    """True/False when two dims are provably equal/different, None when unknown."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    va, vb = getattr(a, "value", a), getattr(b, "value", b)
    if va is None or vb is None:
        return None
    if isinstance(va, str) and isinstance(vb, str):
        return va == vb
    return False  # a static size against a symbolic one: not provably the same


def _check_positions(pos: ir.Value, r: ir.Value, reshaped: ir.Node | None) -> Decline | None:
    """The op takes [B, S] positions (or one base position); a broadcast [1, S] / [1, 1] gather is not that."""
    if pos.shape is None:
        return None
    if len(pos.shape) != 2:
        return Decline(f"position ids rank {len(pos.shape)} is not 2 ([B, S])")
    src = reshaped.inputs[0] if reshaped is not None else None
    lead = None
    if r.shape is not None and len(r.shape) == 4:
        lead = list(r.shape)[:2]
    elif src is not None and src.shape is not None and len(src.shape) == 3:
        lead = list(src.shape)[:2]
    if lead is not None and any(_same_dim(p, x) is False for p, x in zip(pos.shape, lead, strict=True)):
        shown = ", ".join(str(getattr(d, "value", d)) for d in lead)
        return Decline(f"position ids shape {pos.shape} is not the input's [B, S] = [{shown}]")
    return None


class FuseRMSNormRotaryPass(RewritePass[_Match]):
    """Fuse per-head RMS normalization followed by full-width non-interleaved rotary."""

    name = "rms_norm_rotary"
    contrib_op = RMS_NORM_ROTARY

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        """The rotary halves' ``Concat(Sub(...), Add(...))``, and the builder's MRotaryEmbedding.

        Anything short of the whole chain is declined; MRotaryEmbedding always is, with its reason.
        """
        return [n for n in graph if (n.op_type == "Concat" and n.domain == "" and len(n.inputs) == 2
                and producer_of(n.inputs[0], "Sub") is not None and producer_of(n.inputs[1], "Add") is not None)
                or (n.op_type == M_ROTARY_EMBEDDING and n.domain == MS_DOMAIN)]

    def match(self, ctx: RewriteContext, node: ir.Node) -> _Match | Decline:
        """Walk back from the rotary Concat through the RMS norm to its input; a Decline names the first misfit."""
        if node.op_type == M_ROTARY_EMBEDDING:
            return Decline("MRotaryEmbedding (multi-section rotary over [3, B, S] positions) has no "
                           "RMSNormRotary form; kept as exported")
        # --- rotary half: Concat(o1, o2) of Sub / Add of products -------------------------------
        sub = producer_of(node.inputs[0], "Sub")
        add = producer_of(node.inputs[1], "Add")
        assert sub is not None and add is not None  # the anchor condition: Concat(Sub, Add)
        m1, m2 = _mul_operands(inp(sub, 0)), _mul_operands(inp(sub, 1))
        m3, m4 = _mul_operands(inp(add, 0)), _mul_operands(inp(add, 1))
        if not (m1 and m2 and m3 and m4):
            return Decline("rotary Sub / Add operands are not all Mul products")

        def pick(m: tuple[ir.Node, ir.Value, ir.Value]) -> tuple[ir.Value, ir.Value] | None:
            a, b = m[1], m[2]
            if producer_of(a, "Slice") and producer_of(b, "Unsqueeze"):
                return a, b
            if producer_of(b, "Slice") and producer_of(a, "Unsqueeze"):
                return b, a
            return None

        p1, p2, p3, p4 = pick(m1), pick(m2), pick(m3), pick(m4)
        if not (p1 and p2 and p3 and p4):
            return Decline("a rotary product is not Mul(Slice(x), Unsqueeze(cos|sin))")
        x1, c = p1
        x2, s = p2
        # The Add is commutative: (x2*c) + (x1*s) or (x1*s) + (x2*c).
        if p4[0] is x2 and p3[0] is x1:
            p3, p4 = p4, p3
        if p3 != (x2, c) or p4 != (x1, s):
            return Decline("rotary products are not x1*cos - x2*sin and x2*cos + x1*sin")
        slice1, slice2 = producer_of(x1, "Slice"), producer_of(x2, "Slice")
        assert slice1 is not None and slice2 is not None
        nw = inp(slice1, 0)
        if nw is None or inp(slice2, 0) is not nw:
            return Decline("the two rotary halves are not slices of one normalized tensor")
        # --- RMS normalization: nw = Mul(n, w), n = r / sqrt(mean(r^2) + eps) ----------------------
        mul_w = _mul_operands(nw)
        if mul_w is None:
            return Decline("rotary input is not Mul(normalized, scale)")
        if producer_of(mul_w[1], "Div", "Mul"):
            n_val, w = mul_w[1], mul_w[2]
        else:
            n_val, w = mul_w[2], mul_w[1]
        norm = producer_of(n_val, "Div", "Mul")
        if norm is None or len(norm.inputs) != 2:
            return Decline("normalization is not Div(r, rms) or Mul(r, Reciprocal(rms))")
        recip: ir.Node | None = None
        if norm.op_type == "Div":
            r, rs = norm.inputs[0], norm.inputs[1]
        else:
            a, b = norm.inputs[0], norm.inputs[1]
            if producer_of(b, "Reciprocal"):
                r, recip = a, producer_of(b, "Reciprocal")
            elif producer_of(a, "Reciprocal"):
                r, recip = b, producer_of(a, "Reciprocal")
            else:
                return Decline("normalization is not Div(r, rms) or Mul(r, Reciprocal(rms))")
            assert recip is not None
            rs = recip.inputs[0]
        sqrt = producer_of(rs, "Sqrt")
        eps_add = producer_of(inp(sqrt, 0), "Add") if sqrt else None
        if sqrt is None or eps_add is None or r is None:
            return Decline("rms is not Sqrt(Add(mean, epsilon))")
        if producer_of(eps_add.inputs[0], "ReduceMean"):
            mean_v, eps_v = eps_add.inputs[0], eps_add.inputs[1]
        else:
            mean_v, eps_v = eps_add.inputs[1], eps_add.inputs[0]
        mean = producer_of(mean_v, "ReduceMean")
        if mean is None:
            return Decline("mean square is not a ReduceMean")
        sq = producer_of(inp(mean, 0), "Mul", "Pow")
        if sq is None:
            return Decline("mean square is not ReduceMean(Mul(r, r) | Pow(r, 2))")
        if sq.op_type == "Mul" and not (sq.inputs[0] is r and sq.inputs[1] is r):
            return Decline("mean square is not ReduceMean(Mul(r, r)) of the normalized input")
        if sq.op_type == "Pow" and (sq.inputs[0] is not r or const_scalar(inp(sq, 1), ctx.reader) != 2.0):
            return Decline("mean square is not ReduceMean(Pow(r, 2)) of the normalized input")
        # --- the structure matched; from here on every failure is a guard with a reason ---------
        reshaped = producer_of(r, "Reshape")
        dtype = r.dtype or (reshaped.inputs[0].dtype if reshaped is not None and reshaped.inputs[0] else None) or w.dtype
        if dtype not in _HALF_TYPES:
            return Decline(f"input dtype {getattr(dtype, 'name', None)} is not float16/bfloat16")
        rank = rank_of(r)
        if rank is not None and rank != 4:
            return Decline(f"input rank {rank} is not 4 ([B,S,heads,head_size])")
        axes = const_ints(inp(mean, 1), ctx.reader) if inp(mean, 1) is not None else attr_ints(mean, "axes")
        if axes not in ([-1], [3]) or attr_int(mean, "keepdims", 1) != 1:
            return Decline(f"ReduceMean axes {axes} / keepdims is not the last axis with keepdims=1")
        eps = const_scalar(eps_v, ctx.reader)
        if eps is None:
            return Decline("epsilon is not a constant scalar")
        if not math.isfinite(eps) or eps < 0:
            return Decline(f"epsilon {eps} is not finite and nonnegative")
        w_arr = const_array(w, ctx.reader)
        if w_arr is None or w.is_graph_input():
            return Decline(f"RMS scale {w.name!r} is not a constant initializer")
        if w_arr.ndim != 1:
            return Decline(f"RMS scale {w.name!r} has shape {list(w_arr.shape)}, expected [head_size]")
        d = int(w_arr.shape[0])
        a1, a2 = slice_args(slice1, ctx.reader), slice_args(slice2, ctx.reader)
        if a1 is None or a2 is None or a1[2] not in (-1, 3) or a2[2] not in (-1, 3):
            return Decline("rotary Slices are not constant single-axis slices of the last axis")
        if d % 2 or a1[:2] != (0, d // 2) or a2[0] != d // 2 or a2[1] not in (d, _INT64_MAX):
            return Decline(
                f"rotary slices [{a1[0]}:{a1[1]}] and [{a2[0]}:{a2[1]}] are not the two halves of "
                f"head_size {d} (only full-width non-interleaved rotary is fused)"
            )
        if attr_int(node, "axis") not in (-1, 3):
            return Decline(f"rotary Concat axis {attr_int(node, 'axis')} is not the last axis")
        caches = []
        gathers_pos = []
        shared: list[ir.Node] = []
        for val, what in ((c, "cosine"), (s, "sine")):
            unsq = producer_of(val, "Unsqueeze")
            assert unsq is not None
            uaxes = const_ints(inp(unsq, 1), ctx.reader) if inp(unsq, 1) is not None else attr_ints(unsq, "axes")
            gather = producer_of(inp(unsq, 0), "Gather")
            if gather is None or uaxes != [2] or attr_int(gather, "axis", 0) != 0:
                return Decline(f"{what} is not Unsqueeze(Gather(cache, position_ids, axis=0), [2])")
            cache = gather.inputs[0]
            arr_shape = cache.shape if cache is not None else None
            if cache is None or cache.const_value is None:
                return Decline(f"{what} cache is not a constant initializer")
            if arr_shape is None or len(arr_shape) != 2 or arr_shape[1] != d // 2:
                return Decline(f"{what} cache shape {arr_shape} is not [rows, {d // 2}]")
            caches.append(cache)
            gathers_pos.append(gather.inputs[1])
            shared.extend([unsq, gather])
        if gathers_pos[0] is not gathers_pos[1] or gathers_pos[0] is None:
            return Decline("cosine and sine are gathered with different position ids")
        if gathers_pos[0].dtype not in (None, ir.DataType.INT64):
            return Decline("position ids are not int64")
        declined = _check_positions(gathers_pos[0], r, reshaped)
        if declined:
            return declined
        # --- the flattening Reshape that the op's output replaces --------------------------------
        y = node.outputs[0]
        uses = list(y.uses())
        reshape = uses[0].node if len(uses) == 1 else None
        if reshape is None or reshape.op_type != "Reshape" or reshape.graph is not ctx.graph or y.is_graph_output():
            return Decline("rotary output is not consumed by exactly one flattening Reshape")
        shape = const_ints(inp(reshape, 1), ctx.reader)
        heads = r.shape[2] if r.shape is not None and len(r.shape) == 4 else None
        src = producer_of(r, "Reshape")
        src_shape = const_ints(inp(src, 1), ctx.reader) if src is not None else None
        if not isinstance(heads, int) and src_shape is not None and len(src_shape) == 4:
            heads = src_shape[2]
        if (
            shape is None
            or len(shape) != 3
            or shape[:2] != [0, 0]
            or (shape[2] != -1 and not (isinstance(heads, int) and heads > 0 and shape[2] == heads * d))
        ):
            return Decline(f"final Reshape shape {shape} is not [0, 0, heads*head_size]")
        private = [n for n in (sq, mean, eps_add, sqrt, recip, norm, mul_w[0], slice1, slice2,
                               m1[0], m2[0], m3[0], m4[0], sub, add, node, reshape) if n is not None]
        intermediates = [o for n in private[:-1] for o in n.outputs]
        declined = check_private(intermediates, private, ctx.graph)
        if declined:
            return declined
        return _Match(r, w, gathers_pos[0], caches[0], caches[1], eps, d, reshape.outputs[0], private, shared, dtype)

    def _as(self, ctx: RewriteContext, value: ir.Value, dtype: ir.DataType, suffix: str) -> ir.Value:
        if value.dtype == dtype:
            return value
        key = ("cast", id(value), dtype)
        if key not in ctx.cache:
            arr = ctx.reader(value).astype(dtype.numpy())
            ctx.cache[key] = ctx.add_initializer(f"{value.name}_{suffix}", arr, [value])
        return ctx.cache[key]

    def produces(self, match: _Match) -> tuple[Produced, ...]:
        """The fused RMSNormRotary, at the activation dtype (its compute dtype)."""
        return (Produced(RMS_NORM_ROTARY, MS_DOMAIN, match.dtype),)

    def rewrite(self, ctx: RewriteContext, match: _Match) -> None:
        """Replace the chain by RMSNormRotary; the scale (and non-bf16 caches) become FP32 once per source.

        The chain's private nodes go; shared ones (the caches' Gather / Unsqueeze) once unread.
        """
        m = match
        scale = self._as(ctx, m.scale, ir.DataType.FLOAT, "fp32")
        cos, sin = m.cos_cache, m.sin_cache
        if cos.dtype != ir.DataType.BFLOAT16 or sin.dtype != ir.DataType.BFLOAT16:
            cos = self._as(ctx, cos, ir.DataType.FLOAT, "fp32")
            sin = self._as(ctx, sin, ir.DataType.FLOAT, "fp32")
        # The activation dtype the match worked out, not x's own (None for an untyped intermediate:
        # a bf16 graph then got output_fp16=1, and ORT refused the fused node's bf16 output).
        fp16 = 1 if m.dtype == ir.DataType.FLOAT16 else 0
        anchor = m.private[-1]
        node = ir.Node(
            MS_DOMAIN,
            RMS_NORM_ROTARY,
            [m.x, scale, m.positions, cos, sin],
            attributes=[
                ir.AttrInt64("rotary_embedding_dim", m.head_size),
                ir.AttrFloat32("epsilon", m.epsilon),
                ir.AttrInt64("output_fp16", fp16),
            ],
            name=ctx.node_name(f"{anchor.name or '/rms_norm_rotary'}/RMSNormRotary"),
            num_outputs=1,
        )
        out = node.outputs[0]
        out.name = ctx.value_name(f"{m.out.name or 'rms_norm_rotary'}_fused")
        copy_type(out, m.out)
        ctx.insert([node], inputs=node.inputs, matched=m.private)
        replace_value(m.out, out, ctx.graph)
        ctx.remove_dead([*reversed(m.private), *m.shared])
        ctx.orphan_candidates.extend([m.scale, m.cos_cache, m.sin_cache])
