"""Differential tests: the generic schema rules (contracts.schema_rules) against real sessions.

Invariants guarded (each case runs against the installed onnxruntime and the contract is asked
about that same version; ``q38 check``'s graph path, runner.check_graph, is what is judged):
- Each class ORT's schema layer refuses gives the rule id of that class and ORT's own text (the
  contract message is contained in ORT's error): unknown attribute, attribute of the wrong kind
  (FLOAT / INTS / STRING for INT, INT for STRING), missing required attribute, input/output count,
  an empty name in a single slot, an input type outside its type constraint, one type parameter
  bound to two types, a declared output type that the schema contradicts, an op not registered at
  the model's opset (onnx domain, contrib domain, unknown domain, inside an If subgraph),
  a deprecated op, an opset import above ORT's support; and the accepted variants pass.
- Version differences come from the dumps: GatedDeltaNet float16 decay/beta (1.31.1: not in TS),
  attributes and slots 1.32.0 added, ops 1.31.1 lacks.
- A wrongly-kinded attribute never raises: it is a violation (the crash of issue 12).
- ``Constant`` as ORT's graph constructor reads it: an initializer made from its FIRST attribute
  whatever its name (the type a consumer sees; names never checked); none at all, or a first
  attribute that is no data (a graph, a list of tensors), is refused with ORT's text.
  Multinomial's output type is its ``dtype`` (int32 by default); RandomNormal / RandomUniform's
  is float by default, EyeLike / Random*Like's their input's.
- A heterogeneous variadic (Loop's carried values) binds no single type.
- Types flow through a graph listed consumer-first (ORT sorts it) as through the sorted one.
- An unnamed node's violation has an empty node and names it in its message as ORT does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import (
    MS,
    ORT_VERSION,
    _model,
    _vi,
    assert_agrees,
    causal_conv_model,
    dsa_model,
    gdn_model,
    graph_violations,
    ort_error,
)

pytestmark = pytest.mark.differential
_V132 = ORT_VERSION >= "1.32"


def _gated_add(names: tuple[str, ...] = ("a", "b", "g"), outs: tuple[str, ...] = ("y",), *,
               types: dict[str, int] | None = None, out_type: int = TP.FLOAT, **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    types = {"a": TP.FLOAT, "b": TP.FLOAT, "g": TP.FLOAT, "gw": TP.FLOAT, **(types or {})}
    node = oh.make_node("GatedAdd", list(names), list(outs), name="ga", domain=MS, **attrs)
    shapes = {"a": [2, 8], "b": [2, 8], "g": [2, 8], "gw": [8, 8]}
    ins = [_vi(n, types[n], shapes[n]) for n in dict.fromkeys(n for n in names if n)]
    return _model([node], ins, [_vi(o, out_type, None) for o in outs if o])


def _one(op: str, ins: list[tuple[str, int, list[Any]]], outs: list[str], *, domain: str = "",
         opsets: list[tuple[str, int]] | None = None, **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    node = oh.make_node(op, [n for n, _t, _s in ins], outs, name="n0", domain=domain, **attrs)
    graph = oh.make_graph([node], "g", [_vi(n, t, s) for n, t, s in ins], [_vi(o, ins[0][1], None) for o in outs])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid(d, v) for d, v in (opsets or [("", 21), (MS, 1)])])
    model.ir_version = 10
    return model


def _with_attr(model: onnx.ModelProto, name: str, value: Any) -> onnx.ModelProto:
    node = model.graph.node[0]
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(oh.make_attribute(name, value))
    return model


def _qmoe(**attrs: Any) -> onnx.ModelProto:
    from support.contracts_testkit import qmoe_model

    model = onnx.load_from_string(qmoe_model())
    for name, value in attrs.items():
        _with_attr(model, name, value)
    return model


def _in_if(inner: onnx.ModelProto) -> onnx.ModelProto:
    """``inner``'s node inside both branches of an If named 'branch'."""
    node = inner.graph.node[0]

    def branch(tag: str) -> onnx.GraphProto:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = f"{node.name}_{tag}"
        copy.output[0] = f"{copy.output[0]}_{tag}"
        return oh.make_graph([copy], tag, [], [_vi(copy.output[0], TP.FLOAT, None)])

    if_node = oh.make_node("If", ["cond"], ["out"], name="branch", then_branch=branch("t"), else_branch=branch("e"))
    ins = [_vi("cond", TP.BOOL, []), *inner.graph.input]
    return _model([if_node], ins, [_vi("out", TP.FLOAT, None)], list(inner.graph.initializer))


def _opsets(model: onnx.ModelProto, opsets: list[tuple[str, int]]) -> onnx.ModelProto:
    del model.opset_import[:]
    model.opset_import.extend(oh.make_opsetid(d, v) for d, v in opsets)
    return model


def _constant(attrs: list[tuple[str, Any]], add_to: int | None = None, *, in_if: bool = False) -> onnx.ModelProto:
    """A Constant 'k' with ``attrs`` in this proto order, consumed by an Add with an input of type ``add_to``
    (or by an Identity), optionally inside both branches of an If."""
    const = oh.make_node("Constant", [], ["c"], name="k")
    const.attribute.extend(oh.make_attribute(n, v) for n, v in attrs)
    use = oh.make_node("Add", ["c", "b"], ["y"], name="ad") if add_to is not None else oh.make_node("Identity", ["c"], ["y"], name="id")
    ins = [_vi("b", add_to, [1])] if add_to is not None else []
    if in_if:
        branch = oh.make_graph([const, use], "t", [], [onnx.ValueInfoProto(name="y")])
        node = oh.make_node("If", ["cond"], ["out"], name="branch", then_branch=branch, else_branch=branch)
        return _model([node], [_vi("cond", TP.BOOL, []), *ins], [onnx.ValueInfoProto(name="out")], ms=False)
    return _model([const, use], ins, [onnx.ValueInfoProto(name="y")], ms=False)


def _multinomial(dtype: int | None, add_to: int) -> onnx.ModelProto:
    attrs = {} if dtype is None else {"dtype": dtype}
    sample = oh.make_node("Multinomial", ["p"], ["s"], name="mn", sample_size=2, **attrs)
    add = oh.make_node("Add", ["s", "b"], ["y"], name="ad")
    return _model([sample, add], [_vi("p", TP.FLOAT, [1, 4]), _vi("b", add_to, [1])], [onnx.ValueInfoProto(name="y")], ms=False)


def _unsorted(add_to: int, *, consumer_first: bool = True) -> onnx.ModelProto:
    """Cast x to int64 'ca' -> Neg 'ng' -> Add 'ad' (with an input of type ``add_to``), listed
    consumer-first (ORT sorts the graph itself and accepts it) or in graph order."""
    chain = [oh.make_node("Cast", ["x"], ["c"], name="ca", to=TP.INT64), oh.make_node("Neg", ["c"], ["d"], name="ng"),
             oh.make_node("Add", ["d", "b"], ["y"], name="ad")]  # fmt: skip
    nodes = chain[::-1] if consumer_first else chain
    return _model(nodes, [_vi("x", TP.FLOAT, [2]), _vi("b", add_to, [2])], [onnx.ValueInfoProto(name="y")], ms=False)


def _generated(op: str, add_to: int, *, of: int | None = None, **attrs: Any) -> onnx.ModelProto:
    """``op`` 'gen' (a generator without inputs, or a *Like of an input of type ``of``) into an Add
    with an input of type ``add_to``."""
    ins = [] if of is None else [_vi("p", of, [2, 2])]
    gen = oh.make_node(op, [i.name for i in ins], ["s"], name="gen", **attrs)
    add = oh.make_node("Add", ["s", "b"], ["y"], name="ad")
    return _model([gen, add], [*ins, _vi("b", add_to, [1])], [onnx.ValueInfoProto(name="y")], ms=False)


def _filled(add_to: int, value_type: int | None) -> onnx.ModelProto:
    """ConstantOfShape 'gen' (filled with a ``value_type`` value, or float 0 without ``value``) into
    an Add with an input of type ``add_to``."""
    attrs = {} if value_type is None else {"value": oh.make_tensor("v", value_type, [1], [1])}
    gen = oh.make_node("ConstantOfShape", ["p"], ["s"], name="gen", **attrs)
    add = oh.make_node("Add", ["s", "b"], ["y"], name="ad")
    return _model([gen, add], [_vi("p", TP.INT64, [2]), _vi("b", add_to, [1])], [onnx.ValueInfoProto(name="y")], ms=False)


def _loop(carried: tuple[int, ...]) -> onnx.ModelProto:
    """A Loop 'lp' carrying one value per type of ``carried`` (its V is a heterogeneous variadic)."""
    names = [f"v{i}" for i in range(len(carried))]
    body = oh.make_graph(
        [oh.make_node("Identity", ["cin"], ["cout"]), *(oh.make_node("Identity", [n], [f"{n}_o"]) for n in names)],
        "body", [_vi("i", TP.INT64, []), _vi("cin", TP.BOOL, []), *(_vi(n, t, [2]) for n, t in zip(names, carried, strict=True))],
        [_vi("cout", TP.BOOL, []), *(_vi(f"{n}_o", t, [2]) for n, t in zip(names, carried, strict=True))],
    )  # fmt: skip
    node = oh.make_node("Loop", ["m", "cond", *(f"{n}_0" for n in names)], [f"{n}_f" for n in names], name="lp", body=body)
    ins = [_vi("m", TP.INT64, []), _vi("cond", TP.BOOL, []), *(_vi(f"{n}_0", t, [2]) for n, t in zip(names, carried, strict=True))]
    return _model([node], ins, [_vi(f"{n}_f", t, [2]) for n, t in zip(names, carried, strict=True)], ms=False)


def _layer_norm_without_y() -> onnx.ModelProto:
    """LayerNormalization whose single output Y is left empty, only the optional Mean kept."""
    node = oh.make_node("LayerNormalization", ["x", "s"], ["", "mean"], name="ln", axis=-1)
    return _model([node], [_vi("x", TP.FLOAT, [2, 8]), _vi("s", TP.FLOAT, [8])], [_vi("mean", TP.FLOAT, None)], ms=False)

_F = [("x", TP.FLOAT, [2, 8])]
# (case, model builder, rule id on 1.32.0, rule id on 1.31.1) ; None = accepted
CASES: list[tuple[str, Callable[[], onnx.ModelProto], str | None, str | None]] = [
    ("valid gated add", lambda: _gated_add(), None, None),
    ("unknown attribute (contrib)", lambda: _with_attr(causal_conv_model(), "bogus_attr", 1), "ORT-SCHEMA-003", "ORT-SCHEMA-003"),
    ("unknown attribute (standard)", lambda: _one("Softmax", _F, ["y"], bogus=1), "ORT-SCHEMA-003", "ORT-SCHEMA-003"),
    ("internal __attribute is not checked", lambda: _one("Softmax", _F, ["y"], __internal=1), None, None),
    ("FLOAT for INT", lambda: causal_conv_model(ndim=1.0), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("INTS for INT (ndim=[3])", lambda: causal_conv_model(ndim=[3]), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("QMoE k=[0,1]", lambda: _qmoe(k=[0, 1]), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("QMoE k=0.5", lambda: _qmoe(k=0.5), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("INT for STRING", lambda: causal_conv_model(activation=1), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("STRING for INT", lambda: causal_conv_model(dilation="2"), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("INT for FLOAT (standard)", lambda: _one("LeakyRelu", _F, ["y"], alpha=1), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("required attribute missing", lambda: dsa_model(num_heads=None), "ORT-SCHEMA-007", "ORT-SCHEMA-007"),
    ("too few inputs", lambda: _gated_add(("a", "b")), "ORT-SCHEMA-004", "ORT-SCHEMA-004"),
    ("too many inputs", lambda: _gated_add(("a", "b", "g", "gw", "a")), "ORT-SCHEMA-004", "ORT-SCHEMA-004"),
    ("projected GatedAdd (4 inputs, 1.32.0 only)", lambda: _gated_add(("a", "b", "g", "gw")), None, "ORT-SCHEMA-004"),
    ("too many outputs", lambda: _one("Softmax", _F, ["y", "z"]), "ORT-SCHEMA-004", "ORT-SCHEMA-004"),
    ("too few outputs: a Cast with none", lambda: _one("Cast", _F, [], to=TP.INT64), "ORT-SCHEMA-004", "ORT-SCHEMA-004"),
    ("empty single input", lambda: _gated_add(("a", "", "g")), "ORT-SCHEMA-008", "ORT-SCHEMA-008"),
    ("empty single output", _layer_norm_without_y, "ORT-SCHEMA-008", "ORT-SCHEMA-008"),
    ("type outside the constraint (contrib)", lambda: _gated_add(types={"a": TP.DOUBLE}, out_type=TP.DOUBLE), "ORT-SCHEMA-002", "ORT-SCHEMA-002"),
    ("type outside the constraint (standard)", lambda: _one("Relu", [("x", TP.UINT8, [2])], ["y"]), "ORT-SCHEMA-002", "ORT-SCHEMA-002"),
    ("type parameter bound to two types", lambda: _gated_add(types={"b": TP.FLOAT16}), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("homogeneous variadic: Concat of float and float16", lambda: _one("Concat", [("a", TP.FLOAT, [2]), ("b", TP.FLOAT16, [2])], ["y"], axis=0), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("homogeneous variadic: Concat of float and float", lambda: _one("Concat", [("a", TP.FLOAT, [2]), ("b", TP.FLOAT, [2])], ["y"], axis=0), None, None),
    ("declared output type contradicts", lambda: _gated_add(out_type=TP.FLOAT16), "ORT-SCHEMA-009", "ORT-SCHEMA-009"),
    ("gdn fp16 decay/beta (TS in 1.31.1)", lambda: gdn_model(), None, "ORT-SCHEMA-002"),
    ("gdn float decay, bf16 beta", lambda: gdn_model(decay=TP.FLOAT, beta=TP.BFLOAT16), "ORT-SCHEMA-005", "ORT-SCHEMA-002"),
    ("gdn gate_lower_bound (1.32.0 attribute)", lambda: gdn_model(decay=TP.FLOAT, gate_lower_bound=-5.0), None, "ORT-SCHEMA-003"),
    ("contrib op in the onnx domain", lambda: _in_domain(_qmoe(), ""), "ORT-SCHEMA-001", "ORT-SCHEMA-001"),
    ("unknown contrib op", lambda: _one("Bogus", _F, ["y"], domain=MS), "ORT-SCHEMA-001", "ORT-SCHEMA-001"),
    ("op of an unknown domain", lambda: _one("Bogus", _F, ["y"], domain="x.custom", opsets=[("", 21), ("x.custom", 1)]), "ORT-SCHEMA-011", "ORT-SCHEMA-011"),
    ("onnx op above its opset", lambda: _one("Gelu", _F, ["y"], opsets=[("", 12)]), "ORT-SCHEMA-001", "ORT-SCHEMA-001"),
    ("onnx op above its opset, domain spelled ai.onnx", lambda: _one("Gelu", _F, ["y"], domain="ai.onnx", opsets=[("", 12)]), "ORT-SCHEMA-001", "ORT-SCHEMA-001"),
    ("onnx domain at opset 0", lambda: _one("Relu", _F, ["y"], opsets=[("", 0)]), "ORT-SCHEMA-001", "ORT-SCHEMA-001"),
    ("contrib domain at opset 0", lambda: _opsets(_gated_add(), [("", 21), (MS, 0)]), "ORT-SCHEMA-001", "ORT-SCHEMA-001"),
    ("contrib op without its import", lambda: _opsets(_gated_add(), [("", 21)]), None, None),
    ("ops 1.31.1 lacks", lambda: _one("HyperConnectionLowRankMix", _F, ["y", "z"], domain=MS, num_branches=2), "ORT-SCHEMA-004", "ORT-SCHEMA-001"),
    ("deprecated op", lambda: _one("Upsample", [("x", TP.FLOAT, [2]), ("s", TP.FLOAT, [1])], ["y"], opsets=[("", 10)]), "ORT-SCHEMA-010", "ORT-SCHEMA-010"),
    ("onnx import above ORT's support", lambda: _opsets(_gated_add(), [("", 10000), (MS, 1)]), "ORT-OPSET-001", "ORT-OPSET-001"),
    ("contrib import above ORT's support", lambda: _opsets(_gated_add(), [("", 21), (MS, 2)]), "ORT-OPSET-001", "ORT-OPSET-001"),
    ("onnx import 27 (1.32.0 only)", lambda: _opsets(_gated_add(), [("", 27), (MS, 1)]), None, "ORT-OPSET-001"),
    ("subgraph: unknown attribute", lambda: _in_if(_with_attr(causal_conv_model(), "bogus_attr", 1)), "ORT-SCHEMA-003", "ORT-SCHEMA-003"),
    ("subgraph: unregistered op", lambda: _in_if(_one("Bogus", _F, ["y"], domain=MS)), "ORT-SCHEMA-001", "ORT-SCHEMA-001"),
    ("subgraph: wrong attribute kind", lambda: _in_if(causal_conv_model(ndim=[3])), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("subgraph: valid", lambda: _in_if(_gated_add()), None, None),
    ("Constant without attributes", lambda: _constant([]), "ORT-SCHEMA-007", "ORT-SCHEMA-007"),
    ("Constant without attributes, in a subgraph", lambda: _constant([], in_if=True), "ORT-SCHEMA-007", "ORT-SCHEMA-007"),
    ("Constant: a graph attribute is no data", lambda: _constant([("value", oh.make_graph([], "sub", [], []))]), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("Constant: a list of tensors is no data", lambda: _constant([("bogus", [onnx.numpy_helper.from_array(np.zeros(1, np.float32))])]), "ORT-SCHEMA-006", "ORT-SCHEMA-006"),
    ("Constant: a second attribute of another kind is not read", lambda: _constant([("value_int", 1), ("bogus", oh.make_graph([], "sub", [], []))], TP.INT64), None, None),
    ("Constant: attribute names are never checked", lambda: _constant([("bogus", 3)]), None, None),
    ("Constant: its first attribute is the data (int64)", lambda: _constant([("value_int", 2), ("value_float", 1.0)], TP.INT64), None, None),
    ("Constant: its first attribute is the data (float)", lambda: _constant([("value_float", 1.0), ("value_int", 2)], TP.INT64), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("Constant: a 'bogus' FLOAT is float data", lambda: _constant([("bogus", 1.5)], TP.FLOAT), None, None),
    ("Constant: a tensor", lambda: _constant([("value", onnx.numpy_helper.from_array(np.zeros(1, np.int32)))], TP.INT32), None, None),
    ("Constant: a tensor into a float Add", lambda: _constant([("value", onnx.numpy_helper.from_array(np.zeros(1, np.int32)))], TP.FLOAT), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("Multinomial dtype int64", lambda: _multinomial(TP.INT64, TP.INT64), None, None),
    ("Multinomial default dtype is int32", lambda: _multinomial(None, TP.INT64), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("Multinomial dtype int32", lambda: _multinomial(TP.INT32, TP.INT32), None, None),
    ("RandomNormal without dtype is float", lambda: _generated("RandomNormal", TP.FLOAT, shape=[1]), None, None),
    ("RandomUniform without dtype is float, not double", lambda: _generated("RandomUniform", TP.DOUBLE, shape=[1]), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("RandomUniform dtype double", lambda: _generated("RandomUniform", TP.DOUBLE, shape=[1], dtype=TP.DOUBLE), None, None),
    ("ConstantOfShape is its value's type", lambda: _filled(TP.INT64, TP.INT64), None, None),
    ("ConstantOfShape of an int64 value into a float Add", lambda: _filled(TP.FLOAT, TP.INT64), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("ConstantOfShape without value is float", lambda: _filled(TP.FLOAT, None), None, None),
    ("EyeLike without dtype is its input's type", lambda: _generated("EyeLike", TP.DOUBLE, of=TP.DOUBLE), None, None),
    ("RandomNormalLike without dtype is its input's type", lambda: _generated("RandomNormalLike", TP.FLOAT, of=TP.DOUBLE), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("Bernoulli without dtype is its input's type", lambda: _generated("Bernoulli", TP.DOUBLE, of=TP.DOUBLE), None, None),
    ("Bernoulli without dtype into a float Add", lambda: _generated("Bernoulli", TP.FLOAT, of=TP.DOUBLE), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
    ("Bernoulli dtype float of a double", lambda: _generated("Bernoulli", TP.FLOAT, of=TP.DOUBLE, dtype=TP.FLOAT), None, None),
    ("heterogeneous variadic: Loop carrying float and int64", lambda: _loop((TP.FLOAT, TP.INT64)), None, None),
    ("unsorted graph: a Cast listed after its consumers types them", lambda: _unsorted(TP.INT64), None, None),
    ("unsorted graph: int64 from a Cast listed last meets a float", lambda: _unsorted(TP.FLOAT), "ORT-SCHEMA-005", "ORT-SCHEMA-005"),
]  # fmt: skip


def _in_domain(model: onnx.ModelProto, domain: str) -> onnx.ModelProto:
    for node in model.graph.node:
        node.domain = domain
    return model


@pytest.mark.parametrize(("case", "build", "on_132", "on_131"), CASES, ids=[c[0] for c in CASES])
def test_generic_schema_rules_match_onnxruntime(case: str, build: Callable[[], onnx.ModelProto],
                                                on_132: str | None, on_131: str | None) -> None:  # fmt: skip
    model = build()
    expected = on_132 if _V132 else on_131
    violations = graph_violations(model)
    errors = [v for v in violations if v.severity == "error"]
    if expected is None:
        assert errors == [], errors
    else:
        assert expected in {v.rule_id for v in errors}, errors
        assert all(v.rule_id.startswith(("ORT-SCHEMA-", "ORT-OPSET-")) for v in errors), errors
    assert_agrees(violations, ort_error(model), context=case)


def test_violations_name_the_node_and_carry_orts_words() -> None:
    [v] = graph_violations(causal_conv_model(ndim=[3]))
    assert (v.rule_id, v.node) == ("ORT-SCHEMA-006", "cc")
    assert v.message == "Mismatched attribute type in 'cc : ndim'. Expected: 'INT', actual: 'INTS'"
    [v] = graph_violations(_gated_add(types={"b": TP.FLOAT16}))
    assert v.message == ("Type Error: Type parameter (T) of Optype (GatedAdd) bound to different types "
                         "(tensor(float) and tensor(float16) in node (ga).")  # fmt: skip
    [v] = graph_violations(_gated_add(("a", "b")))
    top = 4 if _V132 else 3
    assert v.message == f"Node(ga) with schema(com.microsoft::GatedAdd:1) has input size 2 not in range [min=3, max={top}]."
    [v] = graph_violations(_in_domain(_qmoe(), ""))
    assert v.message == "No Op registered for QMoE with domain_version of 21"


def _unnamed(model: onnx.ModelProto) -> onnx.ModelProto:
    for node in model.graph.node:
        node.name = ""
    return model


def _matmul_mismatch() -> onnx.ModelProto:
    node = oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    w = onnx.numpy_helper.from_array(np.zeros((4, 5), np.float32), "w")
    return _model([node], [_vi("x", TP.FLOAT, [2, 3])], [onnx.ValueInfoProto(name="y")], [w], ms=False)


# One violation per rule whose message names the node, built with names and then blanked.
_UNNAMED: list[tuple[str, Callable[[], onnx.ModelProto]]] = [
    ("ORT-SCHEMA-002", lambda: _one("Relu", [("x", TP.UINT8, [2])], ["y"])),
    ("ORT-SCHEMA-004", lambda: _one("Relu", [("x", TP.FLOAT, [2]), ("z", TP.FLOAT, [2])], ["y"])),
    ("ORT-SCHEMA-005", lambda: _gated_add(types={"b": TP.FLOAT16})),
    ("ORT-SCHEMA-006", lambda: causal_conv_model(ndim=[3])),
    ("ORT-SCHEMA-007", lambda: _constant([])),
    ("ORT-SCHEMA-008", lambda: _gated_add(("a", "", "g"))),
    ("ORT-SCHEMA-008", _layer_norm_without_y),
    ("ORT-SCHEMA-009", lambda: _gated_add(out_type=TP.FLOAT16)),
    ("ORT-SHAPE-001", _matmul_mismatch),
]  # fmt: skip


@pytest.mark.parametrize(("rule_id", "build"), _UNNAMED, ids=[rule_id for rule_id, _build in _UNNAMED])
def test_a_violation_of_an_unnamed_node_names_it_as_onnxruntime_does(rule_id: str, build: Callable[[], onnx.ModelProto]) -> None:
    """A node without a name is reported with an empty node (``q38 check`` shows '-') and its
    message names it as ORT's does: '()' / '' where the name goes."""
    model = _unnamed(build())
    error = ort_error(model)
    found = [v for v in graph_violations(model) if v.severity == "error"]
    assert [(v.rule_id, v.node) for v in found] == [(rule_id, "")]
    assert error is not None and found[0].message in error, (found[0].message, error)


def test_an_unsorted_graph_gets_the_verdict_of_its_sorted_self() -> None:
    """Element types flow through a graph listed consumer-first (ORT sorts it and accepts it)
    exactly as through the sorted one: the same violation, on the same node, in ORT's words."""
    def found(model: onnx.ModelProto) -> list[tuple[str, str, str]]:
        return [(v.rule_id, v.node, v.message) for v in graph_violations(model)]

    text = "Type Error: Type parameter (T) of Optype (Add) bound to different types (tensor(int64) and tensor(float) in node (ad)."
    assert found(_unsorted(TP.FLOAT)) == found(_unsorted(TP.FLOAT, consumer_first=False)) == [("ORT-SCHEMA-005", "ad", text)]
    assert text in (ort_error(_unsorted(TP.FLOAT)) or "")
    assert found(_unsorted(TP.INT64)) == found(_unsorted(TP.INT64, consumer_first=False)) == []


def test_an_import_of_an_unknown_domain_names_it_and_the_way_out() -> None:
    """ORT-OPSET-002 (ORT ignores an import no node uses, so a warning, never a refusal): one warning
    per unknown domain, with its version, saying that a custom-op library is what would provide it."""
    from contracts.runner import check_graph

    model = _opsets(_gated_add(), [("", 21), (MS, 1), ("com.evil", 3), ("ai.onnx.ml", 3), ("org.other", 1)])
    assert ort_error(model) is None
    found = [(v.rule_id, v.severity, v.message) for v in graph_violations(model) if v.rule_id.startswith("ORT-OPSET")]
    tail = "onnxruntime registers no operator in it and the graph's session registers no custom-op library"
    assert found == [("ORT-OPSET-002", "warning", f"opset import of domain 'com.evil' (version 3): {tail}"),
                     ("ORT-OPSET-002", "warning", f"opset import of domain 'org.other' (version 1): {tail}")]  # fmt: skip
    assert [v for v in check_graph(model, ort_version=ORT_VERSION, custom_library=True) if v.rule_id.startswith("ORT-OPSET")] == []


def test_a_backward_slice_that_selects_nothing_is_empty_as_in_onnxruntime() -> None:
    """A step -1 Slice whose start lies before its end is empty: adding it to a length-2 tensor is refused, as ORT does."""
    inits = [oh.make_tensor(n, TP.INT64, [1], [v]) for n, v in (("st", 0), ("en", 3), ("ax", 0), ("sp", -1))]
    nodes = [oh.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]), oh.make_node("Add", ["s", "z"], ["y"])]
    model = _model(nodes, [_vi("x", TP.FLOAT, [5]), _vi("z", TP.FLOAT, [2])], [_vi("y", TP.FLOAT, None)], inits, ms=False)
    violations = graph_violations(model)
    error = ort_error(model)
    assert violations and error is not None and "Incompatible dimensions" in error
    assert_agrees(violations, error, context="Slice [5] 0:3:-1 then Add [2]")
