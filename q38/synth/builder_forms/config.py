"""The builder package's ``genai_config.json`` document (onnxruntime-genai surface).

Mirrors what the public builders write: ``Model.make_genai_config`` (builders/base.py), the MTP
section of ``Qwen35MoEModel.add_mtp_to_genai_config`` (builders/qwen.py), ``shared_initializers``
of ``MTPModel.make_shared_initializer_config`` (builders/mtp.py) and the Qwen3.8 builder's
additions (``qwen4_exp_text``, indexer / PLE names, ``past_sequence_length``, ``model.engram``).

The cpu variant writes the subset onnxruntime-genai 0.18.0 loads on CPU: a model type it runs,
no indexer / PLE / engram keys (0.18.0 rejects them) and no ``shared_initializers`` (0.18.0 CPU
fails model creation with them: "GetMemoryInfo for CPU should not be used").
"""

from __future__ import annotations

import copy
from typing import Any

from q38.synth.graph import ExtRef
from q38.synth.spec import Spec

__all__ = [
    "CPU_MODEL_TYPE",
    "FAITHFUL_MODEL_TYPE",
    "OG018_REJECTED",
    "config_dict",
    "for_og018",
    "shared_initializers",
]

FAITHFUL_MODEL_TYPE = "qwen4_exp_text"  # the Qwen3.8 builder, text-only
CPU_MODEL_TYPE = "qwen3_5_moe_text"  # what onnxruntime-genai 0.18.0 runs (3D MRoPE position ids)
_ONNX_TYPES = {"float16": 10, "bfloat16": 16, "float": 1, "uint8": 2, "float8e4m3fn": 17}


def shared_initializers(refs: dict[str, ExtRef]) -> list[dict[str, Any]]:
    """One entry per tensor the MTP graph folds onto the decoder's data file."""
    return [
        {"name": name, "data_file": ref.location, "offset": str(ref.offset),
         "length": str(ref.length), "data_type": _ONNX_TYPES[ref.dtype], "shape": list(ref.shape)}
        for name, ref in sorted(refs.items())
    ]  # fmt: skip


def _search(s: Spec) -> dict[str, Any]:
    return {
        "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True,
        "length_penalty": 1.0, "max_length": s.context, "min_length": 0,
        "no_repeat_ngram_size": 0, "num_beams": 1, "num_return_sequences": 1,
        "past_present_share_buffer": False, "repetition_penalty": 1.0, "temperature": 1.0,
        "top_k": 50, "top_p": 1.0,
    }  # fmt: skip


def _io_names(faithful: bool, *, mtp: bool) -> tuple[dict[str, str], dict[str, str]]:
    inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask",
              "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
              "past_value_names": "past_key_values.%d.value"}  # fmt: skip
    outputs = {"logits": "logits", "present_key_names": "present.%d.key",
               "present_value_names": "present.%d.value"}  # fmt: skip
    if mtp:
        inputs["hidden_states"] = "hidden_states"
        outputs["hidden_states"] = "hidden_states_out"
    else:
        inputs |= {"past_conv_names": "past.%d.conv", "past_recurrent_names": "past.%d.recurrent"}
        outputs |= {"hidden_states": "hidden_states", "present_conv_names": "present.%d.conv",
                    "present_recurrent_names": "present.%d.recurrent"}  # fmt: skip
    if faithful:
        inputs |= {"past_indexer_names": "past.%d.indexer_key",
                   "past_sequence_length": "past_sequence_length"}  # fmt: skip
        outputs["present_indexer_names"] = "present.%d.indexer_key"
        if not mtp:
            inputs |= {"past_ple_conv_names": "past.%d.ple_conv",
                       "engram_embeddings": "engram_embeddings"}  # fmt: skip
            outputs["present_ple_conv_names"] = "present.%d.ple_conv"
    return inputs, outputs


def config_dict(
    s: Spec, *, variant: str, lineage: str, shared: list[dict[str, Any]]
) -> dict[str, Any]:
    """The builder-form ``genai_config.json``: decoder and stateful MTP head, (faithful) engram session.

    Faithful: CUDA sessions, shared initializers (``shared``) and the keys 0.18.0 rejects
    (:func:`for_og018` strips them); cpu: the Engram lookup assigned to CPU by layer annotation.
    """
    faithful = variant == "faithful"
    cuda = [{"cuda": {"enable_cuda_graph": "0"}}] if faithful else []
    session: dict[str, Any] = {"log_id": "onnxruntime-genai", "provider_options": cuda}
    if not faithful:  # the in-graph Engram lookup is annotated layer_ann=cpu_embedding
        session["session.layer_assignment_settings"] = "cpu(=cpu_embedding)"
    if lineage == "custom":
        session["custom_ops_library"] = "libs/libcustom_ops.so"
    d_in, d_out = _io_names(faithful, mtp=False)
    decoder: dict[str, Any] = {
        "session_options": session, "filename": "model.onnx", "head_size": s.head_size,
        "hidden_size": s.streams,  # hidden_states are the hc streams (the MTP head reads them)
        "inputs": d_in, "outputs": d_out, "num_attention_heads": s.heads,
        "num_hidden_layers": s.layers, "num_key_value_heads": s.kv_heads,
    }  # fmt: skip
    m_in, m_out = _io_names(faithful, mtp=True)
    mtp: dict[str, Any] = {
        "enabled": True, "filename": "mtp.onnx", "num_hidden_layers": 1,
        "num_key_value_heads": s.kv_heads, "head_size": s.head_size,
        "main_hidden_states": "hidden_states", "inputs": m_in, "outputs": m_out,
    }  # fmt: skip
    model: dict[str, Any] = {
        "bos_token_id": 1, "context_length": s.context, "decoder": decoder,
        "eos_token_id": [2], "mtp": mtp, "pad_token_id": 0,
        "type": FAITHFUL_MODEL_TYPE if faithful else CPU_MODEL_TYPE, "vocab_size": s.vocab,
    }  # fmt: skip
    if faithful:
        decoder["ple_token_pad_id"] = 0
        mtp["session_options"] = {"log_id": "onnxruntime-genai", "provider_options": cuda,
                                  "session.use_device_allocator_for_initializers": "1"}  # fmt: skip
        decoder["shared_initializers"] = shared
        mtp["shared_initializers"] = shared
        model["engram"] = {
            "filename": "engram.onnx", "cache_capacity": 4096,
            "session_options": {"log_id": "onnxruntime-genai", "provider_options": [],
                                "session.layer_assignment_settings": "cpu(=cpu_embedding)"},
            "inputs": {"input_ids": "input_ids", "past_ple_token_names": "past.%d.ple_tokens"},
            "outputs": {"embeddings": "embeddings",
                        "present_ple_token_names": "present.%d.ple_tokens"},
        }  # fmt: skip
    return {"model": model, "search": _search(s)}


# Keys of the faithful config that onnxruntime-genai 0.18.0's parser rejects ("Unknown value"),
# as (section path, key); measured with og.Config.
OG018_REJECTED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("model",), "engram"),
    (("model", "decoder"), "ple_token_pad_id"),
    (("model", "decoder", "inputs"), "engram_embeddings"),
    (("model", "decoder", "inputs"), "past_indexer_names"),
    (("model", "decoder", "inputs"), "past_ple_conv_names"),
    (("model", "decoder", "outputs"), "present_indexer_names"),
    (("model", "decoder", "outputs"), "present_ple_conv_names"),
    (("model", "mtp", "inputs"), "past_indexer_names"),
    (("model", "mtp", "inputs"), "past_sequence_length"),
    (("model", "mtp", "outputs"), "present_indexer_names"),
)


def for_og018(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` without the keys onnxruntime-genai 0.18.0 rejects.

    What a 0.18.0 user strips to parse a Qwen3.8 builder config; ``doc`` itself is not changed.
    """
    out = copy.deepcopy(doc)
    for path, key in OG018_REJECTED:
        node: object = out
        for part in path:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(key, None)
    return out
