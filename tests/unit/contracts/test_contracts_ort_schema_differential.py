"""Differential tests: what onnxruntime 1.31.1's schema refuses and 1.32.0 accepts (contracts.ort_schema).

Invariants guarded (each case runs against the installed onnxruntime only, and the contract is
asked about that same version):
- ORT-SCHEMA-002: GatedDeltaNet with float16/bfloat16 decay or beta, as the synthetic graphs emit
  it (also behind a Split of a float16 MatMul, i.e. through the contract's type propagation), is
  refused by 1.31.1 with ORT's "Type Error: ... input parameter (<value>) ... is invalid." text and
  created by 1.32.0 (which has the CPU kernel); float decay/beta (also behind a Cast) pass both.
  1.31.1 has no GatedDeltaNet CPU kernel: its NOT_IMPLEMENTED is not a violation.
- ORT-SCHEMA-003: attributes 1.32.0 added (GatedDeltaNet gate_lower_bound, GroupQueryAttention
  q/k_norm_epsilon) are "Unrecognized attribute" on 1.31.1 only.
- ORT-SCHEMA-004: GatedAdd's projected mode (4 inputs) is out of 1.31.1's input range only.
- The rules carry `until 1.32.0`: for 1.32.0 they report nothing on every case, except
  ORT-SCHEMA-005 (since 1.32.0): decay and beta of different types break TG's binding.
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import ORT_VERSION, _model, _vi, assert_agrees, gdn_model, ort_error

from contracts.ort_schema import RULES, check_ort_schema

pytestmark = pytest.mark.differential
_V132 = ORT_VERSION >= "1.32"


def _gdn_behind(op: str) -> onnx.ModelProto:
    """decay/beta = Split(MatMul(x fp16, w fp16)), optionally Cast to float first."""
    base = gdn_model()
    node = base.graph.node[0]
    nodes = [oh.make_node("MatMul", ["x", "w"], ["ab"], name="ab_proj")]
    src = "ab"
    if op == "Cast":
        nodes.append(oh.make_node("Cast", ["ab"], ["ab32"], to=TP.FLOAT))
        src = "ab32"
    nodes.append(oh.make_node("Split", [src, "split"], ["decay", "beta"], axis=-1))
    ins = [i for i in base.graph.input if i.name not in {"decay", "beta"}]
    ins += [_vi("x", TP.FLOAT16, [1, 3, 8])]
    inits = [oh.make_tensor("w", TP.FLOAT16, [8, 8], [0.0] * 64), oh.make_tensor("split", TP.INT64, [2], [4, 4])]
    return _model([*nodes, node], ins, list(base.graph.output), inits)


def _gqa(**attrs: Any) -> onnx.ModelProto:
    node = oh.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sk", "tsl"], ["o", "pk", "pv"], name="gqa",
                        domain="com.microsoft", num_heads=2, kv_num_heads=1, **attrs)  # fmt: skip
    ins = [_vi("q", TP.FLOAT, [1, 3, 32]), _vi("k", TP.FLOAT, [1, 3, 16]), _vi("v", TP.FLOAT, [1, 3, 16]),
           _vi("sk", TP.INT32, [1]), _vi("tsl", TP.INT32, [1])]  # fmt: skip
    return _model([node], ins, [_vi(n, TP.FLOAT, None) for n in ("o", "pk", "pv")])


def _gated_add(n_inputs: int) -> onnx.ModelProto:
    names = ["a", "b", "g", "gw"][:n_inputs]
    node = oh.make_node("GatedAdd", names, ["y"], name="ga", domain="com.microsoft")
    ins = [_vi("a", TP.FLOAT, [2, 8]), _vi("b", TP.FLOAT, [2, 8]), _vi("g", TP.FLOAT, [2, 8]),
           _vi("gw", TP.FLOAT, [8, 8])][:n_inputs]  # fmt: skip
    return _model([node], ins, [_vi("y", TP.FLOAT, None)])


# rule_id: the violation on 1.31.1, or (on 1.32.0, on 1.31.1)
CASES: list[tuple[str, onnx.ModelProto, str | tuple[str, str] | None]] = [
    ("gdn fp16 decay and beta", gdn_model(), "ORT-SCHEMA-002"),
    ("gdn bf16 decay and beta", gdn_model(decay=TP.BFLOAT16), "ORT-SCHEMA-002"),
    ("gdn float decay, bf16 beta", gdn_model(decay=TP.FLOAT, beta=TP.BFLOAT16), ("ORT-SCHEMA-005", "ORT-SCHEMA-002")),
    ("gdn float decay and beta", gdn_model(decay=TP.FLOAT), None),
    ("gdn decay from a Split of fp16", _gdn_behind("Split"), "ORT-SCHEMA-002"),
    ("gdn decay from a Cast to float", _gdn_behind("Cast"), None),
    ("gdn gate_lower_bound", gdn_model(decay=TP.FLOAT, gate_lower_bound=-5.0), "ORT-SCHEMA-003"),
    ("gqa q_norm_epsilon", _gqa(q_norm_epsilon=1e-6), "ORT-SCHEMA-003"),
    ("gqa plain", _gqa(), None),
    ("gated add 3 inputs", _gated_add(3), None),
    ("gated add projected (4 inputs)", _gated_add(4), "ORT-SCHEMA-004"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "model", "rule_id"), CASES, ids=[c[0] for c in CASES])
def test_version_schema_rules_match_the_installed_onnxruntime(
    case: str, model: onnx.ModelProto, rule_id: str | tuple[str, str] | None
) -> None:
    violations = check_ort_schema(model, ort_version=ORT_VERSION)
    if isinstance(rule_id, tuple):
        expected: str | None = rule_id[0] if _V132 else rule_id[1]
    else:
        expected = None if _V132 else rule_id
    assert [v.rule_id for v in violations] == ([expected] if expected else []), violations
    error = ort_error(model)
    assert_agrees(violations, error, context=case)
    if expected == "ORT-SCHEMA-002":  # the exact text, value and node names included
        assert violations[0].message in str(error)


def test_rules_are_versioned_until_1_32() -> None:
    assert {r.rule_id for r in RULES} == {"ORT-SCHEMA-002", "ORT-SCHEMA-003", "ORT-SCHEMA-004", "ORT-SCHEMA-005"}
    for rule in RULES:
        if rule.rule_id == "ORT-SCHEMA-005":
            assert rule.applies("1.32.0") and not rule.applies("1.31.1")
            continue
        assert rule.applies("1.31.1") and not rule.applies("1.32.0") and not rule.applies("1.33.0")
        assert rule.enforced == "cpu-session" and rule.ep == "any"
    assert check_ort_schema(gdn_model(), ort_version="1.32.0") == []
    [violation] = check_ort_schema(gdn_model(), ort_version="1.31.1")
    assert violation.message == (
        "Type Error: Type 'tensor(float16)' of input parameter (decay) of operator (GatedDeltaNet) in node (gdn) is invalid."
    )
