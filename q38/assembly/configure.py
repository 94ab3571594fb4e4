"""The v12b config of a built package, derived from the target graph's interface.

Model dimensions come from the graph (``logits`` -> vocab, ``hidden_states`` -> hidden size,
``past_key_values.{i}.key`` [B, kv_heads, P, head_size], layer ids from every ``past.*`` input)
or, when the target bundle carries a ``genai_config.json``, from that config: q38's own (v12b)
or the one an exporter wrote beside its graphs (onnxruntime-genai surface, e.g. the builder's
``qwen3_5_moe_text``). An exporter's graph leaves dimensions symbolic (the KV cache's last dim
is ``kv_cache_dim``, there may be no ``hidden_states`` output), so its config supplies them; a
dimension both give must agree, and one neither gives is refused naming where it was looked for.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import onnx

from q38._ops import (
    DYNAMIC_SPARSE_ATTENTION,
    GROUP_QUERY_ATTENTION,
    QWEN_FOLD_DOMAIN,
    SPARSE_ATTENTION_INDEXER,
)
from q38.errors import BuildError, quote
from q38.package.surface import exporter_config
from q38.package.v12b.config import (
    _CONFIG_ENTRY_RE,
    CONFIG_FILENAME,
    DECODER_INPUT_KEYS,
    DECODER_OUTPUT_KEYS,
    SEARCH_KEYS,
    Config,
    DecoderConfig,
    HeadGraph,
    ModelConfig,
    PrefillConfig,
    ProviderOptions,
    Qwen38Graph,
    SessionOptions,
)

if TYPE_CHECKING:
    from q38.package.genai.config import GenaiConfig

__all__ = ["DEFAULT_CHUNK", "GraphFacts", "graph_facts", "make_config"]

DEFAULT_CHUNK = 256
_LOG = logging.getLogger(__name__)
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
    """Read what the builder needs from ``model``'s interface and ops (a :class:`GraphFacts`)."""
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


_DIM_SOURCES: Final = {
    "hidden_size": "the graph's hidden_states output (last dim)",
    "head_size": "the graph's past_key_values.*.key input (last dim)",
    "num_key_value_heads": "the graph's past_key_values.*.key input (dim 1)",
    "num_attention_heads": "the attention nodes' num_heads attribute",
    "num_hidden_layers": "the graph's past state inputs",
    "vocab_size": "the graph's logits output (last dim)",
}


def _merge_dims(bundle: Path, graph: dict[str, Any], upstream: dict[str, int | None]) -> dict[str, int]:
    """Graph dimensions completed by the upstream config's; both given must agree."""
    out, missing = {}, []
    for key, where in _DIM_SOURCES.items():
        from_graph, from_config = graph[key] or None, upstream.get(key)
        if from_graph and from_config and from_graph != from_config:
            raise BuildError(
                f"--target {bundle}: genai_config.json says {key} {from_config}, {where} says {from_graph}"
            )
        value = from_config or from_graph
        if not value:
            missing.append(f"{key} ({where})")
        out[key] = value or 0
    if missing:
        raise BuildError(
            f"--target {bundle}: cannot derive {', '.join(missing)}: symbolic or missing in the graph, and the "
            "bundle has no genai_config.json giving them"
        )
    return out


def _upstream_genai(bundle: Path, cfg: GenaiConfig, d: dict[str, Any], *, warn: bool = True) -> dict[str, Any]:
    """What an exporter's (genai-surface) ``genai_config.json`` supplies to the v12b config."""
    m, dec = cfg.model, cfg.model.decoder
    dims = _merge_dims(bundle, d, {
        "hidden_size": dec.hidden_size, "head_size": dec.head_size, "num_key_value_heads": dec.num_key_value_heads,
        "num_attention_heads": dec.num_attention_heads, "num_hidden_layers": dec.num_hidden_layers,
        "vocab_size": m.vocab_size,
    })  # fmt: skip
    _refuse_unbindable(bundle, "inputs", dec.inputs, DECODER_INPUT_KEYS)
    _refuse_unbindable(bundle, "outputs", dec.outputs, DECODER_OUTPUT_KEYS)
    left = [f"model.{name} ({section.filename})" for name, section in cfg.graph_sections.items() if name != "decoder"]
    left += [f"runtime_profiles ({len(cfg.runtime_profiles)})"] if cfg.runtime_profiles else []
    if left and warn:  # the decoder alone is the whole model; say what the v12b package will not name
        _LOG.warning("%s: the v12b surface has no %s: the built package runs the decoder without it",
                     bundle / CONFIG_FILENAME, ", ".join(left))  # fmt: skip
    so = dec.session_options
    entries = {k: v for k, v in (so.config_entries if so else {}).items() if _CONFIG_ENTRY_RE.match(k)}
    return {
        "dims": dims,
        "context": m.context_length,
        "bos": m.bos_token_id if m.bos_token_id is not None else 1,
        "eos": m.eos_token_id or (2,),
        "pad": m.pad_token_id if m.pad_token_id is not None else 0,
        "log_id": (so.typed.get("log_id") if so else None) or "q38",
        "entries": entries,
        "inputs": {k: v for k, v in dec.inputs.items() if k in DECODER_INPUT_KEYS},
        "outputs": {k: v for k, v in dec.outputs.items() if k in DECODER_OUTPUT_KEYS},
        "search": {k: v for k, v in cfg.search.items() if _search_value_ok(k, v)},
    }


def _refuse_unbindable(bundle: Path, kind: str, names: Mapping[str, str], keys: frozenset[str]) -> None:
    """A graph input / output the exporter's config binds but a v12b config cannot: refused.

    (The paged-attention export's ``block_table``, ``cumulative_sequence_lengths``, ...): the
    built package would leave a graph input unfed, so no runtime could run it.
    """
    extra = sorted(k for k in names if k not in keys)
    if extra:
        raise BuildError(
            f"{bundle / CONFIG_FILENAME}: model.decoder.{kind}.{extra[0]}: the v12b surface has no binding for "
            f"graph {kind[:-1]} {quote(names[extra[0]])}" + (f" (nor {len(extra) - 1} more)" if len(extra) > 1 else "")
            + "; build from an export without it (e.g. not paged)"
        )


def _search_value_ok(key: str, value: object) -> bool:
    """Whether ``search.key = value`` fits the v12b surface (its keys; floats may be integers)."""
    want = SEARCH_KEYS.get(key)
    if want is None:
        return False
    if want is bool or isinstance(value, bool):
        return want is bool and isinstance(value, bool)
    return isinstance(value, int) if want is int else isinstance(value, (int, float))


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
    d = _dims(facts, decoder_file)
    base: Config | None = None
    upstream = None
    if (target_bundle / CONFIG_FILENAME).is_file():
        exported = exporter_config(target_bundle)
        if isinstance(exported, Config):  # a q38 bundle: its own config's model fields
            base = exported
        else:  # an exporter's config: the fields the v12b surface can bind
            upstream = _upstream_genai(target_bundle, exported, d, warn=decoder_file == target_file)  # once: the target's
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
    elif upstream is not None:
        dims = upstream["dims"]
        capacity = kv_capacity or upstream["context"]
        context, vocab = upstream["context"], dims["vocab_size"]
        bos, eos, pad = upstream["bos"], upstream["eos"], upstream["pad"]
        decoder = DecoderConfig(
            decoder_file, dims["hidden_size"], dims["num_attention_heads"], dims["num_key_value_heads"],
            dims["head_size"], dims["num_hidden_layers"],
            SessionOptions(log_id=upstream["log_id"], custom_ops_library=custom_ops_library,
                           config_entries=upstream["entries"], provider_options=providers),
            upstream["inputs"] or d["inputs"], upstream["outputs"] or d["outputs"],
        )  # fmt: skip
        chunk = min(DEFAULT_CHUNK, capacity)
        search = {"max_length": capacity, **upstream["search"]}
        search["max_length"] = min(int(search["max_length"]), capacity)
    else:
        capacity = kv_capacity or 4096
        dims = _merge_dims(target_bundle, d, {})
        context, vocab, bos, eos, pad = capacity, dims["vocab_size"], 1, (2,), 0
        decoder = DecoderConfig(
            decoder_file, dims["hidden_size"], dims["num_attention_heads"], dims["num_key_value_heads"],
            dims["head_size"], dims["num_hidden_layers"],
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
