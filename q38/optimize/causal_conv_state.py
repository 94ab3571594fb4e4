"""CausalConvWithState carry-state fusion: reuse the op's own ``present_state`` output.

Channels-first form (target graph)::

    y, st = CausalConvWithState(xT, w[C,1,K], b, past)          st unused
    present = Slice(Concat(past, xT, -1), [-L], [INT64_MAX], [-1])   L = (K-1)*dilation
    ──► present := st ; Concat/Slice removed

First-token form (S = 1 only)::

    present = Concat(Slice(past, [1], [INT64_MAX], [-1]), Slice(xT, [0], [1], [-1]), -1)

Channels-last form (prefill graph), private transposes absorbed::

    pT = Transpose(past, [0,2,1]); xT = Transpose(x, [0,2,1])
    y, _ = CausalConvWithState(xT, w, b, pT); out = Transpose(y, [0,2,1])
    present = Transpose(Slice(Concat(pT, xT, -1), [-L], [INT64_MAX], [-1]), [0,2,1])
    ──► out, present = CausalConvWithState(x, w, b, past, channels_last=1)

No new operator is introduced, so the rewrite applies for every target. After a rewrite the
graph is re-sorted (stably), so a consumer of the reused state that used to sit before the conv
(the Slice did not depend on it) now runs after its new producer, subgraph captures included.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from q38._ops import CAUSAL_CONV_WITH_STATE, MS_DOMAIN
from q38.optimize._common import Produced, RewriteContext, RewritePass, copy_type, replace_value
from q38.optimize.matching import (
    Decline,
    attr_int,
    attr_ints,
    captured_by_subgraph,
    check_private,
    first_dtype,
    inp,
    producer_of,
    rank_of,
    slice_args,
)

__all__ = ["FuseCausalConvStatePass"]

_BIG = 2**31 - 1
_EXTENDED = ("state_length", "state_channels_last", "state_update_capacity", "input_channels", "input_channel_offset")


@dataclasses.dataclass
class _Match:
    conv: ir.Node
    present: ir.Value
    removed: list[ir.Node]
    channels_last: bool = False
    x: ir.Value | None = None  # channels-last: the untransposed activation
    past: ir.Value | None = None  # channels-last: the untransposed state
    out: ir.Value | None = None  # channels-last: the transposed conv output


def _slice(node: ir.Node | None, ctx: RewriteContext) -> tuple[int, int, int] | None:
    return slice_args(node, ctx.reader) if node is not None else None


def _is_transpose021(node: ir.Node | None) -> bool:
    return node is not None and node.op_type == "Transpose" and attr_ints(node, "perm") == [0, 2, 1]


class FuseCausalConvStatePass(RewritePass[_Match]):
    """Replace the exporter's Concat/Slice carry chain by the op's ``present_state`` output."""

    name = "causal_conv_state"
    contrib_op = None

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        """Every ``com.microsoft::CausalConvWithState``: each may carry its state by an exporter chain."""
        return [n for n in graph if n.op_type == CAUSAL_CONV_WITH_STATE and n.domain == MS_DOMAIN]

    def _guards(self, ctx: RewriteContext, conv: ir.Node) -> Decline | None:
        for key in ("state_window",):
            if attr_int(conv, key, 0) != 0:
                return Decline(f"non-default attribute {key}={attr_int(conv, key)}")
        if attr_int(conv, "ndim", 1) != 1:
            return Decline(f"ndim={attr_int(conv, 'ndim')} is not 1")
        for key in _EXTENDED:
            if key in conv.attributes:
                return Decline(f"extended attribute {key} is set (CUDA-only path)")
        if len(conv.outputs) > 2:
            return Decline("state_update output 2 is declared")
        if attr_int(conv, "dilation", 1) < 1:
            return Decline(f"dilation={attr_int(conv, 'dilation')} is not >= 1")
        rank = rank_of(conv.inputs[0])
        if rank is not None and rank != 3:
            return Decline(f"input rank {rank} is not 3")
        w = inp(conv, 1)
        if w is None or w.shape is None or len(w.shape) != 3 or not isinstance(w.shape[2], int):
            return Decline("weight shape is not a static [C, 1, K]")
        return None

    def _history(self, conv: ir.Node) -> int:
        w = conv.inputs[1]
        assert w is not None and w.shape is not None
        width = w.shape[2]
        assert isinstance(width, int)  # a static [C, 1, K], proved by _guards
        return (width - 1) * attr_int(conv, "dilation", 1)

    def match(self, ctx: RewriteContext, conv: ir.Node) -> _Match | Decline:
        """The conv's carry chain (Concat/Slice, or the first-token form), private to it; else a Decline.

        When both its input and state come through ``Transpose([0,2,1])`` the match is channels-last:
        those transposes and the output's are absorbed as well.
        """
        x, past = inp(conv, 0), inp(conv, 3)
        if x is None or past is None:
            return Decline("conv has no past_state input (no state to carry)")
        concats = [u.node for u in past.uses() if u.node.op_type == "Concat" and u.idx == 0 and u.node.graph is ctx.graph]
        first_token = [
            u.node for u in past.uses()
            if u.node.op_type == "Slice" and u.node.graph is ctx.graph
            and any(v.node.op_type == "Concat" for v in u.node.outputs[0].uses())
        ]
        if not concats and not first_token:
            state = conv.outputs[1] if len(conv.outputs) > 1 else None
            if state is not None and (state.uses() or state.is_graph_output()):
                return Decline("present_state output already carries the state (no carry chain to remove)")
            return Decline("no Concat/Slice carry chain reads the past state")
        declined = self._guards(ctx, conv)
        if declined:
            return declined
        hist_len = self._history(conv)
        pT, xT = producer_of(past, "Transpose"), producer_of(x, "Transpose")
        channels_last = _is_transpose021(pT) and _is_transpose021(xT)
        if attr_int(conv, "channels_last", 0) != 0:
            return Decline("conv already uses channels_last=1")
        if concats:
            concat = concats[0]
            if len(concat.inputs) != 2 or concat.inputs[1] is not x:
                return Decline("carry Concat does not append the conv's own input to its past state")
            if attr_int(concat, "axis") not in (-1, 2):
                return Decline(f"carry Concat axis {attr_int(concat, 'axis')} is not the sequence axis")
            hist = concat.outputs[0]
            slices = [u.node for u in hist.uses() if u.node.op_type == "Slice"]
            if len(slices) != 1:
                return Decline("carry history is not consumed by exactly one Slice")
            sl = slices[0]
            args = _slice(sl, ctx)
            if args is None or args[2] not in (-1, 2) or args[1] < _BIG:
                return Decline("carry Slice is not a constant trailing slice of the sequence axis")
            if -args[0] != hist_len:
                return Decline(
                    f"history length {-args[0]} != (K-1)*dilation = {hist_len}"
                )
            declined = check_private([hist], [concat, sl], ctx.graph)
            if declined:
                return declined
            present = sl.outputs[0]
            removed = [sl, concat]
        else:
            tail = first_token[0]
            concat = next(v.node for v in tail.outputs[0].uses() if v.node.op_type == "Concat")
            head = producer_of(inp(concat, 1), "Slice")
            a_tail, a_head = _slice(tail, ctx), _slice(head, ctx)
            if (
                len(concat.inputs) != 2 or concat.inputs[0] is not tail.outputs[0] or head is None
                or head.inputs[0] is not x or a_tail is None or a_head is None
                or a_tail[1] < _BIG or a_head[:2] != (0, 1) or a_tail[2] not in (-1, 2) or a_head[2] not in (-1, 2)
            ):
                return Decline("first-token carry is not Concat(Slice(past,[1],[MAX]), Slice(x,[0],[1]))")
            if attr_int(concat, "axis") not in (-1, 2):
                return Decline(f"carry Concat axis {attr_int(concat, 'axis')} is not the sequence axis")
            seq = x.shape[2] if x.shape is not None and len(x.shape) == 3 else None
            if seq is None and _is_transpose021(xT) and xT is not None:
                src = xT.inputs[0]
                seq = src.shape[1] if src is not None and src.shape is not None and len(src.shape) == 3 else None
            if seq != 1:
                return Decline(f"first-token carry form needs sequence length 1 (got {seq})")
            if a_tail[0] != 1 or past.shape is None or past.shape[-1] != hist_len:
                return Decline(f"first-token carry does not keep (K-1)*dilation = {hist_len} positions")
            declined = check_private([tail.outputs[0], head.outputs[0]], [tail, head, concat], ctx.graph)
            if declined:
                return declined
            present = concat.outputs[0]
            removed = [concat, tail, head]
            channels_last = False
        if len(conv.outputs) > 1 and conv.outputs[1].uses() and not channels_last:
            return Decline("present_state output already has consumers")
        if not channels_last:
            if pT is not None and _is_transpose021(pT) != _is_transpose021(xT):
                return Decline("input and state layouts differ (one transposed, one not)")
            return _Match(conv, present, removed)
        # --- channels-last: absorb the private transposes ---------------------------------------
        assert pT is not None and xT is not None
        y_uses = list(conv.outputs[0].uses())
        if len(y_uses) != 1 or not _is_transpose021(y_uses[0].node) or conv.outputs[0].is_graph_output():
            return Decline("conv output is not read by exactly one Transpose([0,2,1])")
        final = [u.node for u in present.uses()]
        if len(final) != 1 or not _is_transpose021(final[0]) or present.is_graph_output():
            return Decline("carried state is not transposed back to channels-last")
        if len(conv.outputs) > 1 and conv.outputs[1].uses():
            return Decline("present_state output already has consumers")
        for t in (pT, xT):
            if captured_by_subgraph(t.outputs[0]) or t.outputs[0].is_graph_output() or any(
                u.node is not conv and u.node not in removed for u in t.outputs[0].uses()
            ):
                return Decline(f"transpose {t.outputs[0].name!r} is not private to the conv and its carry")
        out_t = y_uses[0].node
        return _Match(
            conv, final[0].outputs[0], [final[0], *removed, out_t, xT, pT], True,
            xT.inputs[0], pT.inputs[0], out_t.outputs[0],
        )

    def produces(self, match: _Match) -> tuple[Produced, ...]:
        """The conv itself, now also computing the carried state (one T: output, input, weight)."""
        conv = match.conv
        dtype = first_dtype(conv.outputs[0], inp(conv, 0), inp(conv, 1))
        return (Produced(CAUSAL_CONV_WITH_STATE, MS_DOMAIN, dtype),)

    def rewrite(self, ctx: RewriteContext, match: _Match) -> None:
        """Feed the carried state's readers from the conv's ``present_state`` and remove the chain.

        Channels-last: a new conv with ``channels_last=1`` reads the untransposed input and state.
        A reader that sat before the conv is handled by moving the conv up after its inputs.
        """
        conv = match.conv
        if not match.channels_last:
            if len(conv.outputs) < 2:
                conv.resize_outputs(2)
            state = conv.outputs[1]
            if not state.name:
                state.name = ctx.value_name(f"{conv.name or 'conv'}/present_state")
            copy_type(state, match.present)
            if any(not ctx.order.before(conv, use.node) for use in match.present.uses()):
                # A reader of the carried state sits before the conv (the Slice did not depend on
                # it): move the conv up to just after its inputs' producers.
                ctx.order.move(conv, matched=match.removed)
                ctx.inserted.append(conv)
            replace_value(match.present, state, ctx.graph)
            ctx.remove_dead(match.removed)
            return
        inputs = [match.x, conv.inputs[1], inp(conv, 2), match.past]
        attrs = [a for a in conv.attributes.values() if a.name != "channels_last"]
        new = ir.Node(
            MS_DOMAIN, CAUSAL_CONV_WITH_STATE, inputs,
            attributes=[*attrs, ir.AttrInt64("channels_last", 1)],
            num_outputs=2, name=ctx.node_name(conv.name or "/CausalConvWithState"),
        )
        assert match.out is not None
        for new_out, old, tag in ((new.outputs[0], match.out, "output"), (new.outputs[1], match.present, "present_state")):
            new_out.name = ctx.value_name(f"{conv.name or 'conv'}/{tag}_cl")
            copy_type(new_out, old)
        ctx.insert([new], inputs=inputs, matched=[conv, *match.removed])
        replace_value(match.out, new.outputs[0], ctx.graph)
        replace_value(match.present, new.outputs[1], ctx.graph)
        ctx.remove_dead([*match.removed[:3], conv, *match.removed[3:]])
