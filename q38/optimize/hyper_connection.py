"""Hyper-connection mix -> ``com.microsoft::HyperConnectionLowRankMix`` (+ PostMix prologue).

Matched subgraph (docs/synthetic-model.md, pattern 3)::

    hn  = BranchwiseRMSNorm(X, norm_scale[C*H], num_branches=C, epsilon)
    up  = MatMul(ScaledSiLU(MatMul(hn, down), alpha), up_w)
    pre = HyperConnectionPreMix(hn, Sigmoid(up), num_branches=C, reduction_scale)
    pg  = Mul(Sigmoid(Div(MatMul(hn, inject), gate_div)), gate_mul)
    ──► pre, pg = HyperConnectionLowRankMix(X, norm_scale, down, up_w, inject)

Phase two absorbs the previous block's post-mix as the prologue::

    X = HyperConnectionPostMix(S, block_out, post_gate, num_branches=C)     identity stream mix
    pre, pg = HyperConnectionLowRankMix(X, ...)
    ──► pre, pg, X' = HyperConnectionLowRankMix(S, ..., block_out, post_gate); X := X'

A PostMix is absorbed only when it is safe: no stream_mix, a (..., C) gate (not (..., C, H)),
output not captured by a subgraph; a LowRankMix that already has a streams output is left alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from q38._ops import (
    BRANCHWISE_RMS_NORM,
    HC_LOW_RANK_MIX,
    HC_POST_MIX,
    HC_PRE_MIX,
    MATMUL_NBITS,
    MS_DOMAIN,
    SCALED_SILU,
)
from q38.optimize._common import Produced, RewriteContext, RewritePass, copy_type, replace_value
from q38.optimize.matching import (
    Decline,
    TensorReader,
    attr_float,
    attr_int,
    attr_ints,
    captured_by_subgraph,
    check_private,
    const_ints,
    const_scalar,
    first_dtype,
    inp,
    producer_of,
    rank_of,
)

__all__ = ["FuseHyperConnectionPass"]

DEFAULT_EPSILON = 1e-5


@dataclasses.dataclass(frozen=True)
class _Packed:
    """A column range [start, stop) of the packed [down|inject] projection weight."""

    weight: ir.Value
    start: int
    stop: int


_Weight = ir.Value | _Packed  # a weight as it is, or a slice of the packed one


@dataclasses.dataclass
class _Chain:
    x: ir.Value
    weights: tuple[ir.Value, _Weight, ir.Value, _Weight | None]  # norm_scale, down, up, inject (None: zeros)
    attrs: dict[str, float | int]
    pre: ir.Value
    post_gate: ir.Value | None  # None: a final mixer (no inject, no combine)
    pre_mix: ir.Node
    nodes: list[ir.Node]


@dataclasses.dataclass
class _Prologue:
    mix: ir.Node
    post: ir.Node


@dataclasses.dataclass
class _Inject:
    value: ir.Value | None  # the (..., C) projection output; None when there is none
    weight: _Weight | None
    nodes: list[ir.Node]
    post_gate: ir.Value | None
    gate_div: float = 1.0
    gate_mul: float = 1.0


def _ms(node: ir.Node | None, op: str) -> bool:
    return node is not None and node.domain == MS_DOMAIN and node.op_type == op


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    return node.inputs[1] if node.inputs[0] is value else node.inputs[0]


def _static_2d(value: ir.Value) -> tuple[int, int] | None:
    shape = value.shape
    if shape is None or len(shape) != 2:
        return None
    rows, cols = shape[0], shape[1]
    return (rows, cols) if isinstance(rows, int) and isinstance(cols, int) else None


def _shape_2d(weight: _Weight | None) -> tuple[int, int] | None:
    if weight is None:
        return None
    if isinstance(weight, _Packed):
        full = _static_2d(weight.weight)
        return (full[0], weight.stop - weight.start) if full is not None else None
    return _static_2d(weight)


def _source(weight: _Weight) -> ir.Value:
    return weight.weight if isinstance(weight, _Packed) else weight


def _check_weight_shapes(scale: ir.Value, down: _Weight, up: ir.Value, inject: _Weight | None, c: int) -> Decline | None:
    """LowRankMix needs norm_scale (C*H), down (C*H, R), up (R, C*H), inject (C*H, C).

    The unfused ops are laxer (BranchwiseRMSNorm takes an (H) scale, PreMix takes (..., C) branch
    gates from an (R, C) up projection), so the layouts are proved here, not assumed.
    """
    d, u = _shape_2d(down), _static_2d(up)
    j = _shape_2d(inject) if inject is not None else None
    if d is None or u is None or (inject is not None and j is None):
        return Decline("hyper-connection projection weights are not static 2-D tensors")
    ch, r = d
    if ch % c or scale.shape is None or scale.shape[0] != ch:
        length = scale.shape[0] if scale.shape is not None and len(scale.shape) else None
        return Decline(f"norm scale {scale.name!r} length {length} is not C*H = {ch} (down rows)")
    if u != (r, ch):
        return Decline(f"up weight {up.name!r} shape {list(u)} is not (R, C*H) = {[r, ch]} (per-feature gates)")
    if inject is not None and j is not None and j != (ch, c):
        return Decline(f"inject weight {_source(inject).name!r} shape {list(j)} is not (C*H, C) = {[ch, c]}")
    return None


def _split_weight(split: ir.Node, k: int, reader: TensorReader) -> _Packed | None:
    """Columns of the packed weight behind output ``k`` of ``split`` (checked by ``_down``)."""
    packed = producer_of(inp(split, 0), "MatMul")
    w = packed.inputs[1] if packed is not None else None
    shape = _static_2d(w) if w is not None else None
    sizes = _split_sizes(split, shape[1], reader) if shape is not None else None
    if w is None or sizes is None or len(sizes) != 2:
        return None
    start = sum(sizes[:k])
    return _Packed(w, start, start + sizes[k])


def _split_sizes(split: ir.Node, width: int, reader: TensorReader) -> list[int] | None:
    """The static sizes of a Split of a ``width``-wide axis (input 1, ``split`` or equal parts)."""
    if inp(split, 1) is not None:
        return const_ints(inp(split, 1), reader)
    sizes = attr_ints(split, "split")
    if sizes is None and width % len(split.outputs) == 0:
        sizes = [width // len(split.outputs)] * len(split.outputs)
    return sizes


class FuseHyperConnectionPass(RewritePass[_Chain | _Prologue]):
    """Fuse the low-rank hyper-connection gate network and absorb the previous PostMix."""

    name = "hyper_connection"
    contrib_op = HC_LOW_RANK_MIX

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        """Phase one: every PreMix; phase two (see :meth:`call`): every LowRankMix reading a PostMix's streams."""
        if self._phase == 1:
            return [n for n in graph if _ms(n, HC_PRE_MIX)]
        return [n for n in graph if _ms(n, HC_LOW_RANK_MIX) and _ms(producer_of(inp(n, 0), HC_POST_MIX, domain=MS_DOMAIN), HC_POST_MIX)]

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Run both phases: fuse every chain, then absorb PostMix prologues into the new LowRankMix nodes.

        The second phase needs the first's output, so one call is two candidate loops; ``count``
        adds both.
        """
        result = super().call(model)
        first = self.count
        self._phase = 2
        try:
            result2 = super().call(model)
        finally:
            self._phase = 1
        self.count += first
        return ir.passes.PassResult(model, modified=result.modified or result2.modified)

    _phase = 1

    def match(self, ctx: RewriteContext, node: ir.Node) -> _Chain | _Prologue | Decline:
        """The whole gate chain of a PreMix (phase one) or an absorbable PostMix (phase two); else a Decline."""
        if self._phase == 2:
            return self._match_prologue(ctx, node)
        return self._match_chain(ctx, node)

    # -- phase 1 ---------------------------------------------------------------------------------
    def _match_chain(self, ctx: RewriteContext, pre_mix: ir.Node) -> _Chain | Decline:
        hn, gate = inp(pre_mix, 0), inp(pre_mix, 1)
        norm = producer_of(hn, BRANCHWISE_RMS_NORM, domain=MS_DOMAIN)
        if norm is None or hn is None:
            return Decline("PreMix streams input is not a BranchwiseRMSNorm output")
        sig = producer_of(gate, "Sigmoid")
        if sig is not None and producer_of(inp(sig, 0), MATMUL_NBITS, domain=MS_DOMAIN) is not None:
            # The builder's int4 exports (-p int4) quantize every dense projection.
            return Decline("PreMix gate projection is already quantized (MatMulNBits); LowRankMix takes "
                           "float down / up / inject weights; kept as exported")
        up_mm = producer_of(inp(sig, 0), "MatMul") if sig else None
        if sig is None or up_mm is None:
            return Decline("PreMix gate is not Sigmoid(MatMul(...))")
        if up_mm.inputs[0] is hn:
            return Decline("PreMix gate is a per-branch Sigmoid(MatMul(hn, W)) with no low-rank "
                           "ScaledSiLU projection (LowRankMix needs down -> ScaledSiLU -> up)")
        silu = producer_of(inp(up_mm, 0), SCALED_SILU, domain=MS_DOMAIN)
        if silu is None:
            return Decline("up projection does not read a ScaledSiLU")
        down = self._down(ctx, silu, hn)
        if isinstance(down, Decline):
            return down
        down_w, down_nodes, packed_split = down
        inject = self._inject(ctx, hn, down_nodes[0], packed_split)
        if isinstance(inject, Decline):
            return inject
        x = norm.inputs[0]
        assert x is not None
        c = attr_int(norm, "num_branches", 0)
        if not c or attr_int(pre_mix, "num_branches", 0) != c:
            return Decline("num_branches is missing or differs between BranchwiseRMSNorm and PreMix")
        if len(silu.inputs) > 1 and silu.inputs[1] is not None:
            return Decline("ScaledSiLU uses a runtime scale input")
        scale = inp(norm, 1)
        if scale is None:
            return Decline("BranchwiseRMSNorm has no scale")
        up_w = up_mm.inputs[1]
        t = x.dtype
        if scale.shape is None or len(scale.shape) != 1:
            return Decline(f"norm scale {scale.name!r} shape {scale.shape} is not the flattened (C*H) layout")
        h = x.shape[-1] if x.shape is not None and len(x.shape) > 0 else None
        if isinstance(h, int) and scale.shape[0] != h:
            return Decline(f"norm scale length {scale.shape[0]} != C*H = {h}")
        sources = [scale, _source(down_w), up_w] + ([_source(inject.weight)] if inject.weight is not None else [])
        for w in sources:
            if w is None or w.const_value is None:
                return Decline("a hyper-connection weight is not a constant initializer")
            if t is not None and w.dtype != t:
                return Decline(f"weight {w.name!r} dtype {w.dtype} != streams dtype {t} (LowRankMix needs one T)")
        assert up_w is not None
        declined = _check_weight_shapes(scale, down_w, up_w, inject.weight, c)
        if declined:
            return declined
        nodes = [norm, *down_nodes, silu, up_mm, sig, pre_mix, *inject.nodes]
        intermediates = [hn, *(o for n in down_nodes for o in n.outputs), silu.outputs[0], up_mm.outputs[0],
                         sig.outputs[0], *(n.outputs[0] for n in inject.nodes[:-1])]
        if inject.value is not None and inject.value not in intermediates:
            intermediates.append(inject.value)
        declined = check_private(intermediates, nodes, ctx.graph)
        if declined:
            return declined
        attrs: dict[str, float | int] = {
            "num_branches": c,
            "epsilon": attr_float(norm, "epsilon", DEFAULT_EPSILON) or 0.0,
            "silu_alpha": attr_float(silu, "alpha", 1.0) or 0.0,
            "reduction_scale": attr_float(pre_mix, "reduction_scale", 1.0) or 0.0,
            "gate_div": inject.gate_div,
            "gate_mul": inject.gate_mul,
        }
        return _Chain(x, (scale, down_w, up_w, inject.weight), attrs, pre_mix.outputs[0], inject.post_gate,
                      pre_mix, nodes)

    def _down(self, ctx: RewriteContext, silu: ir.Node, hn: ir.Value
              ) -> tuple[_Weight, list[ir.Node], ir.Node | None] | Decline:
        """The down projection: MatMul(hn, down), or one output of Split(MatMul(hn, [down|inject]))."""
        d = inp(silu, 0)
        mm = producer_of(d, "MatMul")
        if mm is not None:
            if mm.inputs[0] is not hn or mm.inputs[1] is None:
                return Decline("down projection MatMul does not read the normalized streams")
            return mm.inputs[1], [mm], None
        split = producer_of(d, "Split")
        packed = producer_of(inp(split, 0), "MatMul") if split is not None else None
        if split is None or packed is None or d is None:
            return Decline("ScaledSiLU input is neither MatMul(hn, down) nor a Split of MatMul(hn, [down|inject])")
        w = packed.inputs[1]
        if packed.inputs[0] is not hn or w is None:
            return Decline("packed [down|inject] MatMul does not read the normalized streams")
        shape = _static_2d(w)
        if shape is None:
            return Decline(f"packed [down|inject] weight {w.name!r} is not a static 2-D tensor")
        axis = attr_int(split, "axis", 0)
        rank = rank_of(split.inputs[0])
        if axis != -1 and (rank is None or axis != rank - 1):
            return Decline(f"packed projection Split axis {axis} is not the last axis")
        sizes = _split_sizes(split, shape[1], ctx.reader)
        if sizes is None or len(sizes) != 2 or sum(sizes) != shape[1] or len(split.outputs) != 2:
            return Decline(f"packed projection Split sizes {sizes} do not cut {w.name!r} (width {shape[1]}) "
                           "into [down, inject]")
        k = d.index()
        assert k is not None
        start = sum(sizes[:k])
        return _Packed(w, start, start + sizes[k]), [packed, split], split

    def _inject(self, ctx: RewriteContext, hn: ir.Value, down_mm: ir.Node, split: ir.Node | None) -> _Inject | Decline:
        """The post-gate branch Mul(Sigmoid(Div(hn @ inject, gate_div)), gate_mul), or none (a final mixer)."""
        if split is not None:
            k = 1 - next(i for i, o in enumerate(split.outputs) if any(u.node.op_type == SCALED_SILU for u in o.uses()))
            inj = split.outputs[k]
            w: _Weight | None = _split_weight(split, k, ctx.reader)
            if not inj.uses():  # a final mixer (combine=False): the inject columns are computed, unused
                return _Inject(inj, w, [], None)
            mm_nodes: list[ir.Node] = []
        else:
            others = [u.node for u in hn.uses() if u.node.op_type == "MatMul" and u.node is not down_mm and u.idx == 0]
            if not others:  # a final mixer: no inject projection at all
                return _Inject(None, None, [], None)
            if len(others) > 1:
                return Decline(f"{len(others)} inject projection MatMuls read the normalized streams, not one")
            mm_nodes = [others[0]]
            inj, w = others[0].outputs[0], others[0].inputs[1]
        div = next((u.node for u in inj.uses() if u.node.op_type == "Div" and u.idx == 0), None)
        sig2 = next((u.node for u in div.outputs[0].uses() if u.node.op_type == "Sigmoid"), None) if div else None
        mul = next((u.node for u in sig2.outputs[0].uses() if u.node.op_type == "Mul"), None) if sig2 else None
        if div is None or sig2 is None or mul is None:
            return Decline("inject projection is not Mul(Sigmoid(Div(inject, gate_div)), gate_mul)")
        gate_div = const_scalar(inp(div, 1), ctx.reader)
        gate_mul = const_scalar(_other(mul, sig2.outputs[0]), ctx.reader)
        if gate_div is None or gate_mul is None or gate_div == 0.0:
            return Decline("gate_div / gate_mul are not constant scalars (gate_div != 0)")
        return _Inject(inj, w, [*mm_nodes, div, sig2, mul], mul.outputs[0], gate_div, gate_mul)

    # -- phase 2 ---------------------------------------------------------------------------------
    def _match_prologue(self, ctx: RewriteContext, mix: ir.Node) -> _Prologue | Decline:
        post = producer_of(inp(mix, 0), HC_POST_MIX, domain=MS_DOMAIN)
        if post is None:  # a PostMix read by two mixes: absorbing it into the first re-pointed this one
            return Decline("its PostMix was absorbed into another LowRankMix reading the same output")
        if len(mix.outputs) > 2:
            return Decline("LowRankMix already has a streams output")
        if inp(mix, 5) is not None or inp(mix, 6) is not None:
            return Decline("LowRankMix already has a prologue")
        if inp(post, 3) is not None:
            return Decline("PostMix has a stream_mix (only the identity mix can be absorbed)")
        if attr_int(post, "num_branches", 0) != attr_int(mix, "num_branches"):
            return Decline("PostMix num_branches differs from the LowRankMix")
        gate = inp(post, 2)
        c = attr_int(mix, "num_branches")
        from_mix = gate is not None and _ms(gate.producer(), HC_LOW_RANK_MIX) and gate.index() == 1
        if gate is None:
            return Decline("PostMix has no post_mix input")
        if not from_mix and (gate.shape is None or len(gate.shape) < 1 or gate.shape[-1] != c):
            return Decline(f"PostMix post_mix shape {getattr(gate, 'shape', None)} is not provably (..., C)")
        # The streams' type: the PostMix output's, else its streams input's (an exporter or an
        # earlier rewrite may leave the output untyped; the op's one T makes them the same).
        streams = first_dtype(inp(mix, 0), inp(post, 0))
        for operand in (post.inputs[1], gate):
            if operand is not None and streams is not None and first_dtype(operand) not in (None, streams):
                return Decline(f"PostMix operand {operand.name!r} dtype differs from the streams")
        out = post.outputs[0]
        if captured_by_subgraph(out):
            return Decline(f"PostMix output {out.name!r} is captured by a subgraph")
        return _Prologue(mix, post)

    # -- rewrites --------------------------------------------------------------------------------
    def produces(self, match: _Chain | _Prologue) -> tuple[Produced, ...]:
        """One LowRankMix at the streams' dtype (a prologue re-creates the mix it absorbs into)."""
        if isinstance(match, _Prologue):
            dtype = first_dtype(*match.mix.inputs[:2])  # streams, norm scale: one T
        else:
            dtype = first_dtype(match.x, match.weights[0])
        return (Produced(HC_LOW_RANK_MIX, MS_DOMAIN, dtype),)

    def rewrite(self, ctx: RewriteContext, match: _Chain | _Prologue) -> None:
        """Replace a matched chain by one LowRankMix, or give a LowRankMix the PostMix's inputs as prologue."""
        if isinstance(match, _Prologue):
            self._rewrite_prologue(ctx, match)
            return
        anchor = match.pre_mix
        attrs: list[ir.Attr] = [ir.AttrInt64("num_branches", int(match.attrs["num_branches"]))]
        attrs += [ir.AttrFloat32(k, float(match.attrs[k])) for k in ("epsilon", "silu_alpha", "reduction_scale", "gate_div", "gate_mul")]
        prefix = (anchor.name or "/hc").rsplit("/", 1)[0]
        scale, down, up, inject = match.weights
        inputs = [match.x, scale, self._weight(ctx, down, "down"), up, self._inject_weight(ctx, inject, scale, match)]
        node = ir.Node(
            MS_DOMAIN, HC_LOW_RANK_MIX, inputs, attributes=attrs, num_outputs=2,
            name=ctx.node_name(f"{prefix}/HyperConnectionLowRankMix"),
        )
        node.outputs[0].name = ctx.value_name(f"{match.pre.name or 'hc'}_fused")
        copy_type(node.outputs[0], match.pre)
        gate_base = match.post_gate.name if match.post_gate is not None else f"{prefix}/post_gate"
        node.outputs[1].name = ctx.value_name(f"{gate_base or 'hc'}_fused")
        if match.post_gate is not None:
            copy_type(node.outputs[1], match.post_gate)
        ctx.insert([node], inputs=node.inputs, matched=match.nodes)
        replace_value(match.pre, node.outputs[0], ctx.graph)
        if match.post_gate is not None:
            replace_value(match.post_gate, node.outputs[1], ctx.graph)
        ctx.remove_dead(list(reversed(match.nodes)))

    @staticmethod
    def _weight(ctx: RewriteContext, weight: _Weight, role: str) -> ir.Value:
        """The weight itself, or its columns of the packed projection as a new tensor (once per range)."""
        if not isinstance(weight, _Packed):
            return weight
        key = ("hc_packed", id(weight.weight), weight.start, weight.stop)
        if key not in ctx.cache:
            cols = ctx.reader(weight.weight)[:, weight.start:weight.stop]
            ctx.cache[key] = ctx.add_initializer(f"{weight.weight.name}.{role}", cols.copy(), [weight.weight])
        return ctx.cache[key]

    def _inject_weight(self, ctx: RewriteContext, inject: _Weight | None, scale: ir.Value, match: _Chain) -> ir.Value:
        if inject is not None:
            return self._weight(ctx, inject, "inject")
        # A final mixer has no post gate: LowRankMix still needs an inject weight, whose output
        # nobody reads. Zeros of (C*H, C), once per shape and dtype.
        rows = scale.shape[0] if scale.shape is not None else None
        assert isinstance(rows, int)  # proved C*H by _check_weight_shapes
        ch, c = rows, int(match.attrs["num_branches"])
        dtype = scale.dtype
        assert dtype is not None
        key = ("hc_zero_inject", ch, c, dtype)
        if key not in ctx.cache:
            ctx.cache[key] = ctx.add_initializer(f"{scale.name}.zero_inject", np.zeros((ch, c), dtype.numpy()), [])
        return ctx.cache[key]

    def _rewrite_prologue(self, ctx: RewriteContext, match: _Prologue) -> None:
        mix, post = match.mix, match.post
        streams, block_out, gate = post.inputs[0], post.inputs[1], post.inputs[2]
        inputs = [streams, *mix.inputs[1:5], block_out, gate]
        node = ir.Node(
            MS_DOMAIN, HC_LOW_RANK_MIX, inputs, attributes=list(mix.attributes.values()), num_outputs=3,
            name=ctx.node_name(mix.name or "/HyperConnectionLowRankMix"),
        )
        old_streams = post.outputs[0]
        for new, old in zip(node.outputs, (*mix.outputs, old_streams), strict=False):
            new.name = ctx.value_name(f"{old.name or 'hc'}_p")
            copy_type(new, old)
        ctx.insert([node], inputs=inputs, matched=[post, mix])
        for new, old in zip(node.outputs, mix.outputs, strict=False):
            replace_value(old, new, ctx.graph)
        replace_value(old_streams, node.outputs[2], ctx.graph)
        ctx.remove_dead([mix, post])
