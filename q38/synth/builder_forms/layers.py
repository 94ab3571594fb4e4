"""Builder-form blocks: packed hyper-connection mixes, GatedDeltaNet, MoE, PLE / Engram.

Each function emits one block of docs/synthetic-model.md ("builder exporter") with the public
builder's node and initializer names.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

from q38 import _ops
from q38.synth.builder_forms.forms import TOKENS, B, Forms, S
from q38.synth.builder_forms.typed import Shape
from q38.synth.graph import AttrValue
from q38.synth.qmoe import pack_sm80_int4

__all__ = [
    "engram_lookup",
    "final_mixer",
    "gated_delta_net",
    "hc_mix",
    "hc_post",
    "linear_attention",
    "moe",
    "ple",
]

MS = _ops.MS_DOMAIN
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def hc_mix(f: Forms, x: str, p: str, wp: str) -> tuple[str, str]:
    """One packed hyper-connection mix; returns (pre [B,S,H], inject [B,S,hc]).

    BranchwiseRMSNorm -> one packed MatMul [down|inject] -> Split -> ScaledSiLU -> up MatMul ->
    Sigmoid -> HyperConnectionPreMix; inject Div/Sigmoid/Mul.
    """
    g, s = f.g, f.s
    ch, r, hc, e = s.streams, s.hc_rank, s.hc, f.io.elem
    hn = g.node1(_ops.BRANCHWISE_RMS_NORM, [x, f.norm_weight(f"{wp}.norm.weight", (ch,))],
                 f"{p}/BranchwiseRMSNorm", e, [B, S, ch], domain=MS, num_branches=hc,
                 epsilon=s.eps)  # fmt: skip
    di = f.matmul(hn, f"{p}/down_inject/MatMul", ch, r + hc,
                  wname=f"{wp}.input_mix_down_block_inject.weight")  # fmt: skip
    d, inj = g.node("Split", [di, f.c([r, hc])], f"{p}/down_inject/Split",
                    [(e, [B, S, r]), (e, [B, S, hc])], axis=-1)  # fmt: skip
    z = f.act(_ops.SCALED_SILU, d, f"{p}/ScaledSiLU", [B, S, r], domain=MS, alpha=1.0 / hc)
    up = f.matmul(z, f"{p}/up/MatMul", r, ch, wname=f"{wp}.input_mix_weight_up.weight")
    gt = f.act("Sigmoid", up, f"{p}/Sigmoid", [B, S, ch])
    pre = g.node1(_ops.HC_PRE_MIX, [hn, gt], f"{p}/HyperConnectionPreMix", e, [B, S, s.hidden],
                  domain=MS, num_branches=hc, reduction_scale=1.0 / hc)  # fmt: skip
    dv = f.binary("Div", inj, f.cf(float(hc)), f"{p}/inject/Div", [B, S, hc])
    sg = f.act("Sigmoid", dv, f"{p}/inject/Sigmoid", [B, S, hc])
    pg = f.binary("Mul", sg, f.cf(2.0), f"{p}/inject/Mul", [B, S, hc])
    return pre, pg


def hc_post(f: Forms, x: str, block_out: str, pg: str, p: str) -> str:
    """HyperConnectionPostMix: ``block_out`` written back into the streams ``x`` with the inject gate ``pg``."""
    return f.g.node1(_ops.HC_POST_MIX, [x, block_out, pg], f"{p}/HyperConnectionPostMix",
                     f.io.elem, [B, S, f.s.streams], domain=MS, num_branches=f.s.hc)  # fmt: skip


def final_mixer(f: Forms, x: str) -> str:
    """The final hyper-connection mix, without a combine (no inject, no PostMix).

    Its [B,S,H] output feeds lm_head directly (no RMSNorm).
    """
    g, s = f.g, f.s
    p, wp = "/model/final_hyper_connection", "model.final_hyper_connection"
    ch, r, e = s.streams, s.hc_rank, f.io.elem
    hn = g.node1(_ops.BRANCHWISE_RMS_NORM, [x, f.norm_weight(f"{wp}.norm.weight", (ch,))],
                 f"{p}/BranchwiseRMSNorm", e, [B, S, ch], domain=MS, num_branches=s.hc,
                 epsilon=s.eps)  # fmt: skip
    d = f.matmul(hn, f"{p}/down/MatMul", ch, r, wname=f"{wp}.input_mix_down.weight")
    z = f.act(_ops.SCALED_SILU, d, f"{p}/ScaledSiLU", [B, S, r], domain=MS, alpha=1.0 / s.hc)
    up = f.matmul(z, f"{p}/up/MatMul", r, ch, wname=f"{wp}.input_mix_weight_up.weight")
    gt = f.act("Sigmoid", up, f"{p}/Sigmoid", [B, S, ch])
    return g.node1(_ops.HC_PRE_MIX, [hn, gt], f"{p}/HyperConnectionPreMix", e, [B, S, s.hidden],
                   domain=MS, num_branches=s.hc, reduction_scale=1.0 / s.hc)  # fmt: skip


def _state_conv(f: Forms, x: str, i: int, transpose_in: str) -> str:
    """A GDN layer's causal conv on [B,S,C], its state carried from ``past.{i}.conv`` to ``present.{i}.conv``.

    Transpose [B,S,C] -> [B,C,S], ``CausalConvWithState`` (ndim 1, silu, state_window 0) whose
    output 1 is ``present.{i}.conv``, Transpose back to [B,S,C].
    """
    g, s, e = f.g, f.s, f.io.elem
    p, wp = f"/model/layers.{i}/linear_attn", f"model.layers.{i}.linear_attn"
    cd = s.conv_dim
    xt = g.node1("Transpose", [x], f"{p}/{transpose_in}/Transpose", e, [B, cd, S], perm=[0, 2, 1])
    conv = f"{p}/CausalConvWithState"
    y = g.node(_ops.CAUSAL_CONV_WITH_STATE,
               [xt, f.weight(f"{wp}.conv1d.weight", (cd, 1, s.conv_k), scale=0.3),
                f.weight(f"{wp}.conv1d.bias", (cd,), scale=0.1), f"past.{i}.conv"],
               conv, [(e, [B, cd, S]), None], outputs=[f"{conv}/output_0", f"present.{i}.conv"],
               domain=MS, ndim=1, activation="silu", state_window=0)[0]  # fmt: skip
    return g.node1("Transpose", [y], f"{p}/conv_out/Transpose", e, [B, S, cd], perm=[0, 2, 1])


def gated_delta_net(f: Forms, x: str, i: int) -> str:
    """GatedDeltaNet layer ``i`` in the fused GatedDeltaNet form.

    qkv_z / a_b projections; CausalConvWithState whose output 1 is ``present.{i}.conv``;
    GatedDeltaNet(packed qkv, "", "", "", fp32 decay, fp32 beta, state, A_log, dt_bias) with
    ``gate_activation=qwen``; GatedRMSNorm; out_proj.
    """
    g, s, e = f.g, f.s, f.io.elem
    p, wp = f"/model/layers.{i}/linear_attn", f"model.layers.{i}.linear_attn"
    cd, zd, hv = s.conv_dim, s.gdn_hv * s.gdn_dv, s.gdn_hv
    qkvz = f.matmul(x, f"{p}/qkv_z_proj/MatMul", s.hidden, cd + zd)
    xb, z = g.node("Split", [qkvz, f.c([cd, zd])], f"{p}/qkv_z/Split",
                   [(e, [B, S, cd]), (e, [B, S, zd])], axis=-1)  # fmt: skip
    ab = f.matmul(x, f"{p}/a_b_proj/MatMul", s.hidden, 2 * hv)
    a, b = g.node("Split", [ab, f.c([hv, hv])], f"{p}/a_b/Split",
                  [(e, [B, S, hv]), (e, [B, S, hv])], axis=-1)  # fmt: skip
    yt = _state_conv(f, xb, i, "conv_in")
    gdn = f"{p}/GatedDeltaNet"
    decay = g.node1("Cast", [a], f"{gdn}/decay_fp32/Cast", F32, [B, S, hv], to=F32)
    beta = g.node1("Cast", [b], f"{gdn}/beta_fp32/Cast", F32, [B, S, hv], to=F32)
    a_log = f.w.add(g, f"{wp}.A_log", lambda: np.log(np.linspace(1.0, 4.0, hv)).astype(np.float32))
    dt_b = f.w.add(g, f"{wp}.dt_bias", lambda: np.linspace(-0.5, 0.5, hv).astype(np.float32))
    o = g.node(_ops.GATED_DELTA_NET,
               [yt, "", "", "", decay, beta, f"past.{i}.recurrent", a_log, dt_b], gdn,
               [(e, [B, S, hv, s.gdn_dv]), None],
               outputs=[f"{gdn}/output_0", f"present.{i}.recurrent"], domain=MS,
               update_rule="gated_delta", scale=0.0, gate_activation="qwen",
               beta_activation="sigmoid", qk_l2_norm=1, chunk_size=64)[0]  # fmt: skip
    o3 = f.reshape(o, [0, 0, zd], f"{p}/gdn_out/Reshape", [B, S, zd])
    n = g.node1(_ops.GATED_RMS_NORM, [o3, f.norm_weight(f"{wp}.norm.weight", (s.gdn_dv,)), z],
                f"{p}/GatedRMSNorm", e, [B, S, zd], domain=MS, epsilon=s.eps)  # fmt: skip
    return f.matmul(n, f"{p}/out_proj/MatMul", zd, s.hidden)


def _int4_experts(f: Forms, ep: str) -> tuple[list[str], dict[str, AttrValue]]:
    g, s, w = f.g, f.s, f.w
    e, h, i, blk = s.experts, s.hidden, s.moe_inter, s.block

    def codes(name: str, n: int, k: int) -> str:
        transform = (lambda raw: pack_sm80_int4(raw, n, k)) if f.prepacked else None
        return w.codes(g, name, (e, n, k // 2), transform=transform)

    def scales(name: str, n: int, k: int) -> str:
        return w.uniform(g, name, (e, n, k // blk), 0.01, 0.03, dtype=f.io.np_type)

    ins = [
        codes(f"{ep}.gate_up_proj.qweight", 2 * i, h), scales(f"{ep}.gate_up_proj.scales", 2 * i, h),
        f.zeros(f"{ep}.gate_up_proj.bias", (e, 2 * i)),
        codes(f"{ep}.down_proj.qweight", h, i), scales(f"{ep}.down_proj.scales", h, i),
        f.zeros(f"{ep}.down_proj.bias", (e, h)),
    ]  # fmt: skip
    attrs: dict[str, AttrValue] = {"activation_type": "swiglu", "expert_weight_bits": 4,
                                "swiglu_fusion": 1, "block_size": blk}  # fmt: skip
    if f.prepacked:
        attrs["weights_prepacked"] = 1
    return [*ins, "", "", "", "", "", ""], attrs  # fc3 w/s/b, zero points 1-3: absent


def _fp8_experts(f: Forms, ep: str) -> tuple[list[str], dict[str, AttrValue]]:
    """The MTP head's FP8 experts: QMoE inputs and attributes (gate fc1, down fc2, up fc3).

    ``swiglu_fusion=0``; weights float8e4m3fn row-major [E, N, K] with float32 block scales
    [E, ceil(N/128), ceil(K/128)].
    """
    g, s, w = f.g, f.s, f.w
    e, h, i, blk = s.experts, s.hidden, s.moe_inter, s.fp8_block

    def fp8(name: str, n: int, k: int) -> tuple[str, str]:
        wt = w.normal_streamed(g, f"{name}.weight", (e, n, k), 0.5, ml_dtypes.float8_e4m3fn)
        sc = w.uniform(g, f"{name}.weight_scale_inv", (e, -(-n // blk), -(-k // blk)), 0.01, 0.03,
                       dtype=np.float32)  # fmt: skip
        return wt, sc

    w1, s1 = fp8(f"{ep}.gate_proj", i, h)
    w2, s2 = fp8(f"{ep}.down_proj", h, i)
    w3, s3 = fp8(f"{ep}.up_proj", i, h)
    ins = [w1, s1, f.zeros(f"{ep}.gate_proj.bias", (e, i)), w2, s2,
           f.zeros(f"{ep}.down_proj.bias", (e, h)), w3, s3, "", "", "", ""]  # fmt: skip
    attrs: dict[str, AttrValue] = {"activation_type": "silu", "expert_weight_bits": 8,
                                "swiglu_fusion": 0, "block_size": blk, "quant_type": "fp8"}  # fmt: skip
    return ins, attrs


def moe(f: Forms, x: str, i: int, *, fp8: bool = False) -> str:
    """MoE of layer ``i``: routed experts (QMoE, int4 or ``fp8``) plus the shared expert, joined by GatedAdd.

    Router MatMul -> Reshape [-1, E] -> QMoE (14 inputs, zero biases at slots 4 and 7, no
    router_weights).
    """
    g, s, e = f.g, f.s, f.io.elem
    p, wp = f"/model/layers.{i}", f"model.layers.{i}"
    h, ne = s.hidden, s.experts
    lg = f.matmul(x, f"{p}/moe/router/MatMul", h, ne)
    lg2 = f.reshape(lg, [-1, ne], f"{p}/moe/router/Reshape", [TOKENS, ne])
    ins, attrs = (_fp8_experts if fp8 else _int4_experts)(f, f"{wp}.moe.experts")
    m = g.node1(_ops.QMOE, [x, lg2, *ins], f"{p}/moe/QMoE", e, [B, S, h], domain=MS,
                activation_alpha=1.0, activation_beta=0.0, k=s.top_k,
                normalize_routing_weights=1, use_sparse_mixer=0, **attrs)  # fmt: skip
    sp, si = f"{p}/mlp", s.shared_inter  # the builder names the shared expert "mlp"
    gm = f.matmul(x, f"{sp}/gate_proj/MatMul", h, si)
    um = f.matmul(x, f"{sp}/up_proj/MatMul", h, si)
    sig = f.act("Sigmoid", gm, f"{sp}/act_fn/Sigmoid", [B, S, si])
    act = f.binary("Mul", gm, sig, f"{sp}/act_fn/Mul", [B, S, si])
    a = f.binary("Mul", act, um, f"{sp}/Mul", [B, S, si])
    d = f.matmul(a, f"{sp}/down_proj/MatMul", si, h)
    sgm = f.matmul(x, f"{p}/shared_expert_gate/MatMul", h, 1)
    gate = f.act("Sigmoid", sgm, f"{p}/shared_expert_gate/Sigmoid", [B, S, 1])
    return g.node1(_ops.GATED_ADD, [m, d, gate], f"{p}/moe/GatedAdd", e, [B, S, h], domain=MS)


def engram_lookup(f: Forms, ids: str, p: str, past: str | None, *,
                  outputs: tuple[str, str] | None = None) -> str:  # fmt: skip
    """The n-gram embeddings [B, S, ple_dim] of ``ids``, looked up in the FP8 Engram table.

    NGramHashMapping -> GatherBlockQuantized (``layer_ann=cpu_embedding``) -> Reshape.

    ``past`` is the ``past.{i}.ple_tokens`` history (None: no history, pad ids); ``outputs`` names
    (embeddings, present ple tokens) when they are graph outputs.
    """
    g, s, w = f.g, f.s, f.w
    nh, dh = s.ngram_total_heads, s.ple_head_dim
    rows = nh * s.ngram_head_vocab
    wp = "model.engram"
    mult = w.add(g, f"{wp}.multipliers", lambda: np.array([1, 31, 1009][: s.ngram], np.int64))
    voc = w.add(g, f"{wp}.vocab_sizes", lambda: np.full(nh, s.ngram_head_vocab, np.int64))
    off = w.add(g, f"{wp}.head_offsets",
                lambda: np.arange(nh, dtype=np.int64) * s.ngram_head_vocab)  # fmt: skip
    hp = f"{p}/NGramHashMapping"
    hash_out = [f"{hp}/output_0", outputs[1] if outputs else ""]
    h = g.node(_ops.NGRAM_HASH_MAPPING, [ids, mult, voc, past or "", off], hp,
               [(I64, [B, S, nh]), (I64, [B, s.ngram - 1]) if outputs else None],
               outputs=hash_out, domain=MS, pad_id=0, n_head_per_ngram=s.ngram_heads,
               max_ngram_size=s.ngram)[0]  # fmt: skip
    table = w.normal(g, f"{wp}.embedding.weight", (rows, dh), scale=1.0,
                     dtype=ml_dtypes.float8_e4m3fn)  # fmt: skip
    scales = w.uniform(g, f"{wp}.embedding.scales", (rows, 1), 0.02, 0.05, dtype=f.io.np_type)
    gp = f"{p}/GatherBlockQuantized"
    e4 = g.node1(_ops.GATHER_BLOCK_QUANTIZED, [table, h, scales], gp, f.io.elem, [B, S, nh, dh],
                 domain=MS, bits=8, block_size=dh, quantize_axis=1, gather_axis=0)  # fmt: skip
    g.annotate(gp, "layer_ann", "cpu_embedding")
    return g.node("Reshape", [e4, f.c([0, 0, s.ple_dim])], f"{p}/Reshape",
                  [(f.io.elem, [B, S, s.ple_dim])],
                  outputs=[outputs[0]] if outputs else None)[0]  # fmt: skip


def ple(f: Forms, x: str, i: int, embeddings: str) -> str:
    """The PLE block on the streams of layer ``i``: n-gram embeddings gated into the residual.

    Key/value projections of the n-gram embeddings, EngramGate against the streams, a dilated
    channels-last CausalConvWithState over the gated value, and the residual Adds. Faithful: the
    conv state is ``past.{i}.ple_conv`` -> ``present.{i}.ple_conv``; cpu: no conv state
    (onnxruntime-genai 0.18.0 carries none).
    """
    g, s, e = f.g, f.s, f.io.elem
    p, wp = f"/model/layers.{i}/ple", f"model.layers.{i}.ple"
    hc, h, ch = s.hc, s.hidden, s.streams
    k = f.matmul(embeddings, f"{p}/key_proj/MatMul", s.ple_dim, ch)
    k4 = f.reshape(k, [0, 0, hc, h], f"{p}/key/Reshape", [B, S, hc, h])
    q4 = f.reshape(x, [0, 0, hc, h], f"{p}/query/Reshape", [B, S, hc, h])
    v = f.matmul(embeddings, f"{p}/value_proj/MatMul", s.ple_dim, h)
    gated, normed = g.node(_ops.ENGRAM_GATE,
                           [k4, q4, v, f.norm_weight(f"{wp}.key_norm.weight", (hc, h)),
                            f.norm_weight(f"{wp}.query_norm.weight", (hc, h)),
                            f.norm_weight(f"{wp}.conv_norm.weight", (hc, h))],
                           f"{p}/EngramGate", [(e, [B, S, hc, h]), (e, [B, S, hc, h])],
                           domain=MS, epsilon=s.eps)  # fmt: skip
    n3 = f.reshape(normed, [0, 0, ch], f"{p}/conv_in/Reshape", [B, S, ch])
    conv = f"{p}/CausalConvWithState"
    past = [f"past.{i}.ple_conv"] if f.faithful else []
    # Output 1 (the state) is required by the schema; the cpu variant leaves it unconsumed.
    outs = [f"{conv}/output_0", f"present.{i}.ple_conv" if f.faithful else f"{conv}/output_1"]
    state: tuple[int, Shape] | None = None if f.faithful else (e, [B, s.ngram * (s.conv_k - 1), ch])
    c = g.node(_ops.CAUSAL_CONV_WITH_STATE,
               [n3, f.weight(f"{wp}.conv.weight", (ch, 1, s.conv_k), scale=0.3),
                f.weight(f"{wp}.conv.bias", (ch,), scale=0.1), *past],
               conv, [(e, [B, S, ch]), state], outputs=outs, domain=MS, ndim=1,
               activation="silu", dilation=s.ngram, channels_last=1)[0]  # fmt: skip
    g3 = f.reshape(gated, [0, 0, ch], f"{p}/gated/Reshape", [B, S, ch])
    add = f.binary("Add", g3, c, f"{p}/Add", [B, S, ch])
    return f.binary("Add", x, add, f"{p}/residual/Add", [B, S, ch])


def linear_attention(f: Forms, x: str, i: int) -> str:
    """GatedDeltaNet layer ``i`` in the 0.18.0 builder's default linear-attention form.

    ``linear_attn_op=linear_attention``: separate qkv / z / b / a projections, CausalConvWithState (output 1 = ``present.{i}.conv``),
    split q/k/v, LpNormalization q/k (q scaled by Dk^-0.5), LinearAttentionGate ->
    LinearAttention{gated_delta} (state ``past.{i}.recurrent`` in the io dtype), GatedRMSNorm,
    out_proj.
    """
    g, s, e = f.g, f.s, f.io.elem
    p, wp = f"/model/layers.{i}/linear_attn", f"model.layers.{i}.linear_attn"
    kd, vd, hk, hv = s.gdn_hk * s.gdn_dk, s.gdn_hv * s.gdn_dv, s.gdn_hk, s.gdn_hv
    cd = s.conv_dim
    qkv = f.matmul(x, f"{p}/qkv_proj/MatMul", s.hidden, cd)
    z = f.matmul(x, f"{p}/z_proj/MatMul", s.hidden, vd)
    b = f.matmul(x, f"{p}/b_proj/MatMul", s.hidden, hv)
    a = f.matmul(x, f"{p}/a_proj/MatMul", s.hidden, hv)
    yt = _state_conv(f, qkv, i, "qkv_proj")
    q, k, v = g.node("Split", [yt, f.c([kd, kd, vd])], f"{p}/split_qkv/Split",
                     [(e, [B, S, kd]), (e, [B, S, kd]), (e, [B, S, vd])], axis=-1)  # fmt: skip

    def l2(t: str, tag: str) -> str:
        r = f.reshape(t, [0, 0, hk, s.gdn_dk], f"{p}/{tag}_l2norm/flat/Reshape", [B, S, hk, s.gdn_dk])
        n = g.node1("LpNormalization", [r], f"{p}/{tag}_l2norm/LpNormalization", e,
                    [B, S, hk, s.gdn_dk], axis=-1, p=2)  # fmt: skip
        return f.reshape(n, [0, 0, kd], f"{p}/{tag}_l2norm/unflat/Reshape", [B, S, kd])

    qs = f.binary("Mul", l2(q, "q"), f.cf(float(s.gdn_dk) ** -0.5), f"{p}/q_scaled/Mul", [B, S, kd])
    kn = l2(k, "k")
    dt_b = f.w.normal(g, f"{wp}.dt_bias", (hv,), scale=0.5, dtype=np.float32)  # TF is float only
    neg = f.w.add(g, f"{wp}.neg_exp_A", lambda: (-np.linspace(1.0, 4.0, hv)).astype(np.float32))
    decay, beta = g.node(_ops.LINEAR_ATTENTION_GATE, [a, dt_b, neg, b], f"{p}/LinearAttentionGate",
                         [(e, [B, S, hv]), (e, [B, S, hv])], domain=MS)  # fmt: skip
    la = f"{p}/LinearAttention"
    o = g.node(_ops.LINEAR_ATTENTION, [qs, kn, v, f"past.{i}.recurrent", decay, beta], la,
               [(e, [B, S, vd]), None], outputs=[f"{la}/output_0", f"present.{i}.recurrent"],
               domain=MS, q_num_heads=hk, kv_num_heads=hv, update_rule="gated_delta", scale=1.0,
               state_window=0)[0]  # fmt: skip
    n = g.node1(_ops.GATED_RMS_NORM, [o, f.norm_weight(f"{wp}.norm.weight", (s.gdn_dv,)), z],
                f"{p}/GatedRMSNorm", e, [B, S, vd], domain=MS, epsilon=s.eps)  # fmt: skip
    return f.matmul(n, f"{p}/out_proj/MatMul", vd, s.hidden)
