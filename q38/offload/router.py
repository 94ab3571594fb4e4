"""Prepare the target for ORT's QMoE offload: clear ``router_weights``, refuse QMoEOffload.

:class:`ClearRouterWeightsPass` is an onnx-ir ``FunctionalPass``: it returns a new model (a clone
sharing the source's lazy tensors) in which every ``com.microsoft::QMoE`` node keeps its op and
attributes but has input slot 14 (``router_weights``) empty, trailing empty inputs trimmed, and
the nodes that only fed the cleared inputs removed. ORT then weights the top-k experts by the
(normalized) ``router_probs`` instead of ``router_weights``.
"""

from __future__ import annotations

import onnx_ir as ir

from q38._ops import MS_DOMAIN, QMOE, QMOE_OFFLOAD
from q38.errors import OffloadError

__all__ = [
    "ROUTER_WEIGHTS_SLOT",
    "ClearRouterWeightsPass",
    "clear_router_weights",
    "qmoe_nodes",
    "refuse_qmoe_offload",
]

ROUTER_WEIGHTS_SLOT = 14


def qmoe_nodes(graph: ir.Graph) -> list[ir.Node]:
    """The top-level ``com.microsoft::QMoE`` nodes, in graph order."""
    return [n for n in graph if n.domain == MS_DOMAIN and n.op_type == QMOE]


def refuse_qmoe_offload(model: ir.Model, *, where: str) -> None:
    """A graph holding the old tool's QMoEOffload operator (subgraphs included) is refused, naming the node."""
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type == QMOE_OFFLOAD:
            raise OffloadError(
                f"{where}: node {node.name!r} is a {node.domain or 'ai.onnx'}::{QMOE_OFFLOAD} node of the old "
                "offload tool; ORT 1.32.0 offloads com.microsoft::QMoE nodes through "
                "session.moe.offload.* options: convert from the QMoE source package instead"
            )


def _remove_dead(graph: ir.Graph, values: list[ir.Value]) -> None:
    outputs = set(graph.outputs)
    stack = list(values)
    while stack:
        value = stack.pop()
        producer = value.producer()
        if producer is None or producer.graph is not graph:
            continue
        if any(o.uses() or o in outputs for o in producer.outputs):
            continue
        inputs = [v for v in producer.inputs if v is not None]
        graph.remove(producer, safe=True)
        stack.extend(inputs)


def clear_router_weights(model: ir.Model, *, in_place: bool = False) -> tuple[ir.Model, int]:
    """(model with every QMoE's router_weights cleared, number of inputs cleared).

    A new model unless ``in_place`` (for a model the caller loaded privately and owns).
    """
    out = model if in_place else model.clone()
    cleared: list[ir.Value] = []
    for node in ir.traversal.RecursiveGraphIterator(out.graph):
        if node.domain != MS_DOMAIN or node.op_type != QMOE:
            continue
        if len(node.inputs) > ROUTER_WEIGHTS_SLOT and node.inputs[ROUTER_WEIGHTS_SLOT] is not None:
            value = node.inputs[ROUTER_WEIGHTS_SLOT]
            assert value is not None
            node.replace_input_with(ROUTER_WEIGHTS_SLOT, None)
            cleared.append(value)
        count = len(node.inputs)
        while count and node.inputs[count - 1] is None:
            count -= 1
        node.resize_inputs(count)
    _remove_dead(out.graph, [v for v in cleared if not v.is_graph_input() and not v.is_initializer()])
    return out, len(cleared)


class ClearRouterWeightsPass(ir.passes.FunctionalPass):
    """onnx-ir pass form; ``self.cleared`` holds the count of the last call."""

    def __init__(self) -> None:
        super().__init__()
        self.cleared = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Clear the router weights of a copy of ``model``; modified only when some were cleared."""
        out, self.cleared = clear_router_weights(model)
        return ir.passes.PassResult(out, modified=bool(self.cleared))
