"""Differential tests: graph contracts the CPU wheel enforces, against real onnxruntime sessions.

Invariants guarded:
- The offload subgraph rule: a QMoE inside an If is refused under mode=required (any spelling ORT
  maps to required) with ORT's text, and accepted under auto/disabled; 1.31.1 accepts everything.
- CausalConvWithState / VarlenCausalConvWithState schema and CPU-kernel rules: single-fault cases
  (state_window=9, dilation=0, ndim=2, channels_last=2, extended attributes, ranks, activation)
  give the contract's verdict and a message ORT's error contains.
- QSA schema rules (PackedSparseAttentionIndexer policy/budget/state_capacity/inputs,
  SparseAttentionIndexer, DynamicSparseAttention kv_num_heads): same verdict and text; a
  NOT_IMPLEMENTED error (no CPU kernel) counts as "passed every creation-time check".
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest
from support.contracts_testkit import (
    ORT_VERSION,
    assert_agrees,
    before_kernels,
    causal_conv_model,
    dsa_model,
    graph_violations,
    ort_error,
    psai_model,
    qmoe_in_if_model,
    qmoe_model,
    sai_model,
    varlen_conv_model,
)

from contracts.offload_config import check_offload_config
from contracts.offload_nodes import check_offload_nodes

pytestmark = pytest.mark.differential
_P = "session.moe.offload."


@pytest.mark.parametrize("mode", ["required", "1", "on", "REQUIRED", "auto", "disabled", "0"])
@pytest.mark.parametrize("in_if", [True, False])
def test_qmoe_subgraph_rule_matches_onnxruntime(mode: str, in_if: bool) -> None:
    entries = {_P + "mode": mode}
    data = qmoe_in_if_model() if in_if else qmoe_model()
    model = onnx.load_from_string(data)
    violations = check_offload_config(entries, ort_version=ORT_VERSION) + check_offload_nodes(
        model, entries, ort_version=ORT_VERSION
    )
    if in_if and mode.lower() in {"required", "1", "on"} and ORT_VERSION >= "1.32":
        assert [v.rule_id for v in violations] == ["OFFLOAD-SUBGRAPH-001"]
        assert violations[0].node == "branch"
    else:
        assert violations == []
    assert_agrees(violations, ort_error(data, entries), context=f"mode={mode} in_if={in_if}")


CC_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("valid channels-first", {}, None),
    ("valid silu dilation 2", {"activation": "silu", "dilation": 2}, None),
    ("valid channels_last", {"channels_last": 1}, None),
    ("state_window=9", {"state_window": 9}, "CCONV-SCHEMA-001"),
    ("state_window=-1", {"state_window": -1}, "CCONV-SCHEMA-001"),
    ("state_window=2 (CPU kernel)", {"state_window": 2}, "CCONV-CPU-001"),
    ("dilation=0", {"dilation": 0}, "CCONV-SCHEMA-001"),
    ("ndim=0", {"ndim": 0}, "CCONV-SCHEMA-001"),
    ("ndim=4", {"ndim": 4}, "CCONV-SCHEMA-001"),
    ("ndim=2 rank 4 (CPU kernel)", {"ndim": 2, "rank_in": 4, "rank_w": 4}, "CCONV-CPU-001"),
    ("channels_last=2", {"channels_last": 2}, "CCONV-SCHEMA-001"),
    ("channels_last with ndim=2", {"channels_last": 1, "ndim": 2, "rank_in": 4, "rank_w": 4}, "CCONV-SCHEMA-001"),
    ("channels_last rank 2", {"channels_last": 1, "rank_in": 2}, "CCONV-SCHEMA-001"),
    ("rank-2 input", {"rank_in": 2}, "CCONV-SCHEMA-001"),
    ("rank-2 weight", {"rank_w": 2}, "CCONV-SCHEMA-001"),
    ("rank-4 weight", {"rank_w": 4}, "CCONV-SCHEMA-001"),
    ("activation gelu", {"activation": "gelu"}, "CCONV-CPU-001"),
    ("activation SiLU", {"activation": "SiLU"}, "CCONV-CPU-001"),
    ("extended without channels_last", {"state_length": 2}, "CCONV-SCHEMA-003"),
    ("3rd output without channels_last", {"outputs": ("y", "st", "su")}, "CCONV-SCHEMA-003"),
    ("state_channels_last=5", {"state_channels_last": 5, "channels_last": 1, "in_shape": [1, 5, 4]}, "CCONV-SCHEMA-003"),
    ("state_update_capacity=9", {"state_update_capacity": 9, "channels_last": 1, "in_shape": [1, 5, 4]}, "CCONV-SCHEMA-003"),
    ("weight channels mismatch", {"state_length": 2, "channels_last": 1}, "CCONV-SCHEMA-003"),
    ("channel slice exceeds width", {"input_channel_offset": 1, "channels_last": 1, "in_shape": [1, 5, 4]}, "CCONV-SCHEMA-003"),
    ("state_length too short", {"state_length": 1, "channels_last": 1, "in_shape": [1, 5, 4]}, "CCONV-SCHEMA-003"),
    ("3rd output without capacity", {"outputs": ("y", "st", "su"), "channels_last": 1, "in_shape": [1, 5, 4]}, "CCONV-SCHEMA-003"),
    ("extended valid (CPU kernel refuses)", {"state_length": 2, "channels_last": 1, "in_shape": [1, 5, 4]}, "CCONV-CPU-001"),
    ("input_channels slice (CPU kernel refuses)", {"input_channels": 4, "channels_last": 1, "in_shape": [1, 5, 6]}, "CCONV-CPU-001"),
]  # fmt: skip

_EXTENDED = {"state_length", "state_channels_last", "state_update_capacity", "input_channels", "input_channel_offset"}


def _cc_expected(attrs: dict[str, Any], rule: str | None) -> str | None:
    if ORT_VERSION < "1.32" and _EXTENDED & set(attrs):
        return "ORT-SCHEMA-003"  # 1.31.1: an unknown attribute
    if ORT_VERSION < "1.32" and len(attrs.get("outputs", ())) == 3:
        return "ORT-SCHEMA-004"  # 1.31.1: two outputs at most
    return rule


@pytest.mark.parametrize(("case", "kwargs", "rule"), CC_CASES, ids=[c[0] for c in CC_CASES])
def test_causal_conv_rules_match_onnxruntime(case: str, kwargs: dict[str, Any], rule: str | None) -> None:
    model = causal_conv_model(**kwargs)
    violations = [v for v in graph_violations(model) if v.severity == "error"]
    expected = _cc_expected(kwargs, rule)
    ids = {v.rule_id for v in violations}
    if expected is not None and expected.startswith("ORT-SCHEMA-"):
        assert expected in ids, violations  # the CPU-kernel rule may add its own reason
    else:
        assert sorted(ids) == ([expected] if expected else []), violations
    assert_agrees(violations, ort_error(model), context=case)


VL_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("valid", {}, None),
    ("valid dilation 2", {"dilation": 2}, None),
    ("dilation=0", {"dilation": 0}, "VCCONV-SCHEMA-001"),
    ("state_update_capacity=9", {"state_update_capacity": 9}, "VCCONV-SCHEMA-001"),
    ("group_size without kernel_delta", {"group_size": 2}, "VCCONV-SCHEMA-001"),
    ("delta_offset without kernel_delta", {"delta_offset": 1}, "VCCONV-SCHEMA-001"),
    ("rank-3 input", {"x_rank": 3}, "VCCONV-SCHEMA-001"),
    ("rank-2 weight", {"w_rank": 2}, "VCCONV-SCHEMA-001"),
    ("activation gelu (CPU kernel)", {"activation": "gelu"}, "VCCONV-CPU-001"),
]


@pytest.mark.parametrize(("case", "kwargs", "rule"), VL_CASES, ids=[c[0] for c in VL_CASES])
def test_varlen_causal_conv_rules_match_onnxruntime(case: str, kwargs: dict[str, Any], rule: str | None) -> None:
    model = varlen_conv_model(**kwargs)
    violations = graph_violations(model)
    if ORT_VERSION < "1.32" and rule in (None, "VCCONV-CPU-001"):
        rule = "ORT-KERNEL-001"  # 1.31.1 has no Varlen CPU kernel: NOT_IMPLEMENTED after the schema passes
    if ORT_VERSION < "1.32" and {"group_size", "delta_offset"} & set(kwargs):
        rule = "ORT-SCHEMA-003"  # 1.31.1 does not know the dynamic-mode attributes
    assert sorted({v.rule_id for v in violations}) == ([rule] if rule else []), violations
    assert all(v.node == "vl" for v in violations), violations  # each names the node
    assert_agrees(violations, ort_error(model), context=case)


_CSA_IO = {"extra_in": [(8, "g"), (9, "pb"), (10, "hw"), (11, "pos"), (14, "pgb")],
           "outputs": ["si", "sc", "pks_o", "pkv_o", "pg_o", "psl_o"]}  # fmt: skip
PSAI_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("valid qsa", {}, True),
    ("policy bogus", {"policy_mode": "bogus"}, False),
    ("policy QSA (case-sensitive)", {"policy_mode": "QSA"}, False),
    ("budget 6 not divisible", {"token_budget": 6}, False),
    ("budget 0", {"token_budget": 0}, False),
    ("budget absent", {"token_budget": None}, False),
    ("budget 8 cr 8", {"token_budget": 8, "compress_ratio": 8, "pkv_shape": [1, 15, 32]}, True),
    ("state_update_capacity 9", {"state_update_capacity": 9}, False),
    ("state_update_capacity 2 without count", {"state_update_capacity": 2}, False),
    ("state_update_capacity 2 with count", {"state_update_capacity": 2, "extra_in": [(16, "cc")]}, True),
    ("index_topk in qsa", {"index_topk": 4}, False),
    ("head_weight_scale in qsa", {"head_weight_scale": 1.0}, False),
    ("state_capacity 0", {"state_capacity": 0}, False),
    ("state_capacity -1", {"state_capacity": -1}, False),
    ("state_capacity absent", {"state_capacity": None}, False),
    ("compress_ratio 0", {"compress_ratio": 0}, False),
    ("compress_ratio 1 (the smallest)", {"compress_ratio": 1, "pkv_shape": [1, 1, 32]}, True),
    ("compress_ratio -3", {"compress_ratio": -3, "token_budget": None}, False),
    ("compress_ratio huge", {"compress_ratio": 1073741825, "token_budget": None}, False),
    ("compress_ratio 2^30: 2cr-1 = INT_MAX", {"compress_ratio": 2**30, "token_budget": 2**30, "pkv_shape": [1, 2**31 - 1, 32]},
     True),
    ("token_budget + compress_ratio - 1 = INT_MAX + 1", {"compress_ratio": 2**30, "token_budget": 2**31 - 2**30 + 2**30,
                                                         "pkv_shape": [1, 2**31 - 1, 32]}, False),
    ("policy absent", {"policy_mode": None}, False),
    ("max_output_entries without IndexShare", {"max_output_entries": 19}, False),
    ("gate in qsa", {"extra_in": [(8, "g")]}, False),
    ("position_bias in qsa", {"extra_in": [(9, "pb")]}, False),
    ("head_weights in qsa", {"extra_in": [(10, "hw")]}, False),
    ("position_ids in qsa", {"extra_in": [(11, "pos")]}, False),
    ("past_gate_buffer in qsa", {"extra_in": [(14, "pgb")]}, False),
    ("present_gate_buffer in qsa", {"outputs": ["si", "sc", "pks_o", "pkv_o", "pg_o", "psl_o"]}, False),
    ("past_kv_buffer dim 1", {"compress_ratio": 2, "token_budget": 16}, False),
    ("csa without index_topk", {"policy_mode": "csa", "token_budget": None, **_CSA_IO}, False),
    ("csa with token_budget", {"policy_mode": "csa", "index_topk": 4, **_CSA_IO}, False),
    ("csa without gate", {"policy_mode": "csa", "token_budget": None, "index_topk": 4}, False),
    ("csa key width", {"policy_mode": "csa", "token_budget": None, "index_topk": 4, **_CSA_IO}, False),
    ("epsilon -1 (CUDA only)", {"epsilon": -1.0}, True),
    ("state_update_capacity 1 without count", {"state_update_capacity": 1}, False),
    ("state_update_capacity 0 without count", {"state_update_capacity": 0}, True),
    # ranks, in ORT's order (0, 1, 2, 3, 6, 7, rotary caches, 12, 13, 15, 16), one wrong at a time
    ("query rank 3", {"shapes": {"q": [4, 64, 1]}}, False),
    ("query rank 1", {"shapes": {"q": [4]}}, False),
    ("key rank 3", {"shapes": {"k": [4, 32, 1]}}, False),
    ("query_norm_weight rank 2", {"shapes": {"qn": [32, 1]}}, False),
    ("key_norm_weight rank 2", {"shapes": {"kn": [32, 1]}}, False),
    ("cumulative_sequence_lengths rank 2", {"shapes": {"cu": [2, 1]}}, False),
    ("past_sequence_lengths rank 2", {"shapes": {"ps": [1, 1]}}, False),
    ("cos_cache rank 1", {"shapes": {"cos": [16]}}, False),
    ("sin_cache rank 1", {"shapes": {"sin": [16]}}, False),
    ("past_key_state rank 2", {"shapes": {"pks": [1, 64]}}, False),
    ("past_key_state rank 4", {"shapes": {"pks": [1, 64, 32, 1]}}, False),
    ("past_kv_buffer rank 2", {"pkv_shape": [1, 7]}, False),
    ("past_state_lengths rank 1", {"shapes": {"psl": [1]}}, False),
    ("state_update_capture_count rank 2", {"state_update_capacity": 2, "extra_in": [(16, "cc")], "shapes": {"cc": [1, 1]}},
     False),
    ("query rank 3 before key rank 3", {"shapes": {"q": [4, 64, 1], "k": [4, 32, 1]}}, False),
    ("sin_cache rank 1 before past_key_state rank 2", {"shapes": {"sin": [16], "pks": [1, 64]}}, False),
    ("past_sequence_lengths rank 2 before cos_cache rank 1", {"shapes": {"ps": [1, 1], "cos": [16]}}, False),
    # dims, one wrong at a time, then pairs whose order ORT fixes
    ("key rows 3", {"shapes": {"k": [3, 32]}}, False),
    ("query/key norm widths 16 / 32", {"shapes": {"qn": [16]}}, False),
    ("past_sequence_lengths batch 2", {"shapes": {"ps": [2]}}, False),
    ("past_kv_buffer batch 2", {"pkv_shape": [2, 7, 32]}, False),
    ("past_state_lengths batch 2", {"shapes": {"psl": [2, 2]}}, False),
    ("past_key_state dim 1 32 (capacity 64)", {"shapes": {"pks": [1, 32, 32]}}, False),
    ("past_key_state dim 2 16 (head 32)", {"shapes": {"pks": [1, 64, 16]}}, False),
    ("past_state_lengths dim 1 3", {"shapes": {"psl": [1, 3]}}, False),
    ("cumulative_sequence_lengths 3 (batch 1)", {"shapes": {"cu": [3]}}, False),
    ("past_kv_buffer dim 2 16", {"pkv_shape": [1, 7, 16]}, False),
    ("rotary caches of ranks 2 / 3", {"shapes": {"cos": [1, 16, 32]}}, False),
    ("batched rotary caches of batch 2", {"shapes": {"cos": [2, 16, 32], "sin": [2, 16, 32]}}, False),
    ("batched rotary caches of batch 1", {"shapes": {"cos": [1, 16, 32], "sin": [1, 16, 32]}}, True),
    ("rotary max_position 0", {"shapes": {"cos": [0, 32], "sin": [0, 32]}}, False),
    ("rotary width 33 (odd)", {"shapes": {"cos": [16, 33], "sin": [16, 33]}}, False),
    ("rotary width 0", {"shapes": {"cos": [16, 0], "sin": [16, 0]}}, False),
    ("rotary width 2 (the smallest even)", {"shapes": {"cos": [16, 2], "sin": [16, 2]}}, True),
    ("rotary width 64 > head 32", {"shapes": {"cos": [16, 64], "sin": [16, 64]}}, False),
    ("rotary width 16 < head 32", {"shapes": {"cos": [16, 16], "sin": [16, 16]}}, True),
    ("cos / sin widths 32 / 16", {"shapes": {"sin": [16, 16]}}, False),
    ("cos / sin positions 16 / 8", {"shapes": {"sin": [8, 32]}}, False),
    ("query width 60 (head 32)", {"shapes": {"q": [4, 60]}}, False),
    ("query width 0", {"shapes": {"q": [4, 0]}}, False),
    ("query width 32: one head", {"shapes": {"q": [4, 32]}}, True),
    ("key rows before norm widths", {"shapes": {"k": [3, 32], "qn": [16]}}, False),
    ("past_kv_buffer dim 1 before key width", {"pkv_shape": [1, 3, 32], "shapes": {"k": [4, 16]}}, False),
    ("cumulative_sequence_lengths before key width", {"shapes": {"cu": [3], "k": [4, 16]}}, False),
    ("past_sequence_lengths batch before query width", {"shapes": {"ps": [2], "q": [4, 60]}}, False),
    ("rotary width before query width", {"shapes": {"cos": [16, 33], "sin": [16, 33], "q": [4, 60]}}, False),
]  # fmt: skip


def _psai_known_on(kwargs: dict[str, Any]) -> bool:
    return ORT_VERSION >= "1.32" or "max_output_entries" not in kwargs


@pytest.mark.parametrize(("case", "kwargs", "accepted"), PSAI_CASES, ids=[c[0] for c in PSAI_CASES])
def test_packed_indexer_schema_matches_onnxruntime(case: str, kwargs: dict[str, Any], accepted: bool) -> None:
    model = psai_model(**kwargs)
    violations = graph_violations(model)
    if _psai_known_on(kwargs):
        assert (not before_kernels(violations)) == accepted, violations
    error = ort_error(model)
    if not _psai_known_on(kwargs):
        assert error is not None and "Unrecognized attribute: max_output_entries" in error
        return
    assert_agrees(violations, error, context=case)


DSA_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("valid", {}, True),
    ("kv_num_heads 3 does not divide 4", {"kv_num_heads": 3}, False),
    ("kv_num_heads 0", {"kv_num_heads": 0}, False),
    ("kv_num_heads -2", {"kv_num_heads": -2}, False),
    ("kv_num_heads absent", {"kv_num_heads": None}, False),
    ("num_heads absent", {"num_heads": None}, False),
    ("num_heads 0", {"num_heads": 0}, False),
    ("rank-2 query", {"q_shape": (2, 64)}, False),
    ("is_causal 0 (CUDA only)", {"is_causal": 0}, True),
    ("attention_mode bogus (CUDA only)", {"attention_mode": "bogus"}, True),
    ("packed QKV width 60 (4 + 2 * 2 heads)", {"q_shape": (1, 2, 60)}, False),
    ("packed QKV width 63", {"q_shape": (1, 2, 63)}, False),
    ("packed QKV width 72", {"q_shape": (1, 2, 72)}, True),
    ("packed QKV width 8", {"q_shape": (1, 2, 8)}, True),
    ("packed QKV width 6, 2 + 2 * 2 heads", {"q_shape": (1, 2, 6), "num_heads": 2, "kv_num_heads": 2}, True),
    ("packed QKV width 8, 2 + 2 * 2 heads", {"q_shape": (1, 2, 8), "num_heads": 2, "kv_num_heads": 2}, False),
    ("packed QKV width 8, 2 + 2 * 1 heads", {"q_shape": (1, 2, 8), "num_heads": 2, "kv_num_heads": 1}, True),
    ("rank-2 query of width 63: the rank first", {"q_shape": (2, 63)}, False),
    ("kv_num_heads 3 with width 63: the heads first", {"q_shape": (1, 2, 63), "kv_num_heads": 3}, False),
]


@pytest.mark.parametrize(("case", "kwargs", "accepted"), DSA_CASES, ids=[c[0] for c in DSA_CASES])
def test_dynamic_sparse_attention_schema_matches_onnxruntime(case: str, kwargs: dict[str, Any], accepted: bool) -> None:
    model = dsa_model(**kwargs)
    violations = graph_violations(model)
    assert (not before_kernels(violations)) == accepted, violations
    assert_agrees(violations, ort_error(model), context=case)


SAI_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("valid", {}, True),
    ("policy bogus", {"policy_mode": "bogus"}, False),
    ("budget 6", {"token_budget": 6}, False),
    ("index_topk in qsa", {"index_topk": 4}, False),
    ("compress_ratio 0", {"compress_ratio": 0}, False),
    ("compress_ratio 1 (the smallest)", {"compress_ratio": 1}, True),
]


@pytest.mark.parametrize(("case", "kwargs", "accepted"), SAI_CASES, ids=[c[0] for c in SAI_CASES])
def test_sparse_attention_indexer_schema_matches_onnxruntime(case: str, kwargs: dict[str, Any], accepted: bool) -> None:
    model = sai_model(**kwargs)
    violations = graph_violations(model)
    assert (not before_kernels(violations)) == accepted, violations
    assert_agrees(violations, ort_error(model), context=case)
