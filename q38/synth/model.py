"""Assembly of the target, prefill and head graphs of the synthetic model."""

from __future__ import annotations

import onnx
from onnx import TensorProto

from q38 import _ops
from q38.synth.blocks import F16, MS, Ctx
from q38.synth.graph import GraphBuilder
from q38.synth.spec import Spec
from q38.synth.weights import Weights

__all__ = ["MTP_MISALIGN", "build_head", "build_target"]

I64, F32 = TensorProto.INT64, TensorProto.FLOAT
MTP_MISALIGN = 16  # MTP expert tensors start 16 bytes past a 64-byte boundary (never 4096-aligned)


def _io(g: GraphBuilder, s: Spec, variant: str, *, prefill: bool) -> None:
    B, S, T, P = "batch_size", "sequence_length", "total_sequence_length", "past_sequence_length"
    g.input("input_ids", I64, [B, S])
    g.input("attention_mask", I64, [B, T])
    g.input("position_ids", I64, [B, S])
    outs: list[tuple[str, int, list[int | str]]] = []
    for i in range(s.layers):
        if s.is_qsa(i):
            for kv in ("key", "value"):
                g.input(f"past_key_values.{i}.{kv}", F16, [B, s.kv_heads, P, s.head_size])
                outs.append((f"present.{i}.{kv}", F16, [B, s.kv_heads, T, s.head_size]))
            if variant == "faithful":
                g.input(f"past.{i}.indexer_key", F16, [B, P, s.idx_dim])
                outs.append((f"present.{i}.indexer_key", F16, [B, T, s.idx_dim]))
        else:
            st = s.conv_k - 1
            shape: list[int | str] = [B, st, s.conv_dim] if prefill else [B, s.conv_dim, st]
            g.input(f"past.{i}.conv", F16, shape)
            outs.append((f"present.{i}.conv", F16, shape))
            rshape: list[int | str] = [B, s.gdn_hv, s.gdn_dv, s.gdn_dk]
            g.input(f"past.{i}.recurrent", F32, rshape)
            outs.append((f"present.{i}.recurrent", F32, rshape))
    g.output("logits", F16, [B, S, s.vocab])
    g.output("hidden_states", F16, [B, S, s.streams])
    if not prefill:
        g.output("mtp.0.logits", F16, [B, S, s.vocab])
    for name, elem, shape in outs:
        g.output(name, elem, shape)


def _mask(c: Ctx) -> tuple[str, str]:
    g = c.g
    p = "/model/attn_mask"
    rs = g.op1(
        "ReduceSum",
        ["attention_mask", c.c64(f"{p}/ReduceSum/axes", [1])],
        f"{p}/ReduceSum",
        keepdims=0,
    )
    sub = g.op1("Sub", [rs, c.c64(f"{p}/Sub/one", 1)], f"{p}/Sub")
    seqlens = g.op1("Cast", [sub], f"{p}/seqlens_k/Cast", to=TensorProto.INT32)
    shp = g.op1("Shape", ["attention_mask"], f"{p}/Shape", start=1, end=2)
    tot = g.op1("Cast", [shp], f"{p}/total_seq_len/Cast", to=TensorProto.INT32)
    total = g.op1("Squeeze", [tot, c.c64(f"{p}/Squeeze/axes", [0])], f"{p}/total_seq_len/Squeeze")
    return seqlens, total


def _final_norm(c: Ctx, x: str) -> str:
    g, s, w = c.g, c.s, c.w
    p = "/model/norm"
    hn = g.op1(
        _ops.BRANCHWISE_RMS_NORM,
        [x, w.norm(g, "model.norm.hc_scale", (s.streams,))],
        f"{p}/BranchwiseRMSNorm",
        domain=MS,
        num_branches=s.hc,
        epsilon=s.eps,
    )
    mix = g.op1(
        "MatMul",
        [hn, w.normal(g, "model.norm.hc_gate.weight", (s.streams, s.hc))],
        f"{p}/gate/MatMul",
    )
    gate = g.op1("Sigmoid", [mix], f"{p}/gate/Sigmoid")
    pre = g.op1(
        _ops.HC_PRE_MIX,
        [hn, gate],
        f"{p}/HyperConnectionPreMix",
        domain=MS,
        num_branches=s.hc,
        reduction_scale=1.0 / s.hc,
    )
    return c.rms_norm(pre, f"{p}/rms", "model.norm.weight", s.hidden)


def _lm_head(c: Ctx, n: str, name: str, out: str) -> str:
    w = c.w.normal(c.g, "lm_head.weight", (c.s.hidden, c.s.vocab))
    return c.g.op("MatMul", [n, w], name, outputs=[out])[0]


def build_target(
    w: Weights, s: Spec, *, variant: str, experts: str, lineage: str, prefill: bool
) -> onnx.ModelProto:
    """The target graph (``prefill=False``, model.onnx) or the chunked-prefill graph."""
    g = GraphBuilder("qwen38_flash_prefill" if prefill else "qwen38_flash_target")
    c = Ctx(g, w, s, variant=variant, experts=experts)
    _io(g, s, variant, prefill=prefill)
    emb = w.normal(g, "model.embed_tokens.weight", (s.vocab, s.hidden), scale=0.5)
    e = g.op1("Gather", [emb, "input_ids"], "/model/embed_tokens/Gather")
    x = g.op1(
        "Tile",
        [e, c.c64("/model/hyper_connection/Tile/repeats", [1, 1, s.hc])],
        "/model/hyper_connection/Tile",
    )
    seqlens, total = _mask(c)
    for i in range(s.layers):
        p, wp = f"/model/layers.{i}", f"model.layers.{i}"
        pre, pg = c.hc_mix(x, f"{p}/attn_hc", f"{wp}.attn_hc")
        if s.is_qsa(i):
            out = c.attention(pre, f"{p}/attn", f"{wp}.attn", layer=i, seqlens=seqlens, total=total)
        else:
            out = c.gdn(pre, i, prefill=prefill)
        x = c.hc_post(x, out, pg, f"{p}/attn_hc")
        pre2, pg2 = c.hc_mix(x, f"{p}/mlp_hc", f"{wp}.mlp_hc")
        m = c.moe(pre2, p, wp)
        x = c.hc_post(x, m, pg2, f"{p}/mlp_hc")
    g.op("Identity", [x], "/model/hidden_states/Identity", outputs=["hidden_states"])
    _lm_head(c, _final_norm(c, x), "/lm_head/MatMul", "logits")
    if not prefill:
        if lineage == "custom":
            x = g.op1(_ops.FOLD_MID2, [x], "/fold/FoldMid2", domain=_ops.QWEN_FOLD_DOMAIN)
        _mtp(c, x, emb)
    return g.model()


def _mtp(c: Ctx, x: str, emb: str) -> None:
    g, s, w = c.g, c.s, c.w
    p, wp = "/mtp/0", "mtp.0"
    e = g.op1("Gather", [emb, "input_ids"], f"{p}/embed/Gather")
    hn = g.op1(
        _ops.BRANCHWISE_RMS_NORM,
        [x, w.norm(g, f"{wp}.hidden_norm.weight", (s.streams,))],
        f"{p}/hidden_norm/BranchwiseRMSNorm",
        domain=MS,
        num_branches=s.hc,
        epsilon=s.eps,
    )
    fh = g.op1(
        "MatMul",
        [hn, w.normal(g, f"{wp}.fc_hidden.weight", (s.streams, s.hidden))],
        f"{p}/fc_hidden/MatMul",
    )
    fe = g.op1(
        "MatMul",
        [e, w.normal(g, "fold.proj.weight", (s.hidden, s.hidden))],
        f"{p}/fc_embedding/MatMul",
    )
    h = g.op1("Add", [fh, fe], f"{p}/Add")
    sp = f"{p}/attn/seqlens"
    slen = g.op1("Shape", ["input_ids"], f"{sp}/Shape", start=1, end=2)
    bsz = g.op1("Shape", ["input_ids"], f"{sp}/Shape_1", start=0, end=1)
    tot = g.op1(
        "Squeeze",
        [
            g.op1("Cast", [slen], f"{sp}/total/Cast", to=TensorProto.INT32),
            c.c64(f"{sp}/Squeeze/axes", [0]),
        ],
        f"{sp}/total/Squeeze",
    )
    last = g.op1(
        "Cast",
        [g.op1("Sub", [slen, c.c64(f"{sp}/Sub/one", 1)], f"{sp}/Sub")],
        f"{sp}/Cast",
        to=TensorProto.INT32,
    )
    seqlens = g.op1("Expand", [last, bsz], f"{sp}/Expand")
    a = c.attention(h, f"{p}/attn", f"{wp}.attn", layer=None, seqlens=seqlens, total=tot)
    h2 = g.op1("Add", [h, a], f"{p}/Add_1")
    m = c.moe(h2, p, wp, misalign=MTP_MISALIGN)
    h3 = g.op1("Add", [h2, m], f"{p}/Add_2")
    n = c.rms_norm(h3, f"{p}/norm", f"{wp}.norm.weight", s.hidden)
    _lm_head(c, n, f"{p}/lm_head/MatMul", "mtp.0.logits")


def build_head(shared: Weights, own: Weights, s: Spec) -> onnx.ModelProto:
    """The head graph (``fold.head_r2``): final norm, fp16 lm_head and the next token's embedding.

    The lm_head (FP8-quantizable) runs over the streams. Norm, lm_head and embedding bytes come
    from ``shared`` (the target's data file); ``fold.proj.weight`` is the head's own tensor (same
    name as an unrelated target tensor, different bytes).
    """
    g = GraphBuilder("qwen38_flash_head_r2")
    B, S = "batch_size", "sequence_length"
    g.input("hidden_states", F16, [B, S, s.streams])
    c = Ctx(g, shared, s, variant="cpu", experts="int4")
    n = _final_norm(c, "hidden_states")
    logits = _lm_head(c, n, "/lm_head/MatMul", "logits")
    emb = shared.normal(g, "model.embed_tokens.weight", (s.vocab, s.hidden), scale=0.5)
    ids = g.op1("ArgMax", [logits], "/fold/ArgMax", axis=-1, keepdims=0)
    e = g.op1("Gather", [emb, ids], "/fold/embed/Gather")
    g.op(
        "MatMul",
        [e, own.normal(g, "fold.proj.weight", (s.hidden, s.hidden), scale=0.07)],
        "/fold/proj/MatMul",
        outputs=["next_embeds"],
    )
    g.output("logits", F16, [B, S, s.vocab])
    g.output("next_embeds", F16, [B, S, s.hidden])
    return g.model()
