"""What onnxruntime-genai 0.18.0 accepts in ``genai_config.json``: its parser, as a table.

GenAI parses the config with a tree of JSON "elements" (``src/config.cpp``): each element takes
scalars, objects and arrays by key, rejects what it does not know (``Unknown value "k"``), and
checks types (``Expected a string but saw a number``), integer ranges (``SafeDoubleToInt``) and a
few value bounds while it reads. This module is GenAI 0.18.0's table of those elements, in the
machinery of :mod:`q38.package.config_schema` (which holds the elements both surfaces share: a
graph's ``session_options`` and its providers). It was read from the source
(v0.16 tree, the nearest stored one) and probed key by key against the installed 0.18.0 wheel
(``og.Config(dir)``; ``tests/support/og_config_probe.py``); the differential test
(``tests/unit/package/test_genai_config_differential.py``) holds both verdicts equal.

Only the verdict per document matters here: :func:`validate` raises one :class:`ConfigError`
line naming the key path (``model.decoder.session_options.provider_options[0].cuda.x``); it
does not build anything. The checks GenAI runs after parsing (``context_length``, runtime
profiles, decoder state groups) live in :mod:`q38.package.genai.checks`.
"""

from __future__ import annotations

import math
from typing import Final

from q38.package.config_schema import (
    BOOL,
    I32,
    I64,
    NUM,
    PATH,
    POS,
    RUN_OPTIONS,
    SESSION_OPTIONS,
    STR,
    Arr,
    Obj,
    Scalar,
    between,
    finite_float32_positive,
    legacy,
    ngram_size,
    non_negative,
    one_of,
    positive,
    unit_interval_open_low,
)
from q38.package.config_schema import validate as validate_against

__all__ = ["MODEL", "ROOT", "validate"]

def _strings(*keys: str, path: bool = False) -> dict[str, tuple[Scalar | Obj | Arr, ...]]:
    return dict.fromkeys(keys, (PATH if path else STR,))


def _ints(*keys: str) -> dict[str, tuple[Scalar | Obj | Arr, ...]]:
    return dict.fromkeys(keys, (I32,))


_GRAPH: Final = {"session_options": (SESSION_OPTIONS,), "run_options": (RUN_OPTIONS,)}
SHARED_INITIALIZER: Final = Obj(
    {**_strings("name", "data_file", "offset", "length"), "data_type": (I32,), "shape": (Arr(I64),)}
)

DECODER_INPUT_KEYS: Final = (
    "input_ids", "inputs_embeds", "attention_mask", "position_ids", "past_key_names",
    "past_value_names", "past_key_scale_names", "past_value_scale_names", "past_names",
    "cross_past_key_names", "cross_past_value_names", "past_sequence_length",
    "current_sequence_length", "total_sequence_length", "encoder_hidden_states",
    "encoder_attention_mask", "rnn_states_prev", "past_key_values_length", "cache_indirection",
    "cumulative_sequence_lengths", "past_sequence_lengths", "block_table", "block_table_windowed",
    "attention_metadata", "logits_indices", "past_conv_names", "past_recurrent_names",
    "state_update_capture_count", "state_update_active", "hidden_states", "targets",
    "targets_length", "lstm_hidden_state", "lstm_cell_state", "per_layer_inputs",
)  # fmt: skip
DECODER_OUTPUT_KEYS: Final = (
    "logits", "present_key_names", "present_value_names", "present_key_scale_names",
    "present_value_scale_names", "present_names", "output_cross_qk_names", "rnn_states",
    "present_conv_names", "present_recurrent_names", "state_update_conv_value_names",
    "state_update_recurrent_capsule_names", "hidden_states", "aux_hidden_states", "outputs",
    "lstm_hidden_state", "lstm_cell_state", "outputs_length",
)  # fmt: skip

_STATE_UPDATE: Final = Obj(
    {
        "capacity": (Scalar("int32", between(1, 8)),),
        "key_head_count": (POS,),
        "enabled": (BOOL,),
        **{
            k: (Scalar("string", legacy(f"legacy state_update field {k!r} is no longer supported; move "
                                        "state-update binding templates to model.decoder.inputs and outputs")),)
            for k in ("kind", "value", "capsule")
        },
    }
)  # fmt: skip
STATE_GROUP_KINDS: Final = ("paged_kv", "fixed_conv", "fixed_recurrent")


def _kind(v: str) -> str | None:
    if v == "fixed":
        return "decoder state group kind 'fixed' is no longer supported; use 'fixed_conv' or 'fixed_recurrent'"
    return None if v in STATE_GROUP_KINDS else f"unsupported decoder state group kind {v!r}"


_STATE_GROUP: Final = Obj(
    {
        "kind": (Scalar("string", _kind),),
        "layer_ids": (Arr(I32),),
        "state_update": (_STATE_UPDATE,),
        "bindings": (Obj(reject="legacy decoder state group bindings are no longer supported; move "
                             "binding templates to model.decoder.inputs and outputs"),),
    }
)
_SLIDING_WINDOW: Final = Obj(
    {
        **_ints("window_size", "pad_value", "cache_slack"),
        "alignment": (STR,),
        "slide_key_value_cache": (BOOL,),
        "slide_inputs": (BOOL,),
        "layers": (Arr(I32),),
    }
)


def _pipeline_model(*, vision: bool, paths: bool) -> Obj:
    name = PATH if paths else STR
    if vision:
        keys: dict[str, tuple[Scalar | Obj | Arr, ...]] = {"filename": (name,), "run_on_cpu": (BOOL,)}
    else:
        keys = {
            "filename": (name,),
            **dict.fromkeys(("run_on_prompt", "run_on_token_gen", "is_lm_head", "inherit_session_options"), (BOOL,)),
            "reset_session_idx": (I32,),
            "output_names_forwarder": (Obj(other_strings=True),),
        }
    return Obj({**keys, **_GRAPH, "inputs": (Arr(STR),), "outputs": (Arr(STR),)})


def _pipeline(*, vision: bool, paths: bool = True) -> tuple[Obj, Arr]:
    model = _pipeline_model(vision=vision, paths=paths)
    by_id = Obj(other_objects=model)
    return by_id, Arr(by_id)


def decoder_element(*, main: bool) -> Obj:
    """``model.decoder`` (``main``: paths validated, state groups checked) or ``model.draft``."""
    return Obj(
        {
            "filename": (PATH if main else STR,),
            **_ints("hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
                    "head_size", "conv_cache_size"),
            "state_update_capacity": (Scalar("int32", between(0, 8)),),
            **_GRAPH,
            "inputs": (Obj(_strings(*DECODER_INPUT_KEYS)),),
            "outputs": (Obj(_strings(*DECODER_OUTPUT_KEYS)),),
            "sliding_window": (_SLIDING_WINDOW,),
            "pipeline": _pipeline(vision=False, paths=main),
            "layer_types": (Arr(STR),),
            "shared_initializers": (Arr(SHARED_INITIALIZER),),
            "state_groups": (Arr(_STATE_GROUP),),
        }
    )  # fmt: skip


MTP: Final = Obj(
    {
        "enabled": (BOOL,),
        "filename": (STR,),
        "num_hidden_layers": (POS,),
        "num_key_value_heads": (POS,),
        "head_size": (POS,),
        "main_hidden_states": (STR,),
        **_GRAPH,
        "inputs": (Obj(_strings("input_ids", "hidden_states", "attention_mask", "position_ids",
                                "past_key_names", "past_value_names")),),
        "outputs": (Obj(_strings("logits", "hidden_states", "present_key_names", "present_value_names")),),
        "shared_initializers": (Arr(SHARED_INITIALIZER),),
    }
)  # fmt: skip


def _block_drafter() -> Obj:
    """``model.dflash2`` and ``model.dspark`` (block drafters; the same element in 0.18.0)."""
    return Obj(
        {
            "filename": (STR,),
            "main_aux_hidden_states": (STR,),
            **dict.fromkeys(("head_size", "num_hidden_layers", "num_key_value_heads", "num_draft_tokens", "selector_top_k"), (POS,)),
            "block_size": (Scalar("int32", lambda v: None if v >= 2 else f"must be >= 2, got {v:g}"),),
            "mask_token_id": (I32,),
            "sliding_window": (I32,),
            "independent_sampling": (BOOL,),
            "sampled_proposal": (Scalar("string", one_of("none", "greedy_path", "independent", "lattice")),),
            "sampling_min_p": (Scalar("number", between(0, 1)),),
            "sampling_top_p": (Scalar("number", unit_interval_open_low),),
            "sampling_temperature": (Scalar("number", finite_float32_positive),),
            "aux_hidden_state_layers": (Arr(I32),),
            **_GRAPH,
            "inputs": (Obj(_strings("input_ids", "inputs_embeds", "aux_hidden_states", "past_key_names",
                                    "past_value_names", "past_key_scale_names", "past_value_scale_names",
                                    "block_table", "cumulative_sequence_lengths", "past_sequence_lengths",
                                    "attention_metadata", "block_row_index", "q_row_map", "qkv_row_map")),),
            "outputs": (Obj(_strings("candidate_ids", "scores", "present_key_names", "present_value_names",
                                     "present_key_scale_names", "present_value_scale_names")),),
            "shared_initializers": (Arr(SHARED_INITIALIZER),),
        }
    )  # fmt: skip


_VISION_PIPELINE: Final = _pipeline(vision=True)
_MOONSHINE_GRAPH: Final = Obj({"inputs": (Obj(_strings("encoded", "pos_offset")),),
                               "outputs": (Obj(_strings("encoded", "logits")),)})  # fmt: skip
MODEL: Final = Obj(
    {
        "type": (STR,),
        "tokenizer_dir": (STR,),
        "context_length": (POS,),
        **_ints(
            "vocab_size", "pad_token_id", "bos_token_id", "decoder_start_token_id", "sep_token_id",
            "image_token_id", "audio_token_id", "boa_token_id", "video_token_id", "vision_start_token_id",
            "num_mels", "fft_size", "hop_length", "win_length", "subsampling_factor", "left_context",
            "conv_context", "pre_encode_cache_size", "sample_rate", "chunk_samples", "blank_id",
            "max_symbols_per_step", "left_context_samples", "right_context_samples", "bot_token_id",
            "eot_token_id", "bor_token_id", "eor_token_id",
        ),
        **dict.fromkeys(("preemph", "log_eps", "norm_eps"), (NUM,)),
        "eos_token_id": (I32, Arr(I32)),
        "tdt_durations": (Arr(I32),),
        "decoder": (decoder_element(main=True),),
        "draft": (decoder_element(main=False),),
        "mtp": (MTP,),
        "dflash2": (_block_drafter(),),
        "dspark": (_block_drafter(),),
        "encoder": (Obj({
            "filename": (PATH,),
            **_ints("hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "head_size"),
            **_GRAPH,
            "inputs": (Obj(_strings("input_ids", "inputs_embeds", "attention_mask", "position_ids",
                                    "audio_features", "input_lengths", "cache_last_channel", "cache_last_time",
                                    "cache_last_channel_len", "lang_id")),),
            "outputs": (Obj(_strings("encoder_hidden_states", "encoder_outputs", "output_lengths",
                                     "cache_last_channel_next", "cache_last_time_next",
                                     "cache_last_channel_len_next", "cross_present_key_names",
                                     "cross_present_value_names")),),
        }),),
        "vision": (Obj({
            **_strings("filename", "config_filename", "adapter_filename", path=True),
            **_ints("spatial_merge_size", "patch_size", "num_visual_tokens", "window_size", "max_num_patches"),
            "tokens_per_second": (NUM,),
            **_GRAPH,
            "inputs": (Obj(_strings("pixel_values", "pixel_position_ids", "image_sizes", "image_grid_thw",
                                    "attention_mask")),),
            "outputs": (Obj(_strings("image_features")),),
            "pipeline": _VISION_PIPELINE,
        }),),
        "embedding": (Obj({
            "filename": (PATH,), **_GRAPH,
            "inputs": (Obj(_strings("input_ids", "image_features", "audio_features")),),
            "outputs": (Obj(_strings("inputs_embeds", "per_layer_inputs")),),
        }),),
        "speech": (Obj({
            **_strings("filename", "config_filename", "adapter_filename", path=True), **_GRAPH,
            "inputs": (Obj(_strings("audio_embeds", "attention_mask", "audio_sizes", "audio_projection_mode",
                                    "audio_lengths")),),
            "outputs": (Obj(_strings("audio_features")),),
        }),),
        "joiner": (Obj({
            "filename": (PATH,), **_GRAPH,
            "inputs": (Obj(_strings("encoder_outputs", "decoder_outputs")),),
            "outputs": (Obj(_strings("logits")),),
        }),),
        "vad": (Obj({
            "filename": (PATH,), "threshold": (NUM,), **_ints("silence_duration_ms", "prefix_padding_ms"),
            **_GRAPH,
        }),),
        "moonshine": (Obj({
            **_strings("encoder_filename", "adapter_filename", "frontend_filename", "cross_kv_filename",
                       "decoder_kv_filename", path=True),
            **dict.fromkeys(("conv1_buffer_size", "conv2_buffer_size", "left_context_frames", "max_segment_memory_frames", "max_seq_len", "min_segment_memory_frames", "sample_buffer_size", "seconds_per_memory_frame", "tokens_per_second", "total_lookahead"), (NUM,)),
            **dict.fromkeys(("encoder", "adapter", "cross_kv", "decoder_kv"), (_MOONSHINE_GRAPH,)),
        }),),
        "audio_output": (Obj({
            **_ints("audio_start_token_id", "codebook_size", "interleaved_n_audio", "interleaved_n_text",
                    "num_codebooks", "text_end_token_id"),
            **{k: (Obj({"filename": (STR,), "session_options": (SESSION_OPTIONS,)}),)
               for k in ("embedding", "depthformer")},
        }),),
    }
)  # fmt: skip
SEARCH: Final = Obj(
    {
        **_ints("min_length", "max_length", "batch_size", "num_beams", "num_return_sequences", "top_k",
                "no_repeat_ngram_size", "random_seed", "audio_top_k"),
        **dict.fromkeys(("top_p", "temperature", "repetition_penalty", "length_penalty", "diversity_penalty", "chunk_size", "blank_penalty", "audio_temperature"), (NUM,)),
        **dict.fromkeys(("do_sample", "past_present_share_buffer", "early_stopping", "audio_interleaved"), (BOOL,)),
    }
)  # fmt: skip
SPECULATIVE: Final = Obj(
    {
        "max_draft_tokens": (Scalar("int32", between(1, 16)),),
        "ngram_size": (Scalar("int32", ngram_size),),
        "min_adaptive_k": (Scalar("int32", between(0, 16)),),
        "ngram_chained_lookup": (BOOL,),
        "cooldown": (BOOL,),
    }
)
DYNAMIC_BATCHING: Final = Obj(
    {
        **dict.fromkeys(("block_size", "num_blocks", "max_batch_size", "max_scheduled_tokens"), (POS,)),
        "gpu_utilization_factor": (Scalar("number", unit_interval_open_low),),
        "prefix_caching": (BOOL,),
        "dflash2_max_snapshots": (Scalar("int32", non_negative),),
    }
)
ENGINE: Final = Obj(
    {
        "dynamic_batching": (DYNAMIC_BATCHING,),
        "static_batching": (Obj({"max_batch_size": (Scalar("int32", positive),)}),),
    }
)
ELIGIBILITY_KEYS: Final = (
    "minimum_total_device_memory_bytes", "maximum_total_device_memory_bytes",
    "minimum_free_device_memory_bytes", "maximum_free_device_memory_bytes",
)  # fmt: skip


def _byte_count(v: float) -> str | None:
    if v < 0 or v != math.trunc(v) or v >= 2**63:
        return "must be a non-negative integer byte count"
    return None


RUNTIME_PROFILE: Final = Obj(
    {
        "id": (STR,),
        "eligibility": (Obj({**{k: (Scalar("number", _byte_count),) for k in ELIGIBILITY_KEYS},
                             "is_integrated": (BOOL,)}),),
        "overlay": (Obj({
            "model": (Obj({"decoder": (Obj({"filename": (STR,)}),)}),),
            "engine": (Obj({"dynamic_batching": (Obj(dict.fromkeys(("num_blocks", "max_batch_size", "max_scheduled_tokens"), (POS,))),)}),),
            "search": (Obj({"chunk_size": (POS,)}),),
            "speculative": (Obj({"max_draft_tokens": (Scalar("int32", between(1, 16)),)}),),
        }),),
    }
)  # fmt: skip
ROOT: Final = Obj(
    {
        "model": (MODEL,),
        "search": (SEARCH,),
        "speculative": (SPECULATIVE,),
        "engine": (ENGINE,),
        "runtime_profiles": (Arr(RUNTIME_PROFILE),),
    },
    ignore_scalars=True,
)


def validate(document: object, *, source: str, root: Obj = ROOT) -> None:
    """Raise one ConfigError line if GenAI 0.18.0's parser would refuse ``document``.

    ``root`` is the element table (default: 0.18.0's; genai_config passes an extended one for
    research-builder configs).
    """
    validate_against(document, source=source, root=root)
