"""The two graph checks a contrib op with a shape-inference function and a CPU kernel gets.

ORT runs an op's shape inference when the session resolves the graph, then its CPU kernel's
constructor when the session creates kernels. A module describing one op (GroupQueryAttention,
GatedDeltaNet) supplies both as pure functions; this module turns them into rule checks with the
same node selection (schema-clean nodes of the op) and the same order: a node whose inference
fails never reaches its constructor, so it gets the inference row only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import onnx_ir as ir

from contracts._facts import nodes_of
from contracts._graph import ModelLike, as_ir_model, node_label, per_node
from contracts._rule import Violation
from contracts.cpu_kernels import runs_on_cpu
from contracts.schema_rules import schema_clean
from contracts.shapes import Shapes, shapes_of

__all__ = ["GraphCheck", "inference_and_cpu_checks"]

# A versioned graph check, ``check(model, entries, version)``, as ``contracts._versions.per_version`` binds it.
GraphCheck = Callable[[ModelLike, Mapping[str, str], str], list[Violation]]


def inference_and_cpu_checks(
    domain: str,
    op: str,
    *,
    inference_rule: str,
    cpu_rule: str,
    inference_problem: Callable[[ir.Node, Shapes], str | None],
    cpu_problems: Callable[[ir.Node], list[str]],
) -> tuple[GraphCheck, GraphCheck]:
    """(inference check, CPU-constructor check) for ``domain::op``, in ORT's order.

    The CPU check runs only on graphs the CPU provider runs (``runs_on_cpu``), and skips a node
    whose inference already failed.
    """

    def nodes(model: ir.Model) -> list[ir.Node]:
        return [n for n in nodes_of(model, domain, op) if schema_clean(model, n)]

    def check_inference(model: ModelLike, _entries: Mapping[str, str], _version: str) -> list[Violation]:
        ir_model = as_ir_model(model)
        shapes = shapes_of(ir_model)

        def one(node: ir.Node) -> Iterable[Violation]:
            reason = inference_problem(node, shapes)
            if reason is not None:
                yield Violation(inference_rule, reason, node=node_label(node))

        return per_node(nodes(ir_model), one)

    def check_cpu(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
        ir_model = as_ir_model(model)
        if not runs_on_cpu(ir_model, version):
            return []
        shapes = shapes_of(ir_model)

        def one(node: ir.Node) -> Iterable[Violation]:
            if inference_problem(node, shapes) is None:
                for text in cpu_problems(node):
                    yield Violation(cpu_rule, text, node=node_label(node))

        return per_node(nodes(ir_model), one)

    return check_inference, check_cpu
