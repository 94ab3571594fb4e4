"""Assembly of the builder-form graphs: decoder ``model.onnx``, stateful ``mtp.onnx``, ``engram.onnx``.

The engram graph is the n-gram lookup (docs/synthetic-model.md, "builder exporter").
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from q38 import _ops
from q38.synth.builder_forms.attention import attention, kv_shapes
from q38.synth.builder_forms.forms import FP16, B, Forms, IoType, S, T
from q38.synth.builder_forms.layers import (
    engram_lookup,
    final_mixer,
    gated_delta_net,
    hc_mix,
    hc_post,
    linear_attention,
    moe,
    ple,
)
from q38.synth.builder_forms.typed import Shape, TypedGraph
from q38.synth.spec import Spec
from q38.synth.weights import Weights

__all__ = ["SHARED_WITH_MTP", "build_decoder", "build_engram", "build_mtp"]

I64, I32, F32 = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT
EMBED, LM_HEAD = "model.embed_tokens.weight", "lm_head.MatMul.weight"
SHARED_WITH_MTP = (EMBED, LM_HEAD)  # folded onto the decoder's copy (shared_initializers)
ENGRAM_IO = FP16  # GatherBlockQuantized has no bf16 CPU kernel; the Engram is a CPU session


def _common_inputs(g: TypedGraph, f: Forms) -> None:
    g.input("input_ids", I64, [B, S])
    g.input("attention_mask", I64, [B, T])
    g.input("position_ids", I64, [3, B, S])
    if f.faithful:
        g.input("past_sequence_length", I32, [1])


def _kv_io(g: TypedGraph, f: Forms, state: int, outs: list[tuple[str, int, Shape]]) -> None:
    past, present = kv_shapes(f)
    for kv in ("key", "value"):
        g.input(f"past_key_values.{state}.{kv}", f.io.elem, past)
        outs.append((f"present.{state}.{kv}", f.io.elem, present))
    if f.faithful:
        s = f.s
        g.input(f"past.{state}.indexer_key", f.io.elem, [B, "past_sequence_length", s.idx_dim])
        outs.append((f"present.{state}.indexer_key", f.io.elem, [B, T, s.idx_dim]))


def _logits(f: Forms, x: str, name: str = "/lm_head/MatMul") -> None:
    """lm_head over [B,S,H]; bf16 graphs cast the logits to float32 (the builder's rule)."""
    s = f.s
    if f.io.elem == TensorProto.BFLOAT16:
        y = f.matmul(x, name, s.hidden, s.vocab, weights=f.shared, wname=LM_HEAD)
        f.g.node("Cast", [y], "/lm_head/output_0/Cast", [(F32, [B, S, s.vocab])],
                 outputs=["logits"], to=F32)  # fmt: skip
    else:
        w = f.shared.normal(f.g, LM_HEAD, (s.hidden, s.vocab), dtype=f.io.np_type)
        f.g.node("MatMul", [x, w], name, [(f.io.elem, [B, S, s.vocab])], outputs=["logits"])


def _logits_elem(f: Forms) -> int:
    return F32 if f.io.elem == TensorProto.BFLOAT16 else f.io.elem


def build_decoder(w: Weights, s: Spec, *, io: IoType, variant: str, prepacked: bool,
                  lineage: str, linear_attn: str = "gated_delta_net") -> onnx.ModelProto:  # fmt: skip
    """The decoder graph: embedding, hc streams, per-layer HC mixes around GDN / QSA and MoE, lm_head.

    The embedding is tiled x hc; each layer has two packed HC mixes (around GDN or QSA, and
    around the MoE); PLE runs on layer ``s.ple_layer``; ``hidden_states`` (the streams) is an
    output; a final mixer feeds lm_head.
    """
    g = TypedGraph("qwen4_exp_text")
    f = Forms(g, w, s, io=io, variant=variant, prepacked=prepacked, linear_attn=linear_attn)
    e, ch = io.elem, s.streams
    recurrent = F32 if linear_attn == "gated_delta_net" else e  # GatedDeltaNet's state is float
    _common_inputs(g, f)
    if f.faithful:  # engram.onnx runs as a CPU session: its float16 output is cast in here
        g.input("engram_embeddings", ENGRAM_IO.elem, [B, S, s.ple_dim])
    outs: list[tuple[str, int, Shape]] = []
    for i in range(s.layers):
        if s.is_qsa(i):
            _kv_io(g, f, i, outs)
        else:
            states: tuple[tuple[str, int, Shape], ...] = (
                ("conv", e, [B, s.conv_dim, s.conv_k - 1]),
                ("recurrent", recurrent, [B, s.gdn_hv, s.gdn_dk, s.gdn_dv]),
            )
            for kind, elem, shape in states:
                g.input(f"past.{i}.{kind}", elem, shape)
                outs.append((f"present.{i}.{kind}", elem, shape))
        if i == s.ple_layer and f.faithful:
            ple_shape: Shape = [B, s.ngram * (s.conv_k - 1), ch]
            g.input(f"past.{i}.ple_conv", e, ple_shape)
            outs.append((f"present.{i}.ple_conv", e, ple_shape))
    emb = w.normal(g, EMBED, (s.vocab, s.hidden), scale=0.5, dtype=io.np_type)
    x = g.node1("Gather", [emb, "input_ids"], "/model/embed_tokens/Gather", e, [B, S, s.hidden])
    x = g.node1("Tile", [x, f.c([1, 1, s.hc])], "/model/hyper_connection/Tile", e, [B, S, ch])
    for i in range(s.layers):
        p, wp = f"/model/layers.{i}", f"model.layers.{i}"
        if i == s.ple_layer:
            if f.faithful:
                ee = g.node1("Cast", ["engram_embeddings"], f"{p}/ple/engram_embeddings/Cast", e,
                             [B, S, s.ple_dim], to=e)  # fmt: skip
            else:
                ee = engram_lookup(f, "input_ids", f"/model/layers.{i}/ple/engram", None)
            x = ple(f, x, i, ee)
        pre, pg = hc_mix(f, x, f"{p}/attn_hyper_connection", f"{wp}.attn_hyper_connection")
        if s.is_qsa(i):
            out = attention(f, pre, i, i)
        elif linear_attn == "linear_attention":
            out = linear_attention(f, pre, i)
        else:
            out = gated_delta_net(f, pre, i)
        x = hc_post(f, x, out, pg, f"{p}/attn_hyper_connection")
        pre2, pg2 = hc_mix(f, x, f"{p}/mlp_hyper_connection", f"{wp}.mlp_hyper_connection")
        x = hc_post(f, x, moe(f, pre2, i), pg2, f"{p}/mlp_hyper_connection")
    g.node("Identity", [x], "/model/hidden_states/Identity", [(e, [B, S, ch])],
           outputs=["hidden_states"])  # fmt: skip
    if lineage == "custom":
        x = g.node1(_ops.FOLD_MID2, [x], "/fold/FoldMid2", e, [B, S, ch],
                    domain=_ops.QWEN_FOLD_DOMAIN)  # fmt: skip
    _logits(f, final_mixer(f, x))
    g.output("logits", _logits_elem(f), [B, S, s.vocab])
    g.output("hidden_states", e, [B, S, ch])
    for name, elem, shape in outs:
        g.output(name, elem, shape)
    return g.model()


def _sln(f: Forms, x: str, name: str, wname: str) -> str:
    s = f.s
    return f.g.node1(_ops.SIMPLIFIED_LAYER_NORM, [x, f.norm_weight(wname, (s.hidden,))], name,
                     f.io.elem, [B, S, s.hidden], epsilon=s.eps, axis=-1, stash_type=1)  # fmt: skip


def _skip_sln(f: Forms, x: str, skip: str, name: str, wname: str, *, last: bool) -> tuple[str, str]:
    s, e = f.s, f.io.elem
    shape: Shape = [B, S, s.hidden]
    types: list[tuple[int, Shape] | None] = [(e, shape)] if last else [(e, shape), None, None, (e, shape)]
    outs = f.g.node(_ops.SKIP_SIMPLIFIED_LAYER_NORM, [x, skip, f.norm_weight(wname, (s.hidden,))],
                    name, types, domain=_ops.MS_DOMAIN, epsilon=s.eps)  # fmt: skip
    return outs[0], (outs[3] if not last else "")


def build_mtp(own: Weights, shared: Weights, s: Spec, *, io: IoType, variant: str,
              prepacked: bool) -> onnx.ModelProto:  # fmt: skip
    """The stateful one-layer MTP head graph (``mtp.onnx``).

    Embedding (shared) + SimplifiedLayerNormalization, BranchwiseRMSNorm over the target's
    streams, fc_embedding / fc_hidden, one QSA + MoE layer (FP8 experts in the faithful variant,
    int4 in the cpu one: FP8 QMoE has no CPU kernel), SkipSimplifiedLayerNormalization, lm_head
    (shared).
    """
    g = TypedGraph("qwen4_exp_text_mtp")
    f = Forms(g, own, s, io=io, variant=variant, prepacked=prepacked, shared=shared)
    e, ch, h = io.elem, s.streams, s.hidden
    _common_inputs(g, f)
    g.input("hidden_states", e, [B, S, ch])
    outs: list[tuple[str, int, Shape]] = []
    _kv_io(g, f, 0, outs)
    p = "/model/mtp"
    emb = shared.normal(g, EMBED, (s.vocab, h), scale=0.5, dtype=io.np_type)
    x = g.node1("Gather", [emb, "input_ids"], f"{p}/embed_tokens/Gather", e, [B, S, h])
    en = _sln(f, x, f"{p}/pre_fc_norm_embedding", "model.mtp.pre_fc_norm_embedding.weight")
    hn = g.node1(_ops.BRANCHWISE_RMS_NORM,
                 ["hidden_states", f.norm_weight("model.mtp.pre_fc_norm_hidden.weight", (ch,))],
                 f"{p}/pre_fc_norm_hidden/BranchwiseRMSNorm", e, [B, S, ch], domain=_ops.MS_DOMAIN,
                 num_branches=s.hc, epsilon=s.eps)  # fmt: skip
    fe = f.matmul(en, f"{p}/fc_embedding/MatMul", h, h)
    fh = f.matmul(hn, f"{p}/fc_hidden/MatMul", ch, h)
    x = f.binary("Add", fe, fh, f"{p}/fc/Add", [B, S, h])
    n1 = _sln(f, x, "/model/layers.0/input_layernorm/LayerNorm",
              "model.layers.0.input_layernorm.weight")  # fmt: skip
    a = attention(f, n1, 0, 0)
    n2, res = _skip_sln(f, a, x, "/model/layers.0/post_attention_layernorm/SkipLayerNorm",
                        "model.layers.0.post_attention_layernorm.weight", last=False)  # fmt: skip
    m = moe(f, n2, 0, fp8=f.faithful)
    fin, _ = _skip_sln(f, m, res, "/model/layers.1/final_norm_layernorm/SkipLayerNorm",
                       "model.layers.1.final_norm_layernorm.weight", last=True)  # fmt: skip
    _logits(f, fin)
    # The head's hidden state goes back in as the next draft's ``hidden_states`` [B, S, hc*H].
    t = g.node1("Tile", [fin, f.c([1, 1, s.hc])], f"{p}/hidden_states_out/Tile", e, [B, S, ch])
    g.node("Identity", [t], f"{p}/hidden_states_out/Identity", [(e, [B, S, ch])],
           outputs=["hidden_states_out"])  # fmt: skip
    g.output("logits", _logits_elem(f), [B, S, s.vocab])
    g.output("hidden_states_out", e, [B, S, ch])
    for name, elem, shape in outs:
        g.output(name, elem, shape)
    return g.model()


def build_engram(w: Weights, s: Spec, *, io: IoType = ENGRAM_IO) -> onnx.ModelProto:
    """``engram.onnx``: the n-gram embeddings ``[B, S, ple_dim]``, run as a CPU session.

    NGramHashMapping (history ``past.{i}.ple_tokens``) + GatherBlockQuantized over the FP8 table.
    """
    g = TypedGraph("qwen4_exp_text_engram")
    f = Forms(g, w, s, io=io, variant="faithful", prepacked=False)
    i = s.ple_layer
    g.input("input_ids", I64, [B, S])
    g.input(f"past.{i}.ple_tokens", I64, [B, s.ngram - 1])
    engram_lookup(f, "input_ids", "/model/engram", f"past.{i}.ple_tokens",
                  outputs=("embeddings", f"present.{i}.ple_tokens"))  # fmt: skip
    g.output("embeddings", io.elem, [B, S, s.ple_dim])
    g.output(f"present.{i}.ple_tokens", I64, [B, s.ngram - 1])
    return g.model()
