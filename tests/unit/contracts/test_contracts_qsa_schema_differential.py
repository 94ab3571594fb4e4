"""Differential tests: SparseAttentionIndexer, PackedSparseAttentionIndexerMerge and IndexShare
schema rules (ort-contract-rules.md §2E, §2F, §2C.11) against real CPU sessions.

Invariants guarded:
- SparseAttentionIndexer (QSA-SAI-001): every single-fault case (checker arity / empty required
  input, inputs and outputs by policy, ranks, query width and head_size, packed QK, csa
  past_proj_buffer dims) and every accepted variant gives the verdict of a real session, and
  ORT's text contains the contract's message; the expected verdicts are pinned (a case that
  both sides accept or reject for the wrong reason still fails on the rule id list).
- Multi-fault cases give ORT's first message (the contract checks in ORT's probed order).
- PackedSparseAttentionIndexerMerge (QSA-MERGE-001, since 1.32.0): attributes, ranks, inputs by
  policy (append_indices forbids the range inputs), int32 only, three outputs; on 1.31.1 the op
  has no schema and ORT-SCHEMA-001 says so in ORT's words.
- IndexShare (QSA-PSAI-002, since 1.32.0): inputs 18-21 together, positive max_output_entries
  exactly when they are present, the status output, indexshare_state_policy per policy_mode,
  the group's shapes and the selection budget; on 1.31.1 ORT-SCHEMA-003/-004 (unknown attribute,
  too many inputs/outputs) carry ORT's verdict instead.
A NOT_IMPLEMENTED error (no CPU kernel for these ops) is ORT-KERNEL-001 after every schema check
passed: the schema verdicts are pinned without it (``before_kernels``), ``assert_agrees`` holds it.
"""

from __future__ import annotations

from typing import Any

import pytest
from onnx import TensorProto as TP
from support.contracts_testkit import (
    INDEXSHARE_INPUTS,
    INDEXSHARE_OUTPUTS,
    ORT_VERSION,
    SAI_CSA,
    SAI_QSA_INPUTS,
    assert_agrees,
    before_kernels,
    graph_violations,
    merge_model,
    ort_error,
    psai_indexshare_model,
    psai_model,
    rule_for,
    sai_model,
)

pytestmark = pytest.mark.differential
_V132 = ORT_VERSION >= "1.32"
_Q = list(SAI_QSA_INPUTS)


def _with(slot: int, name: str, base: list[str] = _Q) -> list[str]:
    names = list(base) + [""] * max(0, slot + 1 - len(base))
    names[slot] = name
    return names


def _csa(**shapes: list[int]) -> dict[str, Any]:
    return dict(SAI_CSA, shapes={**SAI_CSA["shapes"], **shapes})


_CSA_IN = list(SAI_CSA["inputs"])
SAI_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("valid qsa", {}, None),
    ("valid qsa packed QK (no key)", {"inputs": ["q", "", *_Q[2:]]}, None),
    ("valid qsa with mask", {"inputs": _with(6, "m")}, None),
    ("valid qsa with past_sequence_length", {"inputs": _with(12, "psl")}, None),
    ("valid csa", _csa(), None),
    ("valid csa past_proj_buffer length 7", _csa(ppb=[2, 1, 7, 64]), None),
    ("valid csa past_proj_buffer length 0", _csa(ppb=[2, 1, 0, 64]), None),
    ("valid symbolic query width", {"shapes": {"q": [1, 4, "w"]}}, None),
    ("past_key omitted (too few inputs)", {"inputs": _Q[:6]}, "has input size 6 not in range [min=8, max=14]"),
    ("past_key empty slot", {"inputs": [*_Q[:7], "", "", "", "", "", "psl"]},
     "input 7 is marked single but has an empty string in the graph"),
    ("policy absent", {"policy_mode": None}, "Required attribute 'policy_mode' is missing."),
    ("compress_ratio absent", {"compress_ratio": None}, "Required attribute 'compress_ratio' is missing."),
    ("position_ids in qsa", {"inputs": _with(11, "pos")}, "input 11 must be omitted when policy_mode is 'qsa'"),
    ("gate in qsa", {"inputs": _with(8, "g")}, "input 8 must be omitted when policy_mode is 'qsa'"),
    ("position_bias in qsa", {"inputs": _with(9, "pb")}, "input 9 must be omitted when policy_mode is 'qsa'"),
    ("head_weights in qsa", {"inputs": _with(10, "hw")}, "input 10 must be omitted when policy_mode is 'qsa'"),
    ("past_proj_buffer in qsa", {"inputs": _with(13, "ppb")}, "input 13 must be omitted when policy_mode is 'qsa'"),
    ("3 outputs in qsa", {"outputs": ("si", "pk_o", "pp_o")}, "policy_mode 'qsa' requires exactly 2 declared outputs, got 3"),
    ("csa without key", dict(_csa(), inputs=["q", "", *_CSA_IN[2:]]), "input 1 is required for every policy_mode"),
    ("csa without gate", dict(_csa(), inputs=_with(8, "", _CSA_IN)), "input 8 is required when policy_mode is 'csa'"),
    ("csa without position_ids", dict(_csa(), inputs=_with(11, "", _CSA_IN)), "input 11 is required when policy_mode is 'csa'"),
    ("csa without past_proj_buffer", dict(_csa(), inputs=_CSA_IN[:12]), "input 13 is required when policy_mode is 'csa'"),
    ("csa 2 outputs", dict(_csa(), outputs=("si", "pk_o")), "policy_mode 'csa' requires exactly 3 declared outputs, got 2"),
    ("query rank 2", {"shapes": {"q": [4, 64]}}, "input 0 must have rank 3, got rank 2"),
    ("query rank 4", {"shapes": {"q": [1, 4, 2, 32]}}, "input 0 must have rank 3, got rank 4"),
    ("key rank 2", {"shapes": {"k": [4, 32]}}, "input 1 must have rank 3, got rank 2"),
    ("query_norm_weight rank 2", {"shapes": {"qn": [1, 32]}}, "input 2 must have rank 1, got rank 2"),
    ("key_norm_weight rank 2", {"shapes": {"kn": [1, 32]}}, "input 3 must have rank 1, got rank 2"),
    ("cos rank 1", {"shapes": {"cos": [16]}}, "input 4 must have rank 2 or 3, got rank 1"),
    ("sin rank 4", {"shapes": {"sin": [1, 1, 16, 16]}}, "input 5 must have rank 2 or 3, got rank 4"),
    ("mask rank 1", {"inputs": _with(6, "m"), "shapes": {"m": [12]}}, "input 6 must have rank 2, got rank 1"),
    ("past_key rank 2", {"shapes": {"pk": [8, 32]}}, "input 7 must have rank 3, got rank 2"),
    ("past_sequence_length rank 2", {"inputs": _with(12, "psl"), "shapes": {"psl": [1, 1]}},
     "input 12 must have rank 1, got rank 2"),
    ("csa gate rank 2", _csa(g=[4, 64]), "input 8 must have rank 3, got rank 2"),
    ("csa position_bias rank 1", _csa(pb=[64]), "input 9 must have rank 2, got rank 1"),
    ("csa head_weights rank 2", _csa(hw=[4, 2]), "input 10 must have rank 3, got rank 2"),
    ("csa position_ids rank 1", _csa(pos=[4]), "input 11 must have rank 2, got rank 1"),
    ("csa past_proj_buffer rank 3", _csa(ppb=[2, 1, 64]), "input 13 must have rank 4, got rank 3"),
    ("valid query width 1 (head_size 1)", {"shapes": {"q": [1, 4, 1], "qn": [1]}}, None),
    ("query width 1 not divisible by 32", {"shapes": {"q": [1, 4, 1]}}, "query width must be divisible by head_size"),
    ("query width 0", {"shapes": {"q": [1, 4, 0]}}, "query width must be > 0, got 0"),
    ("query width above INT_MAX", {"shapes": {"q": [1, 4, 2**31]}}, "query width must be no greater than INT_MAX"),
    ("head_size 0", {"shapes": {"qn": [0]}}, "head_size must be > 0, got 0"),
    ("query width 48 not divisible by 32", {"shapes": {"q": [1, 4, 48]}}, "query width must be divisible by head_size"),
    ("packed QK with one head", {"inputs": ["q", "", *_Q[2:]], "shapes": {"q": [1, 4, 32]}},
     "packed QK input must contain at least one query head and one key"),
    ("csa past_proj_buffer dim 0", _csa(ppb=[3, 1, 3, 64]), "past_proj_buffer dimension 0 must be 2, got 3"),
    ("csa past_proj_buffer dim 1", _csa(ppb=[2, 2, 3, 64]), "past_proj_buffer dimension 1 must equal batch_size"),
    ("csa past_proj_buffer dim 3", _csa(ppb=[2, 1, 3, 48]), "past_proj_buffer dimension 3 must equal 2 * head_size"),
    ("csa past_proj_buffer length 8", _csa(ppb=[2, 1, 8, 64]),
     "past_proj_buffer sequence length must be in [0, 2 * compress_ratio), got 8"),
    # two faults: ORT reports the first in its order, and so does the contract
    ("order: budget before inputs", {"token_budget": 6, "inputs": _with(11, "pos")}, "got token_budget=6 compress_ratio=4"),
    ("order: inputs before outputs", {"inputs": _with(11, "pos"), "outputs": ("si", "pk_o", "pp_o")},
     "input 11 must be omitted when policy_mode is 'qsa'"),
    ("order: outputs before ranks", {"shapes": {"q": [4, 64]}, "outputs": ("si", "pk_o", "pp_o")},
     "requires exactly 2 declared outputs, got 3"),
    ("order: key rank before query rank", {"shapes": {"q": [4, 64], "k": [4, 32]}}, "input 1 must have rank 3, got rank 2"),
    ("order: key_norm before query_norm", {"shapes": {"qn": [1, 32], "kn": [1, 32]}}, "input 3 must have rank 1, got rank 2"),
    ("order: sin before query", {"shapes": {"sin": [16], "q": [4, 64]}}, "input 5 must have rank 2 or 3, got rank 1"),
    ("order: width before past_key rank", {"shapes": {"pk": [8, 32], "q": [1, 4, 48]}}, "query width must be divisible by head_size"),
    ("order: query width before head_size", {"shapes": {"q": [1, 4, 0], "qn": [0]}}, "query width must be > 0, got 0"),
    ("order: mask before past_key", {"inputs": _with(6, "m"), "shapes": {"m": [12], "pk": [8, 32]}},
     "input 6 must have rank 2, got rank 1"),
    ("order: proj dim 3 before length", _csa(ppb=[2, 1, 9, 48]), "past_proj_buffer dimension 3 must equal 2 * head_size"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "kwargs", "message"), SAI_CASES, ids=[c[0] for c in SAI_CASES])
def test_sparse_attention_indexer_shape_rules_match_onnxruntime(case: str, kwargs: dict[str, Any], message: str | None) -> None:
    model = sai_model(**kwargs)
    violations = graph_violations(model)
    assert [v.rule_id for v in before_kernels(violations)] == ([rule_for(message, "QSA-SAI-001")] if message else []), violations
    if message:
        assert message in violations[0].message
    error = ort_error(model)
    assert_agrees(violations, error, context=case)
    if message:
        assert violations[0].message in str(error)  # the first failure, not just any of them


MERGE_AI = ("bi", "bc", "br", "", "", "ai", "ac")
MERGE_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("valid append_range", {}, None),
    ("valid append_indices", {"inputs": MERGE_AI, "policy_mode": "append_indices"}, None),
    ("valid max_output_entries 2^30", {"max_output_entries": 2**30}, None),
    ("max_output_entries 0", {"max_output_entries": 0}, "Invalid PackedSparseAttentionIndexerMerge policy or capacity"),
    ("max_output_entries -1", {"max_output_entries": -1}, "Invalid PackedSparseAttentionIndexerMerge policy or capacity"),
    ("max_output_entries 2^30+1", {"max_output_entries": 2**30 + 1}, "Invalid PackedSparseAttentionIndexerMerge policy or capacity"),
    ("policy bogus", {"policy_mode": "bogus"}, "Invalid PackedSparseAttentionIndexerMerge policy or capacity"),
    ("policy upper case", {"policy_mode": "APPEND_RANGE"}, "Invalid PackedSparseAttentionIndexerMerge policy or capacity"),
    ("max_output_entries absent", {"max_output_entries": None}, "Required attribute 'max_output_entries' is missing."),
    ("policy absent", {"policy_mode": None}, "Required attribute 'policy_mode' is missing."),
    ("append_range without range_ends", {"inputs": ("bi", "bc", "br", "rs")}, "Merge inputs must match policy_mode"),
    ("append_range with additional inputs", {"inputs": ("bi", "bc", "br", "rs", "re", "ai", "ac")}, "Merge inputs must match policy_mode"),
    ("append_indices without counts", {"inputs": ("bi", "bc", "br", "", "", "ai"), "policy_mode": "append_indices"},
     "Merge inputs must match policy_mode"),
    ("append_indices with range inputs", {"inputs": ("bi", "bc", "br", "rs", "re", "ai", "ac"), "policy_mode": "append_indices"},
     "Merge inputs must match policy_mode"),
    ("append_indices without additional_indices", {"inputs": ("bi", "bc", "br", "", "", "", "ac"), "policy_mode": "append_indices"},
     "Merge inputs must match policy_mode"),
    ("append_indices with range_starts", {"inputs": ("bi", "bc", "br", "rs", "", "ai", "ac"), "policy_mode": "append_indices"},
     "Merge inputs must match policy_mode"),
    ("base_indices rank 1", {"shapes": {"bi": [32]}}, "base_indices must have rank 2"),
    ("base_counts rank 2", {"shapes": {"bc": [2, 1]}}, "Merge input 1 must have rank 1"),
    ("base_row_indices rank 2", {"shapes": {"br": [2, 1]}}, "Merge input 2 must have rank 1"),
    ("range_ends rank 2", {"shapes": {"re": [2, 1]}}, "Merge input 4 must have rank 1"),
    ("additional_indices rank 1", {"inputs": MERGE_AI, "policy_mode": "append_indices", "shapes": {"ai": [16]}},
     "Merge input 5 must have rank 2"),
    ("int64 tensors", {"elem": TP.INT64}, ("Type Error: Type 'tensor(int64)' of input parameter (bi) of operator "
                                           "(PackedSparseAttentionIndexerMerge) in node (mg) is invalid.")),
    ("two outputs", {"outputs": ("o_i", "o_c")}, "has output size 2 not in range [min=3, max=3]"),
    ("order: capacity before ranks", {"max_output_entries": 0, "shapes": {"bi": [32]}}, "policy or capacity"),
    ("order: ranks before inputs", {"shapes": {"bi": [32]}, "inputs": ("bi", "bc", "br", "rs")}, "base_indices must have rank 2"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "kwargs", "message"), MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_indexer_merge_schema_matches_onnxruntime(case: str, kwargs: dict[str, Any], message: str | None) -> None:
    model = merge_model(**kwargs)
    violations = graph_violations(model)
    error = ort_error(model)
    if not _V132:  # no schema at all in 1.31.1
        assert [v.rule_id for v in violations] == ["ORT-SCHEMA-001"]
        assert_agrees(violations, error, context=case)
        return
    assert [v.rule_id for v in before_kernels(violations)] == ([rule_for(message, "QSA-MERGE-001")] if message else []), violations
    if message:
        assert message in violations[0].message
    assert_agrees(violations, error, context=case)


_IS = list(INDEXSHARE_INPUTS)
_FULL = {"extra_in": _IS, "outputs": INDEXSHARE_OUTPUTS, "max_output_entries": 24}
IS_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("valid IndexShare", _FULL, None),
    ("valid max_output_entries = budget 19", dict(_FULL, max_output_entries=19, shapes={"mi": [1, 19]}), None),
    ("valid state policy hold", dict(_FULL, indexshare_state_policy="hold"), None),
    ("valid state policy default", dict(_FULL, indexshare_state_policy="default"), None),
    ("valid state policy hold without IndexShare", {"indexshare_state_policy": "hold"}, None),
    ("valid max_output_entries 0 without IndexShare", {"max_output_entries": 0}, None),
    ("valid zero merged rows", dict(_FULL, shapes={"mi": [0, 24], "mc": [0], "ms": [0]}), None),
    ("state policy advance in qsa", dict(_FULL, indexshare_state_policy="advance"), "invalid indexshare_state_policy for policy_mode"),
    ("state policy bogus without IndexShare", {"indexshare_state_policy": "bogus"}, "invalid indexshare_state_policy for policy_mode"),
    ("merged_status missing", dict(_FULL, extra_in=_IS[:3]), "all IndexShare inputs must be provided together"),
    ("indexshare_mode missing", dict(_FULL, extra_in=_IS[1:]), "all IndexShare inputs must be provided together"),
    ("only indexshare_mode", dict(_FULL, extra_in=_IS[:1]), "all IndexShare inputs must be provided together"),
    ("max_output_entries absent", {"extra_in": _IS, "outputs": INDEXSHARE_OUTPUTS}, "IndexShare requires a positive max_output_entries"),
    ("max_output_entries 0", dict(_FULL, max_output_entries=0), "IndexShare requires a positive max_output_entries"),
    ("max_output_entries without inputs", {"max_output_entries": 24}, "IndexShare requires a positive max_output_entries"),
    ("max_output_entries -1 without inputs", {"max_output_entries": -1}, "IndexShare requires a positive max_output_entries"),
    ("status output missing", dict(_FULL, outputs=None), "IndexShare requires its status output"),
    ("status output without inputs", {"outputs": INDEXSHARE_OUTPUTS}, "IndexShare requires its status output"),
    ("merged_indices rank 1", dict(_FULL, shapes={"mi": [24]}), "input 19 must have rank 2, got rank 1"),
    ("indexshare_mode rank 2", dict(_FULL, shapes={"im": [1, 1]}), "input 18 must have rank 1, got rank 2"),
    ("indexshare_mode shape 2", dict(_FULL, shapes={"im": [2]}), "indexshare_mode must have shape {1} (1), got 2"),
    ("merged_indices width", dict(_FULL, shapes={"mi": [1, 20]}), "merged_indices width must equal max_output_entries (24), got 20"),
    ("merged_counts rows", dict(_FULL, shapes={"mc": [2]}), "merged_counts must match merged_indices rows"),
    ("merged_status rows", dict(_FULL, shapes={"ms": [2]}), "merged_status must match merged_indices rows"),
    ("merged rows != batch", dict(_FULL, shapes={"mi": [2, 24], "mc": [2], "ms": [2]}),
     "Nonempty merged_indices must have one row per request"),
    ("max_output_entries 18 < budget 19", dict(_FULL, max_output_entries=18, shapes={"mi": [1, 18]}),
     "max_output_entries is smaller than the selection budget"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "kwargs", "message"), IS_CASES, ids=[c[0] for c in IS_CASES])
def test_indexshare_rules_match_onnxruntime(case: str, kwargs: dict[str, Any], message: str | None) -> None:
    model = psai_indexshare_model(**kwargs)
    violations = graph_violations(model)
    error = ort_error(model)
    if _V132:
        assert [v.rule_id for v in before_kernels(violations)] == (["QSA-PSAI-002"] if message else []), violations
        if message:
            assert message in violations[0].message
    else:  # 1.31.1 knows neither the attributes nor inputs 18-21 / outputs 6-8
        assert all(v.rule_id.startswith("ORT-SCHEMA-") for v in violations), violations
    assert_agrees(violations, error, context=case)


def test_packed_indexer_state_capacity_message_names_the_dimension_found() -> None:
    """PackedSparseAttentionIndexer's state_capacity fault quotes past_key_state's dim 1 as ORT does."""
    model = psai_model(shapes={"pks": [1, 63, 32]})
    violations = graph_violations(model)
    assert [v.rule_id for v in violations] == ["QSA-PSAI-001"], violations
    assert "past_key_state dimension 1 must equal state_capacity (64), got 63" in violations[0].message
    error = ort_error(model)
    assert_agrees(violations, error, context="state_capacity 64, past_key_state [1, 63, 32]")
    assert error is not None and "got 63" in str(error)


def test_packed_indexer_with_a_symbolic_head_size_is_accepted() -> None:
    """An unknown head_size (symbolic norm weights) leaves the width checks unjudged, like ORT's inference."""
    model = psai_model()
    for value in model.graph.input:
        if value.name in ("qn", "kn"):
            value.type.tensor_type.shape.dim[0].dim_param = "h"
    violations = graph_violations(model)
    assert before_kernels(violations) == []
    assert_agrees(violations, ort_error(model), context="symbolic head_size")


def test_packed_indexer_reads_an_empty_dim_param_as_an_unknown_dim() -> None:
    """A cos_cache dim declared with an empty dim_param is unknown, like sin_cache's unset dim: the caches match, as in ORT."""
    model = psai_model()
    for value in model.graph.input:
        if value.name == "cos":
            value.type.tensor_type.shape.dim[0].dim_param = ""
        if value.name == "sin":
            value.type.tensor_type.shape.dim[0].Clear()
    violations = graph_violations(model)
    assert before_kernels(violations) == []
    assert_agrees(violations, ort_error(model), context="cos dim 0 dim_param '', sin dim 0 unset")


@pytest.mark.parametrize(("cos_dim", "sin_dim", "refused"), [
    ("a", "b", False),    # two symbols: not provably different, ORT accepts
    ("a", "a", False),
    ("a", None, False),   # a symbol against a static dim: unknown
    (None, None, False),  # both static as psai_model declares them
], ids=["two-symbols", "same-symbol", "symbol-vs-static", "both-static"])  # fmt: skip
def test_packed_indexer_rotary_caches_differ_only_by_static_dims(cos_dim: str | None, sin_dim: str | None,
                                                                  refused: bool) -> None:  # fmt: skip
    """cos_cache and sin_cache "must match" only where both dims are static and differ: dims named by
    different symbols are accepted, as ORT accepts them (the contract refused them once)."""
    model = psai_model()
    for value in model.graph.input:
        dim = value.type.tensor_type.shape.dim[0] if value.name in ("cos", "sin") else None
        want = cos_dim if value.name == "cos" else sin_dim
        if dim is not None and want is not None:
            dim.dim_param = want
    violations = graph_violations(model)
    assert [v.rule_id for v in before_kernels(violations) if v.severity == "error"] == (["QSA-PSAI-001"] if refused else [])
    assert_agrees(violations, ort_error(model), context=f"cos dim 0 {cos_dim!r}, sin dim 0 {sin_dim!r}")


def test_packed_indexer_rotary_caches_with_different_static_dims_are_refused_as_in_onnxruntime() -> None:
    """Static dims that differ are refused with ORT's text."""
    model = psai_model()
    for value in model.graph.input:
        if value.name == "sin":
            dim = value.type.tensor_type.shape.dim[0]
            dim.dim_value = dim.dim_value + 1
    violations = graph_violations(model)
    assert [v.message.endswith("cos_cache and sin_cache dimensions must match") for v in violations
            if v.rule_id == "QSA-PSAI-001"] == [True]  # fmt: skip
    assert_agrees(violations, ort_error(model), context="sin dim 0 one longer")
