"""Shared-expert projection fusion: three MatMuls on one input -> one MatMul + Split.

Matched subgraph (docs/synthetic-model.md, pattern 2)::

    g  = MatMul(h, Wg[H,I])   ─┐
    u  = MatMul(h, Wu[H,I])    ├─ a = Mul(Mul(g, Sigmoid(g)), u)   (either operand order)
    sg = MatMul(h, Wsg[H,1])  ─┴─ gate = Sigmoid(sg)

Replacement (standard ops, so it also applies for ``--target cpu``)::

    g, u, sg = Split(MatMul(h, Concat[Wg|Wu|Wsg] along N), [I, I, 1], axis=-1)

The concatenated weight is built once per (Wg, Wu, Wsg) triple, so projections that shared
weights before still share one tensor after.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from q38._ops import MATMUL_NBITS, MS_DOMAIN
from q38.optimize._common import Produced, RewriteContext, RewritePass, copy_type, replace_value
from q38.optimize.matching import Decline, producer_of

__all__ = ["FuseSharedExpertPass"]


@dataclasses.dataclass
class _Match:
    h: ir.Value
    matmuls: tuple[ir.Node, ir.Node, ir.Node]  # gate, up, shared gate
    weights: tuple[ir.Value, ...]  # their constant 2-D weights, in that order
    widths: tuple[int, ...]  # the weights' (static) output widths: the Split sizes


def _is_matmul(node: ir.Node) -> bool:
    return node.op_type == "MatMul" and node.domain == "" and len(node.inputs) == 2


def _is_nbits(node: ir.Node) -> bool:
    return node.op_type == MATMUL_NBITS and node.domain == MS_DOMAIN


def _silu_of(g: ir.Value) -> ir.Node | None:
    """The Mul(g, Sigmoid(g)) that reads ``g`` (either operand order), or None."""
    for use in g.uses():
        sig = use.node
        if sig.op_type != "Sigmoid" or sig.domain != "":
            continue
        for v in sig.outputs[0].uses():
            mul = v.node
            if mul.op_type == "Mul" and len(mul.inputs) == 2 and g in mul.inputs:
                return mul
    return None


class FuseSharedExpertPass(RewritePass[_Match]):
    """Concatenate the gate, up and shared-gate projection weights of a shared expert."""

    name = "shared_expert"
    contrib_op = None

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        """Gate MatMuls: output ``g`` feeds Sigmoid(g) and the SiLU product ``Mul(g, Sigmoid(g))``.

        A quantized gate (MatMulNBits, the builder's int4 exports) is an anchor too: declined.
        """
        return [n for n in graph if (_is_matmul(n) or _is_nbits(n)) and _silu_of(n.outputs[0]) is not None]

    def _roles(self, gate: ir.Node) -> tuple[ir.Node, ir.Node, ir.Node] | Decline:
        g = gate.outputs[0]
        silu = _silu_of(g)
        assert silu is not None
        prods = [u.node for u in silu.outputs[0].uses() if u.node.op_type == "Mul"]
        if len(prods) != 1:
            return Decline(f"SiLU output feeds {len(prods)} Mul nodes, not one up-projection product")
        prod = prods[0]
        other = prod.inputs[1] if prod.inputs[0] is silu.outputs[0] else prod.inputs[0]
        up = producer_of(other, "MatMul")
        h = gate.inputs[0]
        if h is None or up is None or up.inputs[0] is not h or not _is_matmul(up):
            return Decline("the SiLU is not multiplied by an up projection MatMul of the same input")
        shared = [
            u.node for u in h.uses()
            if _is_matmul(u.node) and u.idx == 0 and u.node is not gate and u.node is not up
            and u.node.graph is gate.graph
            and any(v.node.op_type == "Sigmoid" for v in u.node.outputs[0].uses())
            and all(v.node.op_type == "Sigmoid" for v in u.node.outputs[0].uses())
        ]
        if len(shared) != 1:
            return Decline(f"{len(shared)} shared-gate MatMul -> Sigmoid projections read the input, not one")
        return gate, up, shared[0]

    def match(self, ctx: RewriteContext, node: ir.Node) -> _Match | Decline | None:
        """The gate, up and shared-gate MatMuls on one input, with constant 2-D weights of one dtype.

        A Decline names what differs (quantized gate, non-constant weight, widths, a graph output).
        """
        if _is_nbits(node):
            return Decline("gate projection is already quantized (MatMulNBits); the fusion concatenates "
                           "float weights; kept as exported")
        roles = self._roles(node)
        if isinstance(roles, Decline):
            return roles
        h = node.inputs[0]
        assert h is not None
        weights: list[ir.Value] = []
        shapes: list[ir.Shape] = []
        for m, what in zip(roles, ("gate", "up", "shared-gate"), strict=True):
            w = m.inputs[1]
            if w is None or w.const_value is None or not w.is_initializer() or w.is_graph_input():
                return Decline(f"{what} weight {getattr(w, 'name', None)!r} is not a constant initializer")
            if w.shape is None or len(w.shape) != 2:
                return Decline(f"{what} weight {w.name!r} is not 2-D")
            weights.append(w)
            shapes.append(w.shape)
        dtypes = {w.dtype for w in weights}
        if len(dtypes) != 1:
            return Decline(f"projection weights have different dtypes {sorted(str(d) for d in dtypes)}")
        ks = {shape[0] for shape in shapes}
        if len(ks) != 1:
            return Decline(f"projection weights disagree on the input width {sorted(map(str, ks))}")
        if shapes[2][1] != 1:
            return Decline(f"shared-gate weight {weights[2].name!r} is not [H, 1]")
        widths = tuple(n for shape in shapes if isinstance(n := shape[1], int))
        if len(widths) != len(shapes):
            return Decline("projection widths are not static")
        for m in roles:
            if m.outputs[0].is_graph_output():
                return Decline(f"projection output {m.outputs[0].name!r} is a graph output")
        return _Match(h, roles, tuple(weights), widths)

    def produces(self, match: _Match) -> tuple[Produced, ...]:
        """The fused MatMul and its Split, in the projection weights' dtype (standard ops)."""
        dtype = match.weights[0].dtype
        return Produced("MatMul", "", dtype), Produced("Split", "", dtype)

    def rewrite(self, ctx: RewriteContext, match: _Match) -> None:
        """Replace the three MatMuls by one on the concatenated weight and a Split into their widths."""
        weights = match.weights
        key = ("concat", *(id(w) for w in weights))
        if key not in ctx.cache:
            arrays = [ctx.reader(w) for w in weights]
            base = (weights[0].name or "shared_expert").replace("gate_proj", "gate_up_sg_proj")
            ctx.cache[key] = ctx.add_initializer(f"{base}.fused", np.concatenate(arrays, axis=1), weights)
        fused_w = ctx.cache[key]
        widths = list(match.widths)
        prefix = (match.matmuls[0].name or "/shared_expert").rsplit("/", 1)[0]
        split_sizes = ctx.add_initializer(f"{prefix}/split_sizes", np.asarray(widths, np.int64), [])
        mm = ir.Node("", "MatMul", [match.h, fused_w], name=ctx.node_name(f"{prefix}/FusedMatMul"))
        mm.outputs[0].name = ctx.value_name(f"{prefix}/FusedMatMul_output_0")
        mm.outputs[0].type = fused_w.type
        split = ir.Node(
            "", "Split", [mm.outputs[0], split_sizes], attributes=[ir.AttrInt64("axis", -1)],
            num_outputs=3, name=ctx.node_name(f"{prefix}/FusedSplit"),
        )
        for out, old in zip(split.outputs, match.matmuls, strict=True):
            out.name = ctx.value_name(f"{old.outputs[0].name or prefix}_split")
            copy_type(out, old.outputs[0])
        ctx.insert([mm, split], inputs=[match.h, fused_w, split_sizes], matched=match.matmuls)
        for out, old in zip(split.outputs, match.matmuls, strict=True):
            replace_value(old.outputs[0], out, ctx.graph)
        ctx.remove_dead(list(match.matmuls))
