"""RNN / GRU / LSTM CPU kernel-constructor rule (probed on 1.31.1 and 1.32.0 CPU).

``RNN-CPU-001`` (``ep="cpu"``): the CPU kernels of the standard recurrent ops (``RNN``, ``GRU``,
``LSTM``, opset 14 on: the ``layout`` attribute) take only ``layout=0``; the schema accepts
``layout=1`` (batch-major), the constructor refuses it. It applies only where the session reaches
kernel creation (``cpu_kernels.runs_on_cpu``).
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

__all__ = ["RULES"]

_SRC = "probed onnxruntime 1.31.1 / 1.32.0 CPU (providers/cpu/rnn: rnn.h, deep_cpu_gru.h, lstm_base.h)"
_TEXT = ("Batchwise recurrent operations (layout == 1) are not supported. If you need support create a github "
         "issue with justification.")  # fmt: skip


def _check(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    ir_model = as_ir_model(model)
    if not runs_on_cpu(ir_model, version):
        return []  # NOT_IMPLEMENTED comes first: no constructor runs
    nodes = [n for op in ("RNN", "GRU", "LSTM") for n in nodes_of(ir_model, "", op) if schema_clean(ir_model, n)]

    def one(node: ir.Node) -> Iterable[Violation]:
        if attr_int(node, "layout", 0) != 0:
            yield Violation("RNN-CPU-001", _TEXT, node=node_label(node))

    return per_node(nodes, one)

# The rule's examples (ONNX text, onnx.parser): one LSTM over X [2, 3, 4], hidden 5, one direction.
_EX_LSTM = """<ir_version: 10, opset_import: ["" : 21]>
g (float[2,3,4] X, float[1,20,4] W, float[1,20,5] R) => (float[] Y) {
  [rnn] Y = LSTM <hidden_size: int = 5, layout: int = 0> (X, W, R)
}"""

FAMILY = "recurrent"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES = (
    *per_version("RNN-CPU-001", "RNN / GRU / LSTM CPU constructor: layout 0 only (no batch-major layout=1)", _SRC,
                 "cpu-session", "graph", _check, ep="cpu", family=FAMILY, doc=RuleDoc(
        "The CPU kernels of RNN, GRU and LSTM take only layout=0 (sequence-major); the schema accepts "
        "layout=1 and the constructor refuses it ('Batchwise recurrent operations (layout == 1) are "
        "not supported.').",
        "LSTM(X, W, R, layout=1) on a CPU graph",
        "Export with layout=0 (transpose the batch-major input before the op).",
    ), examples=GraphExamples.edited(_EX_LSTM, ("layout: int = 0", "layout: int = 1"))),
)  # fmt: skip
