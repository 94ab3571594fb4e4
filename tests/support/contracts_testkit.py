"""Tiny models and a real-onnxruntime verdict helper for the contract tests."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

from contracts._rule import Violation

ORT_VERSION: str = ort.__version__
MS = "com.microsoft"


def _gated_delta_net_gate_types() -> frozenset[str]:
    """The types the installed onnxruntime's GatedDeltaNet schema allows for its ``decay`` gate."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C  # its schema registry

    for schema in C.get_all_operator_schema():
        if schema.name == "GatedDeltaNet" and schema.domain == MS:
            param = next(i.typeStr for i in schema.inputs if i.name == "decay")
            return frozenset(t for c in schema.type_constraints if c.type_param_str == param for t in c.allowed_type_strs)
    return frozenset()


FP16_GATES: bool = "tensor(float16)" in _gated_delta_net_gate_types()
"""Whether the installed onnxruntime takes fp16 GatedDeltaNet gates (``decay``/``beta`` typed TG,
1.32.0) as q38's synthetic packages feed them; 1.31.1 types them TS (float only) and refuses
those packages, which ``q38 check`` reports as ORT-SCHEMA-002 on every GatedDeltaNet node."""

needs_fp16_gates = pytest.mark.skipif(
    not FP16_GATES,
    reason=f"onnxruntime {ORT_VERSION} types GatedDeltaNet's gates float only: q38's synthetic packages "
    "(fp16 gates) fail its check by design (test_contracts_version_gates.py)",
)


def _model(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[Any],
           inits: Sequence[onnx.TensorProto] = (), ms: bool = True) -> onnx.ModelProto:  # fmt: skip
    graph = oh.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    opsets = [oh.make_opsetid("", 21)] + ([oh.make_opsetid(MS, 1)] if ms else [])
    model = oh.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


@functools.cache
def identity_model() -> bytes:
    node = oh.make_node("Identity", ["x"], ["y"])
    return _model([node], [oh.make_tensor_value_info("x", TP.FLOAT, [1])],
                  [oh.make_tensor_value_info("y", TP.FLOAT, [1])], ms=False).SerializeToString()  # fmt: skip


def _u8(name: str, shape: Sequence[int]) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.full(shape, 0x88, dtype=np.uint8), name)


def _f(name: str, shape: Sequence[int], dtype: Any = np.float32, value: float = 0.01) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.full(shape, value, dtype=dtype), name)


def qmoe_node(name: str = "moe0", *, inputs: Sequence[str] | None = None, **attrs: Any) -> onnx.NodeProto:
    base: dict[str, Any] = {"quant_type": "int", "expert_weight_bits": 4, "block_size": 32,
                                "activation_type": "swiglu", "swiglu_fusion": 1, "k": 2,
                                "weights_prepacked": 0, "normalize_routing_weights": 1}  # fmt: skip
    base.update(attrs)
    base = {k: v for k, v in base.items() if v is not None}
    ins = list(inputs) if inputs is not None else ["x", "router", "fc1_w", "fc1_s", "", "fc2_w", "fc2_s"]
    return oh.make_node("QMoE", ins, [f"{name}_out" if name != "moe0" else "y"], name=name, domain=MS, **base)


E, H, I = 4, 64, 32  # noqa: E741 (the spec names: experts, hidden, inter)


def qmoe_initializers() -> list[onnx.TensorProto]:
    """Raw int4 block-32 experts (fp32 scales): a layout the 1.32.0 CPU kernel accepts."""
    return [_u8("fc1_w", [E, 2 * I, H // 2]), _f("fc1_s", [E, 2 * I, H // 32]),
            _u8("fc2_w", [E, H, I // 2]), _f("fc2_s", [E, H, I // 32])]  # fmt: skip


@functools.cache
def qmoe_model() -> bytes:
    inputs = [oh.make_tensor_value_info("x", TP.FLOAT, [2, H]),
              oh.make_tensor_value_info("router", TP.FLOAT, [2, E])]  # fmt: skip
    outputs = [oh.make_tensor_value_info("y", TP.FLOAT, [2, H])]
    return _model([qmoe_node()], inputs, outputs, qmoe_initializers()).SerializeToString()


@functools.cache
def qmoe_in_if_model() -> bytes:
    """A QMoE inside both branches of an If named 'branch' (the subgraph rule)."""
    outer_in = [oh.make_tensor_value_info("cond", TP.BOOL, []),
                oh.make_tensor_value_info("x", TP.FLOAT, [2, H]),
                oh.make_tensor_value_info("router", TP.FLOAT, [2, E])]  # fmt: skip

    def branch(tag: str) -> onnx.GraphProto:
        node = qmoe_node(f"moe_{tag}")
        node.output[0] = f"y_{tag}"
        return oh.make_graph([node], tag, [], [oh.make_tensor_value_info(f"y_{tag}", TP.FLOAT, [2, H])])

    if_node = oh.make_node("If", ["cond"], ["y"], name="branch", then_branch=branch("then"),
                           else_branch=branch("else"))  # fmt: skip
    outputs = [oh.make_tensor_value_info("y", TP.FLOAT, [2, H])]
    return _model([if_node], outer_in, outputs, qmoe_initializers()).SerializeToString()


def ort_error(model: bytes | onnx.ModelProto, entries: Mapping[str, str] | None = None) -> str | None:
    """None when a CPU InferenceSession is created, else ORT's error text."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    for key, value in (entries or {}).items():
        so.add_session_config_entry(key, value)
    data = model if isinstance(model, bytes) else model.SerializeToString()
    try:
        ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several pybind exception types
        return str(exc)
    return None


def graph_violations(model: bytes | onnx.ModelProto, entries: Mapping[str, str] | None = None, *,
                     eps: frozenset[str] = frozenset({"cpu"}), version: str | None = None) -> list[Violation]:  # fmt: skip
    """Every graph rule ``q38 check`` runs on ``model`` (runner.check_graph), for ``version``
    (default: the installed onnxruntime) on a CPU session."""
    from contracts.runner import check_graph

    proto = onnx.load_from_string(model) if isinstance(model, bytes) else model
    return check_graph(proto, entries=entries, eps=eps, ort_version=version or ORT_VERSION)


_GENERIC_TEXTS = (
    ("input size", "ORT-SCHEMA-004"), ("output size", "ORT-SCHEMA-004"), ("is marked single", "ORT-SCHEMA-008"),
    ("Required attribute", "ORT-SCHEMA-007"), ("Unrecognized attribute", "ORT-SCHEMA-003"),
    ("Mismatched attribute type", "ORT-SCHEMA-006"), ("bound to different types", "ORT-SCHEMA-005"),
    ("of input parameter", "ORT-SCHEMA-002"), ("is not a registered function/op", "ORT-SCHEMA-001"),
)  # fmt: skip


def rule_for(message: str, specific: str) -> str:
    """The rule id a case's expected ORT text belongs to: a generic schema rule's, or ``specific``."""
    for text, rule_id in _GENERIC_TEXTS:
        if text in message:
            return rule_id
    return specific


def is_not_implemented(error: str | None) -> bool:
    return error is not None and (
        "NOT_IMPLEMENTED" in error or "Could not find an implementation" in error
        or "Failed to find kernel" in error
    )  # fmt: skip


def before_kernels(violations: Sequence[Violation]) -> list[Violation]:
    """The violations of the stages before ORT's kernel lookup (load, resolve, inference).

    A test that pins a schema verdict compares these; ``assert_agrees`` still holds the whole
    verdict (the ORT-KERNEL-* one included) to the real session.
    """
    return [v for v in violations if not v.rule_id.startswith("ORT-KERNEL-")]


def assert_agrees(violations: Sequence[Violation], error: str | None, *, context: str = "") -> None:
    """The contract verdict equals ORT's, and ORT's text contains one of the contract messages.

    A NOT_IMPLEMENTED error (no CPU kernel) is a refusal like any other: ORT-KERNEL-001 says it,
    in ORT's words.
    """
    errors = [v for v in violations if v.severity == "error"]
    if error is None:
        assert not errors, f"{context}: ORT accepted, contract says {[v.message for v in errors]}"
        return
    assert errors, f"{context}: ORT rejected ({error!r}), contract accepted"
    assert any(v.message in error for v in errors), (
        f"{context}: ORT text {error!r} contains none of {[v.message for v in errors]}"
    )


def _vi(name: str, elem: int, shape: Sequence[int] | None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def causal_conv_model(*, rank_in: int = 3, rank_w: int = 3, outputs: Sequence[str] = ("y", "st"),
                      in_shape: Sequence[int] | None = None, **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """CausalConvWithState(x [1,4,5], w [4,1,3]) float, named 'cc'; shapes by rank unless given."""
    x_shape = list(in_shape) if in_shape is not None else [1, 4, 5, 2, 2][:rank_in]
    node = oh.make_node("CausalConvWithState", ["x", "w", "", ""], list(outputs), name="cc", domain=MS, **attrs)
    ins = [_vi("x", TP.FLOAT, x_shape), _vi("w", TP.FLOAT, [4, 1, 3, 3, 3][:rank_w])]
    return _model([node], ins, [_vi(o, TP.FLOAT, None) for o in outputs])


def varlen_conv_model(*, x_rank: int = 2, w_rank: int = 3, **attrs: Any) -> onnx.ModelProto:
    node = oh.make_node("VarlenCausalConvWithState", ["x", "w", "cu", "", "st"], ["y", "sto"], name="vl",
                        domain=MS, **attrs)  # fmt: skip
    ins = [_vi("x", TP.FLOAT, [6, 4, 1][:x_rank]), _vi("w", TP.FLOAT, [4, 1, 3, 1][:w_rank]),
           _vi("cu", TP.INT32, [3]), _vi("st", TP.FLOAT, [2, 4, 2])]  # fmt: skip
    return _model([node], ins, [_vi("y", TP.FLOAT, None), _vi("sto", TP.FLOAT, None)])


def varlen_dynamic_model(**attrs: Any) -> onnx.ModelProto:
    """VarlenCausalConvWithState 'vl' in 1.32.0's dynamic mode (kernel_delta, previous_mask wired) with
    shapes its inference accepts at group_size 1: x [6,4], weight [4,1,2], kernel_delta [6,2,4]."""
    node = oh.make_node("VarlenCausalConvWithState", ["x", "w", "cu", "", "st", "", "kd", "pm"], ["y", "sto"],
                        name="vl", domain=MS, **attrs)  # fmt: skip
    ins = [_vi("x", TP.FLOAT, [6, 4]), _vi("w", TP.FLOAT, [4, 1, 2]), _vi("cu", TP.INT32, [3]),
           _vi("st", TP.FLOAT, [2, 4, 1]), _vi("kd", TP.FLOAT, [6, 2, 4]), _vi("pm", TP.FLOAT, [6, 1])]  # fmt: skip
    return _model([node], ins, [_vi("y", TP.FLOAT, None), _vi("sto", TP.FLOAT, None)])


_PSAI_SHAPES = {"q": [4, 64], "k": [4, 32], "qn": [32], "kn": [32], "cos": [16, 32], "sin": [16, 32],
                "cu": [2], "ps": [1], "pks": [1, 64, 32], "pkv": [1, 7, 32], "psl": [1, 2], "pos": [4],
                "g": [4, 64], "pgb": [1, 7, 64], "hw": [4, 2], "pb": [4, 64], "cc": [1]}  # fmt: skip
_INT32_NAMES = {"cu", "ps", "psl", "cc", "si", "sc", "psl_o"}


def psai_model(*, extra_in: Sequence[tuple[int, str]] = (), outputs: Sequence[str] | None = None,
               pkv_shape: Sequence[int] | None = None, shapes: Mapping[str, Sequence[int]] | None = None,
               **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """PackedSparseAttentionIndexer (qsa, cr=4, budget 16, capacity 64, hs 32) fp16, named 'idx'.

    ``attrs`` override the base attributes; a value of None removes the attribute; ``shapes``
    overrides input shapes by name.
    """
    base: dict[str, Any] = {"policy_mode": "qsa", "compress_ratio": 4, "token_budget": 16, "state_capacity": 64}
    base.update(attrs)
    names = ["q", "k", "qn", "kn", "cos", "sin", "cu", "ps", "", "", "", "", "pks", "pkv", "", "psl"]
    for index, name in extra_in:
        names += [""] * (index + 1 - len(names))
        names[index] = name
    while names[-1] == "":
        names.pop()
    outs = list(outputs) if outputs is not None else ["si", "sc", "pks_o", "pkv_o", "", "psl_o"]
    node = oh.make_node("PackedSparseAttentionIndexer", names, outs, name="idx", domain=MS,
                        **{k: v for k, v in base.items() if v is not None})  # fmt: skip
    dims = dict(_PSAI_SHAPES, pkv=list(pkv_shape) if pkv_shape is not None else _PSAI_SHAPES["pkv"])
    dims.update({k: list(v) for k, v in (shapes or {}).items()})
    elem = {"pos": TP.INT64}
    ins = [_vi(n, elem.get(n, TP.INT32 if n in _INT32_NAMES else TP.FLOAT16), dims[n]) for n in names if n]
    o = [_vi(n, TP.INT32 if n in _INT32_NAMES else TP.FLOAT16, None) for n in outs if n]
    return _model([node], ins, o)


def dsa_model(*, q_shape: Sequence[int] = (1, 2, 64), **attrs: Any) -> onnx.ModelProto:
    """DynamicSparseAttention (num_heads 4, kv_num_heads 2, packed QKV) fp16, named 'dsa'."""
    base: dict[str, Any] = {"num_heads": 4, "kv_num_heads": 2}
    base.update(attrs)
    names = ["q", "", "", "", "", "", "", "si", "sc", "sk", "tsl"]
    node = oh.make_node("DynamicSparseAttention", names, ["out"], name="dsa", domain=MS,
                        **{k: v for k, v in base.items() if v is not None})  # fmt: skip
    ins = [_vi("q", TP.FLOAT16, list(q_shape)), _vi("si", TP.INT32, [2, 4]), _vi("sc", TP.INT32, [2]),
           _vi("sk", TP.INT32, [1]), _vi("tsl", TP.INT32, [1])]  # fmt: skip
    return _model([node], ins, [_vi("out", TP.FLOAT16, None)])


_SAI_SHAPES: dict[str, list[Any]] = {
    "q": [1, 4, 64], "k": [1, 4, 32], "qn": [32], "kn": [32], "cos": [16, 16], "sin": [16, 16],
    "m": [1, 12], "pk": [1, 8, 32], "g": [1, 4, 64], "pb": [4, 64], "hw": [1, 4, 2], "pos": [1, 4],
    "psl": [1], "ppb": [2, 1, 3, 64],
}  # fmt: skip
_SAI_ELEM = {"m": TP.INT64, "pos": TP.INT64, "psl": TP.INT32}
SAI_QSA_INPUTS = ("q", "k", "qn", "kn", "cos", "sin", "", "pk")
SAI_CSA = {"policy_mode": "csa", "token_budget": None, "index_topk": 4,
           "inputs": ("q", "k", "qn", "kn", "cos", "sin", "", "pk", "g", "pb", "hw", "pos", "", "ppb"),
           "outputs": ("si", "pk_o", "pp_o"), "shapes": {"k": [1, 4, 64]}}  # fmt: skip


def sai_model(*, inputs: Sequence[str] = SAI_QSA_INPUTS, outputs: Sequence[str] = ("si", "pk_o"),
              shapes: Mapping[str, Sequence[Any]] | None = None, **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """SparseAttentionIndexer (qsa, cr 4, budget 16, hs 32) fp16, named 'sai'.

    ``inputs``/``outputs`` name the slots ('' = omitted; names from ``_SAI_SHAPES``), ``shapes``
    overrides input shapes, ``attrs`` override the attributes (None removes one).
    """
    base: dict[str, Any] = {"policy_mode": "qsa", "compress_ratio": 4, "token_budget": 16}
    base.update(attrs)
    names = list(inputs)
    while names and names[-1] == "":
        names.pop()
    dims = dict(_SAI_SHAPES, **{k: list(v) for k, v in (shapes or {}).items()})
    node = oh.make_node("SparseAttentionIndexer", names, list(outputs), name="sai", domain=MS,
                        **{k: v for k, v in base.items() if v is not None})  # fmt: skip
    ins = [_vi(n, _SAI_ELEM.get(n, TP.FLOAT16), dims[n]) for n in names if n]
    outs = [_vi(n, TP.INT32 if n == "si" else TP.FLOAT16, None) for n in outputs if n]
    return _model([node], ins, outs)


def merge_model(*, inputs: Sequence[str] = ("bi", "bc", "br", "rs", "re"), outputs: Sequence[str] = ("o_i", "o_c", "o_s"),
                shapes: Mapping[str, Sequence[int]] | None = None, elem: int = TP.INT32, **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """PackedSparseAttentionIndexerMerge (append_range, 32 entries) int32, named 'mg'."""
    base: dict[str, Any] = {"max_output_entries": 32, "policy_mode": "append_range"}
    base.update(attrs)
    dims = {"bi": [2, 16], "bc": [2], "br": [2], "rs": [2], "re": [2], "ai": [2, 8], "ac": [2]}
    dims.update({k: list(v) for k, v in (shapes or {}).items()})
    node = oh.make_node("PackedSparseAttentionIndexerMerge", list(inputs), list(outputs), name="mg", domain=MS,
                        **{k: v for k, v in base.items() if v is not None})  # fmt: skip
    return _model([node], [_vi(n, elem, dims[n]) for n in inputs if n],
                  [_vi(o, TP.INT32, None) for o in outputs if o])  # fmt: skip


INDEXSHARE_INPUTS = ((18, "im"), (19, "mi"), (20, "mc"), (21, "ms"))
INDEXSHARE_OUTPUTS = ("si", "sc", "pks_o", "pkv_o", "", "psl_o", "", "is_o")


def psai_indexshare_model(*, shapes: Mapping[str, Sequence[int]] | None = None, **kwargs: Any) -> onnx.ModelProto:
    """``psai_model`` with extra IndexShare tensors available: im [1], mi [1, 24], mc [1], ms [1]."""
    dims = {"im": [1], "mi": [1, 24], "mc": [1], "ms": [1], **{k: list(v) for k, v in (shapes or {}).items()}}
    saved = dict(_PSAI_SHAPES)
    _PSAI_SHAPES.update(dims)
    _INT32_NAMES.update({"im", "mi", "mc", "ms", "is_o"})
    try:
        return psai_model(**kwargs)
    finally:
        _PSAI_SHAPES.clear()
        _PSAI_SHAPES.update(saved)


def gdn_model(*, decay: int = TP.FLOAT16, beta: int | None = None, dtype: int = TP.FLOAT16,
              **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """GatedDeltaNet as the synthetic graphs use it (packed QKV, Hq 2, Hv 4, dk = dv = 16), named 'gdn'.

    ``decay``/``beta`` are the element types of inputs 4/5 (beta defaults to decay's).
    """
    base: dict[str, Any] = {"gate_activation": "softplus", "beta_activation": "sigmoid", "qk_l2_norm": 1,
                            "update_rule": "gated_delta", "scale": 0.0}  # fmt: skip
    base.update(attrs)
    node = oh.make_node("GatedDeltaNet", ["qkv", "", "", "", "decay", "beta", "st", "alog", "dtb"], ["y", "st_o"],
                        name="gdn", domain=MS, **{k: v for k, v in base.items() if v is not None})  # fmt: skip
    ins = [_vi("qkv", dtype, [1, 3, 128]), _vi("decay", decay, [1, 3, 4]),
           _vi("beta", decay if beta is None else beta, [1, 3, 4]), _vi("st", TP.FLOAT, [1, 4, 16, 16]),
           _vi("alog", TP.FLOAT, [4]), _vi("dtb", TP.FLOAT, [4])]  # fmt: skip
    return _model([node], ins, [_vi("y", dtype, None), _vi("st_o", TP.FLOAT, None)])


def rule_named(rules: Sequence[Any], rule_id: str) -> Any:
    """The one rule of ``rules`` whose id is ``rule_id``."""
    [rule] = [r for r in rules if r.rule_id == rule_id]
    return rule
