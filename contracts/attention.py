"""GroupQueryAttention schema-inference and CPU kernel-constructor rules (probed on 1.32.0 CPU).

``GQA-SCHEMA-001`` (any EP), on the shapes ORT infers: the query has rank 3; a packed query (of
known rank) has positive ``num_heads`` and ``kv_num_heads`` and a width that divides by
``num_heads + 2 * kv_num_heads``; an ``output_qk`` output needs ``qk_output`` (when
the node has a ``past_key``: inference checks it there);
``past_key`` has rank 4 and comes with ``past_value`` (inference reads input 4's type). ``GQA-CPU-001`` (``ep="cpu"``): ``num_heads``
and ``kv_num_heads`` positive, ``causal`` 0 or 1, ``local_window_size`` -1 when not causal,
``sliding_window_cache`` only with a positive window, KV quantization types NONE / PER_TENSOR /
PER_CHANNEL (case-insensitive). Head counts that do not divide are refused only when the model
runs.
"""

from __future__ import annotations

import onnx_ir as ir

from contracts._graph import (
    attr_int,
    attr_str,
    input_at,
    output_at,
)
from contracts._rule import GraphExamples, RuleDoc
from contracts._versions import per_version
from contracts.op_kernel_rules import inference_and_cpu_checks
from contracts.shapes import Shapes
from q38._ops import GROUP_QUERY_ATTENTION, MS_DOMAIN

__all__ = ["RULES", "cpu_constructor_problems", "schema_problem"]

_SRC = "probed onnxruntime 1.32.0 CPU (group_query_attention.cc, gqa_attention_base.h, bert_defs inference)"
_KV_QUANT = frozenset({"NONE", "PER_TENSOR", "PER_CHANNEL"})


def schema_problem(node: ir.Node, shapes: Shapes) -> str | None:
    """GQA-SCHEMA-001: the first refusal of GroupQueryAttention's shape inference, ORT's text.

    None when inference accepts the node (or the dims it checks are not known statically).
    """
    query = input_at(node, 0)
    rank = shapes.rank(query)
    if rank is not None and rank != 3:
        return "Inputs 0 (query) shall be 3 dimensions"
    if input_at(node, 1) is None and rank == 3:  # a packed query, read once its rank is known
        heads, kv_heads = attr_int(node, "num_heads", 0), attr_int(node, "kv_num_heads", 0)
        if heads <= 0 or kv_heads <= 0:  # before the CPU constructor's check, and on every EP
            return "num_heads and kv_num_heads must be positive."
        width = shapes.dim(query, 2)
        if width is not None and width % (heads + 2 * kv_heads):
            return "Packed query hidden size must be divisible by the grouped head count."
    if input_at(node, 3) is not None and len(node.outputs) > 2:
        # ORT's order where inference reads the past (probed 1.31.1 and 1.32.0): past_value's type,
        # past_key's rank, then output_qk (without past_key an output_qk without qk_output passes).
        # It reads the past only for a node with present outputs (more than two output slots): with
        # one or two, a past_key without past_value or of rank 3 loads.
        if input_at(node, 4) is None:
            return "Input 4 expected to have type but instead is null"
        past_rank = shapes.rank(input_at(node, 3))
        if past_rank is not None and past_rank != 4:
            return "The past_key input shall be 4 dimensions"
        if output_at(node, 3) is not None and attr_int(node, "qk_output", 0) == 0:
            return "Output QK buffer was provided but qk_output attribute was not configured"
    return None


def cpu_constructor_problems(node: ir.Node) -> list[str]:
    """GQA-CPU-001: every refusal of the CPU kernel constructor, in its order (ORT reports the first).

    The texts are ORT's (``ORT_ENFORCE`` conditions included); only attributes are read.
    """
    found = []
    if attr_int(node, "num_heads", 0) <= 0:
        found.append('info.GetAttr("num_heads", &num_heads).IsOK() && num_heads > 0 was false.')
    if attr_int(node, "kv_num_heads", 0) <= 0:
        found.append('info.GetAttr("kv_num_heads", &kv_num_heads).IsOK() && kv_num_heads > 0 was false.')
    causal = attr_int(node, "causal", 1)
    window = attr_int(node, "local_window_size", -1)
    if causal not in {0, 1}:
        found.append("causal must be 0 or 1.")
    elif causal == 0 and window != -1:
        found.append("GroupQueryAttention (CPU): local_window_size must be -1 when causal is 0.")
    if attr_int(node, "sliding_window_cache", 0) and window <= 0:
        found.append("GroupQueryAttention (CPU): sliding_window_cache=1 requires local_window_size > 0.")
    for name in ("k_quant_type", "v_quant_type"):
        kind = attr_str(node, name, "NONE").upper()
        if kind not in _KV_QUANT:
            found.append(f"Invalid KV quantization type: '{kind}'. Valid values are: NONE, PER_TENSOR, PER_CHANNEL.")
    return found


_check_schema, _check_cpu = inference_and_cpu_checks(
    MS_DOMAIN, GROUP_QUERY_ATTENTION, inference_rule="GQA-SCHEMA-001", cpu_rule="GQA-CPU-001",
    inference_problem=schema_problem, cpu_problems=cpu_constructor_problems,
)

# The rules' examples (ONNX text, onnx.parser): GroupQueryAttention, 2 query heads over 1 KV head.
_EX_GQA = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[1,3,32] q, float[1,3,16] k, float[1,3,16] v, int32[1] sk, int32[1] tsl) => (float[] o, float[] pk, float[] pv) {
  [gqa] o, pk, pv = com.microsoft.GroupQueryAttention <kv_num_heads: int = 1, num_heads: int = 2>
      (q, k, v, "", "", sk, tsl)
}"""

FAMILY = "attention"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES = (
    *per_version("GQA-SCHEMA-001", "GroupQueryAttention inference: rank-3 query, packed width divisible "
                 "by the grouped head count, rank-4 past_key with past_value", _SRC, "cpu-session", "graph",
                 _check_schema, family=FAMILY, doc=RuleDoc(
        "GroupQueryAttention's inference (bert_defs) requires a rank-3 query, a packed width "
        "divisible by num_heads + 2 x kv_num_heads and a rank-4 past_key given with past_value.",
        "GroupQueryAttention(query: [B, S, 100], num_heads=8, kv_num_heads=2) with packed QKV",
        "Make the packed width (num_heads + 2 kv_num_heads) x head_size and give past_key and past_value together.",
    ), examples=GraphExamples.edited(_EX_GQA, ("float[1,3,32] q", "float[3,32] q"))),
    *per_version("GQA-CPU-001", "GroupQueryAttention CPU constructor: positive head counts, causal 0/1, "
                 "window and sliding-window cache, KV quantization type", _SRC, "cpu-session", "graph",
                 _check_cpu, ep="cpu", family=FAMILY, doc=RuleDoc(
        "The CPU GroupQueryAttention constructor requires positive head counts, causal 0/1, a "
        "valid local window with a sliding-window cache, and a supported KV quantization type.",
        "GroupQueryAttention(num_heads=0, ...) on a CPU graph",
        "Use positive num_heads / kv_num_heads and the documented window and quantization settings.",
    ), examples=GraphExamples.edited(_EX_GQA, ("num_heads: int = 2", "num_heads: int = 0"))),
)  # fmt: skip
