"""RotaryEmbedding CPU kernel-constructor rule (probed on 1.31.1 and 1.32.0 CPU).

``ROPE-CPU-001`` (``ep="cpu"``): the constructor reads ``rotary_embedding_dim`` and ``num_heads``
as ints (each in [0, INT_MAX]) and needs ``num_heads`` when ``rotary_embedding_dim`` is set (a
partial rotary cannot split a 3-D input into heads otherwise). The schema accepts all three. It
applies only where the session reaches kernel creation (``cpu_kernels.runs_on_cpu``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx_ir as ir

from contracts._facts import nodes_of
from contracts._graph import ModelLike, as_ir_model, attr_int, node_label, per_node
from contracts._rule import GraphExamples, RuleDoc, Violation
from contracts._versions import per_version
from contracts.cpu_kernels import runs_on_cpu
from contracts.schema_rules import schema_clean
from q38._ops import MS_DOMAIN

__all__ = ["RULES", "constructor_problems"]

_SRC = "probed onnxruntime 1.31.1 / 1.32.0 CPU (contrib_ops/cpu/bert/rotary_embedding.cc)"
_INT_MAX = 2**31 - 1


def constructor_problems(node: ir.Node) -> list[str]:
    """The CPU RotaryEmbedding constructor's refusals of ``node``, in its order (ORT reports the first)."""
    found = []
    rotary = attr_int(node, "rotary_embedding_dim", 0)
    heads = attr_int(node, "num_heads", 0)
    if not 0 <= rotary <= _INT_MAX:
        found.append(f"rotary_embedding_dim must be in range [0, {_INT_MAX}]. Actual value: {rotary}")
    if not 0 <= heads <= _INT_MAX:
        found.append(f"num_heads must be in range [0, {_INT_MAX}]. Actual value: {heads}")
    if rotary > 0 and heads <= 0:
        found.append("num_heads must be provided if rotary_embedding_dim is specified")
    return found


def _check(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    ir_model = as_ir_model(model)
    if not runs_on_cpu(ir_model, version):
        return []  # NOT_IMPLEMENTED comes first: no constructor runs

    def one(node: ir.Node) -> Iterable[Violation]:
        for text in constructor_problems(node)[:1]:
            yield Violation("ROPE-CPU-001", text, node=node_label(node))

    return per_node([n for n in nodes_of(ir_model, MS_DOMAIN, "RotaryEmbedding") if schema_clean(ir_model, n)], one)

# The rule's examples (ONNX text, onnx.parser): a partial RotaryEmbedding (rotary_embedding_dim 8).
_EX_ROPE = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[1,3,32] x, int64[1,3] pos, float[8,4] cos, float[8,4] sin) => (float[] y) {
  [rope] y = com.microsoft.RotaryEmbedding <num_heads: int = 2, rotary_embedding_dim: int = 8> (x, pos, cos, sin)
}"""

FAMILY = "rotary"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES = (
    *per_version("ROPE-CPU-001", "RotaryEmbedding CPU constructor: rotary_embedding_dim and num_heads in [0, INT_MAX], "
                 "num_heads given with rotary_embedding_dim", _SRC, "cpu-session", "graph", _check, ep="cpu", family=FAMILY, doc=RuleDoc(
        "The CPU RotaryEmbedding constructor reads rotary_embedding_dim and num_heads as ints in "
        "[0, INT_MAX] and needs num_heads when rotary_embedding_dim is set ('num_heads must be "
        "provided if rotary_embedding_dim is specified'); the schema accepts the node, the CPU session fails.",
        "RotaryEmbedding(rotary_embedding_dim=8, ...) without num_heads on a CPU graph",
        "Give num_heads with a partial rotary_embedding_dim (or drop rotary_embedding_dim for a full rotary).",
    ), examples=GraphExamples.edited(_EX_ROPE, ("num_heads: int = 2, ", ""))),
)  # fmt: skip
