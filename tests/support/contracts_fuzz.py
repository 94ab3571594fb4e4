"""A seeded differential generator: mutate real graphs, ask onnxruntime and the contracts.

Each case is one mutation of a base graph (the synthetic cpu-variant target graph, which a real
1.32.0 CPU session creates, or a one-node model) in one class of issue 12's list, or one session
config. The verdict of a real ``InferenceSession`` (a ``NOT_IMPLEMENTED`` missing kernel is a
refusal like any other: ORT-KERNEL-001 predicts it) is compared with ``q38 check``'s graph path on the same file
(``runner.check_graph`` on ``q38.package.load_graph``'s model; errors only). The generator never
decides the expected answer itself: onnxruntime does.

Classes: ``unknown_attribute``, ``attribute_kind``, ``type_constraint``, ``arity``,
``registration`` (op / domain / opset, also inside an If subgraph), ``shape_inference`` (values
that only inference knows), ``cpu_constructor`` (QMoE, CausalConvWithState, GatedDeltaNet,
GroupQueryAttention), ``valid`` (mutations ORT accepts), ``session_options``.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as oh

MS = "com.microsoft"
CLASSES = ("unknown_attribute", "attribute_kind", "type_constraint", "arity", "registration",
           "shape_inference", "cpu_constructor", "valid", "session_options")  # fmt: skip


@dataclass
class Case:
    cls: str
    label: str
    model: onnx.ModelProto
    entries: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    case: Case
    ort_error: str | None
    contract: list[str]  # error messages
    agree: bool


def _node(model: onnx.ModelProto, op: str, rng: random.Random) -> onnx.NodeProto:
    found = [n for n in model.graph.node if n.op_type == op]
    return rng.choice(found)


def _set_attr(node: onnx.NodeProto, name: str, value: Any) -> None:
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(oh.make_attribute(name, value))


def _random_value(rng: random.Random, kind: str) -> Any:
    if kind == "INT":
        return rng.choice([0, 1, 2, 3, -1, 7, 2**31, 2**40])
    if kind == "FLOAT":
        return rng.choice([0.5, -1.0, 1e-6, 3.0])
    if kind == "STRING":
        return rng.choice(["bogus", "none", "silu", "x"])
    if kind == "INTS":
        return rng.choice([[0, 1], [3], [1, 2, 3]])
    return rng.choice([[0.5], [1.0, 2.0]])


_CONTRIB_OPS = ("CausalConvWithState", "GatedDeltaNet", "QMoE", "HyperConnectionPreMix", "HyperConnectionPostMix",
                "BranchwiseRMSNorm", "GatedRMSNorm", "GatedAdd", "ScaledSiLU", "GroupQueryAttention")  # fmt: skip


def _unknown_attribute(base: onnx.ModelProto, rng: random.Random) -> Case:
    model = copy.deepcopy(base)
    op = rng.choice((*_CONTRIB_OPS, "MatMul", "Softmax", "Reshape"))
    node = _node(model, op, rng)
    name = rng.choice(["bogus_attr", "ndims", "k2", "num_branch", "axis2"])
    _set_attr(node, name, _random_value(rng, rng.choice(["INT", "FLOAT", "STRING"])))
    return Case("unknown_attribute", f"{op} {name}", model)


def _attribute_kind(base: onnx.ModelProto, rng: random.Random) -> Case:
    model = copy.deepcopy(base)
    candidates = [(n, a) for n in model.graph.node if n.op_type in _CONTRIB_OPS or n.op_type == "Softmax" for a in n.attribute]
    node, attribute = rng.choice(candidates)
    kinds = [k for k in ("INT", "FLOAT", "STRING", "INTS", "FLOATS") if k != onnx.AttributeProto.AttributeType.Name(attribute.type)]
    kind = rng.choice(kinds)
    _set_attr(node, attribute.name, _random_value(rng, kind))
    return Case("attribute_kind", f"{node.op_type} {attribute.name} as {kind}", model)


def _insert_cast(model: onnx.ModelProto, node: onnx.NodeProto, slot: int, to: int) -> None:
    source = node.input[slot]
    cast_out = f"{source}_fuzz_cast"
    cast = oh.make_node("Cast", [source], [cast_out], name=f"fuzz_cast_{slot}", to=to)
    index = list(model.graph.node).index(node)
    model.graph.node.insert(index, cast)
    node.input[slot] = cast_out


def _type_constraint(base: onnx.ModelProto, rng: random.Random) -> Case:
    model = copy.deepcopy(base)
    op = rng.choice(_CONTRIB_OPS)
    node = _node(model, op, rng)
    slots = [i for i, name in enumerate(node.input) if name]
    slot = rng.choice(slots)
    to = rng.choice([TP.DOUBLE, TP.FLOAT, TP.FLOAT16, TP.BFLOAT16, TP.INT32, TP.INT64, TP.UINT8])
    _insert_cast(model, node, slot, to)
    return Case("type_constraint", f"{op} input {slot} -> {TP.DataType.Name(to)}", model)


def _arity(base: onnx.ModelProto, rng: random.Random) -> Case:
    model = copy.deepcopy(base)
    op = rng.choice(_CONTRIB_OPS)
    node = _node(model, op, rng)
    how = rng.choice(["extra input", "drop inputs", "extra output", "empty required"])
    if how == "extra input":
        node.input.extend([node.input[0]] * rng.choice([1, 5, 12]))
    elif how == "drop inputs" and len(node.input) > 1:
        del node.input[rng.randrange(1, len(node.input)) :]
    elif how in {"extra output", "drop inputs"}:
        node.output.extend([f"fuzz_extra_out_{i}" for i in range(rng.choice([1, 3]))])
    else:
        node.input[0] = ""
    return Case("arity", f"{op} {how}", model)


def _registration(base: onnx.ModelProto, rng: random.Random) -> Case:
    model = copy.deepcopy(base)
    how = rng.choice(["contrib in onnx domain", "bogus op", "bogus domain", "onnx opset", "ms opset", "std in ms domain", "in subgraph"])
    if how == "contrib in onnx domain":
        _node(model, rng.choice(_CONTRIB_OPS), rng).domain = ""
    elif how == "bogus op":
        _node(model, rng.choice(_CONTRIB_OPS), rng).op_type = "BogusOp"
    elif how == "bogus domain":
        node = _node(model, rng.choice(_CONTRIB_OPS), rng)
        node.domain = "com.bogus"
        model.opset_import.append(oh.make_opsetid("com.bogus", 1))
    elif how == "std in ms domain":
        _node(model, rng.choice(["MatMul", "Softmax", "Sigmoid"]), rng).domain = MS
    elif how in {"onnx opset", "ms opset"}:
        domain = "" if how == "onnx opset" else MS
        version = rng.choice([0, 1, 12, 20, 27, 28, 29, 10000] if domain == "" else [0, 2, 10000])
        for opset in model.opset_import:
            if opset.domain == domain:
                opset.version = version
        how = f"{how} {version}"
    else:
        node = _node(model, rng.choice(["Sigmoid", "MatMul"]), rng)
        _wrap_in_if(model, node, rng)
    return Case("registration", how, model)


def _wrap_in_if(model: onnx.ModelProto, node: onnx.NodeProto, rng: random.Random) -> None:
    """Move ``node`` into both branches of an If (cond: a new bool graph input), optionally broken."""
    broken = rng.choice([None, "bogus op", "unknown attribute"])
    index = list(model.graph.node).index(node)
    model.graph.node.remove(node)

    def branch(tag: str) -> onnx.GraphProto:
        inner = copy.deepcopy(node)
        inner.name = f"{node.name}_{tag}"
        inner.output[0] = f"{node.output[0]}_{tag}"
        if broken == "bogus op":
            inner.op_type, inner.domain = "BogusOp", MS
        elif broken == "unknown attribute":
            inner.attribute.append(oh.make_attribute("bogus_attr", 1))
        out = onnx.ValueInfoProto()
        out.name = inner.output[0]
        return oh.make_graph([inner], tag, [], [out])

    if_node = oh.make_node("If", ["fuzz_cond"], [node.output[0]], name="fuzz_if", then_branch=branch("then"),
                           else_branch=branch("else"))  # fmt: skip
    model.graph.node.insert(index, if_node)
    model.graph.input.append(oh.make_tensor_value_info("fuzz_cond", TP.BOOL, []))


_SHAPE_MUTATIONS: tuple[tuple[str, str, list[Any]], ...] = (
    ("HyperConnectionPreMix", "num_branches", [1, 2, 3, 4, 5, 6, 8, -1, 0]),
    ("CausalConvWithState", "ndim", [1, 2, 3, 0, 4]),
    ("CausalConvWithState", "channels_last", [0, 1, 2]),
    ("GroupQueryAttention", "num_heads", [1, 2, 3, 4, 8]),
    ("GatedDeltaNet", "state_update_capacity", [0, 2, 8, 9, -1]),
)


def _shape_inference(base: onnx.ModelProto, rng: random.Random) -> Case:
    model = copy.deepcopy(base)
    how = rng.choice(["attribute", "unsqueeze input", "reshape input"])
    if how == "attribute":
        op, name, values = rng.choice(_SHAPE_MUTATIONS)
        value = rng.choice(values)
        _set_attr(_node(model, op, rng), name, value)
        return Case("shape_inference", f"{op} {name}={value}", model)
    op, slot = rng.choice([("GatedDeltaNet", 6), ("GatedDeltaNet", 0), ("CausalConvWithState", 0), ("CausalConvWithState", 1),
                           ("GroupQueryAttention", 0), ("HyperConnectionPreMix", 0), ("GroupQueryAttention", 3)])  # fmt: skip
    node = _node(model, op, rng)
    if not node.input[slot] if slot < len(node.input) else True:
        return Case("shape_inference", f"{op} input {slot} absent (no change)", model)
    source, out = node.input[slot], f"{node.input[slot]}_fuzz_shape"
    axes = f"{out}_axes"
    if how == "unsqueeze input":
        model.graph.initializer.append(onnx.numpy_helper.from_array(__import__("numpy").array([0], "int64"), axes))
        extra = oh.make_node("Unsqueeze", [source, axes], [out], name=f"fuzz_unsqueeze_{slot}")
    else:
        model.graph.initializer.append(onnx.numpy_helper.from_array(__import__("numpy").array([0, -1], "int64"), axes))
        extra = oh.make_node("Reshape", [source, axes], [out], name=f"fuzz_reshape_{slot}")
    model.graph.node.insert(list(model.graph.node).index(node), extra)
    node.input[slot] = out
    return Case("shape_inference", f"{op} input {slot} {how}", model)


_CPU_MUTATIONS: tuple[tuple[str, str, list[Any]], ...] = (
    ("QMoE", "k", [0, -1, 1, 2, 8]),
    ("QMoE", "swiglu_fusion", [0, 1, 2]),
    ("QMoE", "block_size", [8, 16, 32, 48, 64, 128, 256]),
    ("QMoE", "expert_weight_bits", [1, 2, 3, 4, 5, 8]),
    ("QMoE", "weights_prepacked", [-1, 0, 1, 2]),
    ("QMoE", "swiglu_limit_after_activation", [0, 1]),
    ("QMoE", "activation_type", ["swiglu", "silu", "SwiGLU", "bogus"]),
    ("QMoE", "use_sparse_mixer", [0, 1]),
    ("QMoE", "fc3_expert_weight_bits", [4, 8]),
    ("CausalConvWithState", "dilation", [1, 2, 2**31, 2**33]),
    ("CausalConvWithState", "activation", ["none", "silu", "swish", "gelu"]),
    ("CausalConvWithState", "state_window", [0, 2, 8]),
    ("GatedDeltaNet", "gate_activation", ["softplus", "qwen", "kda", "bogus", "Softplus"]),
    ("GatedDeltaNet", "update_rule", ["gated_delta", "delta", "bogus"]),
    ("GatedDeltaNet", "beta_activation", ["sigmoid", "none", "bogus"]),
    ("GatedDeltaNet", "gate_lower_bound", [-5.0, 0.0, 1.0]),
    ("GatedDeltaNet", "chunk_size", [64, 0, -1, 2**31]),
    ("GroupQueryAttention", "causal", [0, 1, 2]),
    ("GroupQueryAttention", "local_window_size", [-1, 4]),
    ("GroupQueryAttention", "k_quant_type", ["NONE", "per_tensor", "bogus"]),
)


def _cpu_constructor(base: onnx.ModelProto, rng: random.Random) -> Case:
    model = copy.deepcopy(base)
    if rng.random() < 0.2:  # an optional QMoE input the shared kernel refuses
        node = _node(model, "QMoE", rng)
        slot = rng.choice([8, 11, 12, 15, 17])
        while len(node.input) <= slot:
            node.input.append("")
        node.input[slot] = node.input[2 if slot in (8, 11, 12) else 3]
        return Case("cpu_constructor", f"QMoE input {slot} present", model)
    op, name, values = rng.choice(_CPU_MUTATIONS)
    value = rng.choice(values)
    _set_attr(_node(model, op, rng), name, value)
    return Case("cpu_constructor", f"{op} {name}={value}", model)


def _valid(base: onnx.ModelProto, rng: random.Random) -> Case:
    model = copy.deepcopy(base)
    op, name, value = rng.choice([("QMoE", "k", 1), ("QMoE", "block_size", 64), ("CausalConvWithState", "activation", "swish"),
                                  ("GatedDeltaNet", "gate_activation", "qwen"), ("GatedDeltaNet", "chunk_size", 32),
                                  ("Softmax", "axis", -1), ("QMoE", "normalize_routing_weights", 0)])  # fmt: skip
    _set_attr(_node(model, op, rng), name, value)
    return Case("valid", f"{op} {name}={value}", model)


_P = "session.moe.offload."
_FLOAT_TEXT = ["1.0000000596046448", "1.000000059604644775390625", "1.0000000596046447753906251", "0x1p-1", " 0.5", "1e-50",
               "3.40282356779733661637539395458142568447e38", "3.40282356779733661637539395458142568448e38", "7e-46",
               "7.1e-46", "1e39", "0.5", "-0", "nan", "1.5"]  # fmt: skip


def _session_options(base: onnx.ModelProto, rng: random.Random) -> Case:
    how = rng.choice(["float", "nul", "deferred", "key", "limits"])
    if how == "float":
        key = rng.choice(["min_expert_weight", "tail_substitution_threshold"])
        value = rng.choice(_FLOAT_TEXT)
        entries = {_P + key: value}
    elif how == "nul":
        key = rng.choice(["mode", "gpu_budget_bytes", "bogus", "placement"])
        value = rng.choice(["auto", "required", "1024", "bogus", "static"])
        entries = {_P + key + rng.choice(["", "\0x"]): value + rng.choice(["", "\0junk", "\0"])}
    elif how == "deferred":
        key = "ep.cpu.qmoe_deferred_scale" + rng.choice(["", "", "s", "\0x", "\udcff", "\ud800x", " "])  # near misses
        entries = {key: rng.choice(["0", "1", "bogus", "", " 1", "1\0x", "2", "1\udcff"])}
    elif how == "limits":
        entries = {rng.choice(["session.k", "x" * rng.choice([1024, 1025])]): "v" * rng.choice([8192, 8193, 3])}
    else:
        entries = {rng.choice([_P + "mode", _P + "MODE", "moe.cpu_offload.x", _P + "node_overrides"]):
                   rng.choice(["auto", "moe0:max_resident_slots=1,", "x", "required"])}  # fmt: skip
    return Case("session_options", f"{how} {entries!r}"[:120], base, entries)


_MAKERS: dict[str, Callable[[onnx.ModelProto, random.Random], Case]] = {
    "unknown_attribute": _unknown_attribute, "attribute_kind": _attribute_kind, "type_constraint": _type_constraint,
    "arity": _arity, "registration": _registration, "shape_inference": _shape_inference,
    "cpu_constructor": _cpu_constructor, "valid": _valid, "session_options": _session_options,
}  # fmt: skip


def cases(base: onnx.ModelProto, *, seed: int, per_class: int, classes: tuple[str, ...] = CLASSES) -> Iterator[Case]:
    rng = random.Random(seed)
    for cls in classes:
        for _ in range(per_class):
            yield _MAKERS[cls](base, rng)


def ort_verdict(path: Path, entries: dict[str, str]) -> str | None:
    """None when a CPU session is created, else ORT's text (a missing kernel included)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        for key, value in entries.items():
            options.add_session_config_entry(key, value)
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several pybind exception types
        return str(exc)
    return None


def judge(case: Case, package: Path) -> Outcome:
    """Write the case's graph beside the package's data, and judge it both ways."""
    from contracts.runner import check_graph, check_session_config
    from q38.package import load_graph

    path = package / "fuzz_case.onnx"
    onnx.save(case.model, path)
    try:
        error = ort_verdict(path, case.entries)
        try:
            model = load_graph(path, root=package)
        except Exception as exc:  # the graph reader refuses it: q38 check reports PKG-GRAPH-001
            contract = [f"PKG-GRAPH-001 {exc}"]
        else:
            found = check_session_config(case.entries, ort_version=ort.__version__) + check_graph(
                model, entries=case.entries, eps=frozenset({"cpu"}), ort_version=ort.__version__)
            contract = [f"{v.rule_id} {v.message}" for v in found if v.severity == "error"]
    finally:
        path.unlink(missing_ok=True)
    return Outcome(case, error, contract, (error is None) == (not contract))
