"""QSA-DSA-CUDA-001: what the DynamicSparseAttention CUDA constructor refuses (ort-contract-rules.md §2B).

Invariants guarded (CUDA-only: the CPU wheel has no kernel to ask, so the texts are the
onnxruntime-gpu strings of §2B / ort-cpu-capabilities.md §8):
- Every clause is refused alone with its text, and its boundary values are accepted:
  is_causal 1 only; local_window_size -1 or 1..INT_MAX; rotary_offset 0..INT_MAX; the four flags
  0 or 1; the two mode strings; the mode/source pairs (reported only when nothing else is).
- Every refusal is listed (ORT reports the first); the rule reports them on the node, for CUDA only.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import pytest
from support.contracts_testkit import (
    dsa_model,
    graph_violations,
    psai_model,
    rule_named,
    sai_model,
)

from contracts.qsa import RULES as QSA_RULES
from contracts.qsa import dsa_cuda_problems

pytestmark = pytest.mark.cuda_rule
_D = "DynamicSparseAttention: "
_INT_MAX = 2**31 - 1
_PAIRS = (f"{_D}supported mode/source combinations are selected_only with main and local_plus_selected "
          "with auxiliary.")  # fmt: skip


def _problems(**attrs: Any) -> list[str]:
    node = next(iter(ir.from_proto(dsa_model(**attrs)).graph))
    return dsa_cuda_problems(node)


CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({}, []),
    ({"is_causal": 1}, []),
    ({"is_causal": 0}, ["DynamicSparseAttention only supports is_causal=1."]),
    ({"is_causal": 2}, ["DynamicSparseAttention only supports is_causal=1."]),
    ({"local_window_size": -1}, []),
    ({"local_window_size": 1}, []),
    ({"local_window_size": _INT_MAX}, []),
    ({"local_window_size": 0}, [f"{_D}local_window_size must be -1 or a positive int."]),
    ({"local_window_size": -2}, [f"{_D}local_window_size must be -1 or a positive int."]),
    ({"local_window_size": _INT_MAX + 1}, [f"{_D}local_window_size must be -1 or a positive int."]),
    ({"rotary_offset": 0}, []),
    ({"rotary_offset": _INT_MAX}, []),
    ({"rotary_offset": -1}, [f"{_D}rotary_offset must be a nonnegative int."]),
    ({"rotary_offset": _INT_MAX + 1}, [f"{_D}rotary_offset must be a nonnegative int."]),
    *[({flag: v}, []) for flag in ("do_rotary", "rotary_interleaved", "smooth_softmax", "auxiliary_kv_shared") for v in (0, 1)],
    *[({flag: v}, [f"{_D}{flag} must be 0 or 1."])
      for flag in ("do_rotary", "rotary_interleaved", "smooth_softmax", "auxiliary_kv_shared") for v in (2, -1)],
    ({"attention_mode": "selected_only", "selected_kv_source": "main"}, []),
    ({"attention_mode": "local_plus_selected", "selected_kv_source": "auxiliary"}, []),
    ({"attention_mode": "local_plus_selected"}, [_PAIRS]),
    ({"selected_kv_source": "auxiliary"}, [_PAIRS]),
    ({"attention_mode": "dense"}, [f"{_D}attention_mode must be selected_only or local_plus_selected."]),
    ({"attention_mode": "Selected_Only"}, [f"{_D}attention_mode must be selected_only or local_plus_selected."]),
    ({"selected_kv_source": "paged"}, [f"{_D}selected_kv_source must be main or auxiliary."]),
    ({"is_causal": 0, "rotary_offset": -1, "smooth_softmax": 3, "attention_mode": "local_plus_selected"},
     ["DynamicSparseAttention only supports is_causal=1.", f"{_D}rotary_offset must be a nonnegative int.",
      f"{_D}smooth_softmax must be 0 or 1."]),
    ({"attention_mode": "dense", "selected_kv_source": "paged"},
     [f"{_D}attention_mode must be selected_only or local_plus_selected.", f"{_D}selected_kv_source must be main or auxiliary."]),
]  # fmt: skip


@pytest.mark.parametrize(("attrs", "expected"), CASES, ids=[repr(c[0]) for c in CASES])
def test_each_constructor_clause_and_its_boundaries(attrs: dict[str, Any], expected: list[str]) -> None:
    assert _problems(**attrs) == expected


def test_the_rule_reports_every_refusal_on_the_node_for_cuda_only() -> None:
    model = dsa_model(is_causal=0, do_rotary=2)
    cuda = [(v.rule_id, v.node, v.message) for v in graph_violations(model, eps=frozenset({"cuda"}))
            if v.rule_id == "QSA-DSA-CUDA-001"]  # fmt: skip
    assert cuda == [("QSA-DSA-CUDA-001", "dsa", "DynamicSparseAttention only supports is_causal=1."),
                    ("QSA-DSA-CUDA-001", "dsa", f"{_D}do_rotary must be 0 or 1.")]  # fmt: skip
    assert [v for v in graph_violations(model) if v.rule_id == "QSA-DSA-CUDA-001"] == []


@pytest.mark.parametrize(("is_causal", "refused"), [(None, False), (1, False), (0, True), (2, True)])
def test_dynamic_sparse_attention_cuda_needs_is_causal_1(is_causal: int | None, refused: bool) -> None:
    found = rule_named(QSA_RULES, "QSA-DSA-CUDA-001").check(dsa_model(is_causal=is_causal), {})
    assert [v.message for v in found] == (["DynamicSparseAttention only supports is_causal=1."] if refused else [])


@pytest.mark.parametrize("build", [psai_model, sai_model], ids=["packed", "dense"])
@pytest.mark.parametrize(("epsilon", "refused"), [(None, False), (0.0, False), (1e-6, False), (-1e-9, True), (-1.0, True)])
def test_indexer_cuda_epsilon_bound_is_inclusive(build: Any, epsilon: float | None, refused: bool) -> None:
    model = build(epsilon=epsilon) if epsilon is not None else build()
    found = rule_named(QSA_RULES, "QSA-INDEXER-CUDA-001").check(model, {})
    op = model.graph.node[0].op_type
    assert [v.message for v in found] == ([f"{op}: epsilon must be >= 0, got {epsilon:g}"] if refused else [])
