"""QSA op rules: DynamicSparseAttention, PackedSparseAttentionIndexer(+Merge), SparseAttentionIndexer.

Source: ``ort-contract-rules.md`` §2 and ``ort-cpu-capabilities.md`` §1/§8. The 1.32.0 CPU wheel has
no kernel for these ops, but schema inference runs first, so the schema rules (``cpu-session``,
any EP) reject a graph before the ``NOT_IMPLEMENTED`` error. The kernel-constructor rules are
``cuda-only`` (read from older public CUDA source and the onnxruntime-gpu 1.31.1 strings).
Ranks and dims are the ones ORT infers (``contracts.shapes``). Arity, required attributes and
types are the generic schema rules' (``contracts.schema_rules``): a node they reject is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx_ir as ir

from contracts._facts import nodes_of
from contracts._graph import (
    ModelLike,
    attr_float,
    attr_int,
    attr_str,
    has_attr,
    input_at,
    node_label,
    output_at,
    per_node,
)
from contracts._rule import (
    Enforced,
    GraphExamples,
    ModelCheck,
    OrtVersions,
    Rule,
    RuleDoc,
    Violation,
)
from contracts.schema_rules import schema_clean
from contracts.shapes import Shapes, shapes_of
from q38._ops import (
    DYNAMIC_SPARSE_ATTENTION,
    MS_DOMAIN,
    PACKED_SPARSE_ATTENTION_INDEXER,
    PACKED_SPARSE_ATTENTION_INDEXER_MERGE,
    SPARSE_ATTENTION_INDEXER,
)

__all__ = ["RULES"]

_INT_MAX = 2**31 - 1
_PSAI = PACKED_SPARSE_ATTENTION_INDEXER
_SAI = SPARSE_ATTENTION_INDEXER
_DSA = DYNAMIC_SPARSE_ATTENTION
_MERGE = PACKED_SPARSE_ATTENTION_INDEXER_MERGE


def _nodes(model: ModelLike, *op_types: str) -> list[ir.Node]:
    """The nodes of ``op_types`` that pass ORT's schema layer (the ones whose inference runs)."""
    return [n for n in nodes_of(model, MS_DOMAIN, *op_types) if schema_clean(model, n)]


def _indexer_policy(node: ir.Node, p: str) -> str | None:
    """Rules 2C.1-2C.7 / 2E (shared attribute parsing of both indexers)."""
    mode = attr_str(node, "policy_mode", "")
    if mode not in {"qsa", "csa"}:
        return f"{p}policy_mode must be 'qsa' or 'csa', got '{mode}'"
    cr = attr_int(node, "compress_ratio", 0)
    if node.op_type == _PSAI:
        if cr <= 0 or 2 * cr - 1 > _INT_MAX:
            return f"{p}compress_ratio must be positive and produce a generic buffer capacity no greater than INT_MAX, got {cr}"
        capacity = attr_int(node, "state_capacity", 0)
        if not 0 < capacity <= _INT_MAX:
            return f"{p}state_capacity must be in (0, INT_MAX], got {capacity}"
    elif not 0 < cr <= _INT_MAX:
        return f"{p}compress_ratio must be in (0, INT_MAX], got {cr}"
    if mode == "qsa":
        if has_attr(node, "index_topk") or has_attr(node, "head_weight_scale"):
            return f"{p}index_topk and head_weight_scale must not be set when policy_mode is 'qsa'"
        tb = attr_int(node, "token_budget", 0)
        if tb <= 0 or tb % cr or tb + cr - 1 > _INT_MAX:
            return (
                f"{p}policy_mode 'qsa' requires token_budget > 0, divisible by compress_ratio, and a "
                f"selected capacity no greater than INT_MAX, got token_budget={tb} compress_ratio={cr}"
            )
    else:
        if has_attr(node, "token_budget"):
            return f"{p}token_budget must not be set when policy_mode is 'csa'"
        topk = attr_int(node, "index_topk", 0)
        if not 0 < topk <= _INT_MAX:
            return f"{p}policy_mode 'csa' requires index_topk in (0, INT_MAX], got {topk}"
    return None


def _psai_schema(node: ir.Node, shapes: Shapes) -> str | None:
    p = f"{_PSAI}: "
    reason = _indexer_policy(node, p)
    if reason is not None:
        return reason
    mode = attr_str(node, "policy_mode", "")
    cap = attr_int(node, "state_update_capacity", 0)
    if not 0 <= cap <= 8:
        return f"{p}state_update_capacity must be in [0, 8], got {cap}"
    if cap > 0 and input_at(node, 16) is None:
        return f"{p}state_update_capture_count is required when state_update_capacity is positive"
    if mode == "qsa":
        for slot in (8, 9, 10):
            if input_at(node, slot) is not None:
                return f"{p}input {slot} must be omitted when policy_mode is 'qsa'"
        if input_at(node, 11) is not None:
            return f"{p}input 11 (position_ids) must be omitted when policy_mode is 'qsa'"
        if input_at(node, 14) is not None:
            return f"{p}input 14 must be omitted when policy_mode is 'qsa'"
        if output_at(node, 4) is not None:
            return f"{p}output 4 (present_gate_buffer) must be omitted when policy_mode is 'qsa'"
    else:
        for slot in (8, 9, 10, 11, 14):
            if input_at(node, slot) is None:
                return f"{p}input {slot} is required when policy_mode is 'csa'"
    return _rank_problem(node, shapes, p, _PSAI_RANKS, _PSAI_EARLY) or _psai_cache_ranks(node, shapes, p) or \
        _rank_problem(node, shapes, p, _PSAI_RANKS, _PSAI_LATE) or _psai_dims(node, shapes, p, mode)  # fmt: skip


# PackedSparseAttentionIndexer inputs: the rank each must have, and the order inference checks
# them in (probed 1.32.0): 0, 1, 2, 3, 6, 7, then the rotary caches (rank 2 or 3), then 12, 13,
# 15, 16; the dims after every rank (_psai_dims).
_PSAI_RANKS = {0: (2,), 1: (2,), 2: (1,), 3: (1,), 6: (1,), 7: (1,), 12: (3,), 13: (3,), 15: (2,), 16: (1,)}
_PSAI_EARLY, _PSAI_LATE = (0, 1, 2, 3, 6, 7), (12, 13, 15, 16)


def _psai_cache_ranks(node: ir.Node, shapes: Shapes, p: str) -> str | None:
    for slot, name in ((4, "cos_cache"), (5, "sin_cache")):
        rank = shapes.rank(input_at(node, slot))
        if rank is not None and rank not in (2, 3):
            return f"{p}{name} must have rank 2 or 3, got rank {rank}"
    return None


def _psai_dims(node: ir.Node, shapes: Shapes, p: str, mode: str) -> str | None:
    """The dim checks of PackedSparseAttentionIndexer inference, in ORT's order.

    Probed on 1.32.0, one fault at a time and every pair of faults.
    """
    dim = shapes.dim
    query, key, pks, pkv, psl = (input_at(node, i) for i in (0, 1, 12, 13, 15))
    head = dim(input_at(node, 2), 0)
    batch = dim(pks, 0)
    width = None if head is None else head * (2 if mode == "csa" else 1)
    cr = attr_int(node, "compress_ratio", 0)
    checks: tuple[tuple[bool, str], ...] = (
        (_differ(dim(key, 0), dim(query, 0)), "key dimension 0 must equal query dimension 0"),
        (_differ(head, dim(input_at(node, 3), 0)), "query_norm_weight and key_norm_weight dimensions must match"),
        (_differ(dim(input_at(node, 7), 0), batch), "past_sequence_lengths dimension 0 must equal the state batch dimension"),
        (_differ(dim(pkv, 0), batch), "past_key_state and past_kv_buffer batch dimensions must match"),
        (_differ(dim(psl, 0), batch), "past_state_lengths dimension 0 must equal the state batch dimension"),
        (_differ(dim(pks, 1), attr_int(node, "state_capacity", 0)),
         f"past_key_state dimension 1 must equal state_capacity ({attr_int(node, 'state_capacity', 0)}), got {dim(pks, 1)}"),
        (_differ(dim(pks, 2), head), "past_key_state dimension 2 must equal head_size"),
        (_differ(dim(pkv, 1), 2 * cr - 1),
         f"past_kv_buffer dimension 1 must equal 2 * compress_ratio - 1 ({2 * cr - 1}), got {dim(pkv, 1)}"),
        (_differ(dim(psl, 1), 2), f"past_state_lengths dimension 1 must equal 2 (2), got {dim(psl, 1)}"),
        (_differ(dim(input_at(node, 6), 0), None if batch is None else batch + 1),
         "cumulative_sequence_lengths dimension 0 must equal batch_size + 1"),
        (_differ(dim(key, 1), width), f"key dimension 1 must equal the policy-specific width ({width}), got {dim(key, 1)}"),
        (_differ(dim(pkv, 2), width), f"past_kv_buffer dimension 2 must equal the policy-specific width ({width}), got {dim(pkv, 2)}"),
    )  # fmt: skip
    for failed, text in checks:
        if failed:
            return p + text
    return _psai_rotary(node, shapes, p, head, batch) or _psai_query_width(dim(query, 1), head, p)


def _differ(got: int | None, want: int | None) -> bool:
    return got is not None and want is not None and got != want


def _psai_rotary(node: ir.Node, shapes: Shapes, p: str, head: int | None, batch: int | None) -> str | None:
    cos, sin = input_at(node, 4), input_at(node, 5)
    rank, rank_sin = shapes.rank(cos), shapes.rank(sin)
    if rank is None or rank_sin is None:
        return None
    if rank != rank_sin:
        return f"{p}cos_cache and sin_cache ranks must match"
    if rank == 3 and _differ(shapes.dim(cos, 0), batch):
        return f"{p}batched rotary cache dimension 0 must equal batch_size"
    positions, rotary = shapes.dim(cos, -2), shapes.dim(cos, -1)
    if positions is not None and positions <= 0:
        return f"{p}rotary cache max_position must be > 0"
    if rotary is not None and (rotary <= 0 or rotary % 2):
        return f"{p}invalid rotary cache width {rotary}"
    if rotary is not None and head is not None and rotary > head:
        return f"{p}rotary cache width is incompatible with head_size"
    if any(_differ(shapes.dim(cos, i), shapes.dim(sin, i)) for i in range(rank)):  # static dims only, as ORT
        return f"{p}cos_cache and sin_cache dimensions must match"
    return None


def _psai_query_width(width: int | None, head: int | None, p: str) -> str | None:
    if width is None or head is None or head <= 0:
        return None
    if width % head:
        return f"{p}query width must be divisible by head_size"
    if width // head < 1:
        return f"{p}query width must contain at least one query head, got {width // head}"
    return None


def _rank_problem(node: ir.Node, shapes: Shapes, p: str, ranks: Mapping[int, tuple[int, ...]],
                  slots: tuple[int, ...]) -> str | None:  # fmt: skip
    """``input <i> must have rank <r>, got rank <n>`` for the first listed slot of the wrong rank."""
    for slot in slots:
        rank = shapes.rank(input_at(node, slot))
        if rank is None or rank in ranks[slot]:
            continue
        want = " or ".join(str(r) for r in ranks[slot])
        return f"{p}input {slot} must have rank {want}, got rank {rank}"
    return None


# SparseAttentionIndexer inputs: the rank each must have (probed 1.32.0), and the order inference
# checks them in: 1, 3, 4, 5, 0, 2 before the width checks, 6..13 after them.
_SAI_RANKS = {0: (3,), 1: (3,), 2: (1,), 3: (1,), 4: (2, 3), 5: (2, 3), 6: (2,), 7: (3,), 8: (3,), 9: (2,),
              10: (3,), 11: (2,), 12: (1,), 13: (4,)}  # fmt: skip
_SAI_EARLY, _SAI_LATE = (1, 3, 4, 5, 0, 2), (6, 7, 8, 9, 10, 11, 12, 13)
_SAI_POLICY_INPUTS = (8, 9, 10, 11, 13)  # forbidden in qsa, required in csa


def _sai_schema(node: ir.Node, shapes: Shapes) -> str | None:
    """§2E: the first failure of SparseAttentionIndexer's schema checks, in ORT's order.

    Probed on 1.32.0: checker arity, attributes, inputs/outputs by policy, ranks, widths,
    past_proj_buffer (csa).
    """
    p = f"{_SAI}: "
    reason = _indexer_policy(node, p)
    if reason is not None:
        return reason
    mode = attr_str(node, "policy_mode", "")
    if mode == "csa" and input_at(node, 1) is None:
        return f"{p}input 1 is required for every policy_mode"
    for slot in _SAI_POLICY_INPUTS:
        present = input_at(node, slot) is not None
        if mode == "qsa" and present:
            return f"{p}input {slot} must be omitted when policy_mode is 'qsa'"
        if mode == "csa" and not present:
            return f"{p}input {slot} is required when policy_mode is 'csa'"
    want_out = 2 if mode == "qsa" else 3
    if len(node.outputs) != want_out:
        return f"{p}policy_mode '{mode}' requires exactly {want_out} declared outputs, got {len(node.outputs)}"
    reason = _rank_problem(node, shapes, p, _SAI_RANKS, _SAI_EARLY)
    if reason is not None:
        return reason
    width = shapes.dim(input_at(node, 0), 2) if shapes.rank(input_at(node, 0)) == 3 else None
    hs = shapes.dim(input_at(node, 2), 0) if shapes.rank(input_at(node, 2)) == 1 else None
    if width is not None and width <= 0:
        return f"{p}query width must be > 0, got {width}"
    if width is not None and width > _INT_MAX:
        return f"{p}query width must be no greater than INT_MAX"
    if hs is not None and hs <= 0:
        return f"{p}head_size must be > 0, got {hs}"
    if width is not None and hs is not None:
        if width % hs:
            return f"{p}query width must be divisible by head_size"
        if input_at(node, 1) is None and width // hs < 2:
            return f"{p}packed QK input must contain at least one query head and one key"
    reason = _rank_problem(node, shapes, p, _SAI_RANKS, _SAI_LATE)
    if reason is not None:
        return reason
    proj = input_at(node, 13)
    if mode == "csa" and shapes.rank(proj) == 4:
        d0, d1, d2, d3 = (shapes.dim(proj, i) for i in range(4))
        batch = shapes.dim(input_at(node, 0), 0)
        cr = attr_int(node, "compress_ratio", 0)
        if d0 is not None and d0 != 2:
            return f"{p}past_proj_buffer dimension 0 must be 2, got {d0}"
        if d1 is not None and batch is not None and d1 != batch:
            return f"{p}past_proj_buffer dimension 1 must equal batch_size"
        if d3 is not None and hs is not None and d3 != 2 * hs:
            return f"{p}past_proj_buffer dimension 3 must equal 2 * head_size"
        if d2 is not None and not 0 <= d2 < 2 * cr:
            return f"{p}past_proj_buffer sequence length must be in [0, 2 * compress_ratio), got {d2}"
    return None


_IS_INPUTS = (18, 19, 20, 21)  # indexshare_mode, merged_indices, merged_counts, merged_status
_IS_RANKS = {18: (1,), 19: (2,), 20: (1,), 21: (1,)}
# indexshare_state_policy values accepted per policy_mode (qsa probed on 1.32.0: 'advance' and
# anything else fail; csa not probed: every documented value is accepted here)
_IS_STATE_POLICIES = {"qsa": frozenset({"default", "hold"}), "csa": frozenset({"default", "hold", "advance"})}


def _psai_indexshare(node: ir.Node, shapes: Shapes) -> str | None:
    """§2C.11 (1.32.0 only): the IndexShare checks of PackedSparseAttentionIndexer, in ORT's order.

    Probed: state policy, the IndexShare input group, max_output_entries, the status output,
    then the group's shapes and the selection budget.
    """
    p = f"{_PSAI}: "
    mode = attr_str(node, "policy_mode", "")
    if mode not in _IS_STATE_POLICIES:
        return None  # QSA-PSAI-001 reports it
    state_policy = attr_str(node, "indexshare_state_policy", "") if has_attr(node, "indexshare_state_policy") else None
    if state_policy is not None and state_policy not in _IS_STATE_POLICIES[mode]:
        return f"{p}invalid indexshare_state_policy for policy_mode"
    present = [input_at(node, slot) is not None for slot in _IS_INPUTS]
    if any(present) and not all(present):
        return f"{p}all IndexShare inputs must be provided together"
    enabled = all(present)
    entries = attr_int(node, "max_output_entries", 0)
    if (enabled and entries <= 0) or (not enabled and entries != 0):
        return f"{p}IndexShare requires a positive max_output_entries"
    if enabled != (output_at(node, 7) is not None):
        return f"{p}IndexShare requires its status output"
    if not enabled:
        return None
    reason = _rank_problem(node, shapes, p, _IS_RANKS, _IS_INPUTS)
    if reason is not None:
        return reason
    mode_dim = shapes.dim(input_at(node, 18), 0)
    if mode_dim is not None and mode_dim != 1:
        return f"{p}indexshare_mode must have shape {{1}} (1), got {mode_dim}"
    merged = input_at(node, 19)
    rows, width = shapes.dim(merged, 0), shapes.dim(merged, 1)
    if width is not None and width != entries:
        return f"{p}merged_indices width must equal max_output_entries ({entries}), got {width}"
    for slot, name in ((20, "merged_counts"), (21, "merged_status")):
        other = shapes.dim(input_at(node, slot), 0)
        if rows is not None and other is not None and other != rows:
            return f"{p}{name} must match merged_indices rows"
    cu = shapes.dim(input_at(node, 6), 0)
    if rows is not None and rows != 0 and cu is not None and rows != cu - 1:
        return f"{p}Nonempty merged_indices must have one row per request"
    if mode == "qsa":
        budget = attr_int(node, "token_budget", 0) + attr_int(node, "compress_ratio", 0) - 1
        if entries < budget:
            return f"{p}max_output_entries is smaller than the selection budget"
    return None


def _dsa_schema(node: ir.Node, shapes: Shapes) -> str | None:
    heads = attr_int(node, "num_heads", 0)
    kv = attr_int(node, "kv_num_heads", 0)
    if heads <= 0:
        return "num_heads must be a positive int"
    if kv <= 0 or heads % kv:
        return "kv_num_heads must be positive and divide num_heads"
    rank = shapes.rank(input_at(node, 0))
    if rank is not None and rank != 3:
        return "The query input shall be 3 dimensions"
    width = shapes.dim(input_at(node, 0), 2)
    if input_at(node, 1) is None and width is not None and width % (heads + 2 * kv):  # packed QKV (probed)
        return "Packed QKV hidden size must be divisible by num_heads + 2 * kv_num_heads"
    return None


_MERGE_RANKS = {1: (1,), 2: (1,), 3: (1,), 4: (1,), 5: (2,), 6: (1,)}


def _merge_schema(node: ir.Node, shapes: Shapes) -> str | None:
    """§2F: the first schema failure of PackedSparseAttentionIndexerMerge, probed on 1.32.0.

    Checks attributes, ranks and inputs by policy; arity and the int32 types are the generic
    schema rules'.
    """
    entries = attr_int(node, "max_output_entries", 0)
    mode = attr_str(node, "policy_mode", "")
    if not 1 <= entries <= 2**30 or mode not in {"append_range", "append_indices"}:
        return "Invalid PackedSparseAttentionIndexerMerge policy or capacity"
    base = shapes.rank(input_at(node, 0))
    if base is not None and base != 2:
        return "base_indices must have rank 2"
    for slot, ranks in _MERGE_RANKS.items():
        rank = shapes.rank(input_at(node, slot))
        if rank is not None and rank not in ranks:
            return f"Merge input {slot} must have rank {ranks[0]}"
    has = [input_at(node, slot) is not None for slot in range(7)]
    if mode == "append_range":
        ok = has[3] and has[4] and not has[5] and not has[6]
    else:
        ok = has[5] and has[6] and not has[3] and not has[4]
    return None if ok else "Merge inputs must match policy_mode"


_SCHEMAS: dict[str, Callable[[ir.Node, Shapes], str | None]] = {
    _PSAI: _psai_schema, _SAI: _sai_schema, _DSA: _dsa_schema, _MERGE: _merge_schema,
}  # fmt: skip


def _schema_rule(rule_id: str, op_type: str) -> ModelCheck:
    def check(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
        shapes = shapes_of(model)

        def one(node: ir.Node) -> list[Violation]:
            reason = _SCHEMAS[op_type](node, shapes)
            return [] if reason is None else [Violation(rule_id, reason, node=node_label(node))]

        return per_node(_nodes(model, op_type), one)

    return check


def _is_rule(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
    shapes = shapes_of(model)

    def one(node: ir.Node) -> list[Violation]:
        if _psai_schema(node, shapes) is not None:
            return []  # the policy rules fail first
        reason = _psai_indexshare(node, shapes)
        return [] if reason is None else [Violation("QSA-PSAI-002", reason, node=node_label(node))]

    return per_node(_nodes(model, _PSAI), one)


def dsa_cuda_problems(node: ir.Node) -> list[str]:
    """§2B: the CUDA constructor's refusals of one DynamicSparseAttention node, all of them.

    The texts are onnxruntime-gpu's; ORT reports the first.
    """
    p = f"{_DSA}: "
    reasons = []
    mode = attr_str(node, "attention_mode", "selected_only")
    source = attr_str(node, "selected_kv_source", "main")
    if mode not in {"selected_only", "local_plus_selected"}:
        reasons.append(f"{p}attention_mode must be selected_only or local_plus_selected.")
    if source not in {"main", "auxiliary"}:
        reasons.append(f"{p}selected_kv_source must be main or auxiliary.")
    if attr_int(node, "is_causal", 1) != 1:
        reasons.append(f"{_DSA} only supports is_causal=1.")
    window = attr_int(node, "local_window_size", -1)
    if window != -1 and not 1 <= window <= _INT_MAX:
        reasons.append(f"{p}local_window_size must be -1 or a positive int.")
    if not 0 <= attr_int(node, "rotary_offset", 0) <= _INT_MAX:
        reasons.append(f"{p}rotary_offset must be a nonnegative int.")
    for flag in ("do_rotary", "rotary_interleaved", "smooth_softmax", "auxiliary_kv_shared"):
        if attr_int(node, flag, 0) not in {0, 1}:
            reasons.append(f"{p}{flag} must be 0 or 1.")
    if (mode, source) not in {("selected_only", "main"), ("local_plus_selected", "auxiliary")} and not reasons:
        reasons.append(f"{p}supported mode/source combinations are selected_only with main and local_plus_selected with auxiliary.")
    return reasons


def _check_dsa_cuda(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
    """§2B constructor rules (CUDA-only; the message texts of the onnxruntime-gpu strings)."""
    shapes = shapes_of(model)

    def one(node: ir.Node) -> list[Violation]:
        if _dsa_schema(node, shapes) is not None:
            return []
        return [Violation("QSA-DSA-CUDA-001", r, node=node_label(node)) for r in dsa_cuda_problems(node)]

    return per_node(_nodes(model, _DSA), one)


def _check_indexer_cuda(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
    """§2D: the indexer constructors add epsilon >= 0 (0 itself is accepted)."""

    def one(node: ir.Node) -> list[Violation]:
        eps = attr_float(node, "epsilon", 1e-6)
        if eps >= 0:
            return []
        return [Violation("QSA-INDEXER-CUDA-001", f"{node.op_type}: epsilon must be >= 0, got {eps:g}", node=node_label(node))]

    return per_node(_nodes(model, _PSAI, _SAI), one)


_C: Enforced = "cpu-session"
_S = "ort-contract-rules.md §2"

# The rules' examples (ONNX text, onnx.parser): one node of each op, fp16, shapes its inference takes.
_EX_PSAI = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float16[4,64] q, float16[4,32] k, float16[32] qn, float16[32] kn, float16[16,32] cos, float16[16,32] sin,
   int32[2] cu, int32[1] ps, float16[1,64,32] pks, float16[1,7,32] pkv, int32[1,2] psl)
  => (int32[] si, int32[] sc, float16[] pks_o, float16[] pkv_o, int32[] psl_o) {
  [idx] si, sc, pks_o, pkv_o, "", psl_o = com.microsoft.PackedSparseAttentionIndexer
      <compress_ratio: int = 4, policy_mode: string = "qsa", state_capacity: int = 64, token_budget: int = 16>
      (q, k, qn, kn, cos, sin, cu, ps, "", "", "", "", pks, pkv, "", psl)
}"""
# IndexShare: inputs 18-21 (im, mi, mc, ms) wired, output 7 (is_o) too.
_EX_PSAI_INDEXSHARE = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float16[4,64] q, float16[4,32] k, float16[32] qn, float16[32] kn, float16[16,32] cos, float16[16,32] sin,
   int32[2] cu, int32[1] ps, float16[1,64,32] pks, float16[1,7,32] pkv, int32[1,2] psl,
   int32[1] im, int32[1,24] mi, int32[1] mc, int32[1] ms)
  => (int32[] si, int32[] sc, float16[] pks_o, float16[] pkv_o, int32[] psl_o, int32[] is_o) {
  [idx] si, sc, pks_o, pkv_o, "", psl_o, "", is_o = com.microsoft.PackedSparseAttentionIndexer
      <compress_ratio: int = 4, max_output_entries: int = 24, policy_mode: string = "qsa", state_capacity: int = 64,
       token_budget: int = 16>
      (q, k, qn, kn, cos, sin, cu, ps, "", "", "", "", pks, pkv, "", psl, "", "", im, mi, mc, ms)
}"""
_EX_SAI = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float16[1,4,64] q, float16[1,4,32] k, float16[32] qn, float16[32] kn, float16[16,16] cos, float16[16,16] sin,
   float16[1,8,32] pk) => (int32[] si, float16[] pk_o) {
  [sai] si, pk_o = com.microsoft.SparseAttentionIndexer
      <compress_ratio: int = 4, policy_mode: string = "qsa", token_budget: int = 16> (q, k, qn, kn, cos, sin, "", pk)
}"""
_EX_DSA = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float16[1,2,64] q, int32[2,4] si, int32[2] sc, int32[1] sk, int32[1] tsl) => (float16[] out) {
  [dsa] out = com.microsoft.DynamicSparseAttention <is_causal: int = 1, kv_num_heads: int = 2, num_heads: int = 4>
      (q, "", "", "", "", "", "", si, sc, sk, tsl)
}"""
_EX_MERGE = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (int32[2,16] bi, int32[2] bc, int32[2] br, int32[2] rs, int32[2] re) => (int32[] o_i, int32[] o_c, int32[] o_s) {
  [mg] o_i, o_c, o_s = com.microsoft.PackedSparseAttentionIndexerMerge
      <max_output_entries: int = 32, policy_mode: string = "append_range"> (bi, bc, br, rs, re)
}"""

FAMILY = "qsa"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES: tuple[Rule, ...] = (
    Rule("QSA-PSAI-001", "PackedSparseAttentionIndexer schema: policy, compress_ratio, state_capacity, "
         "qsa/csa attributes, policy inputs/outputs, key width, past_kv_buffer", _S + "C; probed 1.32.0",
         _C, "graph", _schema_rule("QSA-PSAI-001", _PSAI), family=FAMILY, doc=RuleDoc(
        "ORT's PackedSparseAttentionIndexer schema checks its attributes and wiring at session "
        "creation: policy and compress_ratio values, state_capacity, the qsa/csa attribute groups, "
        "the inputs and outputs each policy needs, the key width and past_kv_buffer; a mismatch "
        "fails the node with the schema's message.",
        "PackedSparseAttentionIndexer(..., policy='topk', compress_ratio=0)",
        "Set the attributes and inputs the policy requires (the message names the one at fault).",
    ), examples=GraphExamples.edited(_EX_PSAI, ("policy_mode: string = \"qsa\"", "policy_mode: string = \"bogus\""))),
    Rule("QSA-PSAI-002", "PackedSparseAttentionIndexer IndexShare: state policy, inputs 18-21 together, "
         "max_output_entries, status output, shapes, selection budget", _S + "C.11; probed 1.32.0",
         _C, "graph", _is_rule, OrtVersions(since="1.32.0"), family=FAMILY, doc=RuleDoc(
        "With IndexShare (ORT 1.32.0) the indexer needs the state policy, inputs 18-21 given "
        "together, max_output_entries, the status output, consistent shapes and a positive "
        "selection budget; the schema refuses the node otherwise.",
        "PackedSparseAttentionIndexer with input 18 wired and inputs 19-21 empty",
        "Wire the IndexShare inputs 18-21 together with the state policy, or none of them.",
    ), examples=GraphExamples.edited(_EX_PSAI_INDEXSHARE, (", int32[] is_o)", ")"), (", \"\", is_o =", " ="))),
    Rule("QSA-SAI-001", "SparseAttentionIndexer schema: arity, policy and attribute rules, inputs and "
         "outputs by policy, ranks, query width / head_size, past_proj_buffer", _S + "E; probed 1.32.0",
         _C, "graph", _schema_rule("QSA-SAI-001", _SAI), family=FAMILY, doc=RuleDoc(
        "ORT's SparseAttentionIndexer schema checks its arity, policy and attribute rules, the "
        "inputs and outputs by policy, tensor ranks, the query width against head_size and the "
        "past_proj_buffer; the session fails with the schema's message.",
        "SparseAttentionIndexer(query: [B, S, 100]) with head_size=64",
        "Make the query width a multiple of head_size and wire the inputs the policy needs.",
    ), examples=GraphExamples.edited(_EX_SAI, ("token_budget: int = 16", "token_budget: int = 6"))),
    Rule("QSA-DSA-001", "DynamicSparseAttention schema: num_heads, kv_num_heads divides num_heads, "
         "rank-3 query", _S + "A; probed 1.32.0", _C, "graph", _schema_rule("QSA-DSA-001", _DSA), family=FAMILY, doc=RuleDoc(
        "ORT's DynamicSparseAttention schema requires num_heads > 0, kv_num_heads dividing "
        "num_heads and a rank-3 query; session creation fails otherwise.",
        "DynamicSparseAttention(num_heads=8, kv_num_heads=3, ...)",
        "Choose kv_num_heads dividing num_heads and feed a [batch, seq, hidden] query.",
    ), examples=GraphExamples.edited(_EX_DSA, ("kv_num_heads: int = 2", "kv_num_heads: int = 3"))),
    Rule("QSA-MERGE-001", "PackedSparseAttentionIndexerMerge schema: capacity, policy, inputs by "
         "policy", _S + "F", _C, "graph", _schema_rule("QSA-MERGE-001", _MERGE), OrtVersions(since="1.32.0"), family=FAMILY, doc=RuleDoc(
        "ORT 1.32.0's PackedSparseAttentionIndexerMerge schema checks the capacity, the policy "
        "and the inputs each policy needs.",
        "PackedSparseAttentionIndexerMerge(capacity=0, ...)",
        "Give a positive capacity and the inputs of the chosen policy.",
    ), examples=GraphExamples.edited(_EX_MERGE, ("max_output_entries: int = 32", "max_output_entries: int = 0"))),
    Rule("QSA-DSA-CUDA-001", "DynamicSparseAttention CUDA constructor: modes, is_causal, window, "
         "rotary_offset, 0/1 flags", _S + "B (dynamic_sparse_attention.cc @0c87280b)", "cuda-only",
         "graph", _check_dsa_cuda, ep="cuda", family=FAMILY, doc=RuleDoc(
        "The CUDA DynamicSparseAttention kernel constructor (dynamic_sparse_attention.cc) accepts "
        "only its supported modes, is_causal=1, a valid window and rotary_offset, and 0/1 flags; "
        "on a CUDA session the node fails to instantiate. The CPU wheel never checks it.",
        "DynamicSparseAttention(is_causal=0, ...) assigned to CUDA",
        "Use the supported mode and flags (is_causal=1) for nodes that run on CUDA.",
    ), examples=GraphExamples.edited(_EX_DSA, ("is_causal: int = 1", "is_causal: int = 0"))),
    Rule("QSA-INDEXER-CUDA-001", "indexer CUDA constructors: epsilon >= 0", _S + "D", "cuda-only",
         "graph", _check_indexer_cuda, ep="cuda", family=FAMILY, doc=RuleDoc(
        "The CUDA constructors of the QSA indexers require epsilon >= 0 ('OP: epsilon must be >= "
        "0, got E'); only a CUDA session checks it.",
        "PackedSparseAttentionIndexer(epsilon=-1e-6, ...) on CUDA",
        "Set epsilon to a non-negative value (the exporter's default is 1e-6).",
    ), examples=GraphExamples.edited(_EX_PSAI, ("compress_ratio", "epsilon: float = 0.0, compress_ratio"), ("epsilon: float = 0.0", "epsilon: float = -1.0"))),
)  # fmt: skip
