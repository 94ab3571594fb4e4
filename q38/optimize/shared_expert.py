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

from q38.optimize._common import (
    Decline,
    RewriteContext,
    RewritePass,
    copy_type,
    producer_of,
    replace_value,
)

__all__ = ["FuseSharedExpertPass"]


@dataclasses.dataclass
class _Match:
    h: ir.Value
    matmuls: tuple[ir.Node, ir.Node, ir.Node]  # gate, up, shared gate


def _is_matmul(node: ir.Node) -> bool:
    return node.op_type == "MatMul" and node.domain in ("", "ai.onnx") and len(node.inputs) == 2


class FuseSharedExpertPass(RewritePass):
    """Concatenate the gate, up and shared-gate projection weights of a shared expert."""

    name = "shared_expert"
    contrib_op = None

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        # The gate MatMul: its output feeds Sigmoid and the SiLU product.
        return [n for n in graph if _is_matmul(n) and any(u.node.op_type == "Sigmoid" for u in n.outputs[0].uses())]

    def _roles(self, gate: ir.Node) -> tuple[ir.Node, ir.Node, ir.Node] | None:
        g = gate.outputs[0]
        sig = next((u.node for u in g.uses() if u.node.op_type == "Sigmoid"), None)
        if sig is None:
            return None
        silu = next((u.node for u in sig.outputs[0].uses() if u.node.op_type == "Mul" and g in u.node.inputs), None)
        if silu is None:
            return None
        prod = next((u.node for u in silu.outputs[0].uses() if u.node.op_type == "Mul"), None)
        if prod is None:
            return None
        other = prod.inputs[1] if prod.inputs[0] is silu.outputs[0] else prod.inputs[0]
        up = producer_of(other, "MatMul")
        h = gate.inputs[0]
        if h is None or up is None or up.inputs[0] is not h:
            return None
        shared = [
            u.node for u in h.uses()
            if _is_matmul(u.node) and u.idx == 0 and u.node is not gate and u.node is not up
            and u.node.graph is gate.graph
            and any(v.node.op_type == "Sigmoid" for v in u.node.outputs[0].uses())
            and all(v.node.op_type == "Sigmoid" for v in u.node.outputs[0].uses())
        ]
        if len(shared) != 1:
            return None
        return gate, up, shared[0]

    def match(self, ctx: RewriteContext, node: ir.Node) -> _Match | Decline | None:
        roles = self._roles(node)
        if roles is None:
            return None
        h = node.inputs[0]
        assert h is not None
        weights = [m.inputs[1] for m in roles]
        for w, what in zip(weights, ("gate", "up", "shared-gate"), strict=True):
            if w is None or w.const_value is None or not w.is_initializer() or w.is_graph_input():
                return Decline(f"{what} weight {getattr(w, 'name', None)!r} is not a constant initializer")
            if w.shape is None or len(w.shape) != 2:
                return Decline(f"{what} weight {w.name!r} is not 2-D")
        dtypes = {w.dtype for w in weights}  # type: ignore[union-attr]
        if len(dtypes) != 1:
            return Decline(f"projection weights have different dtypes {sorted(str(d) for d in dtypes)}")
        ks = {w.shape[0] for w in weights}  # type: ignore[union-attr, index]
        if len(ks) != 1:
            return Decline(f"projection weights disagree on the input width {sorted(map(str, ks))}")
        if weights[2].shape[1] != 1:  # type: ignore[union-attr, index]
            return Decline(f"shared-gate weight {weights[2].name!r} is not [H, 1]")  # type: ignore[union-attr]
        if not all(isinstance(w.shape[1], int) for w in weights):  # type: ignore[union-attr, index]
            return Decline("projection widths are not static")
        for m in roles:
            if m.outputs[0].is_graph_output():
                return Decline(f"projection output {m.outputs[0].name!r} is a graph output")
        return _Match(h, roles)

    def rewrite(self, ctx: RewriteContext, match: object) -> None:
        assert isinstance(match, _Match)
        weights = [m.inputs[1] for m in match.matmuls]
        key = ("concat", *(id(w) for w in weights))
        if key not in ctx.cache:
            arrays = [ctx.reader(w) for w in weights]  # type: ignore[arg-type]
            base = (weights[0].name or "shared_expert").replace("gate_proj", "gate_up_sg_proj")  # type: ignore[union-attr]
            ctx.cache[key] = ctx.add_initializer(f"{base}.fused", np.concatenate(arrays, axis=1), weights)  # type: ignore[arg-type]
        fused_w = ctx.cache[key]
        widths = [int(w.shape[1]) for w in weights]  # type: ignore[union-attr, index, arg-type]
        first = min(match.matmuls, key=lambda n: next(i for i, x in enumerate(ctx.graph) if x is n))
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
        ctx.graph.insert_before(first, [mm, split])
        for out, old in zip(split.outputs, match.matmuls, strict=True):
            replace_value(old.outputs[0], out, ctx.graph)
        ctx.remove_dead(list(match.matmuls))
