"""Builder-form QSA attention: the faithful sparse-attention form and the cpu variant's substitute.

Faithful: DynamicSparseAttention / SparseAttentionIndexer. cpu: SimplifiedLayerNormalization q/k
norms, MRotaryEmbedding and GroupQueryAttention, which ORT 1.32.0 CPU runs.
"""

from __future__ import annotations

from onnx import TensorProto

from q38 import _ops
from q38.synth.builder_forms.forms import KV_DIM, TOKENS, B, Forms, P, S, T
from q38.synth.graph import AttrValue

__all__ = ["attention"]

MS = _ops.MS_DOMAIN
I32, BOOL, F32 = TensorProto.INT32, TensorProto.BOOL, TensorProto.FLOAT


def attention(f: Forms, x: str, i: int, state: int) -> str:
    """QSA attention of layer ``i``: packed qkv MatMul, gate MatMul, attention, gated o_proj.

    Nodes are named ``/model/layers.{i}/attn/...``; the states are ``past_key_values.{state}.*``
    (and ``past.{state}.indexer_key``); the output is ``o_proj(Mul(o, Sigmoid(gate)))``.
    """
    s = f.s
    p = f"/model/layers.{i}/attn"
    qd, kd = s.heads * s.head_size, s.kv_heads * s.head_size
    qkv = f.matmul(x, f"{p}/qkv_proj/MatMul", s.hidden, qd + 2 * kd)
    gate = f.matmul(x, f"{p}/gate_proj/MatMul", s.hidden, qd)
    if f.faithful:
        o = _sparse(f, x, qkv, i, state)
    else:
        o = _gqa(f, qkv, i, state)
    sg = f.act("Sigmoid", gate, f"{p}/gate/Sigmoid", [B, S, qd])
    gated = f.binary("Mul", o, sg, f"{p}/gate/Mul", [B, S, qd])
    return f.matmul(gated, f"{p}/o_proj/MatMul", qd, s.hidden)


def _kv(f: Forms, p: str, op: str, ins: list[str], state: int, **attrs: AttrValue) -> str:
    s, e = f.s, f.io.elem
    name = f"{p}/{op}"
    return f.g.node(op, ins, name,
                    [(e, [B, S, s.heads * s.head_size]), None, None],
                    outputs=[f"{name}/output_0", f"present.{state}.key", f"present.{state}.value"],
                    domain=MS, **attrs)[0]  # fmt: skip


def _sparse(f: Forms, x: str, qkv: str, i: int, state: int) -> str:
    """The faithful sparse attention: SparseAttentionIndexer, then DynamicSparseAttention.

    The indexer is in its 13-input fixed-cache form (slot 12 ``past_sequence_length``); the
    counts chain is GreaterOrEqual -> Where -> ReduceSum and two Reshapes; DynamicSparseAttention
    has ``do_rotary=1`` and 17 inputs (q/k norm weights inside the op).
    """
    g, s = f.g, f.s
    p, wp = f"/model/layers.{i}/attn", f"model.layers.{i}.attn"
    ip, di = f"{p}/indexer", s.idx_dim
    iqk = f.matmul(x, f"{ip}/index_qk_proj/MatMul", s.hidden, (s.idx_heads + 1) * di)
    cos, sin = f.rotary_caches()
    cap = s.token_budget + s.compress_ratio - 1
    sel = g.node(_ops.SPARSE_ATTENTION_INDEXER,
                 [iqk, "", f.norm_weight(f"{wp}.indexer.q_norm.weight", (di,)),
                  f.norm_weight(f"{wp}.indexer.k_norm.weight", (di,)), cos, sin, "",
                  f"past.{state}.indexer_key", "", "", "", "", P],
                 f"{ip}/SparseAttentionIndexer", [(I32, [B, S, cap]), None],
                 outputs=[f"{ip}/SparseAttentionIndexer/output_0", f"present.{state}.indexer_key"],
                 domain=MS, policy_mode="qsa", compress_ratio=s.compress_ratio,
                 token_budget=s.token_budget, epsilon=s.eps, scale=float(di) ** -0.5)[0]  # fmt: skip
    cp = f"{ip}/counts"
    ge = g.node1("GreaterOrEqual", [sel, f.c(0, "INT32")], f"{cp}/GreaterOrEqual", BOOL,
                 [B, S, cap])  # fmt: skip
    wh = g.node1("Where", [ge, f.c(1, "INT32"), f.c(0, "INT32")], f"{cp}/Where", I32, [B, S, cap])
    rs = g.node1("ReduceSum", [wh, f.c([-1])], f"{cp}/ReduceSum", I32, [B, S], keepdims=0)
    cnt = f.reshape(rs, [-1], f"{cp}/Reshape", [TOKENS], elem=I32)
    sel2 = f.reshape(sel, [-1, cap], f"{ip}/selected/Reshape", [TOKENS, cap], elem=I32)
    seqlens, total = f.mask()
    return _kv(f, p, _ops.DYNAMIC_SPARSE_ATTENTION,
               [qkv, "", "", f"past_key_values.{state}.key", f"past_key_values.{state}.value",
                "", "", sel2, cnt, seqlens, total, cos, sin, f.pos0(),
                f.norm_weight(f"{wp}.q_norm.weight", (s.head_size,)),
                f.norm_weight(f"{wp}.k_norm.weight", (s.head_size,)), ""],
               state, num_heads=s.heads, kv_num_heads=s.kv_heads,
               scale=float(s.head_size) ** -0.5, is_causal=1, attention_mode="selected_only",
               selected_kv_source="main", do_rotary=1, rotary_interleaved=0,
               qk_norm_epsilon=s.eps)  # fmt: skip


def _qk(f: Forms, x: str, p: str, wp: str, tag: str, heads: int) -> str:
    """Per-head norm and MRoPE of q or k in the Qwen3.5 builder's CPU attention form.

    ``Reshape [0, -1, D]`` -> ``SimplifiedLayerNormalization`` (ai.onnx) -> ``Reshape`` back, then
    ``MRotaryEmbedding`` over the [3, B, S] position ids (interleaved partial MRoPE, mrope_layout
    1) computed in float32 between two Casts.
    """
    g, s, e = f.g, f.s, f.io.elem
    d = s.head_size
    rows = "sequence_length * num_attention_heads" if tag == "q" else "sequence_length * num_key_value_heads"
    r = f.reshape(x, [0, -1, d], f"{p}/{tag}_norm/Reshape_1", [B, rows, d])
    n = g.node1(_ops.SIMPLIFIED_LAYER_NORM,
                [r, f.norm_weight(f"{wp}.{tag}_norm.layernorm.weight", (d,))],
                f"{p}/{tag}_norm/SimplifiedLayerNormalization", e,
                [B, rows, d], epsilon=s.eps, axis=-1, stash_type=1)  # fmt: skip
    n3 = f.reshape(n, [0, -1, heads * d], f"{p}/{tag}_norm/Reshape_2", [B, S, heads * d])
    cos, sin = f.rotary_caches(fp32=True)
    rp = f"{p}/{tag}_rotary/MRotaryEmbedding"
    shape: list[int | str] = [B, S, heads * d]
    x32 = g.node1("Cast", [n3], f"{rp}/root_input/Cast", F32, shape, to=F32)
    y32 = g.node(_ops.M_ROTARY_EMBEDDING, [x32, "position_ids", cos, sin], rp, [(F32, shape)],
                 outputs=[f"{rp}/output_0/Cast/output_0"], domain=MS, interleaved=0,
                 rotary_embedding_dim=s.rotary_dim, num_heads=heads,
                 mrope_section=list(s.mrope_section), mrope_layout=1,
                 is_packed_batching=0)[0]  # fmt: skip
    return g.node(
        "Cast", [y32], f"{rp}/output_0/Cast", [(e, shape)], outputs=[f"{rp}/output_0"], to=e
    )[0]


def _gqa(f: Forms, qkv: str, i: int, state: int) -> str:
    s, e = f.s, f.io.elem
    p, wp = f"/model/layers.{i}/attn", f"model.layers.{i}.attn"
    qd, kd = s.heads * s.head_size, s.kv_heads * s.head_size
    q, k, v = f.g.node("Split", [qkv, f.c([qd, kd, kd])], f"{p}/qkv_proj/Split",
                       [(e, [B, S, qd]), (e, [B, S, kd]), (e, [B, S, kd])], axis=-1)  # fmt: skip
    qr = _qk(f, q, p, wp, "q", s.heads)
    kr = _qk(f, k, p, wp, "k", s.kv_heads)
    seqlens, total = f.mask()
    return _kv(f, p, _ops.GROUP_QUERY_ATTENTION,
               [qr, kr, v, f"past_key_values.{state}.key", f"past_key_values.{state}.value",
                seqlens, total, "", "", "", "", ""],
               state, num_heads=s.heads, kv_num_heads=s.kv_heads,
               scale=float(s.head_size) ** -0.5, local_window_size=-1, softcap=0.0, do_rotary=0,
               rotary_interleaved=0)  # fmt: skip


def kv_shapes(f: Forms) -> tuple[list[int | str], list[int | str]]:
    """Past / present KV shapes: [B, kvH, past|total, kv_cache_dim] (the builder's symbolic dim)."""
    kv = f.s.kv_heads
    return [B, kv, P, KV_DIM], [B, kv, T, KV_DIM]
