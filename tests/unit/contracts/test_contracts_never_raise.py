"""No contract raises on a malformed attribute: a wrong kind is a violation, never an exception.

Invariants guarded:
- Every graph rule of both mirrored versions (CPU and CUDA kernel rules included, offload node
  rules under mode=required and auto) and ``offload_eligibility`` return violations for any
  attribute of any kind and value on any op q38 emits or reads (hypothesis: the op's own
  attribute names and made-up ones; INT incl. beyond int64 range boundaries, FLOAT incl. NaN and
  infinities, STRING incl. NUL and non-ASCII, INTS / FLOATS / STRINGS, a TENSOR, an empty GRAPH).
- A packed-QKV GroupQueryAttention whose head counts sum to zero (no grouped head count to
  divide the packed width by) is refused, not a division by zero.
- The two crashes of issue 12 (``CausalConvWithState ndim=[3]``, ``QMoE k=[0,1]``) are
  ORT-SCHEMA-006 violations through ``q38 check`` of a whole package, exit 1.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import (
    MS,
    _model,
    _vi,
    causal_conv_model,
    dsa_model,
    gdn_model,
    merge_model,
    psai_model,
    qmoe_model,
    sai_model,
    varlen_conv_model,
)
from support.offload_node_kit import offload_model

from contracts.offload_nodes import offload_eligibility
from contracts.runner import check_graph
from contracts.schema_registry import registry_for
from q38.cli import main

_BASES = {
    "causal_conv": lambda: causal_conv_model(),
    "varlen_conv": lambda: varlen_conv_model(),
    "psai": lambda: psai_model(),
    "sai": lambda: sai_model(),
    "dsa": lambda: dsa_model(),
    "merge": lambda: merge_model(),
    "gdn": lambda: gdn_model(),
    "qmoe": lambda: onnx.load_from_string(qmoe_model()),
    "qmoe_offload": lambda: offload_model("int4"),
}
_INTS = st.one_of(st.integers(-3, 300), st.sampled_from([2**31 - 1, 2**31, -(2**31), 2**63 - 1, -(2**63)]))
_FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)
_STRINGS = st.one_of(st.sampled_from(["", "none", "silu", "swiglu", "qsa", "csa", "int", "nvfp4", "\0", "é"]),
                     st.text(max_size=6))  # fmt: skip


def _value(kind: str, draw: Any) -> Any:
    if kind == "INT":
        return draw(_INTS)
    if kind == "FLOAT":
        return draw(_FLOATS)
    if kind == "STRING":
        return draw(_STRINGS).encode("utf-8", "surrogatepass")
    if kind == "INTS":
        return draw(st.lists(_INTS, max_size=3))
    if kind == "FLOATS":
        return draw(st.lists(_FLOATS, min_size=1, max_size=3))
    if kind == "STRINGS":
        return [s.encode("utf-8", "surrogatepass") for s in draw(st.lists(_STRINGS, min_size=1, max_size=2))]
    if kind == "TENSOR":
        return onnx.numpy_helper.from_array(np.array([1, 2], np.int64))
    return oh.make_graph([], "empty", [], [])


def _attribute(name: str, kind: str, value: Any) -> onnx.AttributeProto:
    if kind in {"INTS", "FLOATS"} and not value:
        proto = onnx.AttributeProto(name=name, type=getattr(onnx.AttributeProto, kind))
        return proto
    proto = oh.make_attribute(name, value)
    if kind == "INT" and not -(2**63) <= value < 2**63:
        proto.i = 0
    return proto


@settings(max_examples=120, deadline=None, database=None)
@given(data=st.data())
def test_no_contract_raises_on_any_attribute(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(sorted(_BASES)))
    model = _BASES[base]()
    node = model.graph.node[0]
    schema = registry_for("1.32.0").resolve(node.domain, node.op_type, 1)
    names = sorted(schema.attributes) if schema is not None else []
    for _ in range(data.draw(st.integers(1, 3))):
        name = data.draw(st.one_of(st.sampled_from(names or ["k"]), st.sampled_from(["bogus", "ndim", "k", "num_heads"])))
        kind = data.draw(st.sampled_from(["INT", "FLOAT", "STRING", "INTS", "FLOATS", "STRINGS", "TENSOR", "GRAPH"]))
        for existing in list(node.attribute):
            if existing.name == name:
                node.attribute.remove(existing)
        node.attribute.append(_attribute(name, kind, _value(kind, data.draw)))
    entries = data.draw(st.sampled_from([{}, {"session.moe.offload.mode": "required"}, {"session.moe.offload.mode": "auto",
                        "session.moe.offload.tail_substitution_threshold": "0.5", "ep.cpu.qmoe_deferred_scale": "x"}]))  # fmt: skip
    for version in ("1.31.1", "1.32.0"):
        found = check_graph(model, entries=entries, eps=frozenset({"cpu", "cuda"}), ort_version=version)
        assert all(v.rule_id and isinstance(v.message, str) for v in found)
    for mode in ("auto", "required"):
        offload_eligibility(model, mode)


@pytest.mark.parametrize(("heads", "kv_heads"), [(0, 0), (-2, 1)])
def test_a_packed_gqa_with_no_grouped_heads_is_refused_not_raised(heads: int, kv_heads: int) -> None:
    """num_heads + 2 * kv_num_heads == 0 with a packed query: ORT refuses the node; so does the contract."""
    node = oh.make_node("GroupQueryAttention", ["qkv", "", "", "", "", "sk", "tsl"], ["o", "pko", "pvo"], name="gqa",
                        domain=MS, num_heads=heads, kv_num_heads=kv_heads)  # fmt: skip
    ins = [_vi("qkv", TP.FLOAT, [1, 3, 64]), _vi("sk", TP.INT32, [1]), _vi("tsl", TP.INT32, [1])]
    model = _model([node], ins, [_vi(o, TP.FLOAT, None) for o in ("o", "pko", "pvo")])
    for version in ("1.31.1", "1.32.0"):
        errors = [v for v in check_graph(model, eps=frozenset({"cpu"}), ort_version=version) if v.severity == "error"]
        assert errors and {v.node for v in errors} == {"gqa"}, (version, errors)


@pytest.mark.parametrize(("op", "name", "value"), [("CausalConvWithState", "ndim", [3]), ("QMoE", "k", [0, 1])])
def test_the_issue_12_crashes_are_violations_of_a_whole_package(op: str, name: str, value: Any, tiny_cpu_package: Path,
                                                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    node = next(n for n in model.graph.node if n.op_type == op)
    for existing in list(node.attribute):
        if existing.name == name:
            node.attribute.remove(existing)
    node.attribute.append(oh.make_attribute(name, value))
    (pkg / "model.onnx").write_bytes(model.SerializeToString())
    assert main(["check", str(pkg), "--json", "--ort-version", "1.32.0"]) == 1
    report = json.loads(capsys.readouterr().out)
    [violation] = [v for v in report["violations"] if v["severity"] == "error"]
    assert (violation["rule_id"], violation["node"]) == ("ORT-SCHEMA-006", node.name)
    assert violation["message"] == f"Mismatched attribute type in '{node.name} : {name}'. Expected: 'INT', actual: 'INTS'"
