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

import onnx_ir as ir

from q38._ops import (
    BRANCHWISE_RMS_NORM,
    HC_LOW_RANK_MIX,
    HC_POST_MIX,
    HC_PRE_MIX,
    MS_DOMAIN,
    SCALED_SILU,
)
from q38.optimize._common import (
    Decline,
    RewriteContext,
    RewritePass,
    attr_float,
    attr_int,
    captured_by_subgraph,
    check_private,
    const_scalar,
    copy_type,
    inp,
    producer_of,
    replace_value,
)

__all__ = ["FuseHyperConnectionPass"]

DEFAULT_EPSILON = 1e-5


@dataclasses.dataclass
class _Chain:
    x: ir.Value
    weights: tuple[ir.Value, ir.Value, ir.Value, ir.Value]  # norm_scale, down, up, inject
    attrs: dict[str, float | int]
    pre: ir.Value
    post_gate: ir.Value
    nodes: list[ir.Node]


@dataclasses.dataclass
class _Prologue:
    mix: ir.Node
    post: ir.Node


def _ms(node: ir.Node | None, op: str) -> bool:
    return node is not None and node.domain == MS_DOMAIN and node.op_type == op


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    return node.inputs[1] if node.inputs[0] is value else node.inputs[0]


def _static_2d(value: ir.Value) -> tuple[int, int] | None:
    shape = value.shape
    if shape is None or len(shape) != 2 or not all(isinstance(d, int) for d in shape):
        return None
    return int(shape[0]), int(shape[1])  # type: ignore[arg-type]


def _check_weight_shapes(weights: tuple[ir.Value | None, ...], c: int) -> Decline | None:
    """LowRankMix needs norm_scale (C*H), down (C*H, R), up (R, C*H), inject (C*H, C).

    The unfused ops are laxer (BranchwiseRMSNorm takes an (H) scale, PreMix takes (..., C) branch
    gates from an (R, C) up projection), so the layouts are proved here, not assumed.
    """
    scale, down, up, inject = weights
    assert scale is not None and down is not None and up is not None and inject is not None
    d, u, j = _static_2d(down), _static_2d(up), _static_2d(inject)
    if d is None or u is None or j is None:
        return Decline("hyper-connection projection weights are not static 2-D tensors")
    ch, r = d
    if ch % c or scale.shape is None or scale.shape[0] != ch:
        length = scale.shape[0] if scale.shape is not None and len(scale.shape) else None
        return Decline(f"norm scale {scale.name!r} length {length} is not C*H = {ch} (down rows)")
    if u != (r, ch):
        return Decline(f"up weight {up.name!r} shape {list(u)} is not (R, C*H) = {[r, ch]} (per-feature gates)")
    if j != (ch, c):
        return Decline(f"inject weight {inject.name!r} shape {list(j)} is not (C*H, C) = {[ch, c]}")
    return None


class FuseHyperConnectionPass(RewritePass):
    """Fuse the low-rank hyper-connection gate network and absorb the previous PostMix."""

    name = "hyper_connection"
    contrib_op = HC_LOW_RANK_MIX

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        # Phase one anchors on PreMix; phase two (see ``call``) on the fused LowRankMix nodes.
        return [n for n in graph if _ms(n, HC_PRE_MIX if self._phase == 1 else HC_LOW_RANK_MIX)]

    def call(self, model: ir.Model) -> ir.passes.PassResult:
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

    def match(self, ctx: RewriteContext, node: ir.Node) -> object | Decline | None:
        if self._phase == 2:
            return self._match_prologue(ctx, node)
        return self._match_chain(ctx, node)

    # -- phase 1 ---------------------------------------------------------------------------------
    def _match_chain(self, ctx: RewriteContext, pre_mix: ir.Node) -> _Chain | Decline | None:
        hn, gate = inp(pre_mix, 0), inp(pre_mix, 1)
        norm = producer_of(hn, BRANCHWISE_RMS_NORM, domain=MS_DOMAIN)
        sig = producer_of(gate, "Sigmoid")
        up_mm = producer_of(inp(sig, 0), "MatMul") if sig else None
        silu = producer_of(inp(up_mm, 0), SCALED_SILU, domain=MS_DOMAIN) if up_mm else None
        down_mm = producer_of(inp(silu, 0), "MatMul") if silu else None
        if norm is None or hn is None or sig is None or up_mm is None or silu is None or down_mm is None:
            return None
        if down_mm.inputs[0] is not hn:
            return None
        inj_mm = next((u.node for u in hn.uses() if u.node.op_type == "MatMul" and u.node is not down_mm and u.idx == 0), None)
        if inj_mm is None:
            return Decline("no inject projection MatMul reads the normalized streams")
        div = next((u.node for u in inj_mm.outputs[0].uses() if u.node.op_type == "Div" and u.idx == 0), None)
        sig2 = next((u.node for u in div.outputs[0].uses() if u.node.op_type == "Sigmoid"), None) if div else None
        mul = next((u.node for u in sig2.outputs[0].uses() if u.node.op_type == "Mul"), None) if sig2 else None
        if div is None or sig2 is None or mul is None:
            return Decline("inject projection is not Mul(Sigmoid(Div(inject, gate_div)), gate_mul)")
        x = norm.inputs[0]
        assert x is not None
        c = attr_int(norm, "num_branches", 0)
        if not c or attr_int(pre_mix, "num_branches", 0) != c:
            return Decline("num_branches is missing or differs between BranchwiseRMSNorm and PreMix")
        gate_div = const_scalar(inp(div, 1), ctx.reader)
        gate_mul = const_scalar(_other(mul, sig2.outputs[0]), ctx.reader)
        if gate_div is None or gate_mul is None or gate_div == 0.0:
            return Decline("gate_div / gate_mul are not constant scalars (gate_div != 0)")
        if len(silu.inputs) > 1 and silu.inputs[1] is not None:
            return Decline("ScaledSiLU uses a runtime scale input")
        scale = inp(norm, 1)
        if scale is None:
            return Decline("BranchwiseRMSNorm has no scale")
        weights = (scale, down_mm.inputs[1], up_mm.inputs[1], inj_mm.inputs[1])
        t = x.dtype
        if scale.shape is None or len(scale.shape) != 1:
            return Decline(f"norm scale {scale.name!r} shape {scale.shape} is not the flattened (C*H) layout")
        h = x.shape[-1] if x.shape is not None and len(x.shape) > 0 else None
        if isinstance(h, int) and scale.shape[0] != h:
            return Decline(f"norm scale length {scale.shape[0]} != C*H = {h}")
        for w in weights:
            if w is None or w.const_value is None:
                return Decline("a hyper-connection weight is not a constant initializer")
            if t is not None and w.dtype != t:
                return Decline(f"weight {w.name!r} dtype {w.dtype} != streams dtype {t} (LowRankMix needs one T)")
        declined = _check_weight_shapes(weights, c)
        if declined:
            return declined
        nodes = [norm, down_mm, silu, up_mm, sig, pre_mix, inj_mm, div, sig2, mul]
        declined = check_private(
            [hn, down_mm.outputs[0], silu.outputs[0], up_mm.outputs[0], sig.outputs[0], inj_mm.outputs[0],
             div.outputs[0], sig2.outputs[0]],
            nodes, ctx.graph,
        )
        if declined:
            return declined
        attrs: dict[str, float | int] = {
            "num_branches": c,
            "epsilon": attr_float(norm, "epsilon", DEFAULT_EPSILON) or 0.0,
            "silu_alpha": attr_float(silu, "alpha", 1.0) or 0.0,
            "reduction_scale": attr_float(pre_mix, "reduction_scale", 1.0) or 0.0,
            "gate_div": gate_div,
            "gate_mul": gate_mul,
        }
        return _Chain(x, weights, attrs, pre_mix.outputs[0], mul.outputs[0], nodes)  # type: ignore[arg-type]

    # -- phase 2 ---------------------------------------------------------------------------------
    def _match_prologue(self, ctx: RewriteContext, mix: ir.Node) -> _Prologue | Decline | None:
        post = producer_of(inp(mix, 0), HC_POST_MIX, domain=MS_DOMAIN)
        if post is None:
            return None
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
        for operand in (post.inputs[1], gate):
            if operand is not None and operand.dtype not in (None, mix.inputs[0].dtype if mix.inputs[0] else None):
                return Decline(f"PostMix operand {operand.name!r} dtype differs from the streams")
        out = post.outputs[0]
        if captured_by_subgraph(out):
            return Decline(f"PostMix output {out.name!r} is captured by a subgraph")
        return _Prologue(mix, post)

    # -- rewrites --------------------------------------------------------------------------------
    def rewrite(self, ctx: RewriteContext, match: object) -> None:
        if isinstance(match, _Prologue):
            self._rewrite_prologue(ctx, match)
            return
        assert isinstance(match, _Chain)
        anchor = match.nodes[5]
        attrs: list[ir.Attr] = [ir.AttrInt64("num_branches", int(match.attrs["num_branches"]))]
        attrs += [ir.AttrFloat32(k, float(match.attrs[k])) for k in ("epsilon", "silu_alpha", "reduction_scale", "gate_div", "gate_mul")]
        node = ir.Node(
            MS_DOMAIN, HC_LOW_RANK_MIX, [match.x, *match.weights], attributes=attrs, num_outputs=2,
            name=ctx.node_name(f"{(anchor.name or '/hc').rsplit('/', 1)[0]}/HyperConnectionLowRankMix"),
        )
        for new, old in zip(node.outputs, (match.pre, match.post_gate), strict=True):
            new.name = ctx.value_name(f"{old.name or 'hc'}_fused")
            copy_type(new, old)
        ctx.graph.insert_before(anchor, node)
        replace_value(match.pre, node.outputs[0], ctx.graph)
        replace_value(match.post_gate, node.outputs[1], ctx.graph)
        ctx.remove_dead(list(reversed(match.nodes)))

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
        ctx.graph.insert_before(mix, node)
        for new, old in zip(node.outputs, mix.outputs, strict=False):
            replace_value(old, new, ctx.graph)
        replace_value(old_streams, node.outputs[2], ctx.graph)
        ctx.remove_dead([mix, post])
