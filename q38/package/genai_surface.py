"""What onnxruntime-genai 0.18.0 accepts in ``genai_config.json``: its parser, as a table.

GenAI parses the config with a tree of JSON "elements" (``src/config.cpp``): each element takes
scalars, objects and arrays by key, rejects what it does not know (``Unknown value "k"``), and
checks types (``Expected a string but saw a number``), integer ranges (``SafeDoubleToInt``) and a
few value bounds while it reads. This module mirrors that tree: one :class:`Obj` per element,
the handlers of each key by JSON kind, and the value checks. It was read from the source
(v0.16 tree, the nearest stored one) and probed key by key against the installed 0.18.0 wheel
(``og.Config(dir)``; ``tests/support/og_config_probe.py``); the differential test
(``tests/unit/package/test_genai_config_differential.py``) holds both verdicts equal.

Only the verdict per document matters here: :func:`validate` raises one :class:`ConfigError`
line naming the key path (``model.decoder.session_options.provider_options[0].cuda.x``); it
does not build anything. The checks GenAI runs after parsing (``context_length``, runtime
profiles, decoder state groups) live in :mod:`q38.package.genai_checks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np

from q38.errors import ConfigError
from q38.package.jsonio import json_kind

__all__ = ["ROOT", "Arr", "Obj", "Scalar", "json_kind", "validate"]

# A scalar's extra check, called once ``_Walker.scalar`` has checked the value's JSON kind: a
# number check takes a float, a string check a str. ``Any``: the one parameter type all of them accept.
Check = Callable[[Any], "str | None"]
ScalarKind = Literal["string", "bool", "int32", "int64", "number"]

_INT32: Final = (-(2**31), 2**31 - 1)
_INT64: Final = (-(2**63), 2**63)  # upper bound exclusive, as GenAI compares doubles


@dataclass(frozen=True)
class Scalar:
    """A JSON scalar GenAI reads with ``JSON::Get<T>``; ``check`` returns an error or None."""

    kind: ScalarKind
    check: Check | None = None


@dataclass(frozen=True)
class Arr:
    """A JSON array whose elements all go to one handler (a scalar or an object element)."""

    item: Scalar | Obj


@dataclass(frozen=True)
class Obj:
    """One GenAI config element: handlers per key, and what it does with any other key.

    ``other_strings``: any other key takes a string (session config entries, provider options,
    run options); ``other_objects``: any other key takes this object (provider names, pipeline
    model ids); ``ignore_scalars``: any other key's scalar is dropped (the document root);
    ``reject``: the element refuses any object with this message (a retired key).
    """

    fields: Mapping[str, tuple[Scalar | Obj | Arr, ...]] = field(default_factory=dict)
    other_strings: bool = False
    other_objects: Obj | None = None
    ignore_scalars: bool = False
    reject: str = ""




# --------------------------------------------------------------------------- value checks
def between(lo: float, hi: float) -> Check:
    """A check: the number lies in ``[lo, hi]`` (GenAI's range error otherwise)."""
    def check(v: float) -> str | None:
        return None if lo <= v <= hi else f"must be between {lo:g} and {hi:g}, got {v:g}"

    return check


def positive(v: float) -> str | None:
    """A check: the number is > 0."""
    return None if v > 0 else f"must be > 0, got {v:g}"


def non_negative(v: float) -> str | None:
    """A check: the number is >= 0."""
    return None if v >= 0 else f"must be >= 0, got {v:g}"


def unit_interval_open_low(v: float) -> str | None:
    """A check: the number lies in ``(0, 1]`` (e.g. top_p)."""
    return None if 0 < v <= 1 else f"must be > 0 and <= 1, got {v:g}"


def finite_float32_positive(v: float) -> str | None:
    """A check: the number is > 0 and stays finite when GenAI stores it as a float32."""
    if not math.isfinite(float(np.float32(v))) or v <= 0:
        return f"must be finite (as float32) and > 0, got {v:g}"
    return None


def one_of(*choices: str, fold_case: bool = False) -> Check:
    """A check: the string is one of ``choices`` (case-folded first when ``fold_case``)."""
    def check(v: str) -> str | None:
        probe = v.lower() if fold_case else v
        return None if probe in choices else f"expected one of {', '.join(choices)}, got {v!r}"

    return check


def ngram_size(v: float) -> str | None:
    """A check: an n-gram size GenAI accepts, 0 (off) or 2 to 16."""
    return None if v == 0 or 2 <= v <= 16 else f"must be 0 or between 2 and 16, got {v:g}"


def config_path(v: str) -> str | None:
    r"""GenAI's ``ValidateConfigPath``: relative, no ``..`` component (``/`` or ``\``)."""
    if not v:
        return None
    if v[0] in "/\\":
        return f"must be a relative path under the model directory, got {v!r}"
    if ".." in v.replace("\\", "/").split("/"):
        return f"must not contain path traversal (..): {v!r}"
    return None


def legacy(message: str) -> Check:
    """A check that always fails with ``message``: a field GenAI 0.18.0 no longer reads."""
    def check(v: object) -> str | None:
        return message

    return check


STR: Final = Scalar("string")
BOOL: Final = Scalar("bool")
I32: Final = Scalar("int32")
I64: Final = Scalar("int64")
NUM: Final = Scalar("number")  # read as a double and cast (float, size_t): any number
PATH: Final = Scalar("string", config_path)
POS: Final = Scalar("int32", positive)
GRAPH_OPTIMIZATION_LEVELS: Final = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")


def _strings(*keys: str, path: bool = False) -> dict[str, tuple[Scalar | Obj | Arr, ...]]:
    return dict.fromkeys(keys, (PATH if path else STR,))


def _ints(*keys: str) -> dict[str, tuple[Scalar | Obj | Arr, ...]]:
    return dict.fromkeys(keys, (I32,))


# --------------------------------------------------------------------------- elements
RUN_OPTIONS: Final = Obj(other_strings=True)
DEVICE_FILTERING: Final = Obj(
    {
        "hardware_device_type": (Scalar("string", one_of("cpu", "gpu", "npu", fold_case=True)),),
        "hardware_device_id": (NUM,),
        "hardware_vendor_id": (NUM,),
    }
)
PROVIDER: Final = Obj({"device_filtering_options": (DEVICE_FILTERING,)}, other_strings=True)
SESSION_OPTIONS: Final = Obj(
    {
        "log_id": (STR,),
        "enable_profiling": (STR,),
        "custom_ops_library": (STR,),
        "intra_op_num_threads": (I32,),
        "inter_op_num_threads": (I32,),
        "log_severity_level": (I32,),
        "log_verbosity_level": (I32,),
        "enable_cpu_mem_arena": (BOOL,),
        "enable_mem_pattern": (BOOL,),
        "graph_optimization_level": (Scalar("string", one_of(*GRAPH_OPTIMIZATION_LEVELS)),),
        "provider_options": (Arr(Obj(other_objects=PROVIDER)),),
    },
    other_strings=True,
)
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


# --------------------------------------------------------------------------- validation
class _Walker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {path}: {message}")

    def scalar(self, node: Scalar, value: object, path: str) -> None:
        kind = node.kind
        if kind == "string":
            ok = isinstance(value, str)
        elif kind == "bool":
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            want = {"string": "a string", "bool": "a bool"}.get(kind, "a number")
            raise self.fail(path, f"expected {want}, got {json_kind(value)}")
        if kind in ("int32", "int64"):
            assert isinstance(value, (int, float))
            lo, hi = _INT32 if kind == "int32" else _INT64
            if not lo <= value <= hi or (kind == "int64" and value >= hi):
                raise self.fail(path, f"value {value:g} is out of {kind} range")
            if value != math.trunc(value):
                raise self.fail(path, f"value {value:g} is not an integer")
        if node.check is not None:
            problem = node.check(value)
            if problem:
                raise self.fail(path, problem)

    def array(self, node: Arr, value: list[Any], path: str) -> None:
        for i, item in enumerate(value):
            ipath = f"{path}[{i}]"
            if isinstance(node.item, Obj):
                if not isinstance(item, dict):
                    raise self.fail(ipath, f"expected an object, got {json_kind(item)}")
                self.obj(node.item, item, ipath)
            else:
                if isinstance(item, (dict, list)):
                    raise self.fail(ipath, f"expected {_scalar_name(node.item)}, got {json_kind(item)}")
                self.scalar(node.item, item, ipath)

    def obj(self, node: Obj, value: Mapping[str, Any], path: str) -> None:
        if node.reject:
            raise self.fail(path, node.reject)
        for key, item in value.items():
            kpath = f"{path}.{key}" if path else key
            handlers = node.fields.get(key, ())
            if isinstance(item, dict):
                sub = next((h for h in handlers if isinstance(h, Obj)), node.other_objects)
                if sub is None:
                    raise self.fail(kpath, _unknown_or_kind(handlers, "an object"))
                self.obj(sub, item, kpath)
            elif isinstance(item, list):
                arr = next((h for h in handlers if isinstance(h, Arr)), None)
                if arr is None:
                    raise self.fail(kpath, _unknown_or_kind(handlers, "an array"))
                self.array(arr, item, kpath)
            else:
                sc = next((h for h in handlers if isinstance(h, Scalar)), None)
                if sc is None and node.other_strings:
                    sc = STR
                if sc is None:
                    if node.ignore_scalars:
                        continue
                    raise self.fail(kpath, _unknown_or_kind(handlers, json_kind(item)))
                self.scalar(sc, item, kpath)


def _scalar_name(node: Scalar) -> str:
    return {"string": "a string", "bool": "a bool"}.get(node.kind, "a number")


def _unknown_or_kind(handlers: tuple[Scalar | Obj | Arr, ...], got: str) -> str:
    if not handlers:
        return "unknown key"
    wants = [
        "an object" if isinstance(h, Obj) else "an array" if isinstance(h, Arr) else _scalar_name(h)
        for h in handlers
    ]
    return f"expected {' or '.join(wants)}, got {got}"


def validate(document: object, *, source: str, root: Obj = ROOT) -> None:
    """Raise one ConfigError line if GenAI 0.18.0's parser would refuse ``document``.

    ``root`` is the element table (default: 0.18.0's; genai_config passes an extended one for
    research-builder configs).
    """
    walker = _Walker(source)
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: expected a JSON object at the top level, got {json_kind(document)}")
    walker.obj(root, document, "")
