"""Graphs rebuilt from onnxruntime's own op tests: the external differential's second corpus.

Our own generator, modelled on the inputs, attributes and expected failures of onnxruntime's
Python and C++ op tests (``test_gqa_cpu.py``, ``test_sparse_attention.py``, ``test_moe_cpu.py``,
``test_qmoe_cpu.py``, ``test_op_matmul_4bits.py``; ``gated_delta_net_op_test.cc``,
``causal_conv_with_state_op_test.cc``, ``rotary_embedding_op_test.cc``, the MatMulNBits and
layer-norm op tests): the configurations those tests sweep (head counts, packed / separate
inputs, past state, rotary, dtypes, bit widths, block sizes, activations) and their negative
cases (mismatched heads, missing inputs, bad attributes), each as one single-node graph.

Every graph is IR 10 / opset 21 (+ com.microsoft 1), so onnxruntime 1.31.1 and 1.32.0 judge the
same bytes. Nothing here says what ORT does with a graph: the truth is a real session
(``tools/external_differential.py``). ``graphs()`` yields ``(family, name, model bytes)`` in a fixed
order; ``sample(n)`` takes every k-th graph for the CPU suite's fast run.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

__all__ = ["FAMILIES", "graphs", "sample"]

MS = "com.microsoft"
F32, F16, BF16, I32, I64, U8 = TP.FLOAT, TP.FLOAT16, TP.BFLOAT16, TP.INT32, TP.INT64, TP.UINT8
Spec = dict[str, tuple[int, Sequence[Any] | None]]


def _model(op: str, inputs: Sequence[str], outputs: dict[str, int], feeds: Spec, *, domain: str = MS,
           inits: Sequence[onnx.TensorProto] = (), **attrs: Any) -> bytes:  # fmt: skip
    """One ``op`` node named 'n' over graph inputs ``feeds`` (name -> (elem, shape)) and ``inits``."""
    node = oh.make_node(op, list(inputs), list(outputs), name="n", domain=domain,
                        **{k: v for k, v in attrs.items() if v is not None})  # fmt: skip
    init_names = {t.name for t in inits}
    ins = [oh.make_tensor_value_info(n, e, None if s is None else list(s)) for n, (e, s) in feeds.items() if n not in init_names]
    outs = [oh.make_tensor_value_info(n, e, None) for n, e in outputs.items()]
    graph = oh.make_graph([node], "g", ins, outs, initializer=list(inits))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model.SerializeToString()


def _np(elem: int) -> Any:
    return {F32: np.float32, F16: np.float16, I32: np.int32, I64: np.int64, U8: np.uint8}[elem]


def _const(name: str, elem: int, shape: Sequence[int], fill: float = 0.0) -> onnx.TensorProto:
    if elem == BF16:
        count = int(np.prod(shape)) if shape else 1
        return oh.make_tensor(name, BF16, list(shape), b"\x80\x3f" * count, raw=True)
    return nh.from_array(np.full(list(shape), fill, _np(elem)), name)


def _qkv(elem: int, b: int, s: int, heads: int, kv: int, hd: int, *, packed: bool) -> tuple[Spec, list[str]]:
    """The query / key / value feeds of an attention op and its first three input names (packed: one QKV)."""
    if packed:
        return {"q": (elem, [b, s, (heads + 2 * kv) * hd])}, ["q", "", ""]
    return {"q": (elem, [b, s, heads * hd]), "k": (elem, [b, s, kv * hd]), "v": (elem, [b, s, kv * hd])}, ["q", "k", "v"]


def _gqa() -> Iterator[tuple[str, bytes]]:
    """test_gqa_cpu.py: prompt / past, packed QKV, rotary, local window, softcap, fp32 / fp16 / bf16."""
    for elem, (nh_, kv), hd, packed, past, rotary, extra in itertools.product(
            (F32, F16, BF16), ((2, 1), (4, 2), (6, 3), (4, 4), (4, 3)), (16, 32), (False, True), (False, True),
            (False, True), ({}, {"local_window_size": 4}, {"softcap": 30.0})):  # fmt: skip
        if (elem != F32 or (nh_, kv) in {(4, 4), (6, 3)}) and (hd == 32 or extra):
            continue  # the sweep's corners, not its full product
        b, s, p = 1, 3, 5
        feeds, names = _qkv(elem, b, s, nh_, kv, hd, packed=packed)
        if past:
            feeds.update(pk=(elem, [b, kv, p, hd]), pv=(elem, [b, kv, p, hd]))
            names += ["pk", "pv"]
        else:
            names += ["", ""]
        feeds.update(sk=(I32, [b]), tsl=(I32, [1]))
        names += ["sk", "tsl"]
        if rotary:
            feeds.update(cos=(elem, [16, hd // 2]), sin=(elem, [16, hd // 2]))
            names += ["cos", "sin"]
        flags = "".join(f"_{f}" for f, on in (("packed", packed), ("past", past), ("rotary", rotary)) if on)
        tag = f"{TP.DataType.Name(elem).lower()}_h{nh_}_kv{kv}_d{hd}{flags}{''.join(f'_{k}' for k in extra)}"
        outs = {"o": elem, "pko": elem, "pvo": elem}
        yield tag, _model("GroupQueryAttention", names, outs, feeds, num_heads=nh_, kv_num_heads=kv,
                          do_rotary=int(rotary), **extra)  # fmt: skip
    # negative cases of the op tests: heads that do not divide, a past without its pair, a bad width
    yield "bad_heads_ratio", _model("GroupQueryAttention", ["q", "k", "v", "", "", "sk", "tsl"], {"o": F32},
                                    {"q": (F32, [1, 3, 80]), "k": (F32, [1, 3, 48]), "v": (F32, [1, 3, 48]),
                                     "sk": (I32, [1]), "tsl": (I32, [1])}, num_heads=5, kv_num_heads=3)  # fmt: skip
    yield "past_key_only", _model("GroupQueryAttention", ["q", "k", "v", "pk", "", "sk", "tsl"], {"o": F32},
                                  {"q": (F32, [1, 3, 32]), "k": (F32, [1, 3, 16]), "v": (F32, [1, 3, 16]),
                                   "pk": (F32, [1, 1, 4, 16]), "sk": (I32, [1]), "tsl": (I32, [1])},
                                  num_heads=2, kv_num_heads=1)  # fmt: skip
    yield "packed_width_off", _model("GroupQueryAttention", ["q", "", "", "", "", "sk", "tsl"], {"o": F32},
                                     {"q": (F32, [1, 3, 66]), "sk": (I32, [1]), "tsl": (I32, [1])},
                                     num_heads=2, kv_num_heads=1)  # fmt: skip
    yield "zero_heads", _model("GroupQueryAttention", ["q", "k", "v", "", "", "sk", "tsl"], {"o": F32},
                               {"q": (F32, [1, 3, 32]), "k": (F32, [1, 3, 16]), "v": (F32, [1, 3, 16]),
                                "sk": (I32, [1]), "tsl": (I32, [1])}, num_heads=0, kv_num_heads=1)  # fmt: skip


def _sparse_attention() -> Iterator[tuple[str, bytes]]:
    """test_sparse_attention.py: block layouts, past, rotary, packed QKV, fp16 / bf16 / fp32."""
    for elem, (nh_, kv), block, packed, rotary in itertools.product(
            (F32, F16, BF16), ((4, 2), (2, 1), (4, 4)), (16, 32), (False, True), (False, True)):  # fmt: skip
        hd, b, s, p, layouts, max_blocks = 16, 1, 4, 60, 1, 4
        feeds, names = _qkv(elem, b, s, nh_, kv, hd, packed=packed)
        feeds.update(pk=(elem, [b, kv, p + s, hd]), pv=(elem, [b, kv, p + s, hd]), rows=(I32, [layouts, max_blocks + 1]),
                     cols=(I32, [layouts, max_blocks * max_blocks]), tsl=(I32, [1]), ktsl=(I32, [b]))  # fmt: skip
        names += ["pk", "pv", "rows", "cols", "tsl", "ktsl"]
        if rotary:
            feeds.update(cos=(elem, [p + s, hd // 2]), sin=(elem, [p + s, hd // 2]))
            names += ["cos", "sin"]
        tag = f"{TP.DataType.Name(elem).lower()}_h{nh_}_kv{kv}_b{block}{'_packed' if packed else ''}{'_rotary' if rotary else ''}"
        yield tag, _model("SparseAttention", names, {"o": elem, "pko": elem, "pvo": elem}, feeds, num_heads=nh_,
                          kv_num_heads=kv, sparse_block_size=block, do_rotary=int(rotary))  # fmt: skip
    yield "block_size_odd", _model("SparseAttention", ["q", "k", "v", "pk", "pv", "rows", "cols", "tsl", "ktsl"],
                                   {"o": F16, "pko": F16, "pvo": F16},
                                   {"q": (F16, [1, 4, 64]), "k": (F16, [1, 4, 32]), "v": (F16, [1, 4, 32]),
                                    "pk": (F16, [1, 2, 64, 16]), "pv": (F16, [1, 2, 64, 16]), "rows": (I32, [1, 5]),
                                    "cols": (I32, [1, 16]), "tsl": (I32, [1]), "ktsl": (I32, [1])},
                                   num_heads=4, kv_num_heads=2, sparse_block_size=12)  # fmt: skip


def _moe() -> Iterator[tuple[str, bytes]]:
    """test_moe_cpu.py: experts, top-k, activations (SwiGLU interleaved), bias, normalization."""
    for elem, experts, k, act, bias in itertools.product(
            (F32, F16), (4, 8), (1, 2), ("relu", "gelu", "silu", "swiglu", "identity", "tanh"), (False, True)):  # fmt: skip
        t, h, i = 3, 16, 32
        fc1 = 2 * i if act == "swiglu" else i
        feeds: Spec = {"x": (elem, [t, h]), "r": (elem, [t, experts]), "w1": (elem, [experts, fc1, h]),
                       "w2": (elem, [experts, h, i])}  # fmt: skip
        names = ["x", "r", "w1", "", "w2"]
        if bias:
            feeds.update(b1=(elem, [experts, fc1]), b2=(elem, [experts, h]))
            names = ["x", "r", "w1", "b1", "w2", "b2"]
        swiglu = {"swiglu_fusion": 1} if act == "swiglu" else {}
        yield (f"{TP.DataType.Name(elem).lower()}_e{experts}_k{k}_{act}{'_bias' if bias else ''}",
               _model("MoE", names, {"y": elem}, feeds, k=k, activation_type=act, normalize_routing_weights=1, **swiglu))
    yield "k_above_experts", _model("MoE", ["x", "r", "w1", "", "w2"], {"y": F32},
                                    {"x": (F32, [3, 16]), "r": (F32, [3, 4]), "w1": (F32, [4, 32, 16]),
                                     "w2": (F32, [4, 16, 32])}, k=0, activation_type="relu")  # fmt: skip


def _qmoe() -> Iterator[tuple[str, bytes]]:
    """test_qmoe_cpu.py: 2 / 4 / 8 bits, row-wise or block-wise scales, symmetric or not, SwiGLU."""
    e, t, h, i = 4, 3, 64, 64
    for elem, bits, block, act, zp in itertools.product(
            (F32, F16), (2, 4, 8, 3), (0, 32, 64, 24), ("swiglu", "silu", "relu"), (False, True)):  # fmt: skip
        if zp and block == 24:
            continue
        fc1 = 2 * i if act == "swiglu" else i
        per = 8 // bits if bits in (2, 4, 8) else 1
        cols1, cols2 = h // per, i // per
        scales1 = [e, fc1] if block == 0 else [e, fc1, max(h // block, 1)]
        scales2 = [e, h] if block == 0 else [e, h, max(i // block, 1)]
        inits = [_const("w1", U8, [e, fc1, cols1]), _const("s1", elem, scales1, 0.01), _const("w2", U8, [e, h, cols2]),
                 _const("s2", elem, scales2, 0.01)]  # fmt: skip
        names = ["x", "r", "w1", "s1", "", "w2", "s2"]
        if zp:
            zcols1 = [e, fc1, max(-(-max(h // block, 1) * bits // 8), 1)] if block else [e, -(-fc1 * bits // 8)]
            zcols2 = [e, h, max(-(-max(i // block, 1) * bits // 8), 1)] if block else [e, -(-h * bits // 8)]
            inits += [_const("z1", U8, zcols1), _const("z2", U8, zcols2)]
            names += ["", "", "", "", "z1", "z2"]
        feeds: Spec = {"x": (elem, [t, h]), "r": (elem, [t, e])}
        swiglu = {"swiglu_fusion": 1} if act == "swiglu" else {}
        attrs: dict[str, Any] = {"k": 2, "activation_type": act, "expert_weight_bits": bits, **swiglu}
        if block:
            attrs["block_size"] = block
        yield (f"{TP.DataType.Name(elem).lower()}_int{bits}_block{block}_{act}{'_zp' if zp else ''}",
               _model("QMoE", names, {"y": elem}, feeds, inits=inits, **attrs))


def _matmul_nbits() -> Iterator[tuple[str, bytes]]:
    """test_op_matmul_4bits.py and the C++ MatMulNBits tests: K / N / bits / block / zero points / bias."""
    for elem, (k, n), bits, block, zp, bias in itertools.product(
            (F32, F16, BF16), ((64, 32), (60, 16), (128, 8)), (2, 4, 8, 3), (16, 32, 64, 128, 512, 24),
            ("none", "u8", "float"), (False, True)):  # fmt: skip
        if (elem != F32 and (bias or zp == "float")) or (block == 512 and k != 128):
            continue
        blocks = -(-k // block)
        blob = -(-(block * bits) // 8)
        inits = [_const("B", U8, [n, blocks, blob]), _const("S", elem, [n * blocks], 0.01)]
        names = ["A", "B", "S"]
        if zp == "u8":
            inits.append(_const("Z", U8, [n * -(-(blocks * bits) // 8)]))
            names.append("Z")
        elif zp == "float":
            inits.append(_const("Z", elem, [n * blocks]))
            names.append("Z")
        if bias:
            inits.append(_const("bias", elem, [n]))
            names += [""] * (4 - len(names)) + ["", "bias"]
        yield (f"{TP.DataType.Name(elem).lower()}_k{k}_n{n}_int{bits}_block{block}_zp-{zp}{'_bias' if bias else ''}",
               _model("MatMulNBits", names, {"Y": elem}, {"A": (elem, [2, k])}, inits=inits, K=k, N=n, bits=bits,
                      block_size=block))  # fmt: skip
    yield "n_mismatch", _model("MatMulNBits", ["A", "B", "S"], {"Y": F32}, {"A": (F32, [2, 64])},
                               inits=[_const("B", U8, [33, 2, 16]), _const("S", F32, [64])], K=64, N=32, bits=4,
                               block_size=32)  # fmt: skip


def _rotary() -> Iterator[tuple[str, bytes]]:
    """rotary_embedding_op_test.cc: 3-D / 4-D input, interleaved, partial rotary, packed batching."""
    for elem, rank, interleaved, partial, pos in itertools.product(
            (F32, F16, BF16), (3, 4), (0, 1), (False, True), ("bs", "scalar")):  # fmt: skip
        b, s, nh_, hd = 1, 3, 2, 16
        rot = 8 if partial else hd
        shape = [b, s, nh_ * hd] if rank == 3 else [b, nh_, s, hd]
        feeds: Spec = {"x": (elem, shape), "pos": (I64, [b, s] if pos == "bs" else [1]), "cos": (elem, [8, rot // 2]),
                       "sin": (elem, [8, rot // 2])}  # fmt: skip
        attrs: dict[str, Any] = {"interleaved": interleaved}
        if partial:
            attrs.update(rotary_embedding_dim=rot, num_heads=nh_)
        yield (f"{TP.DataType.Name(elem).lower()}_rank{rank}_il{interleaved}{'_partial' if partial else ''}_pos-{pos}",
               _model("RotaryEmbedding", ["x", "pos", "cos", "sin"], {"y": elem}, feeds, **attrs))
    yield "partial_without_heads", _model("RotaryEmbedding", ["x", "pos", "cos", "sin"], {"y": F32},
                                          {"x": (F32, [1, 3, 32]), "pos": (I64, [1, 3]), "cos": (F32, [8, 4]),
                                           "sin": (F32, [8, 4])}, rotary_embedding_dim=8)  # fmt: skip
    yield "cache_width_off", _model("RotaryEmbedding", ["x", "pos", "cos", "sin"], {"y": F32},
                                    {"x": (F32, [1, 3, 32]), "pos": (I64, [1, 3]), "cos": (F32, [8, 5]),
                                     "sin": (F32, [8, 5])}, num_heads=2)  # fmt: skip


def _gated_delta_net() -> Iterator[tuple[str, bytes]]:
    """gated_delta_net_op_test.cc: packed / separate QKV, update rules, gates, dtypes, negative tests."""
    hq, hv, dk, dv = 2, 4, 16, 16
    for elem, layout, rule, gate in itertools.product(
            (F32, F16, BF16), ("packed3", "packed2", "separate4"), ("gated_delta", "gated", "delta", "linear"),
            ("softplus", "none", "sigmoid", "bogus")):  # fmt: skip
        gated, delta = rule in {"gated", "gated_delta"}, rule in {"delta", "gated_delta"}
        lead = [1, 3] if layout != "packed2" else [3]
        feeds: Spec = {}
        if layout.startswith("packed"):
            feeds["q"] = (elem, [*lead, 2 * hq * dk + hv * dv])
            names = ["q", "", "", ""]
        else:
            feeds.update(q=(elem, [*lead, hq, dk]), k=(elem, [*lead, hq, dk]), v=(elem, [*lead, hv, dv]))
            names = ["q", "k", "v", ""]
        names += ["decay" if gated else "", "beta" if delta else "", "st"]
        if gated:
            feeds["decay"] = (elem, [*lead, hv])
        if delta:
            feeds["beta"] = (elem, [*lead, hv])
        feeds["st"] = (F32, [1, hv, dv, dk])
        if gate in {"softplus", "sigmoid"}:
            feeds.update(alog=(F32, [hv]), dtb=(F32, [hv]))
            names += ["alog", "dtb"]
        yield (f"{TP.DataType.Name(elem).lower()}_{layout}_{rule}_{gate}",
               _model("GatedDeltaNet", names, {"y": elem, "st_o": F32}, feeds, update_rule=rule, gate_activation=gate,
                      qk_l2_norm=1))  # fmt: skip
    base: Spec = {"q": (F16, [1, 3, 128]), "decay": (F16, [1, 3, 4]), "beta": (F16, [1, 3, 4]), "st": (F32, [1, 4, 16, 16])}
    yield "state_rank3", _model("GatedDeltaNet", ["q", "", "", "", "decay", "beta", "st"], {"y": F16},
                                {**base, "st": (F32, [1, 4, 16])})  # fmt: skip
    yield "width_off", _model("GatedDeltaNet", ["q", "", "", "", "decay", "beta", "st"], {"y": F16},
                              {**base, "q": (F16, [1, 3, 120])})  # fmt: skip
    yield "capacity_9", _model("GatedDeltaNet", ["q", "", "", "", "decay", "beta", "st"], {"y": F16}, base,
                               state_update_capacity=9)  # fmt: skip
    yield "chunk_size_0", _model("GatedDeltaNet", ["q", "", "", "", "decay", "beta", "st"], {"y": F16}, base, chunk_size=0)
    yield "gate_lower_bound_pos", _model("GatedDeltaNet", ["q", "", "", "", "decay", "beta", "st"], {"y": F16}, base,
                                         gate_lower_bound=0.5)  # fmt: skip


def _causal_conv() -> Iterator[tuple[str, bytes]]:
    """causal_conv_with_state_op_test.cc: channels, kernel widths, state, bias, activations."""
    for elem, c, kw, state, bias, act in itertools.product(
            (F32, F16, BF16), (4, 8), (2, 3, 4), (False, True), (False, True), ("none", "silu", "swish", "gelu")):  # fmt: skip
        feeds: Spec = {"x": (elem, [1, c, 5]), "w": (elem, [c, 1, kw])}
        names = ["x", "w", "", ""]
        if bias:
            feeds["b"] = (elem, [c])
            names[2] = "b"
        if state:
            feeds["st"] = (elem, [1, c, kw - 1])
            names[3] = "st"
        yield (f"{TP.DataType.Name(elem).lower()}_c{c}_k{kw}{'_state' if state else ''}{'_bias' if bias else ''}_{act}",
               _model("CausalConvWithState", names, {"y": elem, "st_o": elem}, feeds, activation=act))
    yield "weight_rank2", _model("CausalConvWithState", ["x", "w"], {"y": F32, "st_o": F32},
                                 {"x": (F32, [1, 4, 5]), "w": (F32, [4, 3])})  # fmt: skip
    yield "dilation_0", _model("CausalConvWithState", ["x", "w"], {"y": F32, "st_o": F32},
                               {"x": (F32, [1, 4, 5]), "w": (F32, [4, 1, 3])}, dilation=0)  # fmt: skip


def _layer_norms() -> Iterator[tuple[str, bytes]]:
    """The layer-norm op tests: LayerNormalization / SimplifiedLayerNormalization / Skip(Simplified)LayerNormalization."""
    for elem, axis, stash, beta in itertools.product((F32, F16, BF16, TP.DOUBLE), (-1, -2, 1, 3), (1, 0), (False, True)):
        feeds: Spec = {"x": (elem, [2, 3, 8]), "g": (elem, [8] if axis in (-1, 2) else [3, 8])}
        names = ["x", "g"] + (["b"] if beta else [])
        if beta:
            feeds["b"] = feeds["g"]
        yield (f"layernorm_{TP.DataType.Name(elem).lower()}_axis{axis}_stash{stash}{'_beta' if beta else ''}",
               _model("LayerNormalization", names, {"y": elem}, feeds, domain="", axis=axis, stash_type=stash))
        if beta:
            continue  # SimplifiedLayerNormalization has no bias: one graph per (dtype, axis, stash)
        yield (f"simplified_{TP.DataType.Name(elem).lower()}_axis{axis}_stash{stash}",
               _model("SimplifiedLayerNormalization", ["x", "g"], {"y": elem}, {k: feeds[k] for k in ("x", "g")},
                      domain="", axis=axis, stash_type=stash))  # fmt: skip
    for op, elem, bias, gamma in itertools.product(
            ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"), (F32, F16, BF16), (False, True), (8, 7)):  # fmt: skip
        feeds = {"x": (elem, [2, 3, 8]), "s": (elem, [2, 3, 8]), "g": (elem, [gamma])}
        names = ["x", "s", "g"]
        if op == "SkipLayerNormalization":
            feeds["be"] = (elem, [8])
            names.append("be")
        if bias:
            feeds["bias"] = (elem, [8])
            names += [""] * (4 - len(names)) + ["bias"]
        yield (f"{op}_{TP.DataType.Name(elem).lower()}{'_bias' if bias else ''}_gamma{gamma}",
               _model(op, names, {"y": elem}, feeds, epsilon=1e-5))
    yield "skip_rank1", _model("SkipSimplifiedLayerNormalization", ["x", "s", "g"], {"y": F32},
                               {"x": (F32, [8]), "s": (F32, [8]), "g": (F32, [8])})  # fmt: skip


FAMILIES = {
    "GroupQueryAttention": _gqa, "SparseAttention": _sparse_attention, "MoE": _moe, "QMoE": _qmoe,
    "MatMulNBits": _matmul_nbits, "RotaryEmbedding": _rotary, "GatedDeltaNet": _gated_delta_net,
    "CausalConvWithState": _causal_conv, "LayerNorms": _layer_norms,
}  # fmt: skip


def graphs() -> Iterator[tuple[str, str, bytes]]:
    """Every graph of the corpus: (family, name, model bytes), in a fixed order."""
    for family, make in FAMILIES.items():
        for name, data in make():
            yield family, name, data


def sample(count: int) -> list[tuple[str, str, bytes]]:
    """About ``count`` graphs spread evenly over the corpus (every k-th), every family included."""
    every = list(graphs())
    step = max(1, len(every) // max(count, 1))
    picked = every[::step]
    seen = {family for family, _, _ in picked}
    picked += [next(g for g in every if g[0] == family) for family in FAMILIES if family not in seen]
    return picked
