"""Hyper-connection schema-inference rules (probed on 1.31.1 and 1.32.0 CPU).

``HC-SCHEMA-001`` (any EP, ``[ShapeInferenceError]``), on the shapes ORT infers, so a flattened
stream width the producer never declares (a MatMul's output, a Reshape of a graph input) is
still checked:

* ``HyperConnectionPreMix``: with ``num_branches`` set (flattened streams) it must be positive
  and divide the stream width; without it (grouped streams) the rank is at least 2.
* ``HyperConnectionLowRankMix`` (1.32.0 only): ``num_branches`` positive, streams of rank >= 1,
  the last dimension divisible by ``num_branches``.

``HyperConnectionPostMix`` and ``BranchwiseRMSNorm`` check their shapes only when they run (the
session is created whatever ``num_branches`` says), so they have no creation-time rule here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx_ir as ir

from contracts._facts import nodes_of
from contracts._graph import ModelLike, as_ir_model, attr_int, input_at, node_label, per_node
from contracts._rule import GraphExamples, Rule, RuleDoc, Violation
from contracts.schema_rules import schema_clean
from contracts.shapes import Shapes, shapes_of
from q38._ops import HC_LOW_RANK_MIX, HC_PRE_MIX, MS_DOMAIN

__all__ = ["RULES", "schema_problem"]

_SRC = "probed onnxruntime 1.31.1 / 1.32.0 CPU (hyper-connection schema inference)"


def _pre_mix(node: ir.Node, shapes: Shapes) -> str | None:
    streams = input_at(node, 0)
    rank = shapes.rank(streams)
    branches = attr_int(node, "num_branches", 0)
    if branches != 0:
        if branches < 0 or rank == 0:
            return "num_branches must be positive for flattened streams."
        width = shapes.dim(streams, -1)
        if width is not None and width % branches:
            return "The flattened stream width must be divisible by num_branches."
        return None
    if rank is not None and rank < 2:
        return "Grouped streams must have rank at least 2."
    return None


def _low_rank_mix(node: ir.Node, shapes: Shapes) -> str | None:
    streams = input_at(node, 0)
    branches = attr_int(node, "num_branches", 0)
    if branches <= 0:
        return "num_branches must be positive."
    rank = shapes.rank(streams)
    if rank is not None and rank < 1:
        return "streams must have rank at least 1."
    width = shapes.dim(streams, -1)
    if width is not None and width % branches:
        return "The last dimension of streams must be divisible by num_branches."
    return None


def schema_problem(node: ir.Node, shapes: Shapes) -> str | None:
    """The first shape-inference failure of one hyper-connection node, or None."""
    if node.op_type == HC_PRE_MIX:
        return _pre_mix(node, shapes)
    if node.op_type == HC_LOW_RANK_MIX:
        return _low_rank_mix(node, shapes)
    return None


def _check(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
    ir_model = as_ir_model(model)
    shapes = shapes_of(ir_model)
    nodes = [n for n in nodes_of(ir_model, MS_DOMAIN, HC_PRE_MIX, HC_LOW_RANK_MIX) if schema_clean(ir_model, n)]

    def one(node: ir.Node) -> Iterable[Violation]:
        reason = schema_problem(node, shapes)
        if reason is not None:
            yield Violation("HC-SCHEMA-001", reason, node=node_label(node))

    return per_node(nodes, one)

# The rule's examples (ONNX text, onnx.parser): a PreMix over flattened streams of width 256.
_EX_PREMIX = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[1,3,256] s, float[1,3,4] g) => (float[] y) {
  [hc] y = com.microsoft.HyperConnectionPreMix <num_branches: int = 4> (s, g)
}"""

FAMILY = "hyper-connection"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES: tuple[Rule, ...] = (
    Rule("HC-SCHEMA-001", "hyper-connection shape inference: PreMix num_branches positive and dividing "
         "the flattened width (grouped rank >= 2); LowRankMix num_branches positive, rank >= 1, width "
         "divisible", _SRC, "cpu-session", "graph", _check, family=FAMILY, doc=RuleDoc(
        "Hyper-connection shape inference requires PreMix num_branches > 0 dividing the flattened "
        "width (grouped rank >= 2) and LowRankMix num_branches > 0, rank >= 1 and a divisible "
        "width; graph resolve fails otherwise.",
        "HyperConnectionPreMix(x: [1, T, 100], num_branches=3)",
        "Choose num_branches dividing the hidden width (the synthetic model uses 4).",
    ), examples=GraphExamples.edited(_EX_PREMIX, ("num_branches: int = 4", "num_branches: int = 3"))),
)  # fmt: skip
