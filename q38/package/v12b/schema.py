"""What the v12b surface accepts in ``genai_config.json``: its strict parser, as a table.

v12b is q38's own surface and stricter than GenAI's parser: required keys, integers that are
JSON integers with lower bounds, the typed session options it knows plus dotted config-entry
keys, the ``cuda`` / ``cpu`` providers each once, and checks across fields (a prefill chunk
within the KV capacity, unique and non-overlapping runtime profiles). This module declares it in
the machinery of :mod:`q38.package.config_schema`, in the order the refusals are reported: each
object's unknown keys first, then its values in the declared order (:data:`ROOT`, :data:`STYLE`).

:func:`validate` raises one :class:`ConfigError` line naming the key path; it builds nothing:
:mod:`q38.package.v12b.config` builds its records from a document that passed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from q38.errors import quote
from q38.package.config_schema import (
    STR,
    Arr,
    Check,
    Obj,
    Problem,
    Rule,
    Scalar,
    Style,
    all_of,
    at_least,
    finite,
    fits_int64,
)
from q38.package.config_schema import validate as validate_against

__all__ = [
    "CONFIG_ENTRY_RE", "DECODER_INPUT_KEYS", "DECODER_OUTPUT_KEYS", "DIMENSIONS", "ELIGIBILITY_KEYS", "GRAPH_LEVELS",
    "LINEAGES", "MODEL_TYPE", "PROVIDERS", "ROOT", "SEARCH_KEYS", "SESSION_OPTIONS", "STYLE", "SURFACE",
    "VARIANTS", "validate",
]  # fmt: skip

MODEL_TYPE: Final = "qwen38_flash_graph"
SURFACE: Final = "v12b"
LINEAGES: Final = ("contrib", "custom")
VARIANTS: Final = ("faithful", "cpu")
GRAPH_LEVELS: Final = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
PROVIDERS: Final = ("cuda", "cpu")

DECODER_INPUT_KEYS: Final = frozenset(
    {
        "input_ids", "attention_mask", "position_ids", "past_sequence_length",
        "past_key_names", "past_value_names", "past_conv_names", "past_recurrent_names",
        "past_indexer_names",
    }
)  # fmt: skip
DECODER_OUTPUT_KEYS: Final = frozenset(
    {
        "logits", "hidden_states", "present_key_names", "present_value_names",
        "present_conv_names", "present_recurrent_names", "present_indexer_names",
    }
)  # fmt: skip
SEARCH_KEYS: Final = {
    "max_length": int, "min_length": int, "do_sample": bool, "top_k": int, "top_p": float,
    "temperature": float, "num_beams": int, "repetition_penalty": float, "chunk_size": int,
}  # fmt: skip
ELIGIBILITY_KEYS: Final = (
    "minimum_total_device_memory_bytes", "maximum_total_device_memory_bytes",
    "minimum_effective_host_memory_bytes", "maximum_effective_host_memory_bytes",
)  # fmt: skip
# A session config entry: dotted lower-case namespace, e.g. session.moe.offload.mode, ep.cuda.x.
CONFIG_ENTRY_RE: Final = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_]+)+$")

STYLE: Final = Style(clip=True, top="{source}: : expected an object, got {kind}")


# --------------------------------------------------------------------------- value checks
def _choice(*choices: str) -> Check:
    def check(v: str) -> str | None:
        return None if v in choices else f"expected one of {', '.join(choices)}, got {quote(v)}"

    return check


def _log_level(v: int) -> str | None:
    return f"must be in [0, 4], got {v}" if v > 4 else None


def _surface(v: str) -> str | None:
    return None if v == SURFACE else f"unsupported surface {quote(v)} (expected {SURFACE!r})"


def _model_type(v: str) -> str | None:
    return None if v == MODEL_TYPE else f"expected {MODEL_TYPE!r}, got {quote(v)}"


def _non_empty(v: str) -> str | None:
    return None if v else "must not be empty"


INT_NN: Final = Scalar("integer", all_of(at_least(0), fits_int64))
COUNT: Final = Scalar("integer", all_of(at_least(1), fits_int64))
STR_MAP: Final = Obj(other=(STR,))


def _strings(keys: frozenset[str]) -> Obj:
    return Obj(dict.fromkeys(sorted(keys), (STR,)))


# --------------------------------------------------------------------------- session options
def _provider_entry(entries: Sequence[Any], i: int) -> Problem | None:
    """One ``provider_options`` entry: one known provider name, not listed before."""
    entry = entries[i]
    if not isinstance(entry, dict) or len(entry) != 1:
        return f"[{i}]", "expected an object with exactly one provider name"
    ((name, _),) = entry.items()
    if name not in PROVIDERS:
        return f"[{i}].{name}", f"unknown provider (expected one of {', '.join(PROVIDERS)})"
    if any(name in earlier for earlier in entries[:i]):  # GenAI would merge the two entries
        return f"[{i}].{name}", "provider listed twice (GenAI merges the entries: write one)"
    return None


SESSION_OPTIONS: Final = Obj(
    {
        **dict.fromkeys(("log_id", "custom_ops_library", "enable_profiling"), (STR,)),
        **dict.fromkeys(("intra_op_num_threads", "inter_op_num_threads"), (INT_NN,)),
        "log_severity_level": (Scalar("integer", all_of(at_least(0), fits_int64, _log_level)),),
        "graph_optimization_level": (Scalar("string", _choice(*GRAPH_LEVELS)),),
        "provider_options": (Arr(Obj(dict.fromkeys(PROVIDERS, (STR_MAP,))), each=_provider_entry),),
    },
    other=(STR,),  # GenAI passes these to ORT as config entries; GenAI 0.18 rejects non-strings.
    other_keys=CONFIG_ENTRY_RE,
)


# --------------------------------------------------------------------------- model
def _chunk_fits(graph: Mapping[str, Any]) -> Problem | None:
    prefill = graph.get("prefill")
    if prefill is not None and prefill["chunk"] > graph["kv_capacity"]:
        return "prefill.chunk", f"chunk {prefill['chunk']} exceeds kv_capacity {graph['kv_capacity']}"
    return None


def _declared(fields: dict[str, tuple[Scalar | Obj | Arr, ...]], *required: str,
              order: tuple[str | Rule, ...] = ()) -> Obj:  # fmt: skip
    return Obj(fields, walk="declared", required=frozenset(required), order=order)


_GRAPH: Final = _declared(
    {
        "surface": (Scalar("string", _surface),),
        "lineage": (Scalar("string", _choice(*LINEAGES)),),
        "variant": (Scalar("string", _choice(*VARIANTS)),),
        "target": (_declared({"filename": (STR,)}, "filename"),),
        "fold": (_declared({"head_r2": (_declared({"filename": (STR,), "session_options": (SESSION_OPTIONS,)},
                                                  "filename"),)}, "head_r2"),),
        "prefill": (_declared({"filename": (STR,), "chunk": (COUNT,)}, "filename", "chunk"),),
        "kv_capacity": (COUNT,),
        "weights_pool": (STR,),
        "expert_profile": (STR,),
        "multidraft": (_strings(frozenset({"s2", "s3", "s4"})),),
        "libraries": (STR_MAP,),
    },
    "target", "fold", "kv_capacity", "weights_pool",
    order=(
        "surface", "target", "fold", "fold.head_r2", "kv_capacity", "prefill", "prefill.chunk",
        Rule(_chunk_fits), "prefill.filename", "multidraft", "lineage", "variant", "target.filename",
        "fold.head_r2.filename", "fold.head_r2.session_options", "weights_pool", "expert_profile", "libraries",
    ),
)  # fmt: skip
DIMENSIONS: Final = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_size", "num_hidden_layers")
_DECODER: Final = _declared(
    {
        **dict.fromkeys(DIMENSIONS, (COUNT,)),
        "filename": (STR,),
        "session_options": (SESSION_OPTIONS,),
        "inputs": (_strings(DECODER_INPUT_KEYS),),
        "outputs": (_strings(DECODER_OUTPUT_KEYS),),
    },
    *DIMENSIONS, "filename",
)
_MODEL: Final = _declared(
    {
        "type": (Scalar("string", _model_type),),
        "eos_token_id": (Arr(INT_NN, lone=True),),
        "bos_token_id": (INT_NN,),
        "pad_token_id": (INT_NN,),
        "vocab_size": (COUNT,),
        "context_length": (COUNT,),
        "decoder": (_DECODER,),
        "qwen38_graph": (_GRAPH,),
    },
    "type", "vocab_size", "context_length", "decoder", "qwen38_graph",
)


# --------------------------------------------------------------------------- runtime profiles
def _has_minimum(e: Mapping[str, Any]) -> Problem | None:
    return None if "minimum_total_device_memory_bytes" in e else ("", "is missing minimum_total_device_memory_bytes")


def _maximum_above_minimum(e: Mapping[str, Any]) -> Problem | None:
    top = e.get("maximum_total_device_memory_bytes")
    if top is not None and top < e["minimum_total_device_memory_bytes"]:
        return "", "maximum_total_device_memory_bytes is below the minimum"
    return None


def _overlay_not_empty(d: Mapping[str, Any]) -> Problem | None:
    return None if d else ("", "an empty overlay is not allowed")


def _unique_ids(profiles: Sequence[Mapping[str, Any]]) -> Problem | None:
    seen: set[str] = set()
    for i, profile in enumerate(profiles):
        if profile["id"] in seen:
            return f"[{i}].id", f"duplicate runtime profile id {quote(profile['id'])}"
        seen.add(profile["id"])
    return None


def _no_overlap(profiles: Sequence[Mapping[str, Any]]) -> Problem | None:
    """GenAI rejects overlapping device-memory ranges ("runtime profile eligibility ranges overlap")."""
    spans = sorted(
        (
            p["eligibility"]["minimum_total_device_memory_bytes"],
            p["eligibility"].get("maximum_total_device_memory_bytes", 2**64),
            i,
        )
        for i, p in enumerate(profiles)
    )
    reach, owner = -1, -1
    for lo, hi, j in spans:
        if lo <= reach:
            ids = f"{quote(profiles[owner]['id'])} and {quote(profiles[j]['id'])}"
            return f"[{max(owner, j)}].eligibility", f"runtime profile eligibility ranges overlap ({ids})"
        if hi > reach:
            reach, owner = hi, j
    return None


_ELIGIBILITY: Final = Obj(
    dict.fromkeys(ELIGIBILITY_KEYS, (INT_NN,)), walk="keys_first", rules=(Rule(_has_minimum), Rule(_maximum_above_minimum))
)
_OVERLAY_DECODER: Final = _declared(
    {"filename": (STR,), "session_options": (SESSION_OPTIONS,)},
    order=(Rule(_overlay_not_empty), "filename", "session_options"),
)
_PROFILE: Final = _declared(
    {
        "id": (Scalar("string", _non_empty),),
        "eligibility": (_ELIGIBILITY,),
        "overlay": (_declared({"model": (_declared({"decoder": (_OVERLAY_DECODER,)}, "decoder"),)}, "model"),),
    },
    "id", "eligibility", "overlay",
)
_SEARCH_SCALARS: Final = {
    int: Scalar("integer", fits_int64, name="int"),
    bool: Scalar("bool", name="bool"),
    float: Scalar("number", all_of(finite, fits_int64), name="float"),
}
ROOT: Final = _declared(
    {
        "runtime_profiles": (Arr(_PROFILE, rules=(Rule(_unique_ids), Rule(_no_overlap))),),
        "model": (_MODEL,),
        "search": (Obj({k: (_SEARCH_SCALARS[t],) for k, t in SEARCH_KEYS.items()}, walk="keys_first"),),
    },
    "model",
)


def validate(document: object, *, source: str) -> None:
    """Raise one ConfigError line, worded as v12b words it, if the v12b parser would refuse ``document``."""
    validate_against(document, source=source, root=ROOT, style=STYLE)
