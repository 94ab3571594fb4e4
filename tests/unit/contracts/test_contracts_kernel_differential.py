"""Differential tests: CPU kernel constructors, shape inference and session options against ORT.

Invariants guarded (every case runs against the installed onnxruntime and the contract mirrors
that version; the verdict and ORT's own text are compared, a NOT_IMPLEMENTED missing kernel
counting as "every creation-time check passed"):
- QMoE CPU constructor (raw fp32 kernel and the 1.32.0 shared fp16/bf16 kernel): k >= 1, the
  activation spelling, expert bits, block_size, weights_prepacked, post-activation clipping,
  interleaved SwiGLU, fc3 bits, the shared kernel's block / optional inputs, bfloat16 only there,
  INT3 inference (a valid INT3 node, and each packed-byte / row dim off); the 1.32.0 shared
  kernel's mxfp4 (``quant_type=fp4``: bits 4, block 32) and nvfp4 (bits 4, block 16) limits;
  ``ep.cpu.qmoe_deferred_scale`` (NUL-cut) only where a QMoE runs on CPU.
- GatedDeltaNet: inference on packed / separate inputs (ranks, initial_state, packed width, head
  counts, tokens / batch) and the constructor (update_rule, absent read as gated_delta;
  gate_activation, gate_lower_bound, beta_activation, chunk_size); 1.31.1 (no CPU kernel) never
  reaches the constructor.
- GroupQueryAttention inference and constructor; HyperConnection{PreMix,LowRankMix} inference
  (a flattened width only inference knows: behind a MatMul); CausalConvWithState dilation.
- Standard ops' inference errors (MatMul, broadcasting, Transpose perm, Reshape, Split, Concat,
  a Reduce axis out of range).
- Session config: NUL cut, later entries winning, key/value length limits, float32 parsing at the
  midpoint above 1.0 and just under FLT_MAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from support.contracts_testkit import (
    MS,
    ORT_VERSION,
    _model,
    _vi,
    assert_agrees,
    gdn_model,
    graph_violations,
    identity_model,
    ort_error,
    qmoe_initializers,
    qmoe_node,
)

from contracts.runner import check_session_config

pytestmark = pytest.mark.differential
_V132 = ORT_VERSION >= "1.32"


def _raw_qmoe(inputs: list[str] | None = None, extra: tuple[onnx.TensorProto, ...] = (), **attrs: Any) -> onnx.ModelProto:
    """fp32 activations, raw int4 block-32 experts: the plain CPU kernel."""
    ins = [_vi("x", TP.FLOAT, [2, 64]), _vi("router", TP.FLOAT, [2, 4])]
    return _model([qmoe_node(inputs=inputs, **attrs)], ins, [_vi("y", TP.FLOAT, [2, 64])], qmoe_initializers() + list(extra))


_E, _H, _I = 8, 64, 64


def _rnn(op: str, layout: int) -> onnx.ModelProto:
    """``op`` (RNN / GRU / LSTM) over X [2, 3, 4], hidden 5, one direction, with ``layout``."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    node = oh.make_node(op, ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5, layout=layout)
    ins = [_vi("X", TP.FLOAT, [2, 3, 4]), _vi("W", TP.FLOAT, [1, gates * 5, 4]), _vi("R", TP.FLOAT, [1, gates * 5, 5])]
    return _model([node], ins, [_vi("Y", TP.FLOAT, None)], ms=False)


def _rope(cos: int = 4, **attrs: Any) -> onnx.ModelProto:
    """RotaryEmbedding(x [1, 3, 32] float, position_ids [1, 3], caches [8, ``cos``]) named 'rope'."""
    node = oh.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope", domain=MS, **attrs)
    ins = [_vi("x", TP.FLOAT, [1, 3, 32]), _vi("pos", TP.INT64, [1, 3]), _vi("cos", TP.FLOAT, [8, cos]), _vi("sin", TP.FLOAT, [8, cos])]
    return _model([node], ins, [_vi("y", TP.FLOAT, None)])


def _moe(**attrs: Any) -> onnx.ModelProto:
    """MoE with float experts (x [3, 16], 4 experts of [32, 16] / [16, 32]), k 1 and relu unless given."""
    base = {"k": 1, "activation_type": "relu", **attrs}
    node = oh.make_node("MoE", ["x", "r", "w1", "", "w2"], ["y"], name="moe0", domain=MS, **base)
    ins = [_vi("x", TP.FLOAT, [3, 16]), _vi("r", TP.FLOAT, [3, 4]), _vi("w1", TP.FLOAT, [4, 32, 16]), _vi("w2", TP.FLOAT, [4, 16, 32])]
    return _model([node], ins, [_vi("y", TP.FLOAT, None)])


def _act(name: str, shape: list[int], elem: int) -> onnx.TensorProto:
    count = int(np.prod(shape))
    return oh.make_tensor(name, elem, shape, b"\x00\x3c" * count, raw=True)


def _u8(name: str, shape: list[int]) -> onnx.TensorProto:
    return nh.from_array(np.full(shape, 0x88, np.uint8), name)


def _shared_qmoe(elem: int = TP.FLOAT16, inputs: list[str] | None = None, extra: tuple[onnx.TensorProto, ...] = (),
                 **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """int4 weights_prepacked=1 (the synthetic packages' form): the 1.32.0 shared kernel."""
    base: dict[str, Any] = {"quant_type": "int", "expert_weight_bits": 4, "block_size": 32, "activation_type": "swiglu",
                            "swiglu_fusion": 1, "k": 2, "weights_prepacked": 1}  # fmt: skip
    base.update(attrs)
    base = {k: v for k, v in base.items() if v is not None}
    names = inputs or ["x", "router", "fc1_w", "fc1_s", "", "fc2_w", "fc2_s"]
    node = oh.make_node("QMoE", names, ["y"], name="moe0", domain=MS, **base)
    inits = [_u8("fc1_w", [_E, _H, _I]), _act("fc1_s", [_E, 2 * _I, _H // 32], elem), _u8("fc2_w", [_E, _I, _H // 2]),
             _act("fc2_s", [_E, _H, _I // 32], elem), *extra]  # fmt: skip
    return _model([node], [_vi("x", elem, [3, _H]), _vi("router", elem, [3, _E])], [_vi("y", elem, [3, _H])], inits)


def _int3_qmoe(*, fc1_bytes: int = _H * 3 // 8, fc2_rows: int = _H, fc2_bytes: int = _I * 3 // 8,
               **overrides: Any) -> onnx.ModelProto:  # fmt: skip
    """INT3 (1.32.0): fp16 activations, raw weights, fused SwiGLU; fc1 [E, 2I, 3H/8], fc2 [E, H, 3I/8]."""
    attrs = {"quant_type": "int", "expert_weight_bits": 3, "block_size": 32, "activation_type": "swiglu",
             "swiglu_fusion": 1, "k": 2, "weights_prepacked": 0, **overrides}  # fmt: skip
    node = oh.make_node("QMoE", ["x", "router", "fc1_w", "fc1_s", "", "fc2_w", "fc2_s"], ["y"], name="moe0", domain=MS, **attrs)
    inits = [_u8("fc1_w", [_E, 2 * _I, fc1_bytes]), _act("fc1_s", [_E, 2 * _I, _H // 32], TP.FLOAT16),
             _u8("fc2_w", [_E, fc2_rows, fc2_bytes]), _act("fc2_s", [_E, _H, _I // 32], TP.FLOAT16)]  # fmt: skip
    ins = [_vi("x", TP.FLOAT16, [3, _H]), _vi("router", TP.FLOAT16, [3, _E])]
    return _model([node], ins, [_vi("y", TP.FLOAT16, [3, _H])], inits)


_SLOT8 = ["x", "router", "fc1_w", "fc1_s", "", "fc2_w", "fc2_s", ""]


def _gqa(names: tuple[str, ...] = ("q", "k", "v", "", "", "sk", "tsl"), shapes: dict[str, list[Any]] | None = None,
         outputs: tuple[str, ...] = ("o", "pko", "pvo"), **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    dims = {"q": [1, 3, 32], "k": [1, 3, 16], "v": [1, 3, 16], "pk": [1, 1, 8, 16], "pv": [1, 1, 8, 16], "sk": [1],
            "tsl": [1], "qkv": [1, 3, 64], **(shapes or {})}  # fmt: skip
    base = {"num_heads": 2, "kv_num_heads": 1, **attrs}
    node = oh.make_node("GroupQueryAttention", list(names), list(outputs), name="gqa", domain=MS, **base)
    elem = {"sk": TP.INT32, "tsl": TP.INT32}
    ins = [_vi(n, elem.get(n, TP.FLOAT), dims[n]) for n in dict.fromkeys(names) if n]
    return _model([node], ins, [_vi(o, TP.FLOAT, None) for o in outputs])


def _gdn(names: list[str] | None = None, shapes: dict[str, list[Any]] | None = None, **attrs: Any) -> onnx.ModelProto:
    base = {"gate_activation": "softplus", "beta_activation": "sigmoid", "qk_l2_norm": 1, "update_rule": "gated_delta", **attrs}
    names = names or ["qkv", "", "", "", "decay", "beta", "st", "alog", "dtb"]
    dims = {"qkv": [1, 3, 128], "q": [1, 3, 2, 16], "k": [1, 3, 2, 16], "v": [1, 3, 4, 16], "decay": [1, 3, 4],
            "beta": [1, 3, 4], "st": [1, 4, 16, 16], "alog": [4], "dtb": [4], **(shapes or {})}  # fmt: skip
    node = oh.make_node("GatedDeltaNet", names, ["y", "st_o"], name="gdn", domain=MS, **base)
    elem = {"st": TP.FLOAT, "alog": TP.FLOAT, "dtb": TP.FLOAT}
    ins = [_vi(n, elem.get(n, TP.FLOAT16), dims[n]) for n in dict.fromkeys(names) if n]
    return _model([node], ins, [_vi("y", TP.FLOAT16, None), _vi("st_o", TP.FLOAT, None)])


def _beside_bf16_relu(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` plus a bfloat16 Relu: no CPU kernel takes it, so the session never reaches a constructor."""
    model.graph.node.append(oh.make_node("Relu", ["b"], ["br"], name="relu"))
    model.graph.input.append(_vi("b", TP.BFLOAT16, [2]))
    model.graph.output.append(_vi("br", TP.BFLOAT16, [2]))
    return model


def _behind_matmul(op: str, **attrs: Any) -> onnx.ModelProto:
    """``op``'s streams come from a MatMul: only inference knows their width (256)."""
    mm = oh.make_node("MatMul", ["h", "w"], ["s"], name="mm")
    if op == "HyperConnectionPreMix":
        node = oh.make_node(op, ["s", "g"], ["y"], name="hc", domain=MS, **attrs)
        ins, outs = [_vi("h", TP.FLOAT, [1, 3, 64]), _vi("g", TP.FLOAT, [1, 3, 4])], ["y"]
    else:
        node = oh.make_node(op, ["s", "n", "d", "u", "i"], ["p", "q"], name="hc", domain=MS, **attrs)
        ins, outs = [_vi("h", TP.FLOAT, [1, 3, 64]), _vi("n", TP.FLOAT, [256]), _vi("d", TP.FLOAT, [256, 8]),
                     _vi("u", TP.FLOAT, [8, 256]), _vi("i", TP.FLOAT, [256, 4])], ["p", "q"]  # fmt: skip
    init = nh.from_array(np.zeros((64, 256), np.float32), "w")
    return _model([mm, node], ins, [_vi(o, TP.FLOAT, None) for o in outs], [init])


def _low_rank_scalar_streams() -> onnx.ModelProto:
    """A low-rank mix whose streams are a scalar (rank 0): its inference needs rank >= 1."""
    node = oh.make_node("HyperConnectionLowRankMix", ["s", "n", "d", "u", "i"], ["p", "q"], name="hc", domain=MS,
                        num_branches=4)
    ins = [_vi("s", TP.FLOAT, []), _vi("n", TP.FLOAT, [256]), _vi("d", TP.FLOAT, [256, 8]), _vi("u", TP.FLOAT, [8, 256]),
           _vi("i", TP.FLOAT, [256, 4])]
    return _model([node], ins, [_vi(o, TP.FLOAT, None) for o in ("p", "q")])  # fmt: skip


def _std(nodes: list[onnx.NodeProto], ins: list[tuple[str, list[int]]], inits: tuple[onnx.TensorProto, ...] = ()) -> onnx.ModelProto:
    return _model(nodes, [_vi(n, TP.FLOAT, s) for n, s in ins], [_vi(nodes[-1].output[0], TP.FLOAT, None)], inits, ms=False)


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return nh.from_array(np.array(values, np.int64), name)


def _cc(**attrs: Any) -> onnx.ModelProto:
    from support.contracts_testkit import causal_conv_model

    return causal_conv_model(**attrs)


# (case, model builder, session entries, rule id on 1.32.0, on 1.31.1); None = accepted
CASES: list[tuple[str, Callable[[], onnx.ModelProto], dict[str, str], str | None, str | None]] = [
    ("qmoe raw valid", lambda: _raw_qmoe(), {}, None, None),
    ("qmoe k=0", lambda: _raw_qmoe(k=0), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe swiglu_fusion=0", lambda: _raw_qmoe(swiglu_fusion=0), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe activation SwiGLU (case)", lambda: _raw_qmoe(activation_type="SwiGLU"), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe activation silu", lambda: _raw_qmoe(activation_type="silu"), {}, None, None),
    ("qmoe block_size 8", lambda: _raw_qmoe(block_size=8), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe block_size 48", lambda: _raw_qmoe(block_size=48), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe block_size -1", lambda: _raw_qmoe(block_size=-1), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe block_size 16 (the smallest the kernel takes)", lambda: _raw_qmoe(block_size=16), {}, None, None),
    ("qmoe block_size 15", lambda: _raw_qmoe(block_size=15), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe bits 8 (raw)", lambda: _raw_qmoe(expert_weight_bits=8), {}, None, None),
    ("qmoe bits 5", lambda: _raw_qmoe(expert_weight_bits=5), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe weights_prepacked 2", lambda: _raw_qmoe(weights_prepacked=2), {}, "QMOE-CPU-001", None),
    ("qmoe swiglu_limit_after_activation=1", lambda: _raw_qmoe(swiglu_limit_after_activation=1), {}, "QMOE-CPU-001", "ORT-SCHEMA-003"),
    ("qmoe fc3 bits 8", lambda: _raw_qmoe(fc3_expert_weight_bits=8), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe raw fc3 present", lambda: _raw_qmoe([*_SLOT8, "fc3_w", "fc3_s"], (_u8("fc3_w", [4, 32, 32]), nh.from_array(np.zeros((4, 32, 2), np.float32), "fc3_s"))), {}, None, None),
    ("qmoe shared valid", lambda: _shared_qmoe(), {}, None, None),
    ("qmoe shared block 16", lambda: _shared_qmoe(block_size=16), {}, "QMOE-CPU-001", None),
    ("qmoe shared block absent", lambda: _shared_qmoe(block_size=None), {}, "QMOE-CPU-001", None),
    ("qmoe shared sparse mixer", lambda: _shared_qmoe(use_sparse_mixer=1), {}, "QMOE-CPU-001", None),
    ("qmoe shared use_sparse_mixer=2 (only 1 turns it on)", lambda: _shared_qmoe(use_sparse_mixer=2), {}, None, None),
    ("qmoe shared use_sparse_mixer=-1", lambda: _shared_qmoe(use_sparse_mixer=-1), {}, None, None),
    *[(f"{op} layout {layout}", lambda op=op, layout=layout: _rnn(op, layout), {}, rule, rule)
      for op in ("RNN", "GRU", "LSTM") for layout, rule in ((0, None), (1, "RNN-CPU-001"))],
    ("rope partial without num_heads", lambda: _rope(rotary_embedding_dim=8), {}, "ROPE-CPU-001", "ROPE-CPU-001"),
    ("rope partial with num_heads 0", lambda: _rope(rotary_embedding_dim=8, num_heads=0), {}, "ROPE-CPU-001", "ROPE-CPU-001"),
    ("rope partial with num_heads", lambda: _rope(rotary_embedding_dim=8, num_heads=2), {}, None, None),
    ("rope rotary_embedding_dim -1", lambda: _rope(rotary_embedding_dim=-1, cos=16), {}, "ROPE-CPU-001", "ROPE-CPU-001"),
    ("rope num_heads -1", lambda: _rope(num_heads=-1, cos=16), {}, "ROPE-CPU-001", "ROPE-CPU-001"),
    ("rope both -1 (order)", lambda: _rope(rotary_embedding_dim=-1, num_heads=-1, cos=16), {}, "ROPE-CPU-001", "ROPE-CPU-001"),
    ("rope full, num_heads 0", lambda: _rope(num_heads=0, cos=16), {}, None, None),
    ("moe tanh activation", lambda: _moe(activation_type="tanh"), {}, "MOE-CPU-001", "MOE-CPU-001"),
    ("moe k=0", lambda: _moe(k=0), {}, "MOE-CPU-001", "MOE-CPU-001"),
    ("moe sparse mixer k=1", lambda: _moe(use_sparse_mixer=1), {}, "MOE-CPU-001", "MOE-CPU-001"),
    ("moe silu k=1", lambda: _moe(activation_type="silu"), {}, None, None),
    ("moe sparse mixer k=2", lambda: _moe(use_sparse_mixer=1, k=2), {}, None, None),
    ("qmoe sparse mixer k=1", lambda: _raw_qmoe(use_sparse_mixer=1, k=1), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe sparse mixer k=3", lambda: _raw_qmoe(use_sparse_mixer=1, k=3), {}, "QMOE-CPU-001", "QMOE-CPU-001"),
    ("qmoe sparse mixer k=2", lambda: _raw_qmoe(use_sparse_mixer=1, k=2), {}, None, None),
    ("qmoe use_sparse_mixer=2 k=1 (off)", lambda: _raw_qmoe(use_sparse_mixer=2, k=1), {}, None, None),
    ("qmoe shared fc3 present", lambda: _shared_qmoe(inputs=[*_SLOT8, "fc3_w", "fc3_s"], extra=(_u8("fc3_w", [_E, _H, _I // 2]), _act("fc3_s", [_E, _I, 2], TP.FLOAT16))), {}, "QMOE-CPU-001", None),
    ("qmoe shared zero points", lambda: _shared_qmoe(inputs=[*_SLOT8, "", "", "", "zp1"], extra=(_u8("zp1", [_E, 2 * _I, 1]),)), {}, "QMOE-CPU-001", None),
    ("qmoe shared, expert_weight_bits absent (4)", lambda: _shared_qmoe(expert_weight_bits=None), {}, None, None),
    ("qmoe shared, expert_weight_bits absent (4), block 16", lambda: _shared_qmoe(expert_weight_bits=None, block_size=16), {}, "QMOE-CPU-001", None),
    ("qmoe shared prepacked 0", lambda: _shared_qmoe(weights_prepacked=0), {}, None, None),
    ("qmoe bf16 raw layout", lambda: _shared_qmoe(TP.BFLOAT16, weights_prepacked=0), {}, "QMOE-CPU-001", "ORT-KERNEL-001"),
    ("qmoe bf16 shared", lambda: _shared_qmoe(TP.BFLOAT16), {}, None, "ORT-KERNEL-001"),
    ("qmoe shared mxfp4 valid (fp4, bits 4, block 32)", lambda: _shared_qmoe(quant_type="fp4"), {}, None, None),
    ("qmoe shared mxfp4 block 16", lambda: _shared_qmoe(quant_type="fp4", block_size=16), {}, "QMOE-CPU-001", None),
    ("qmoe shared mxfp4 bits 2", lambda: _shared_qmoe(quant_type="fp4", expert_weight_bits=2), {}, "QMOE-CPU-001", None),
    ("qmoe shared mxfp4 bits 8", lambda: _shared_qmoe(quant_type="fp4", expert_weight_bits=8), {}, "QMOE-CPU-001", None),
    ("qmoe shared nvfp4 valid (bits 4, block 16)", lambda: _shared_qmoe(quant_type="nvfp4", block_size=16), {}, None, None),
    ("qmoe shared nvfp4 block 32", lambda: _shared_qmoe(quant_type="nvfp4"), {}, "QMOE-CPU-001", None),
    ("qmoe INT3 valid (fp16, raw, fused SwiGLU)", lambda: _int3_qmoe(), {}, None, "QMOE-CPU-001"),
    ("qmoe INT3 fc2 bytes 3*I/8 + 1", lambda: _int3_qmoe(fc2_bytes=_I * 3 // 8 + 1), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("qmoe INT3 fc2 bytes 4*I/8", lambda: _int3_qmoe(fc2_bytes=_I // 2), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("qmoe INT3 fc1 bytes 4*H/8", lambda: _int3_qmoe(fc1_bytes=_H // 2), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("qmoe INT3 fc2 rows H/2", lambda: _int3_qmoe(fc2_rows=_H // 2), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("qmoe INT3 fp32 activations", lambda: _raw_qmoe(expert_weight_bits=3, weights_prepacked=0), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("qmoe INT3 prepacked 1", lambda: _shared_qmoe(expert_weight_bits=3), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("qmoe INT3 unfused SwiGLU", lambda: _int3_qmoe(swiglu_fusion=0), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("qmoe INT3 fc2 of 4 bits in 3-bit bytes", lambda: _int3_qmoe(fc2_expert_weight_bits=4), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("qmoe INT3 fc3 of 4 bits", lambda: _int3_qmoe(fc3_expert_weight_bits=4), {}, "QMOE-SCHEMA-001", "QMOE-CPU-001"),
    ("deferred scale bogus", lambda: _raw_qmoe(), {"ep.cpu.qmoe_deferred_scale": "bogus"}, "QMOE-CPU-002", None),
    ("deferred scale empty", lambda: _raw_qmoe(), {"ep.cpu.qmoe_deferred_scale": ""}, "QMOE-CPU-002", None),
    ("deferred scale ' 1'", lambda: _raw_qmoe(), {"ep.cpu.qmoe_deferred_scale": " 1"}, "QMOE-CPU-002", None),
    ("deferred scale 'f' on float16", lambda: _shared_qmoe(), {"ep.cpu.qmoe_deferred_scale": "f"}, "QMOE-CPU-002", None),
    ("deferred scale '-0' on float16", lambda: _shared_qmoe(), {"ep.cpu.qmoe_deferred_scale": "-0"}, "QMOE-CPU-002", None),
    ("deferred scale '1' on float16", lambda: _shared_qmoe(), {"ep.cpu.qmoe_deferred_scale": "1"}, None, None),
    ("deferred scale 1 then NUL", lambda: _raw_qmoe(), {"ep.cpu.qmoe_deferred_scale": "1\0junk"}, None, None),
    ("deferred scale without QMoE", lambda: onnx.load_from_string(identity_model()), {"ep.cpu.qmoe_deferred_scale": "bogus"}, None, None),
    ("gdn valid packed", lambda: _gdn(), {}, None, "ORT-SCHEMA-002"),
    ("gdn packed rank 4", lambda: _gdn(shapes={"qkv": [1, 3, 1, 128]}), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn packed without state", lambda: _gdn(["qkv", "", "", "", "decay", "beta"]), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn state rank 3", lambda: _gdn(shapes={"st": [1, 4, 16]}), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn packed width 120", lambda: _gdn(shapes={"qkv": [1, 3, 120]}), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn Hv not a multiple of Hq", lambda: _gdn(shapes={"qkv": [1, 3, 160]}), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn tokens / batch", lambda: _gdn(shapes={"qkv": [3, 128], "decay": [3, 4], "beta": [3, 4], "st": [2, 4, 16, 16]}), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn tokens symbolic (divisibility unknown)", lambda: _gdn(shapes={"qkv": ["t", 128], "decay": ["t", 4], "beta": ["t", 4], "st": [2, 4, 16, 16]}), {}, None, "ORT-SCHEMA-002"),
    ("gdn head counts 0", lambda: _gdn(shapes={"st": [1, 0, 16, 16]}), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn key without value", lambda: _gdn(["qkv", "k", "", "", "decay", "beta", "st", "alog", "dtb"]), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn separate query/value ranks", lambda: _gdn(["q", "k", "v", "", "decay", "beta", "st", "alog", "dtb"], {"q": [3, 2, 16], "k": [3, 2, 16]}), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn state_update_capacity 9", lambda: _gdn(state_update_capacity=9), {}, "GDN-SCHEMA-001", "ORT-SCHEMA-002"),
    ("gdn gate_activation bogus", lambda: gdn_model(gate_activation="bogus"), {}, "GDN-CPU-001", "ORT-SCHEMA-002"),
    ("gdn gate_activation qwen", lambda: gdn_model(gate_activation="qwen"), {}, None, "ORT-SCHEMA-002"),
    ("gdn gate_activation sigmoid", lambda: gdn_model(gate_activation="sigmoid"), {}, None, "ORT-SCHEMA-002"),
    ("gdn gate_activation kda", lambda: gdn_model(gate_activation="kda"), {}, None, "ORT-SCHEMA-002"),
    ("gdn update_rule bogus", lambda: gdn_model(update_rule="bogus"), {}, "GDN-CPU-001", "ORT-SCHEMA-002"),
    ("gdn update_rule absent (gated_delta)", lambda: gdn_model(update_rule=None), {}, None, "ORT-SCHEMA-002"),
    ("gdn gate_lower_bound 0", lambda: gdn_model(gate_lower_bound=0.0), {}, "GDN-CPU-001", "ORT-SCHEMA-003"),
    ("gdn beta_activation Sigmoid", lambda: gdn_model(beta_activation="Sigmoid"), {}, "GDN-CPU-001", "ORT-SCHEMA-002"),
    ("gdn beta_activation none", lambda: gdn_model(beta_activation="none"), {}, None, "ORT-SCHEMA-002"),
    ("gdn beta_activation identity", lambda: gdn_model(beta_activation="identity"), {}, "GDN-CPU-001", "ORT-SCHEMA-002"),
    ("gdn chunk_size 0", lambda: gdn_model(chunk_size=0), {}, "GDN-CPU-001", "ORT-SCHEMA-002"),
    ("gdn float decay, 1.31.1 has no CPU kernel", lambda: gdn_model(decay=TP.FLOAT, dtype=TP.FLOAT, gate_activation="bogus"), {}, "GDN-CPU-001",
     "ORT-KERNEL-001"),
    ("gqa valid", lambda: _gqa(), {}, None, None),
    ("gqa query rank 2", lambda: _gqa(shapes={"q": [3, 32]}), {}, "GQA-SCHEMA-001", "GQA-SCHEMA-001"),
    ("gqa packed width 66", lambda: _gqa(("qkv", "", "", "", "", "sk", "tsl"), {"qkv": [1, 3, 66]}), {}, "GQA-SCHEMA-001", "GQA-SCHEMA-001"),
    ("gqa past_key rank 3", lambda: _gqa(("q", "k", "v", "pk", "pv", "sk", "tsl"), {"pk": [1, 8, 16]}), {}, "GQA-SCHEMA-001", "GQA-SCHEMA-001"),
    ("gqa past_key without past_value, no present outputs", lambda: _gqa(("q", "k", "v", "pk", "", "sk", "tsl"), outputs=("o",)), {}, None, None),
    ("gqa past_key without past_value, present_key only", lambda: _gqa(("q", "k", "v", "pk", "", "sk", "tsl"), outputs=("o", "pko")), {}, None, None),
    ("gqa past_key rank 3, no present outputs", lambda: _gqa(("q", "k", "v", "pk", "pv", "sk", "tsl"), {"pk": [1, 8, 16]}, outputs=("o",)), {}, None, None),
    ("gqa past_key without past_value", lambda: _gqa(("q", "k", "v", "pk", "", "sk", "tsl")), {}, "GQA-SCHEMA-001", "GQA-SCHEMA-001"),
    ("gqa output_qk without qk_output", lambda: _gqa(("q", "k", "v", "pk", "pv", "sk", "tsl"), outputs=("o", "pko", "pvo", "qk")), {}, "GQA-SCHEMA-001", "GQA-SCHEMA-001"),
    ("gqa output_qk without qk_output, past_value but no past_key", lambda: _gqa(("q", "k", "v", "", "pv", "sk", "tsl"), outputs=("o", "pko", "pvo", "qk")), {}, None, None),
    ("gqa num_heads 0", lambda: _gqa(num_heads=0), {}, "GQA-CPU-001", "GQA-CPU-001"),
    ("gqa packed num_heads 0", lambda: _gqa(("qkv", "", "", "", "", "sk", "tsl"), num_heads=0), {}, "GQA-SCHEMA-001", "GQA-SCHEMA-001"),
    ("gqa packed kv_num_heads -1", lambda: _gqa(("qkv", "", "", "", "", "sk", "tsl"), kv_num_heads=-1), {}, "GQA-SCHEMA-001", "GQA-SCHEMA-001"),
    ("gqa packed num_heads -2, kv 2 (groups 2 divide the width)", lambda: _gqa(("qkv", "", "", "", "", "sk", "tsl"), num_heads=-2, kv_num_heads=2),
     {}, "GQA-SCHEMA-001", "GQA-SCHEMA-001"),
    ("gqa packed num_heads 0, query rank unknown", lambda: _gqa(("qkv", "", "", "", "", "sk", "tsl"), {"qkv": None}, num_heads=0), {},
     "GQA-CPU-001", "GQA-CPU-001"),
    ("gqa num_heads 0 beside a bfloat16 Relu (no CPU kernel)", lambda: _beside_bf16_relu(_gqa(num_heads=0)), {},
     "ORT-KERNEL-001", "ORT-KERNEL-001"),
    ("gqa kv_num_heads 0", lambda: _gqa(kv_num_heads=0), {}, "GQA-CPU-001", "GQA-CPU-001"),
    ("gqa causal 2", lambda: _gqa(causal=2), {}, "GQA-CPU-001", "GQA-CPU-001"),
    ("gqa window without causal", lambda: _gqa(causal=0, local_window_size=4), {}, "GQA-CPU-001", "GQA-CPU-001"),
    ("gqa window 1 without causal", lambda: _gqa(causal=0, local_window_size=1), {}, "GQA-CPU-001", "GQA-CPU-001"),
    ("gqa causal 0, no window (-1)", lambda: _gqa(causal=0), {}, None, None),
    ("gqa sliding cache without window", lambda: _gqa(sliding_window_cache=1), {}, "GQA-CPU-001", "GQA-CPU-001"),
    ("gqa kv quant bogus", lambda: _gqa(k_quant_type="bogus"), {}, "GQA-CPU-001", "GQA-CPU-001"),
    ("gqa heads not dividing (run time)", lambda: _gqa(kv_num_heads=3), {}, None, None),
    ("premix behind MatMul, 4 branches", lambda: _behind_matmul("HyperConnectionPreMix", num_branches=4), {}, None, None),
    ("premix behind MatMul, 3 branches", lambda: _behind_matmul("HyperConnectionPreMix", num_branches=3), {}, "HC-SCHEMA-001", "HC-SCHEMA-001"),
    ("premix num_branches -1", lambda: _behind_matmul("HyperConnectionPreMix", num_branches=-1), {}, "HC-SCHEMA-001", "HC-SCHEMA-001"),
    ("low-rank mix behind MatMul, 3 branches", lambda: _behind_matmul("HyperConnectionLowRankMix", num_branches=3), {}, "HC-SCHEMA-001", "ORT-SCHEMA-001"),
    ("low-rank mix num_branches 0", lambda: _behind_matmul("HyperConnectionLowRankMix", num_branches=0), {}, "HC-SCHEMA-001", "ORT-SCHEMA-001"),
    ("low-rank mix num_branches -1", lambda: _behind_matmul("HyperConnectionLowRankMix", num_branches=-1), {}, "HC-SCHEMA-001", "ORT-SCHEMA-001"),
    ("low-rank mix behind MatMul, 4 branches (no CPU kernel)", lambda: _behind_matmul("HyperConnectionLowRankMix", num_branches=4), {},
     "ORT-KERNEL-001", "ORT-SCHEMA-001"),
    ("low-rank mix of scalar streams", _low_rank_scalar_streams, {}, "HC-SCHEMA-001", "ORT-SCHEMA-001"),
    ("conv dilation > INT_MAX", lambda: _cc(dilation=2**31), {}, "CCONV-CPU-001", "CCONV-CPU-001"),
    ("conv dilation 2**33", lambda: _cc(dilation=2**33), {}, "CCONV-CPU-001", "CCONV-CPU-001"),
    ("matmul K mismatch", lambda: _std([oh.make_node("MatMul", ["a", "b"], ["y"], name="mm")], [("a", [2, 3]), ("b", [4, 5])]), {}, "ORT-SHAPE-001", "ORT-SHAPE-001"),
    ("broadcast mismatch", lambda: _std([oh.make_node("Add", ["a", "b"], ["y"], name="ad")], [("a", [2, 3]), ("b", [4, 3])]), {}, "ORT-SHAPE-001", "ORT-SHAPE-001"),
    ("transpose perm rank", lambda: _std([oh.make_node("Transpose", ["a"], ["y"], name="tr", perm=[0, 2, 1])], [("a", [2, 3])]), {}, "ORT-SHAPE-001", "ORT-SHAPE-001"),
    ("reshape two -1", lambda: _std([oh.make_node("Reshape", ["a", "s"], ["y"], name="rs")], [("a", [2, 3])], (_i64("s", [-1, -1]),)), {}, "ORT-SHAPE-001", "ORT-SHAPE-001"),
    ("split sizes", lambda: _std([oh.make_node("Split", ["a", "s"], ["y", "z"], name="sp", axis=1)], [("a", [2, 6])], (_i64("s", [2, 3]),)), {}, "ORT-SHAPE-001", "ORT-SHAPE-001"),
    ("concat ranks", lambda: _std([oh.make_node("Concat", ["a", "b"], ["y"], name="cc", axis=0)], [("a", [2, 3]), ("b", [2, 3, 1])]), {}, "ORT-SHAPE-001", "ORT-SHAPE-001"),
    ("reduce axis out of range", lambda: _std([oh.make_node("ReduceSum", ["a", "ax"], ["y"], name="rd")], [("a", [2, 3])], (_i64("ax", [2]),)), {}, "ORT-SHAPE-001", "ORT-SHAPE-001"),
    ("reduce axis -2 (in range)", lambda: _std([oh.make_node("ReduceSum", ["a", "ax"], ["y"], name="rd")], [("a", [2, 3])], (_i64("ax", [-2]),)), {}, None, None),
    ("matmul with symbolic K", lambda: _std([oh.make_node("MatMul", ["a", "b"], ["y"], name="mm")], [("a", [2, "k"]), ("b", [4, 5])]), {}, None, None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "build", "entries", "on_132", "on_131"), CASES, ids=[c[0] for c in CASES])
def test_kernel_and_inference_rules_match_onnxruntime(case: str, build: Callable[[], onnx.ModelProto],
                                                      entries: dict[str, str], on_132: str | None, on_131: str | None) -> None:  # fmt: skip
    model = build()
    expected = on_132 if _V132 else on_131
    violations = check_session_config(entries) + graph_violations(model, entries)
    errors = [v for v in violations if v.severity == "error"]
    if expected is None:
        assert errors == [], errors
    else:
        assert expected in {v.rule_id for v in errors}, errors
    assert_agrees(violations, ort_error(model, entries), context=case)



@pytest.mark.parametrize("attrs", [{}, {"k": 0}, {"swiglu_fusion": 1}], ids=["unfused", "k=0", "swiglu_fusion=1"])
def test_a_qmoe_without_activation_type_is_judged_as_relu(attrs: dict[str, Any]) -> None:
    """ORT's QMoE reads a missing ``activation_type`` as "relu": the node without the attribute gets
    exactly the verdict (rule, text, node) of one that says "relu", and a real session agrees."""
    base = {"swiglu_fusion": None, **attrs}
    absent, relu = _raw_qmoe(activation_type=None, **base), _raw_qmoe(activation_type="relu", **base)

    def verdict(model: onnx.ModelProto) -> list[tuple[str, str, str | None]]:
        return [(v.rule_id, v.message, v.node) for v in graph_violations(model) if v.severity == "error"]

    assert verdict(absent) == verdict(relu)
    expected = [("QMOE-CPU-001", "MoE attribute 'k' must be >= 1, got k=0", "moe0")] if "k" in attrs else []
    assert verdict(absent) == expected
    assert_agrees(graph_violations(absent), ort_error(absent), context=f"activation_type absent, {attrs}")


_P = "session.moe.offload."
SESSION_CASES: list[tuple[str, dict[str, str], bool]] = [
    ("min_expert_weight at the float32 midpoint above 1.0 (ties to 1.0)", {_P + "min_expert_weight": "1.000000059604644775390625"}, True),
    ("min_expert_weight just above the midpoint (rounds up)", {_P + "min_expert_weight": "1.0000000596046448"}, False),
    ("min_expert_weight below the midpoint", {_P + "min_expert_weight": "1.00000005960464477539062"}, True),
    ("min_expert_weight hex midpoint", {_P + "min_expert_weight": "0x1.000001p0"}, True),
    ("threshold just under the overflow midpoint", {_P + "tail_substitution_threshold": "3.40282356779733661637539395458142568447e38"}, True),
    ("threshold at the overflow midpoint", {_P + "tail_substitution_threshold": "3.40282356779733661637539395458142568448e38"}, False),
    ("threshold FLT_MAX", {_P + "tail_substitution_threshold": "3.4028235e38"}, True),
    ("threshold smallest subnormal", {_P + "tail_substitution_threshold": "7.1e-46"}, True),
    ("threshold underflow to zero", {_P + "tail_substitution_threshold": "7e-46"}, False),
    ("mode cut at NUL (key)", {_P + "mode\0suffix": "bogus"}, False),
    ("mode cut at NUL (value)", {_P + "mode": "auto\0garbage"}, True),
    ("unknown key cut at NUL", {_P + "bogus\0": "1"}, False),
    ("later entry wins", {_P + "mode": "bogus", _P + "mode\0x": "auto"}, True),
    ("earlier entry overwritten", {_P + "mode": "auto", _P + "mode\0x": "bogus"}, False),
    ("empty key after NUL", {"\0abc": "1"}, False),
    ("key of 1024 bytes", {"k" * 1024: "1"}, True),
    ("key of 1025 bytes", {"k" * 1025: "1"}, False),
    ("value of 8192 bytes", {"session.x": "v" * 8192}, True),
    ("value of 8193 bytes", {"session.x": "v" * 8193}, False),
    ("value over 8192 bytes only before the NUL counts", {"session.x": "v" * 10 + "\0" + "v" * 9000}, True),
]  # fmt: skip


def _session_error(entries: dict[str, str]) -> str | None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        for key, value in entries.items():
            options.add_session_config_entry(key, value)
        ort.InferenceSession(identity_model(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several pybind exception types
        return str(exc)
    return None


@pytest.mark.parametrize(("case", "entries", "accepted_on_132"), SESSION_CASES, ids=[c[0] for c in SESSION_CASES])
def test_session_config_is_read_as_onnxruntime_stores_it(case: str, entries: dict[str, str], accepted_on_132: bool) -> None:
    violations = check_session_config(entries)
    error = _session_error(entries)
    if _V132:
        assert (not violations) == accepted_on_132, violations
    assert_agrees(violations, error, context=case)


def test_a_packed_gqa_without_positive_head_counts_is_refused_for_a_cuda_graph_too() -> None:
    """GroupQueryAttention's inference, not the CPU kernel, refuses a packed query with a head count
    of 0 or less: it runs while ORT resolves the graph for any EP, so a CUDA graph gets the same
    GQA-SCHEMA-001 line a real CPU session gives (and no CPU-constructor line)."""
    model = _gqa(("qkv", "", "", "", "", "sk", "tsl"), num_heads=0)
    text = "num_heads and kv_num_heads must be positive."
    refused = ort_error(model)
    assert refused is not None and f"Node (gqa) Op (GroupQueryAttention) [ShapeInferenceError] {text}" in refused
    for eps in (frozenset({"cpu"}), frozenset({"cuda"})):
        found = [(v.rule_id, v.node) for v in graph_violations(model, eps=eps) if v.severity == "error"]
        assert found == [("GQA-SCHEMA-001", "gqa")], eps
        assert next(v.message for v in graph_violations(model, eps=eps) if v.rule_id == "GQA-SCHEMA-001").endswith(text)


@pytest.mark.parametrize(("names", "outputs", "past_key", "text"), [
    (("q", "k", "v", "pk", "", "sk", "tsl"), ("o", "pko", "pvo", "qk"), [1, 1, 8, 16],
     "Input 4 expected to have type but instead is null"),
    (("q", "k", "v", "pk", "pv", "sk", "tsl"), ("o", "pko", "pvo", "qk"), [1, 8, 16], "The past_key input shall be 4 dimensions"),
    (("q", "k", "v", "pk", "", "sk", "tsl"), ("o", "pko", "pvo", "qk"), [1, 8, 16],
     "Input 4 expected to have type but instead is null"),
    (("q", "k", "v", "pk", "", "sk", "tsl"), ("o", "pko", "pvo"), [1, 8, 16], "Input 4 expected to have type but instead is null"),
], ids=["qk-without-past-value", "qk-with-rank-3-past-key", "all-three", "rank-3-past-key-without-past-value"])  # fmt: skip
def test_gqa_past_refusals_come_in_onnxruntimes_order(names: tuple[str, ...], outputs: tuple[str, ...],
                                                       past_key: list[int], text: str) -> None:  # fmt: skip
    """Where inference reads the past, ORT refuses a missing past_value first, then a past_key not of
    rank 4, then an output_qk without qk_output: the contract's one GQA-SCHEMA-001 line is ORT's
    first (it gave the output_qk text first once)."""
    model = _gqa(names, {"pk": past_key}, outputs)
    found = [(v.rule_id, v.message) for v in graph_violations(model) if v.severity == "error"]
    assert found == [("GQA-SCHEMA-001", text)]
    assert text in (ort_error(model) or "")
