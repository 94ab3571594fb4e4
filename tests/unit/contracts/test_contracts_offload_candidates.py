"""Offload candidates beyond one QMoE node: MoEPacked (§1F), several candidates, SM80, subgraphs.

Invariants guarded:
- A MoEPacked node meeting every §1F clause is eligible; breaking one clause gives exactly the
  §1F text (activation, k in 1..16, >= 5 inputs with 0 and 1 present, inputs 2-4 constant 3-D
  UINT8 initializers that are not graph outputs, 1..512 experts >= k, one expert count).
- Compute capability: SM80 and newer are eligible, SM75 is refused with ORT's text.
- Several candidates: a node the schema layer refuses (a wrongly-kinded attribute) does not stop
  the evaluation of the next; an eligible node whose expert initializer an ineligible candidate
  also reads is dropped as shared (§1D), whatever its position.
- Absent swiglu_fusion reads as 0, absent expert_weight_bits as the checker's fallback 8.
- Activation dtype comes from input 0 (router_probs only when input 0's type is unknown).
- INT3's hidden / inter sizes feed the scale (C16) and bias (C17) checks, with integral sizes.
- mode=required: a QMoE nested two control-flow levels deep fails the real CPU session; the rule
  names the If whose subgraph holds the QMoE (the inner one), as ORT does (judged by ORT itself).
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import assert_agrees, graph_violations, ort_error, qmoe_model
from support.offload_node_kit import offload_model

from contracts.offload_nodes import check_offload_nodes, offload_eligibility

pytestmark = pytest.mark.cuda_rule
_P = "session.moe.offload."
_BAD_DIMS = "MoEPacked expert weight dimensions are invalid for offload"
_QMOE_ONLY = {"quant_type": None, "expert_weight_bits": None, "weights_prepacked": None, "block_size": None,
              "swiglu_fusion": None, "use_sparse_mixer": None}  # fmt: skip


def _packed(*, attrs: dict[str, Any] | None = None, experts: tuple[int, int, int] = (4, 4, 4), **kw: Any) -> onnx.ModelProto:
    """A MoEPacked node 'moe0': x, router, three packed uint8 expert banks [E, 8, 8] at slots 2-4."""
    slots: dict[int, Any] = {2: (TP.UINT8, [experts[0], 8, 8]), 3: (TP.UINT8, [experts[1], 8, 8]),
                             4: (TP.UINT8, [experts[2], 8, 8]), 5: None, 6: None}  # fmt: skip
    slots.update(kw.pop("slots", {}))
    return offload_model("int4", op_type="MoEPacked", attrs={**_QMOE_ONLY, **(attrs or {})}, slots=slots, **kw)


def _drop_input(model: onnx.ModelProto, slot: int) -> onnx.ModelProto:
    model.graph.node[0].input[slot] = ""
    return model


MOE_PACKED: list[tuple[str, Any, str | None]] = [
    ("valid", lambda: _packed(), None),
    ("k 1", lambda: _packed(attrs={"k": 1}), None),
    ("k 4 = E", lambda: _packed(attrs={"k": 4}), None),
    ("k 16 of 16 experts", lambda: _packed(attrs={"k": 16}, experts=(16, 16, 16)), None),
    ("512 experts", lambda: _packed(experts=(512, 512, 512)), None),
    ("activation omitted (swiglu)", lambda: _packed(attrs={"activation_type": None}), None),
    ("activation relu", lambda: _packed(attrs={"activation_type": "relu"}),
     "unsupported activation_type='relu' (expected 'swiglu')"),
    ("k 0", lambda: _packed(attrs={"k": 0}), "MoEPacked offload requires attribute k in 1..16"),
    ("k 17", lambda: _packed(attrs={"k": 17}, experts=(32, 32, 32)), "MoEPacked offload requires attribute k in 1..16"),
    ("k omitted (1)", lambda: _packed(attrs={"k": None}), None),
    ("four inputs", lambda: _packed(slots={4: None}), _BAD_DIMS),
    ("input 0 empty", lambda: _drop_input(_packed(), 0), _BAD_DIMS),
    ("input 1 empty", lambda: _drop_input(_packed(), 1), _BAD_DIMS),
    ("bank 3 a graph input", lambda: _packed(graph_inputs=[3]), _BAD_DIMS),
    ("bank 4 a graph output", lambda: _packed(graph_outputs=[4]), _BAD_DIMS),
    ("bank 2 is 2-D", lambda: _packed(slots={2: (TP.UINT8, [4, 64])}), _BAD_DIMS),
    ("bank 3 is int8", lambda: _packed(slots={3: (TP.INT8, [4, 8, 8])}), _BAD_DIMS),
    ("banks of 4 / 4 / 3 experts", lambda: _packed(experts=(4, 4, 3)), _BAD_DIMS),
    ("513 experts", lambda: _packed(experts=(513, 513, 513)), _BAD_DIMS),
    ("k 4 of 3 experts", lambda: _packed(attrs={"k": 4}, experts=(3, 3, 3)), _BAD_DIMS),
]  # fmt: skip


@pytest.mark.parametrize(("case", "build", "reason"), MOE_PACKED, ids=[c[0] for c in MOE_PACKED])
def test_moe_packed_offload_clauses(case: str, build: Any, reason: str | None) -> None:
    model = build()
    assert offload_eligibility(model, "required") == [("moe0", reason)]
    required = check_offload_nodes(model, {_P + "mode": "required"}, cuda=True)
    expected = [] if reason is None else [
        ("OFFLOAD-NODE-PACKED", f"MoE offload mode='required' rejected node 'moe0' (MoEPacked): {reason}.")]
    assert [(v.rule_id, v.message) for v in required] == expected


@pytest.mark.parametrize(("capability", "eligible"), [((7, 5), False), ((8, 0), True), ((8, 6), True), ((9, 0), True)])
def test_sm80_and_newer_are_eligible(capability: tuple[int, int], eligible: bool) -> None:
    reason = None if eligible else "CUDA execution provider requires SM80 or later for QMoE offload"
    assert offload_eligibility(offload_model("int4"), "auto", compute_capability=capability) == [("moe0", reason)]


def _two_nodes(first_attrs: dict[str, Any]) -> onnx.ModelProto:
    """moe0 (edited by ``first_attrs``) then moe1, an eligible copy reading the same expert banks."""
    model = offload_model("int4")
    first = model.graph.node[0]
    second = onnx.NodeProto()
    second.CopyFrom(first)
    second.name, second.output[0] = "moe1", "y1"
    for name, value in first_attrs.items():
        kept = [a for a in first.attribute if a.name != name]
        del first.attribute[:]
        first.attribute.extend([*kept, oh.make_attribute(name, value)])
    model.graph.node.append(second)
    model.graph.output.append(oh.make_tensor_value_info("y1", TP.FLOAT16, [2, 64]))
    return model


def test_a_candidate_the_schema_refuses_does_not_stop_the_next() -> None:
    model = _two_nodes({"k": 2.0})  # FLOAT where QMoE declares INT: the schema layer's fault
    eligibility = offload_eligibility(model, "auto")
    assert [name for name, _ in eligibility] == ["moe0", "moe1"]
    assert eligibility[0][1] == "attribute k is FLOAT, not INT"
    assert eligibility[1] == ("moe1", "expert initializer 'fc1_w' is shared with a non-offload consumer")


def test_an_eligible_node_sharing_banks_with_an_ineligible_one_is_dropped() -> None:
    model = _two_nodes({"use_sparse_mixer": 1})
    assert offload_eligibility(model, "auto") == [
        ("moe0", "use_sparse_mixer=1 is not supported by the QMoE offload backend"),
        ("moe1", "expert initializer 'fc1_w' is shared with a non-offload consumer"),
    ]
    auto = check_offload_nodes(model, {_P + "mode": "auto"}, cuda=True)
    assert [(v.rule_id, v.node, v.severity) for v in auto] == [
        ("OFFLOAD-NODE-C06", "moe0", "warning"), ("OFFLOAD-NODE-SHARED", "moe1", "warning")]


def test_two_eligible_nodes_may_share_their_banks() -> None:
    assert offload_eligibility(_two_nodes({}), "required") == [("moe0", None), ("moe1", None)]


def test_the_activation_dtype_is_input_0s_when_it_is_known() -> None:
    model = offload_model("int4", act=TP.FLOAT, slots={3: (TP.FLOAT, [4, 128, 2]), 6: (TP.FLOAT, [4, 64, 2])})
    # router_probs (input 1) now comes from a node whose output type nobody declared
    model.graph.node.insert(0, oh.make_node("Identity", ["router_in"], ["router"], name="r"))
    model.graph.input[1].name = "router_in"
    assert offload_eligibility(model, "auto") == [
        ("moe0", "unsupported activation dtype for QMoE offload (expected FLOAT16 or BFLOAT16)")]


def test_router_probs_gives_the_dtype_when_input_0s_is_unknown() -> None:
    model = offload_model("int4", act=TP.FLOAT16)
    model.graph.node.insert(0, oh.make_node("Identity", ["x_in"], ["x"], name="xi"))
    model.graph.input[0].name = "x_in"
    model.graph.input[1].type.tensor_type.elem_type = TP.FLOAT
    assert offload_eligibility(model, "auto") == [
        ("moe0", "unsupported activation dtype for QMoE offload (expected FLOAT16 or BFLOAT16)")]


@pytest.mark.parametrize(("slots", "reason"), [
    ({3: (TP.FLOAT16, [4, 128, 1])},
     "expert scale dimensions do not match [E, 2*I, H/block_size] and [E, H, I/block_size]"),
    ({4: (TP.FLOAT16, [4, 64])}, "optional bias slot 4 ('fc1_b') must match activation dtype and shape [E, 128]"),
    ({4: (TP.FLOAT16, [4, 128]), 7: (TP.FLOAT16, [4, 64])}, None),
], ids=["fc1 scale blocks", "fc1 bias of H columns", "both biases"])  # fmt: skip
def test_int3_sizes_feed_the_scale_and_bias_checks(slots: dict[int, Any], reason: str | None) -> None:
    assert offload_eligibility(offload_model("int3", slots=slots), "auto") == [("moe0", reason)]


def _if(name: str, branch: onnx.GraphProto) -> onnx.NodeProto:
    return oh.make_node("If", ["cond"], ["y"], name=name, then_branch=branch, else_branch=branch)


def test_a_qmoe_two_levels_deep_fails_required_mode_naming_the_inner_if() -> None:
    inner = onnx.load_from_string(qmoe_model())
    leaf = oh.make_graph(list(inner.graph.node), "leaf", [], [oh.make_tensor_value_info("y", TP.FLOAT, [2, 64])])
    middle = oh.make_graph([_if("inner_if", leaf)], "middle", [], [oh.make_tensor_value_info("y", TP.FLOAT, [2, 64])])
    graph = oh.make_graph([_if("outer_if", middle)], "g",
                          [oh.make_tensor_value_info("cond", TP.BOOL, []), *inner.graph.input],
                          [oh.make_tensor_value_info("y", TP.FLOAT, [2, 64])], initializer=list(inner.graph.initializer))  # fmt: skip
    model = oh.make_model(graph, opset_imports=list(inner.opset_import))
    model.ir_version = inner.ir_version
    entries = {_P + "mode": "required"}
    # the rule is 1.32.0's (1.31.1 validates no offload key and accepts this graph silently) ...
    offload = [v for v in graph_violations(model, entries, version="1.32.0") if v.rule_id == "OFFLOAD-SUBGRAPH-001"]
    message = "MoE offload mode='required' does not support MoE/QMoE nodes inside subgraph node 'inner_if'."
    assert [(v.node, v.message) for v in offload] == [("inner_if", message)]
    # ... and the installed onnxruntime agrees with the contract of its own version
    assert_agrees(graph_violations(model, entries), ort_error(model, entries), context="nested If")
    assert [v.rule_id for v in graph_violations(model, {_P + "mode": "auto"})] == []


def test_quant_type_absent_reads_as_int() -> None:
    assert offload_eligibility(offload_model("int4", attrs={"quant_type": None}), "required") == [("moe0", None)]
    assert offload_eligibility(offload_model("int3", attrs={"quant_type": None}), "required") == [("moe0", None)]


def test_absent_attributes_read_as_the_offload_checker_reads_them() -> None:
    """swiglu_fusion absent is 0 (allowed for int4, not for INT3); expert_weight_bits absent is the
    checker's own fallback 8 (named in the nvfp4 refusal; the schema default 4 is not filled in)."""
    assert offload_eligibility(offload_model("int4", attrs={"swiglu_fusion": None}), "required") == [("moe0", None)]
    assert offload_eligibility(offload_model("int3", attrs={"swiglu_fusion": None}), "required") == [
        ("moe0", "unsupported swiglu_fusion=0 (expected interleaved SwiGLU)")]
    assert offload_eligibility(offload_model("nvfp4", attrs={"expert_weight_bits": None}), "required") == [
        ("moe0", "unsupported expert_weight_bits=8 (expected 4)")]


def test_the_transposed_layout_with_inter_twice_hidden() -> None:
    """fc1 [E, H, 2I/2], fc2 [E, I, H/2] with H = 64, I = 128: transposed, where 2I/2 != H."""
    slots = {2: (TP.UINT8, [4, 64, 128]), 3: (TP.FLOAT16, [4, 256, 2]), 5: (TP.UINT8, [4, 128, 32]), 6: (TP.FLOAT16, [4, 64, 4])}
    assert offload_eligibility(offload_model("int4", slots=slots), "required") == [("moe0", None)]
    wrong = {**slots, 5: (TP.UINT8, [4, 128, 64])}  # fc2's packed width is not H/2
    assert offload_eligibility(offload_model("int4", slots=wrong), "required") == [
        ("moe0", "expert weight shapes do not match a supported QMoE offload layout")]


@pytest.mark.parametrize("bank", [2, 5])
def test_an_expert_bank_dim_beyond_uint32_is_refused(bank: int) -> None:
    """Dims past 4294967294 (declared by an external-data initializer, never read) fail 1C.13."""
    model = offload_model("int4")
    name = {2: "fc1_w", 5: "fc2_w"}[bank]
    tensor = next(t for t in model.graph.initializer if t.name == name)
    tensor.dims[1] = 4294967295
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="absent.bin")
    assert offload_eligibility(model, "required") == [("moe0", "invalid expert count or weight dimensions for QMoE offload")]
    tensor.dims[1] = 4294967294 if bank == 5 else 128
    assert offload_eligibility(model, "required")[0][1] != "invalid expert count or weight dimensions for QMoE offload"
