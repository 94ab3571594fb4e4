"""Micro-graph builders for the optimizer tests: the exporter patterns of docs/synthetic-model.md.

Each builder returns an ``onnx.ModelProto`` (text-sized, weights in memory) with knobs that
produce the alternate forms and each guard's failure.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F16 = TensorProto.FLOAT16
F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
MS = "com.microsoft"
INT64_MAX = 2**63 - 1


class G:
    """A tiny graph builder: nodes in order, initializers from numpy arrays."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._n = 0

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def ints(self, name: str, vals: list[int]) -> str:
        return self.init(name, np.asarray(vals, dtype=np.int64))

    def op(self, op: str, inputs: list[str], n_out: int = 1, *, name: str | None = None,
           outs: list[str] | None = None, domain: str = "", **attrs: object) -> list[str]:
        self._n += 1
        outs = outs or [f"v{self._n}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name if name is not None else f"n{self._n}",
                                           domain=domain, **attrs))
        return outs

    def o(self, op: str, inputs: list[str], **kw: object) -> str:
        return self.op(op, inputs, **kw)[0]

    def inp(self, name: str, dtype: int, shape: list[object]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def out(self, name: str, dtype: int, shape: list[object] | None) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def model(self, opset: int = 21, ms: bool = True) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "g", self.inputs, self.outputs, self.inits)
        imports = [helper.make_opsetid("", opset)]
        if ms:
            imports.append(helper.make_opsetid(MS, 1))
        return helper.make_model(graph, opset_imports=imports, ir_version=10)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- 1. RMSNorm + rotary --------------------------------------------------------------------------
def rms_rotary_chain(g: G, x: str, pos: str, cos: str, sin: str, w: str, *, N: int, D: int,
                     prefix: str, alternate: bool = False, eps: float = 1e-6, out: str | None = None,
                     commuted: bool = False) -> str:
    r = g.o("Reshape", [x, g.ints(f"{prefix}.shape4", [0, 0, N, D])], name=f"{prefix}/Reshape")
    if alternate:
        sq = g.o("Pow", [r, g.init(f"{prefix}.two", np.array(2.0, np.float16))])
    else:
        sq = g.o("Mul", [r, r])
    ms = g.o("ReduceMean", [sq, g.ints(f"{prefix}.axes", [-1])], keepdims=1)
    ve = g.o("Add", [ms, g.init(f"{prefix}.eps", np.array(eps, np.float16))])
    rs = g.o("Sqrt", [ve])
    if alternate:
        n = g.o("Mul", [r, g.o("Reciprocal", [rs])])
    else:
        n = g.o("Div", [r, rs])
    nw = g.o("Mul", [w, n] if commuted else [n, w])
    c = g.o("Unsqueeze", [g.o("Gather", [cos, pos], axis=0), g.ints(f"{prefix}.ax2", [2])])
    s = g.o("Unsqueeze", [g.o("Gather", [sin, pos], axis=0), g.ints(f"{prefix}.ax2b", [2])])
    x1 = g.o("Slice", [nw, g.ints(f"{prefix}.s0", [0]), g.ints(f"{prefix}.e0", [D // 2]), g.ints(f"{prefix}.a0", [-1])])
    x2 = g.o("Slice", [nw, g.ints(f"{prefix}.s1", [D // 2]), g.ints(f"{prefix}.e1", [D]), g.ints(f"{prefix}.a1", [-1])])
    o1 = g.o("Sub", [g.o("Mul", [x1, c]), g.o("Mul", [x2, s])])
    if commuted:
        o2 = g.o("Add", [g.o("Mul", [s, x1]), g.o("Mul", [c, x2])])
    else:
        o2 = g.o("Add", [g.o("Mul", [x2, c]), g.o("Mul", [x1, s])])
    y = g.o("Concat", [o1, o2], axis=-1, name=f"{prefix}/Concat")
    return g.op("Reshape", [y, g.ints(f"{prefix}.shape3", [0, 0, N * D])], name=f"{prefix}/Flatten",
                outs=[out] if out else None)[0]


def rms_rotary_model(*, N: int = 2, D: int = 8, P: int = 16, dtype: type = np.float16, alternate: bool = False,
                     commuted: bool = False, seed: int = 0) -> onnx.ModelProto:
    r = rng(seed)
    g = G()
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x = g.inp("x", et, ["B", "S", N * D])
    pos = g.inp("position_ids", I64, ["B", "S"])
    cos = g.init("cos_cache", np.cos(r.standard_normal((P, D // 2))).astype(dtype))
    sin = g.init("sin_cache", np.sin(r.standard_normal((P, D // 2))).astype(dtype))
    w = g.init("q_norm.weight", (1 + 0.1 * r.standard_normal(D)).astype(dtype))
    rms_rotary_chain(g, x, pos, cos, sin, w, N=N, D=D, prefix="/q", alternate=alternate,
                     commuted=commuted, out="y")
    g.out("y", et, ["B", "S", N * D])
    return g.model()


# -- 2. shared expert -----------------------------------------------------------------------------
def shared_expert_model(*, H: int = 16, I: int = 8, seed: int = 0, commuted: bool = False,  # noqa: E741
                        up_weight: str | None = None) -> onnx.ModelProto:
    r = rng(seed)
    g = G()
    h = g.inp("h", F16, ["B", "S", H])
    wg = g.init("mlp.shared_expert.gate_proj.weight", (0.3 * r.standard_normal((H, I))).astype(np.float16))
    wu = up_weight or g.init("mlp.shared_expert.up_proj.weight", (0.3 * r.standard_normal((H, I))).astype(np.float16))
    wsg = g.init("mlp.shared_expert_gate.weight", (0.3 * r.standard_normal((H, 1))).astype(np.float16))
    wd = g.init("mlp.shared_expert.down_proj.weight", (0.3 * r.standard_normal((I, H))).astype(np.float16))
    gg = g.o("MatMul", [h, wg], name="/mlp/shared/gate/MatMul")
    u = g.o("MatMul", [h, wu], name="/mlp/shared/up/MatMul")
    sg = g.o("MatMul", [h, wsg], name="/mlp/shared/sgate/MatMul")
    sig = g.o("Sigmoid", [gg])
    silu = g.o("Mul", [sig, gg] if commuted else [gg, sig])
    a = g.o("Mul", [u, silu] if commuted else [silu, u])
    d = g.o("MatMul", [a, wd])
    gate = g.o("Sigmoid", [sg])
    g.op("Mul", [d, gate], outs=["y"])
    g.out("y", F16, ["B", "S", H])
    return g.model()


# -- 4. CausalConvWithState carry ------------------------------------------------------------------
def conv_carry_model(*, C: int = 8, K: int = 4, form: str = "channels_first", S: object = "S",
                     dilation: int = 1, hist: int | None = None, seed: int = 0, **conv_attrs: object) -> onnx.ModelProto:
    r = rng(seed)
    g = G()
    L = (K - 1) * dilation
    hist = L if hist is None else hist
    w = g.init("conv.weight", (0.5 * r.standard_normal((C, 1, K))).astype(np.float16))
    b = g.init("conv.bias", (0.1 * r.standard_normal(C)).astype(np.float16))
    attrs: dict[str, object] = {"activation": "silu", **conv_attrs}
    if dilation != 1:
        attrs["dilation"] = dilation
    if form == "channels_last":
        x = g.inp("x", F16, ["B", S, C])
        past = g.inp("past.0.conv", F16, ["B", L, C])
        pT = g.o("Transpose", [past], perm=[0, 2, 1])
        xT = g.o("Transpose", [x], perm=[0, 2, 1])
        y, _st = g.op("CausalConvWithState", [xT, w, b, pT], 2, domain=MS, name="/conv/CausalConvWithState", **attrs)
        g.op("Transpose", [y], outs=["y"], perm=[0, 2, 1])
        hcat = g.o("Concat", [pT, xT], axis=-1)
        sl = g.o("Slice", [hcat, g.ints("st", [-hist]), g.ints("en", [INT64_MAX]), g.ints("ax", [-1])])
        g.op("Transpose", [sl], outs=["present.0.conv"], perm=[0, 2, 1])
        g.out("y", F16, ["B", S, C])
        g.out("present.0.conv", F16, ["B", L, C])
        return g.model()
    x = g.inp("x", F16, ["B", S, C])
    past = g.inp("past.0.conv", F16, ["B", C, L])
    xT = g.o("Transpose", [x], perm=[0, 2, 1])
    if form == "first_token":
        tail = g.o("Slice", [past, g.ints("st", [1]), g.ints("en", [INT64_MAX]), g.ints("ax", [-1])])
        head = g.o("Slice", [xT, g.ints("st0", [0]), g.ints("en1", [1]), g.ints("ax1", [-1])])
        g.op("Concat", [tail, head], outs=["present.0.conv"], axis=-1)
    else:
        hcat = g.o("Concat", [past, xT], axis=-1)
        g.op("Slice", [hcat, g.ints("st", [-hist]), g.ints("en", [INT64_MAX]), g.ints("ax", [-1])],
             outs=["present.0.conv"])
    y, _st = g.op("CausalConvWithState", [xT, w, b, past], 2, domain=MS, name="/conv/CausalConvWithState",
                  outs=["conv_y", "conv_state_unused"], **attrs)
    g.op("Transpose", [y], outs=["y"], perm=[0, 2, 1])
    g.out("y", F16, ["B", S, C])
    g.out("present.0.conv", F16, ["B", C, L])
    return g.model()


# -- 3. hyper-connection mix ------------------------------------------------------------------------
def hc_chain(g: G, X: str, *, C: int, H: int, R: int, prefix: str, r: np.random.Generator,
             eps: float | None = 1e-5, dtype: type = np.float16, scale_shape: tuple[int, ...] | None = None,
             scale_dtype: type | None = None) -> tuple[str, str]:
    scale = g.init(f"{prefix}.norm.weight", (1 + 0.1 * r.standard_normal(scale_shape or (C * H,))).astype(scale_dtype or dtype))
    down = g.init(f"{prefix}.down", (0.2 * r.standard_normal((C * H, R))).astype(dtype))
    up = g.init(f"{prefix}.up", (0.2 * r.standard_normal((R, C * H))).astype(dtype))
    inject = g.init(f"{prefix}.inject", (0.2 * r.standard_normal((C * H, C))).astype(dtype))
    kw: dict[str, object] = {"num_branches": C}
    if eps is not None:
        kw["epsilon"] = eps
    hn = g.o("BranchwiseRMSNorm", [X, scale], domain=MS, name=f"{prefix}/BranchwiseRMSNorm", **kw)
    d = g.o("MatMul", [hn, down])
    z = g.o("ScaledSiLU", [d], domain=MS, alpha=1.5)
    gate = g.o("Sigmoid", [g.o("MatMul", [z, up])])
    pre = g.o("HyperConnectionPreMix", [hn, gate], domain=MS, num_branches=C, reduction_scale=1.0 / C,
              name=f"{prefix}/HyperConnectionPreMix")
    inj = g.o("MatMul", [hn, inject])
    pg = g.o("Mul", [g.o("Sigmoid", [g.o("Div", [inj, g.init(f"{prefix}.gdiv", np.array(2.0, dtype))])]),
                     g.init(f"{prefix}.gmul", np.array(2.0, dtype))])
    return pre, pg


def hc_model(*, C: int = 4, H: int = 8, R: int = 4, two_blocks: bool = False, seed: int = 0,
             dtype: type = np.float16, **kw: object) -> onnx.ModelProto:
    """One (or two chained) hyper-connection mixes; the block is a Tanh."""
    r = rng(seed)
    g = G()
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    X = g.inp("streams", et, ["B", "S", C * H])
    pre, pg = hc_chain(g, X, C=C, H=H, R=R, prefix="/l0/attn_hc", r=r, dtype=dtype, **kw)  # type: ignore[arg-type]
    blk = g.o("Tanh", [pre])
    X1 = g.op("HyperConnectionPostMix", [X, blk, pg], domain=MS, num_branches=C, name="/l0/attn_hc/PostMix",
              outs=["streams_1" if two_blocks else "streams_out"])[0]
    if two_blocks:
        pre2, pg2 = hc_chain(g, X1, C=C, H=H, R=R, prefix="/l0/mlp_hc", r=r, dtype=dtype)
        blk2 = g.o("Tanh", [pre2])
        g.op("HyperConnectionPostMix", [X1, blk2, pg2], domain=MS, num_branches=C, outs=["streams_out"])
    g.out("streams_out", et, ["B", "S", C * H])
    return g.model()


# -- the public builder's forms (shared/reference/real-exporter-forms.md §1) -------------------------
def hc_packed_chain(g: G, X: str, *, C: int, H: int, R: int, prefix: str, r: np.random.Generator,
                    dtype: type = np.float16, inject_first: bool = False, combine: bool = True,
                    split_attr: bool = False, split_equal: bool = False) -> tuple[str, str | None]:
    """BranchwiseRMSNorm -> ONE MatMul [down|inject] -> Split -> ScaledSiLU -> up -> Sigmoid -> PreMix;
    inject Div/Sigmoid/Mul. ``combine=False``: the final mixer (inject columns computed, unused).
    Split sizes: an input (default), the ``split`` attribute, or none (``split_equal``: R == C)."""
    scale = g.init(f"{prefix}.norm.weight", (1 + 0.1 * r.standard_normal(C * H)).astype(dtype))
    down = (0.2 * r.standard_normal((C * H, R))).astype(dtype)
    inject = (0.2 * r.standard_normal((C * H, C))).astype(dtype)
    parts = [inject, down] if inject_first else [down, inject]
    packed = g.init(f"{prefix}.input_mix_down_block_inject", np.concatenate(parts, axis=1))
    up = g.init(f"{prefix}.input_mix_weight_up", (0.2 * r.standard_normal((R, C * H))).astype(dtype))
    hn = g.o("BranchwiseRMSNorm", [X, scale], domain=MS, name=f"{prefix}/BranchwiseRMSNorm", num_branches=C, epsilon=1e-5)
    di = g.o("MatMul", [hn, packed], name=f"{prefix}/down_inject/MatMul")
    sizes = [C, R] if inject_first else [R, C]
    if split_equal:
        assert R == C, "an equal split needs R == C"
        outs = g.op("Split", [di], 2, name=f"{prefix}/Split", axis=-1, num_outputs=2)
    elif split_attr:
        outs = g.op("Split", [di], 2, name=f"{prefix}/Split", axis=-1, split=sizes)
    else:
        outs = g.op("Split", [di, g.ints(f"{prefix}.split", sizes)], 2, name=f"{prefix}/Split", axis=-1)
    inj, d = (outs[0], outs[1]) if inject_first else (outs[1], outs[0])
    z = g.o("ScaledSiLU", [d], domain=MS, alpha=1.0 / C, name=f"{prefix}/ScaledSiLU")
    gate = g.o("Sigmoid", [g.o("MatMul", [z, up], name=f"{prefix}/up/MatMul")], name=f"{prefix}/Sigmoid")
    pre = g.o("HyperConnectionPreMix", [hn, gate], domain=MS, num_branches=C, reduction_scale=1.0 / C,
              name=f"{prefix}/HyperConnectionPreMix")
    if not combine:
        return pre, None
    div = g.o("Div", [inj, g.init(f"{prefix}.hc", np.array(float(C), dtype))], name=f"{prefix}/inject/Div")
    pg = g.o("Mul", [g.o("Sigmoid", [div], name=f"{prefix}/inject/Sigmoid"), g.init(f"{prefix}.two", np.array(2.0, dtype))],
             name=f"{prefix}/inject/Mul")
    return pre, pg


def hc_builder_model(*, C: int = 4, H: int = 8, R: int = 4, blocks: int = 2, seed: int = 0,
                     inject_first: bool = False, split_attr: bool = False, split_equal: bool = False,
                     ) -> onnx.ModelProto:
    """``blocks`` packed mixes (block = Tanh) with PostMix, then the final mixer (no combine) and lm_head."""
    r = rng(seed)
    g = G()
    X = g.inp("streams", F16, ["B", "S", C * H])
    for b in range(blocks):
        pre, pg = hc_packed_chain(g, X, C=C, H=H, R=R, prefix=f"/l{b}/hc", r=r, inject_first=inject_first,
                                  split_attr=split_attr, split_equal=split_equal)
        assert pg is not None
        blk = g.o("Tanh", [pre], name=f"/l{b}/block/Tanh")
        X = g.op("HyperConnectionPostMix", [X, blk, pg], domain=MS, num_branches=C, name=f"/l{b}/hc/PostMix",
                 outs=[f"streams_{b + 1}"])[0]
    final, _ = hc_packed_chain(g, X, C=C, H=H, R=R, prefix="/model/final_hc", r=r, combine=False,
                               split_attr=split_attr, split_equal=split_equal)
    g.op("Identity", [final], outs=["hidden_states"], name="/model/hidden_states/Identity")
    w = g.init("lm_head.weight", (0.2 * r.standard_normal((H, 16))).astype(np.float16))
    g.op("MatMul", [final, w], outs=["logits"], name="/lm_head/MatMul")
    g.out("hidden_states", F16, ["B", "S", H])
    g.out("logits", F16, ["B", "S", 16])
    return g.model()


def conv_state_output_model(*, C: int = 8, K: int = 4, seed: int = 0) -> onnx.ModelProto:
    """The builder's GDN conv: CausalConvWithState output 1 is ``present.0.conv`` itself."""
    r = rng(seed)
    g = G()
    w = g.init("conv.weight", (0.5 * r.standard_normal((C, 1, K))).astype(np.float16))
    b = g.init("conv.bias", (0.1 * r.standard_normal(C)).astype(np.float16))
    x = g.inp("x", F16, ["B", "S", C])
    past = g.inp("past.0.conv", F16, ["B", C, K - 1])
    xT = g.o("Transpose", [x], perm=[0, 2, 1], name="/conv/Transpose")
    y, _ = g.op("CausalConvWithState", [xT, w, b, past], 2, domain=MS, name="/conv/CausalConvWithState",
                outs=["conv_y", "present.0.conv"], activation="silu", ndim=1, state_window=0)
    g.op("Transpose", [y], outs=["y"], perm=[0, 2, 1], name="/conv/Transpose_1")
    g.out("y", F16, ["B", "S", C])
    g.out("present.0.conv", F16, ["B", C, K - 1])
    return g.model()


def mrope_model(*, N: int = 2, D: int = 8, P: int = 16, seed: int = 0) -> onnx.ModelProto:
    """The builder's q/k norm + rotary: SimplifiedLayerNormalization -> MRotaryEmbedding ([3, B, S])."""
    r = rng(seed)
    g = G()
    x = g.inp("x", F16, ["B", "S", N * D])
    pos = g.inp("position_ids", I64, [3, "B", "S"])
    w = g.init("q_norm.weight", (1 + 0.1 * r.standard_normal(D)).astype(np.float16))
    cos = g.init("cos_cache", np.cos(r.standard_normal((P, D // 2))).astype(np.float16))
    sin = g.init("sin_cache", np.sin(r.standard_normal((P, D // 2))).astype(np.float16))
    xr = g.o("Reshape", [x, g.ints("shape4", [0, 0, N, D])], name="/q/Reshape")
    n = g.o("SimplifiedLayerNormalization", [xr, w], name="/q/SimplifiedLayerNormalization", axis=-1, epsilon=1e-6)
    flat = g.o("Reshape", [n, g.ints("shape3", [0, 0, N * D])], name="/q/Flatten")
    g.op("MRotaryEmbedding", [flat, pos, cos, sin], domain=MS, outs=["y"], name="/q/MRotaryEmbedding",
         mrope_section=[D // 2 - 2, 1, 1], num_heads=N, mrope_layout=1)
    g.out("y", F16, ["B", "S", N * D])
    return g.model()


def as_bfloat16(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The same model with every float16 tensor (inputs, outputs, value_info, initializers) in bfloat16."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    for info in (*graph.input, *graph.output, *graph.value_info):
        if info.type.tensor_type.elem_type == F16:
            info.type.tensor_type.elem_type = TensorProto.BFLOAT16
    for i, init in enumerate(graph.initializer):
        if init.data_type == F16:
            arr = numpy_helper.to_array(init).astype(np.float32)
            graph.initializer[i].CopyFrom(
                helper.make_tensor(init.name, TensorProto.BFLOAT16, arr.shape, arr.reshape(-1).tolist()))
    return out
