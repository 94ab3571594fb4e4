"""GatedDeltaNet schema-inference and CPU kernel-constructor rules (probed on 1.31.1 and 1.32.0).

``GDN-SCHEMA-001`` (any EP, ``[ShapeInferenceError]``), on the shapes ORT infers
(``contracts.shapes``: a producer need not declare one), in inference's order:
``state_update_capacity`` in [0, 8]; key and value together; packed QKV needs ``initial_state``;
packed QKV rank 2 or 3, separate inputs rank 3 or 4; query and value of one rank;
``initial_state`` rank 4; then for packed QKV, with (Hv, dv, dk) from ``initial_state``: positive
head counts and sizes, the width ``2 * Hq * dk + Hv * dv`` for a positive integer Hq, Hv a
multiple of Hq, and for rank-2 packed input the tokens divisible by the batch.

``GDN-CPU-001`` (``ep="cpu"``): the constructor's attribute checks: ``update_rule``,
``gate_activation`` (``qwen`` / ``kda`` aliases), ``gate_lower_bound`` finite and negative,
``beta_activation``, ``chunk_size`` in (0, INT_MAX]. 1.31.1 has no GatedDeltaNet CPU kernel, so
there the rule never applies (the session fails with NOT_IMPLEMENTED first).

``GDN-RUN-001`` (``ep="cpu"``, 1.32.0, a warning): what the CPU kernel's ``Compute`` refuses on the
first run of a session that was created, in its order, from the shapes ORT infers:
``capture_count`` present exactly when ``state_update_capacity`` > 0; ``decay`` present exactly
for the gated rules (``gated``, ``gated_delta``) and ``beta`` exactly for the delta rules
(``delta``, ``gated_delta``); decay ``[...tokens, Hv]`` or per key ``[...tokens, Hv, dk]``; beta
``[...tokens, Hv]``; ``a_log`` and ``dt_bias`` given for a softplus / sigmoid gate (``qwen`` /
``kda``), a_log ``[Hv]``, dt_bias ``[Hv]`` (per-key decay: also ``[Hv, dk]`` / ``[Hv * dk]``);
``capture_count`` ``[batch]``. ``...tokens`` are the query's leading dims, (Hv, dk) and the batch
come from ``initial_state`` (``[B, Hv, dv, dk]``); a check whose dims are not static is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import onnx_ir as ir

from contracts._facts import nodes_of
from contracts._graph import (
    ModelLike,
    as_ir_model,
    attr_float,
    attr_int,
    attr_str,
    input_at,
    node_label,
    per_node,
)
from contracts._rule import GraphExamples, RuleDoc, Violation
from contracts._versions import per_version
from contracts.cpu_kernels import runs_on_cpu
from contracts.op_kernel_rules import inference_and_cpu_checks
from contracts.schema_rules import schema_clean
from contracts.shapes import Shape, Shapes, shapes_of
from q38._ops import GATED_DELTA_NET, MS_DOMAIN

__all__ = ["RULES", "cpu_constructor_problems", "run_time_problem", "schema_problem"]

_P = "GatedDeltaNet: "
_INT_MAX = 2**31 - 1
_SRC = "probed onnxruntime 1.31.1 / 1.32.0 CPU (gated_delta_net.cc, contrib schema inference)"


def schema_problem(node: ir.Node, shapes: Shapes) -> str | None:
    """The first shape-inference failure of one GatedDeltaNet node, or None."""
    capacity = attr_int(node, "state_update_capacity", 0)
    if not 0 <= capacity <= 8:
        return f"{_P}state_update_capacity must be in [0, 8], got {capacity}"
    query, key, value, state = (input_at(node, i) for i in (0, 1, 2, 6))
    if (key is None) != (value is None):
        return f"{_P}key and value must both be present or both be omitted"
    packed = key is None
    if packed and state is None:
        return f"{_P}initial_state is required for packed QKV"
    rank_q = shapes.rank(query)
    if rank_q is not None and rank_q not in ((2, 3) if packed else (3, 4)):
        return f"{_P}packed QKV must have rank 2 or 3, and separate query, key and value inputs must have rank 3 or 4"
    if not packed:
        rank_v = shapes.rank(value)
        if rank_v is not None and rank_v not in (3, 4):
            return f"{_P}packed QKV must have rank 2 or 3, and separate query, key and value inputs must have rank 3 or 4"
        if rank_q is not None and rank_v is not None and rank_q != rank_v:
            return f"{_P}query and value must have the same rank"
    rank_s = shapes.rank(state)
    if state is not None and rank_s is not None and rank_s != 4:
        return f"{_P}initial_state must have rank 4"
    if packed and rank_q is not None and rank_s == 4:
        return _packed_problem(query, state, rank_q, shapes)
    return None


def _packed_problem(query: ir.Value | None, state: ir.Value | None, rank_q: int, shapes: Shapes) -> str | None:
    batch, heads_v, head_v, head_k = (shapes.dim(state, i) for i in range(4))
    width = shapes.dim(query, -1)
    if any(d is not None and d <= 0 for d in (heads_v, head_v, head_k)):
        return f"{_P}packed QKV head counts and head sizes must be positive"
    if width is None or heads_v is None or head_v is None or head_k is None:
        return None
    rest = width - heads_v * head_v
    if rest <= 0 or rest % (2 * head_k):
        return f"{_P}packed QKV last dimension must be 2 * num_heads_q * head_size_qk + num_heads_v * head_size_v"
    heads_q = rest // (2 * head_k)
    if heads_v % heads_q:
        return f"{_P}num_heads_v must be a positive multiple of num_heads_q"
    tokens = shapes.dim(query, 0)
    if rank_q == 2 and tokens is not None and batch is not None and (tokens <= 0 or batch <= 0 or tokens % batch):
        return f"{_P}total_tokens must be divisible by batch, with positive token count and batch size"
    return None


def cpu_constructor_problems(node: ir.Node) -> list[str]:
    """The CPU kernel constructor's refusals of one node (1.32.0), in its order."""
    found = []
    if attr_str(node, "update_rule", "gated_delta") not in {"linear", "gated", "delta", "gated_delta"}:
        found.append("update_rule must be one of: linear, gated, delta, gated_delta")
    if attr_str(node, "gate_activation", "none") not in {"none", "softplus", "qwen", "sigmoid", "kda"}:
        found.append("gate_activation must be one of: none, softplus (alias: qwen), sigmoid (alias: kda)")
    bound = attr_float(node, "gate_lower_bound", -5.0)
    if not (math.isfinite(bound) and bound < 0.0):
        found.append("gate_lower_bound must be finite and negative")
    if attr_str(node, "beta_activation", "none") not in {"none", "sigmoid"}:
        found.append("beta_activation must be one of: none, sigmoid")
    chunk = attr_int(node, "chunk_size", 64)
    if not 0 < chunk <= _INT_MAX:
        found.append(f"chunk_size must be positive and fit in int32, got {chunk}")
    return found


_GATES_WITH_PARAMETERS = frozenset({"softplus", "qwen", "sigmoid", "kda"})
_DECAY_SHAPE = "decay must be [...tokens, num_heads_v] or [...tokens, num_heads_v, head_size_qk]"
_DT_BIAS_SHAPE = ("dt_bias must be [num_heads_v] or (for per-key-dim decay) [num_heads_v, head_size_qk] / "
                  "[num_heads_v * head_size_qk]")  # fmt: skip


def _static(shape: Shape | None) -> tuple[int, ...] | None:
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    return tuple(d for d in shape if isinstance(d, int))


def _presence_problem(node: ir.Node) -> str | None:
    if (input_at(node, 9) is not None) != (attr_int(node, "state_update_capacity", 0) > 0):
        return "capture_count must be present exactly when state_update_capacity is positive"
    rule = attr_str(node, "update_rule", "gated_delta")
    if (input_at(node, 4) is not None) != (rule in {"gated", "gated_delta"}):
        return "decay input presence must match update_rule"
    if (input_at(node, 5) is not None) != (rule in {"delta", "gated_delta"}):
        return "beta input presence must match update_rule"
    return None


def run_time_problem(node: ir.Node, shapes: Shapes) -> str | None:
    """The first refusal of the 1.32.0 CPU ``Compute`` on a node whose session was created, or None."""
    found = _presence_problem(node)
    if found is not None:
        return found
    query, state = input_at(node, 0), _static(shapes.shape(input_at(node, 6)))
    qshape = shapes.shape(query)
    lead = None if qshape is None or not qshape else _static(qshape[:-2] if len(qshape) == 4 else qshape[:-1])
    heads_v, head_k = (state[1], state[3]) if state is not None and len(state) == 4 else (None, None)
    decay, beta = _static(shapes.shape(input_at(node, 4))), _static(shapes.shape(input_at(node, 5)))
    per_key = False
    if decay is not None and lead is not None and heads_v is not None:
        per_key = decay == (*lead, heads_v, head_k)
        if decay != (*lead, heads_v) and not per_key:
            return _DECAY_SHAPE
    if beta is not None and lead is not None and heads_v is not None and beta != (*lead, heads_v):
        return "beta must be [...tokens, num_heads_v]"
    a_log, dt_bias = input_at(node, 7), input_at(node, 8)
    if attr_str(node, "gate_activation", "none") in _GATES_WITH_PARAMETERS:
        if a_log is None or dt_bias is None:
            return "gate_activation=softplus/sigmoid requires a_log and dt_bias"
        a_shape, b_shape = _static(shapes.shape(a_log)), _static(shapes.shape(dt_bias))
        if heads_v is not None and a_shape is not None and a_shape != (heads_v,):
            return "a_log must be [num_heads_v]"
        if heads_v is not None and head_k is not None and b_shape is not None and b_shape not in (
                {(heads_v,), (heads_v, head_k), (heads_v * head_k,)} if per_key else {(heads_v,)}):  # fmt: skip
            return _DT_BIAS_SHAPE
    count = _static(shapes.shape(input_at(node, 9)))
    if count is not None and state is not None and len(state) == 4 and count != (state[0],):
        return "capture_count must be [batch]"
    return None


def _check_run(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    """GDN-RUN-001: a node the CPU kernel constructs but refuses on its first run (a warning)."""
    ir_model = as_ir_model(model)
    if not runs_on_cpu(ir_model, version):
        return []
    shapes = shapes_of(ir_model)

    def one(node: ir.Node) -> Iterable[Violation]:
        if schema_problem(node, shapes) is not None or cpu_constructor_problems(node):
            return  # the session is not created: GDN-SCHEMA-001 / GDN-CPU-001 report it
        text = run_time_problem(node, shapes)
        if text is not None:
            yield Violation("GDN-RUN-001", text, node=node_label(node), severity="warning")

    return per_node([n for n in nodes_of(ir_model, MS_DOMAIN, GATED_DELTA_NET) if schema_clean(ir_model, n)], one)


_check_schema, _check_cpu = inference_and_cpu_checks(
    MS_DOMAIN, GATED_DELTA_NET, inference_rule="GDN-SCHEMA-001", cpu_rule="GDN-CPU-001",
    inference_problem=schema_problem, cpu_problems=cpu_constructor_problems,
)

# The rules' examples (ONNX text, onnx.parser): GatedDeltaNet as the synthetic graphs use it
# (packed QKV, 2 query / 4 value heads, head size 16, fp16 gates).
_EX_GDN = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float16[1,3,128] qkv, float16[1,3,4] decay, float16[1,3,4] beta, float[1,4,16,16] st, float[4] alog, float[4] dtb)
  => (float16[] y, float[] st_o) {
  [gdn] y, st_o = com.microsoft.GatedDeltaNet
      <beta_activation: string = "sigmoid", gate_activation: string = "softplus", qk_l2_norm: int = 1, scale: float = 0.0,
       update_rule: string = "gated_delta">
      (qkv, "", "", "", decay, beta, st, alog, dtb)
}"""

FAMILY = "gated-delta-net"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES = (
    *per_version("GDN-SCHEMA-001", "GatedDeltaNet shape inference: state_update_capacity, key/value "
                 "pairing, initial_state for packed QKV, ranks, packed width and head counts, tokens / batch",
                 _SRC, "cpu-session", "graph", _check_schema, family=FAMILY, doc=RuleDoc(
        "GatedDeltaNet's shape inference (contrib schema) checks state_update_capacity, the "
        "key/value pairing, initial_state for packed QKV, tensor ranks, the packed width against "
        "the head counts and the tokens / batch dimensions; ORT's graph resolve fails otherwise.",
        "GatedDeltaNet(qkv packed with width 100, num_heads=3, head sizes of 32)",
        "Make the packed width equal the sum of the head widths and give the state the declared rank.",
    ), examples=GraphExamples.edited(_EX_GDN, ("float[1,4,16,16] st", "float[1,4,16] st"))),
    *per_version("GDN-CPU-001", "GatedDeltaNet CPU constructor: update_rule, gate_activation, "
                 "gate_lower_bound < 0, beta_activation, chunk_size", _SRC, "cpu-session", "graph",
                 _check_cpu, ep="cpu", family=FAMILY, doc=RuleDoc(
        "The CPU GatedDeltaNet constructor accepts only its update_rule and gate_activation "
        "spellings, gate_lower_bound < 0, a supported beta_activation and chunk_size; a CPU "
        "session fails otherwise.",
        "GatedDeltaNet(gate_lower_bound=0.5, ...) on a CPU graph",
        "Use the supported spellings and a negative gate_lower_bound.",
    ), examples=GraphExamples.edited(_EX_GDN, ("gate_activation: string = \"softplus\"", "gate_activation: string = \"bogus\""))),
    *per_version("GDN-RUN-001", "GatedDeltaNet CPU Compute (first run): capture_count with capacity, decay / "
                 "beta presence per update_rule, decay / beta / a_log / dt_bias / capture_count shapes, a_log and "
                 "dt_bias for a softplus / sigmoid gate", _SRC + "; probed 1.32.0 runs", "run-time", "graph",
                 _check_run, ep="cpu", since="1.32.0", family=FAMILY, doc=RuleDoc(
        "The 1.32.0 CPU GatedDeltaNet kernel checks its optional inputs only in Compute: the session "
        "is created and the first run fails ('capture_count must be present exactly when "
        "state_update_capacity is positive', 'beta input presence must match update_rule', 'decay must "
        "be [...tokens, num_heads_v] ...', 'a_log must be [num_heads_v]', 'dt_bias must be ...', "
        "'capture_count must be [batch]'). A warning: the session is created.",
        "GatedDeltaNet(update_rule='gated_delta', qkv, , , , decay, <no beta>, state, a_log, dt_bias)",
        "Wire the inputs the update_rule and gate_activation need, with the shapes the message names.",
    ), examples=GraphExamples.edited(_EX_GDN, ("update_rule: string = \"gated_delta\"", "update_rule: string = \"linear\""))),
)  # fmt: skip
