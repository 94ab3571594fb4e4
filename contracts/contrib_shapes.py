"""Output-shape handlers of the com.microsoft contrib ops q38 emits or reads.

Each mirrors what ORT's own inference gives the op's outputs (checked value by value against the
shapes a real session reports, ``tests/unit/contracts/test_shape_inference.py``); where ORT leaves a
dim unknown, so does the handler. The checks ORT's inference makes on the inputs (ranks,
divisibility) are rules, in ``contracts.shape_rules`` and the per-op modules.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts._graph import attr_int
from contracts.shape_types import Dim, Handler, Shape, ShapeContext, registrar
from q38._ops import MS_DOMAIN

__all__ = ["HANDLERS"]

# (domain, op type) -> handler, filled by the @register decorators below as this module is defined.
HANDLERS: dict[tuple[str, str], Handler] = {}
register = registrar(HANDLERS)

_SAME_AS_INPUT = (
    "BranchwiseRMSNorm", "GatedRMSNorm", "GatedAdd", "ScaledSiLU", "QMoE", "MoE", "RotaryEmbedding",
    "MRotaryEmbedding", "HyperConnectionPostMix", "FastGelu", "BiasGelu", "QuickGelu", "Gelu",
)  # fmt: skip


@register(MS_DOMAIN, *_SAME_AS_INPUT)
def _same(ctx: ShapeContext) -> Sequence[Shape | None]:
    return [ctx.shape(0)]


@register(MS_DOMAIN, "SkipSimplifiedLayerNormalization", "SkipLayerNormalization")
def _skip_norm(ctx: ShapeContext) -> Sequence[Shape | None]:
    x = ctx.shape(0)
    return [x, None, None, x]


def _branches(ctx: ShapeContext, streams: Shape) -> tuple[Dim, Dim, bool]:
    """(C, H, flattened) of hyper-connection streams.

    The streams are flattened (..., C*H) when ``num_branches`` > 0, else grouped (..., C, H).
    """
    branches = attr_int(ctx.node, "num_branches", 0)
    if branches > 0:
        width = streams[-1]
        return branches, (width // branches if isinstance(width, int) else None), True
    return streams[-2], streams[-1], False


@register(MS_DOMAIN, "HyperConnectionPreMix")
def _pre_mix(ctx: ShapeContext) -> Sequence[Shape | None]:
    streams = ctx.shape(0)
    if streams is None or not streams:
        return [None]
    _c, hidden, flattened = _branches(ctx, streams)
    lead = streams[:-1] if flattened else streams[:-2]
    return [(*lead, hidden)]


@register(MS_DOMAIN, "HyperConnectionLowRankMix")
def _low_rank_mix(ctx: ShapeContext) -> Sequence[Shape | None]:
    streams = ctx.shape(0)
    if streams is None or not streams:
        return [None, None, None]
    branches = attr_int(ctx.node, "num_branches", 0)
    width = streams[-1]
    hidden = width // branches if isinstance(width, int) and branches > 0 else None
    lead = streams[:-1]
    return [(*lead, hidden), (*lead, branches if branches > 0 else None), streams]


@register(MS_DOMAIN, "CausalConvWithState")
def _causal_conv(ctx: ShapeContext) -> Sequence[Shape | None]:
    x, w = ctx.shape(0), ctx.shape(1)
    out: Shape | None = x
    channels = attr_int(ctx.node, "input_channels", 0)
    if x is not None and channels > 0:
        out = (*x[:-1], channels)
    state: Shape | None = None
    if x is not None and w is not None and len(w) >= 3 and len(x) >= 2:
        k = w[-1]
        dilation = attr_int(ctx.node, "dilation", 1)
        length = attr_int(ctx.node, "state_length", 0) or ((k - 1) * dilation if isinstance(k, int) else None)
        window = attr_int(ctx.node, "state_window", 0)
        lead: tuple[Dim, ...] = (window,) if window > 0 else ()
        if attr_int(ctx.node, "channels_last", 0) == 1:
            state = (*lead, x[0], length, *x[2:])
        else:
            state = (*lead, x[0], x[1], length)
    return [out, state, None]


@register(MS_DOMAIN, "VarlenCausalConvWithState")
def _varlen_conv(ctx: ShapeContext) -> Sequence[Shape | None]:
    return [ctx.shape(0), ctx.shape(4), None]


@register(MS_DOMAIN, "GatedDeltaNet")
def _gated_delta_net(ctx: ShapeContext) -> Sequence[Shape | None]:
    query, state = ctx.shape(0), ctx.shape(6)
    out: Shape | None = None
    if query is not None and state is not None and len(state) == 4:
        heads_v, head_v = state[1], state[2]
        if not ctx.present(1):  # packed QKV: [T, D] or [B, S, D]
            out = (*query[:-1], heads_v, head_v)
        else:
            value = ctx.shape(2)
            out = (*query[:-2], heads_v, value[-1] if value else None)
    return [out, state, None]


@register(MS_DOMAIN, "GroupQueryAttention")
def _gqa(ctx: ShapeContext) -> Sequence[Shape | None]:
    query = ctx.shape(0)
    if query is None or len(query) != 3:
        return [None, None, None, None]
    heads = attr_int(ctx.node, "num_heads", 0)
    kv_heads = attr_int(ctx.node, "kv_num_heads", 0)
    width = query[2]
    if ctx.present(1):
        hidden: Dim = width
    elif isinstance(width, int) and heads > 0 and kv_heads > 0:
        hidden = width // (heads + 2 * kv_heads) * heads
    else:
        hidden = None
    past = ctx.shape(3) if ctx.present(3) else None
    present = None if past is None or len(past) != 4 else (past[0], past[1], None, past[3])
    return [(query[0], query[1], hidden), present, present, None]


@register(MS_DOMAIN, "MatMulNBits")
def _matmul_nbits(ctx: ShapeContext) -> Sequence[Shape | None]:
    a = ctx.shape(0)
    n = attr_int(ctx.node, "N", 0)
    if a is None or not a or n <= 0:
        return [None]
    return [(*a[:-1], n)]


@register(MS_DOMAIN, "GatherBlockQuantized")
def _gather_block_quantized(ctx: ShapeContext) -> Sequence[Shape | None]:
    data, indices = ctx.shape(0), ctx.shape(1)
    if data is None or indices is None or attr_int(ctx.node, "gather_axis", 0) != 0:
        return [None]
    bits = attr_int(ctx.node, "bits", 4)
    last = data[-1]
    if len(data) >= 2 and isinstance(last, int) and bits in {2, 4} and attr_int(ctx.node, "quantize_axis", 1) == len(data) - 1:
        last = last * (8 // bits)
    return [(*indices, *data[1:-1], last)] if len(data) >= 2 else [None]
