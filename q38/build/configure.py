"""The v12b config of a built package, derived from the target graph's interface.

Model dimensions come from the graph (``logits`` -> vocab, ``hidden_states`` -> hidden size,
``past_key_values.{i}.key`` [B, kv_heads, P, head_size], layer ids from every ``past.*`` input)
or, when the target bundle carries a ``genai_config.json``, from that config.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import onnx

from q38._ops import (
    DYNAMIC_SPARSE_ATTENTION,
    GROUP_QUERY_ATTENTION,
    QWEN_FOLD_DOMAIN,
    SPARSE_ATTENTION_INDEXER,
)
from q38.package.config import (
    Config,
    DecoderConfig,
    HeadGraph,
    ModelConfig,
    PrefillConfig,
    ProviderOptions,
    Qwen38Graph,
    SessionOptions,
    read_config,
)

__all__ = ["DEFAULT_CHUNK", "GraphFacts", "graph_facts", "make_config"]

DEFAULT_CHUNK = 256
_LAYER_RE = re.compile(r"^(?:past|past_key_values)\.(\d+)\.")
_NAMES = {
    "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value",
    "past_conv_names": "past.%d.conv", "past_recurrent_names": "past.%d.recurrent",
    "past_indexer_names": "past.%d.indexer_key",
}
_OUT_NAMES = {
    "present_key_names": "present.%d.key", "present_value_names": "present.%d.value",
    "present_conv_names": "present.%d.conv", "present_recurrent_names": "present.%d.recurrent",
    "present_indexer_names": "present.%d.indexer_key",
}


class GraphFacts:
    """What the builder needs from the target graph's interface and ops."""

    def __init__(self, model: onnx.ModelProto) -> None:
        g = model.graph
        self.inputs = {v.name: [d.dim_value if d.HasField("dim_value") else 0 for d in v.type.tensor_type.shape.dim] for v in g.input}
        self.outputs = {v.name: [d.dim_value if d.HasField("dim_value") else 0 for d in v.type.tensor_type.shape.dim] for v in g.output}
        ops = {(n.domain, n.op_type) for n in g.node}
        self.lineage = "custom" if any(d == QWEN_FOLD_DOMAIN for d, _ in ops) else "contrib"
        self.variant = "faithful" if any(o in (DYNAMIC_SPARSE_ATTENTION, SPARSE_ATTENTION_INDEXER) for _, o in ops) else "cpu"
        self.num_heads = 0
        for n in g.node:
            if n.op_type in (GROUP_QUERY_ATTENTION, DYNAMIC_SPARSE_ATTENTION):
                for a in n.attribute:
                    if a.name == "num_heads":
                        self.num_heads = a.i


def graph_facts(model: onnx.ModelProto) -> GraphFacts:
    return GraphFacts(model)


def _dims(facts: GraphFacts, graph_name: str) -> dict[str, Any]:
    layers = {int(m.group(1)) for name in facts.inputs if (m := _LAYER_RE.match(name))}
    kv = next((s for n, s in sorted(facts.inputs.items()) if n.startswith("past_key_values.") and n.endswith(".key")), [])
    kv_heads = kv[1] if len(kv) == 4 else 0
    head_size = kv[3] if len(kv) == 4 else 0
    logits = facts.outputs.get("logits", [])
    hidden = facts.outputs.get("hidden_states", [])
    inputs = {k: k for k in ("input_ids", "attention_mask", "position_ids") if k in facts.inputs}
    for key, pattern in _NAMES.items():
        if any(n == pattern % i for n in facts.inputs for i in layers):
            inputs[key] = pattern
    outputs = {k: k for k in ("logits", "hidden_states") if k in facts.outputs}
    for key, pattern in _OUT_NAMES.items():
        if any(n == pattern % i for n in facts.outputs for i in layers):
            outputs[key] = pattern
    return {
        "filename": graph_name,
        "hidden_size": hidden[-1] if hidden else 0,
        "num_attention_heads": facts.num_heads or kv_heads,
        "num_key_value_heads": kv_heads,
        "head_size": head_size,
        "num_hidden_layers": max(layers) + 1 if layers else 0,
        "inputs": inputs,
        "outputs": outputs,
        "vocab_size": logits[-1] if logits else 0,
    }


def make_config(
    *,
    target_bundle: Path,
    facts: GraphFacts,
    decoder_file: str,
    target_file: str,
    head_file: str,
    prefill_file: str | None,
    kv_capacity: int | None,
    provider: str,
    cuda_options: dict[str, str],
    libraries: dict[str, str],
    custom_ops_library: str | None,
) -> Config:
    """The package config; a target bundle's own ``genai_config.json`` supplies model fields."""
    base = read_config(target_bundle / "genai_config.json") if (target_bundle / "genai_config.json").is_file() else None
    d = _dims(facts, decoder_file)
    providers: tuple[ProviderOptions, ...] = ()
    # fold.head_r2 always carries the CUDA-graph defaults (package-format.md; the head runs
    # under a captured graph wherever the runtime picks CUDA).
    head_providers = (ProviderOptions("cuda", {"enable_cuda_graph": "1"}),)
    if provider == "cuda":
        providers = (ProviderOptions("cuda", dict(cuda_options)),)
    if base is not None:
        m = base.model
        dec = m.decoder
        context, vocab, bos, eos, pad = m.context_length, m.vocab_size, m.bos_token_id, m.eos_token_id, m.pad_token_id
        so = dec.session_options
        decoder = DecoderConfig(
            decoder_file, dec.hidden_size, dec.num_attention_heads, dec.num_key_value_heads,
            dec.head_size, dec.num_hidden_layers,
            SessionOptions(
                log_id=so.log_id or "q38", custom_ops_library=custom_ops_library,
                config_entries=dict(so.config_entries), provider_options=providers,
            ),
            dict(dec.inputs), dict(dec.outputs),
        )
        capacity = kv_capacity or m.qwen38_graph.kv_capacity
        chunk = m.qwen38_graph.prefill.chunk if m.qwen38_graph.prefill else DEFAULT_CHUNK
        search = dict(base.search)
    else:
        capacity = kv_capacity or 4096
        context, vocab, bos, eos, pad = capacity, d["vocab_size"], 1, (2,), 0
        decoder = DecoderConfig(
            decoder_file, d["hidden_size"], d["num_attention_heads"], d["num_key_value_heads"],
            d["head_size"], d["num_hidden_layers"],
            SessionOptions(log_id="q38", custom_ops_library=custom_ops_library, provider_options=providers),
            d["inputs"], d["outputs"],
        )
        chunk = min(DEFAULT_CHUNK, capacity)
        search = {"max_length": capacity}
    graph = Qwen38Graph(
        target=target_file,
        head_r2=HeadGraph(head_file, SessionOptions(provider_options=head_providers)),
        prefill=PrefillConfig(prefill_file, chunk) if prefill_file else None,
        kv_capacity=capacity,
        weights_pool="weights_pool.txt",
        lineage=facts.lineage,
        variant=facts.variant,
        libraries=dict(libraries),
    )
    return Config(
        model=ModelConfig(decoder, graph, vocab, context, bos, tuple(eos), pad),
        search=search,
    )
