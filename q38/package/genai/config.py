r"""The onnxruntime-genai 0.18.0 ``genai_config.json`` (the "genai" surface) as frozen dataclasses.

This is the config the public builder (``python -m onnxruntime_genai.models.builder``) writes
next to its graphs, for any decoder model type it emits (``qwen3_5_moe_text``, ``qwen3_5_text``,
``llama``, ...). Parsing is strict in exactly GenAI's way: a document is accepted iff
``og.Config(dir)`` of the installed 0.18.0 wheel accepts it (:mod:`q38.package.genai.schema`
mirrors its parser, :mod:`q38.package.genai.checks` its checks after parsing, the differential
test holds the verdicts equal); a refusal is one line naming the key path.

The Qwen3.8 builder of the research branch writes a few keys 0.18.0 refuses (``model.engram``,
the indexer / PLE state names, ``ple_token_pad_id``, ``mtp.index_share``, the ``fixed_indexer``
and ``fixed_ple`` state groups). ``parse_genai_config(..., research=True)`` accepts those too and
records GenAI's refusal in :attr:`GenaiConfig.og_refusal`, so q38 can read and check such a
package and say that released GenAI cannot load it.

Sections q38 does not interpret (vision, speech, drafters, pipelines, sliding windows, ...) are
validated and kept verbatim in ``extra`` mappings. The writer is deterministic: sorted keys,
indent 2, raw UTF-8 (GenAI's JSON reader refuses ``\u`` escapes), trailing newline.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from q38.errors import ConfigError
from q38.package import config_schema as cs
from q38.package.detect import V12B_MODEL_TYPES, is_genai_document  # noqa: F401 (re-exported)
from q38.package.genai import schema as gs
from q38.package.genai.checks import check_document
from q38.package.io.files import CONFIG_LIMIT, read_bounded
from q38.package.io.jsonio import dumps_json, loads_strict
from q38.package.json_forms import keep_source_forms
from q38.package.session_options import (
    Provider,
    SessionBlock,
    read_session_options,
    session_options_document,
)

__all__ = [
    "BUILDER_MODEL_TYPES",
    "OG_MODEL_TYPES",
    "GenaiConfig",
    "GenaiDecoder",
    "GenaiEngram",
    "GenaiModel",
    "GenaiMtp",
    "Provider",
    "SessionBlock",
    "SharedInitializer",
    "dumps_genai_config",
    "genai_config_to_dict",
    "is_genai_document",
    "parse_genai_config",
    "parse_session_options",
    "read_genai_config",
]

# Decoder model types the 0.18.0 builder writes (builder.py: the architecture table, and the
# ``type`` it derives from ``config.architectures[0]``), plus the research Qwen3.8 builder's.
BUILDER_MODEL_TYPES: Final = frozenset(
    {
        "chatglm", "ernie4_5", "gemma", "gemma2", "gemma3_text", "gemma3_vl_text", "gemma3",
        "gemma4_text", "gptoss", "granite", "granitemoehybrid", "hunyuandensev1", "internlm2",
        "lfm2", "lfm2_moe", "lfm2_vl", "lfm2_vl_text", "lfm2_audio", "lfm2_audio_text", "llama",
        "mistral", "mistral3", "mistral3_text", "nemotron", "olmo", "phi", "phi3", "phi3small",
        "phimoe", "phi3v", "phi4mm", "qwen2", "qwen2_5_vl", "qwen2_5_vl_text", "qwen3",
        "qwen3vl", "qwen3_vl_text", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
        "smollm3", "decoder", "decoder-pipeline",
        "qwen4_exp_text",  # the Qwen3.8 builder of the research branch
    }
)  # fmt: skip
# The types 0.18.0's og.Model creates a text decoder for (src/models/model_type.h: IsLLM, IsPipe).
OG_MODEL_TYPES: Final = frozenset(
    {
        "chatglm", "decoder", "ernie4_5", "gemma", "gemma2", "gemma3_text", "gemma4_text", "gpt2",
        "gptoss", "granite", "granitemoehybrid", "hunyuandensev1", "internlm2", "lfm2", "llama",
        "mistral", "nemotron", "olmo", "phi", "phimoe", "phi3", "phi3small", "qwen2", "qwen3",
        "qwen3_5_moe_text", "qwen3_5_text", "smollm3", "decoder-pipeline",
    }
)  # fmt: skip


# --------------------------------------------------------------------------- research keys
def _add(obj: cs.Obj, **fields: tuple[cs.Scalar | cs.Obj | cs.Arr, ...]) -> cs.Obj:
    return replace(obj, fields={**obj.fields, **fields})


_RESEARCH_NAMES: Final = (
    "past_indexer_names", "past_indexer_kv_buffer_names", "past_indexer_state_lengths_names",
    "past_ple_token_names", "past_ple_conv_names", "engram_embeddings",
)  # fmt: skip
_RESEARCH_OUT: Final = tuple("present_" + n.removeprefix("past_") for n in _RESEARCH_NAMES if n.startswith("past_"))
_RESEARCH_KINDS: Final = ("fixed_indexer", "fixed_ple")


def _research_root() -> cs.Obj:
    """GenAI 0.18.0's table plus what the Qwen3.8 builder of the research branch adds."""
    dec = gs.MODEL.fields["decoder"][0]
    assert isinstance(dec, cs.Obj)
    d_in, d_out = dec.fields["inputs"][0], dec.fields["outputs"][0]
    groups = dec.fields["state_groups"][0]
    assert isinstance(d_in, cs.Obj) and isinstance(d_out, cs.Obj) and isinstance(groups, cs.Arr)
    assert isinstance(groups.item, cs.Obj)
    update = groups.item.fields["state_update"][0]
    assert isinstance(update, cs.Obj)
    kinds = cs.Scalar("string", cs.one_of(*gs.STATE_GROUP_KINDS, *_RESEARCH_KINDS))
    group = _add(groups.item, kind=(kinds,), state_update=(_add(update, compress_ratio=(cs.POS,)),))
    decoder = _add(
        dec,
        inputs=(_add(d_in, **dict.fromkeys(_RESEARCH_NAMES, (cs.STR,))),),
        outputs=(_add(d_out, **dict.fromkeys(_RESEARCH_OUT, (cs.STR,))),),
        ple_token_pad_id=(cs.I32,),
        state_groups=(cs.Arr(group),),
    )
    mtp = gs.MTP
    m_in, m_out = mtp.fields["inputs"][0], mtp.fields["outputs"][0]
    assert isinstance(m_in, cs.Obj) and isinstance(m_out, cs.Obj)
    mtp = _add(
        mtp,
        inputs=(_add(m_in, past_indexer_names=(cs.STR,), past_sequence_length=(cs.STR,), logits_indices=(cs.STR,)),),
        outputs=(_add(m_out, present_indexer_names=(cs.STR,)),),
        index_share=(cs.I32, cs.BOOL),
    )
    engram = cs.Obj(
        {
            "filename": (cs.PATH,),
            "cache_capacity": (cs.POS,),
            "session_options": (cs.SESSION_OPTIONS,),
            "run_options": (cs.RUN_OPTIONS,),
            "inputs": (cs.Obj(dict.fromkeys(("input_ids", "past_ple_token_names"), (cs.STR,))),),
            "outputs": (cs.Obj(dict.fromkeys(("embeddings", "present_ple_token_names"), (cs.STR,))),),
        }
    )
    model = _add(gs.MODEL, decoder=(decoder,), mtp=(mtp,), engram=(engram,))
    return _add(gs.ROOT, model=(model,))


RESEARCH_ROOT: Final = _research_root()


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class SharedInitializer:
    """A ``shared_initializers`` entry: one tensor both graphs read from one data file."""

    name: str = ""
    data_file: str = ""
    offset: str = ""
    length: str = ""
    data_type: int = 0
    shape: tuple[int, ...] = ()

    def byte_range(self) -> tuple[int, int] | None:
        """(offset, length) when both are decimal strings, else None."""
        if not (self.offset.isdigit() and self.length.isdigit()):
            return None
        return int(self.offset), int(self.length)


@dataclass(frozen=True)
class GenaiGraphSection:
    """What every graph section has: a file, session options, name maps, shared weights."""

    filename: str | None = None
    session_options: SessionBlock | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    shared_initializers: tuple[SharedInitializer, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # validated keys q38 does not interpret


@dataclass(frozen=True)
class GenaiDecoder(GenaiGraphSection):
    """``model.decoder``: the graph section plus the dimensions GenAI reads (None where absent)."""

    head_size: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_hidden_layers: int | None = None
    num_key_value_heads: int | None = None


@dataclass(frozen=True)
class GenaiMtp(GenaiGraphSection):
    """``model.mtp``: the multi-token-prediction graph, its dimensions and the hidden-state input."""

    enabled: bool | None = None
    num_hidden_layers: int | None = None
    num_key_value_heads: int | None = None
    head_size: int | None = None
    main_hidden_states: str | None = None


@dataclass(frozen=True)
class GenaiEngram(GenaiGraphSection):
    """``model.engram``: the engram graph and its cache capacity."""

    cache_capacity: int | None = None


@dataclass(frozen=True)
class GenaiModel:
    """``model``: type, context length and token ids, the graph sections, and other keys in ``extra``.

    ``extra`` holds validated keys q38 does not interpret (vision, ...), written back as read.
    """

    type: str
    context_length: int
    decoder: GenaiDecoder = field(default_factory=GenaiDecoder)
    vocab_size: int | None = None
    bos_token_id: int | None = None
    eos_token_id: tuple[int, ...] = ()
    pad_token_id: int | None = None
    mtp: GenaiMtp | None = None
    engram: GenaiEngram | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other model keys (vision, token ids, ...)


@dataclass(frozen=True)
class SourceForms:
    """The document a config was parsed from and its canonical form.

    They let a writer put back every untouched value in the form it was read
    (``"eos_token_id": 2`` stays ``2``; see :mod:`q38.package.json_forms`).
    """

    document: Mapping[str, Any]
    canonical: Mapping[str, Any]


@dataclass(frozen=True)
class GenaiConfig:
    """A parsed genai_config.json; ``og_refusal`` is 0.18.0's refusal of a research config ("").

    ``source_forms`` (set by :func:`parse_genai_config`, kept by ``dataclasses.replace``) makes
    :func:`genai_config_to_dict` write every value a rewrite did not change as it was read.
    """

    model: GenaiModel
    search: dict[str, Any] = field(default_factory=dict)
    speculative: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)
    runtime_profiles: tuple[dict[str, Any], ...] = ()
    ignored: dict[str, Any] = field(default_factory=dict)  # top-level scalars: GenAI skips them
    og_refusal: str = ""
    source_forms: SourceForms | None = field(default=None, compare=False, repr=False)

    @property
    def graph_sections(self) -> dict[str, GenaiGraphSection]:
        """Role -> section for every graph the config names (decoder, mtp, engram)."""
        out: dict[str, GenaiGraphSection] = {"decoder": self.model.decoder}
        if self.model.mtp is not None:
            out["mtp"] = self.model.mtp
        if self.model.engram is not None:
            out["engram"] = self.model.engram
        return out

    def profile_decoder_files(self) -> list[tuple[str, str]]:
        """(profile id, decoder filename) of every runtime profile that swaps the decoder graph."""
        out = []
        for p in self.runtime_profiles:
            filename = p.get("overlay", {}).get("model", {}).get("decoder", {}).get("filename")
            if isinstance(filename, str):
                out.append((str(p["id"]), filename))
        return out


# --------------------------------------------------------------------------- parsing
def parse_session_options(raw: Mapping[str, Any] | None) -> SessionBlock | None:
    """A section's ``session_options`` through the one reader (None: the section has none)."""
    return None if raw is None else read_session_options(raw)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _section_common(raw: Mapping[str, Any], typed: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    known = {"filename", "session_options", "inputs", "outputs", "shared_initializers", *typed}
    common: dict[str, Any] = {
        "filename": raw.get("filename"),
        "session_options": parse_session_options(raw.get("session_options")),
        "inputs": dict(raw.get("inputs", {})),
        "outputs": dict(raw.get("outputs", {})),
        "shared_initializers": tuple(
            SharedInitializer(
                name=s.get("name", ""), data_file=s.get("data_file", ""), offset=s.get("offset", ""),
                length=s.get("length", ""), data_type=int(s.get("data_type", 0)),
                shape=tuple(int(d) for d in s.get("shape", [])),
            )
            for s in raw.get("shared_initializers", [])
        ),
        "extra": {k: v for k, v in raw.items() if k not in known},
    }  # fmt: skip
    return common, {k: raw[k] for k in typed if k in raw}


def _decoder(raw: Mapping[str, Any]) -> GenaiDecoder:
    dims = ("head_size", "hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads")
    common, typed = _section_common(raw, dims)
    ints: dict[str, Any] = {k: _int(v) for k, v in typed.items()}
    return GenaiDecoder(**common, **ints)


def _mtp(raw: Mapping[str, Any]) -> GenaiMtp:
    common, typed = _section_common(
        raw, ("enabled", "num_hidden_layers", "num_key_value_heads", "head_size", "main_hidden_states")
    )
    for key in ("num_hidden_layers", "num_key_value_heads", "head_size"):
        if key in typed:
            typed[key] = int(typed[key])
    return GenaiMtp(**common, **typed)


def _engram(raw: Mapping[str, Any]) -> GenaiEngram:
    common, typed = _section_common(raw, ("cache_capacity",))
    ints: dict[str, Any] = {k: _int(v) for k, v in typed.items()}
    return GenaiEngram(**common, **ints)


_MODEL_TYPED: Final = ("type", "context_length", "decoder", "vocab_size", "bos_token_id", "eos_token_id",
                       "pad_token_id", "mtp", "engram")  # fmt: skip


def _model(raw: Mapping[str, Any]) -> GenaiModel:
    eos = raw.get("eos_token_id", [])
    return GenaiModel(
        type=str(raw.get("type", "")),
        context_length=int(raw["context_length"]),
        decoder=_decoder(raw.get("decoder", {})),
        vocab_size=_int(raw.get("vocab_size")),
        bos_token_id=_int(raw.get("bos_token_id")),
        eos_token_id=tuple(int(e) for e in (eos if isinstance(eos, list) else [eos])),
        pad_token_id=_int(raw.get("pad_token_id")),
        mtp=_mtp(raw["mtp"]) if "mtp" in raw else None,
        engram=_engram(raw["engram"]) if "engram" in raw else None,
        extra={k: v for k, v in raw.items() if k not in _MODEL_TYPED},
    )


def parse_genai_config(data: object, *, source: str = "genai_config.json", research: bool = False) -> GenaiConfig:
    """Validate ``data`` as onnxruntime-genai 0.18.0 would, then build the records.

    Args:
        data: the JSON document (already read strictly: no duplicate keys, no NaN).
        source: names the file in error messages.
        research: also accept the keys of the Qwen3.8 research builder (see the module doc);
            GenAI 0.18.0's refusal of them is kept in ``og_refusal``.

    Raises:
        ConfigError: one line, ``SOURCE: key.path: what is wrong``.

    """
    og_refusal = ""
    try:
        gs.validate(data, source=source)
    except ConfigError as exc:
        if not research:
            raise
        gs.validate(data, source=source, root=RESEARCH_ROOT)
        og_refusal = str(exc)
    assert isinstance(data, dict)
    check_document(data, source=source)
    roots = {"model", "search", "speculative", "engine", "runtime_profiles"}
    profiles = data.get("runtime_profiles")
    cfg = GenaiConfig(
        model=_model(data["model"]),
        search=dict(data.get("search", {})) if isinstance(data.get("search"), dict) else {},
        speculative=dict(data["speculative"]) if isinstance(data.get("speculative"), dict) else {},
        engine=dict(data["engine"]) if isinstance(data.get("engine"), dict) else {},
        runtime_profiles=tuple(dict(p) for p in profiles) if isinstance(profiles, list) else (),
        ignored={k: v for k, v in data.items() if k not in roots or not isinstance(v, (dict, list))},
        og_refusal=og_refusal,
    )
    return replace(cfg, source_forms=SourceForms(copy.deepcopy(data), _canonical_dict(cfg)))


def _refuse_unicode_escapes(text: str, source: str) -> None:
    r"""GenAI's JSON reader refuses every ``\uXXXX`` escape ("Unsupported uXXXX code used")."""
    i = text.find("\\")
    while i != -1:
        if text[i + 1 : i + 2] == "u":
            line = text.count("\n", 0, i) + 1
            raise ConfigError(f"{source}: line {line}: \\u escapes are refused by onnxruntime-genai 0.18.0 (write UTF-8)")
        i = text.find("\\", i + 2)


def read_genai_config(path: Path, *, research: bool = True) -> GenaiConfig:
    r"""Read and parse ``path`` (a genai-surface config); problems are one ConfigError line.

    The file must be a regular file within the config size limit, strict JSON (no duplicate
    keys, NaN, oversized integers: :mod:`q38.package.io.jsonio`) without ``\u`` escapes (GenAI's
    reader refuses them), and a document GenAI 0.18.0 accepts (``research``: or one the Qwen3.8
    research builder writes).
    """
    raw = read_bounded(path, what="config", limit=CONFIG_LIMIT, error=ConfigError)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    _refuse_unicode_escapes(text, str(path))
    data = loads_strict(text, what=str(path), error=ConfigError)
    return parse_genai_config(data, source=str(path), research=research)


# --------------------------------------------------------------------------- writing
def _session_dict(so: SessionBlock) -> dict[str, Any]:
    providers = [
        (p.name, {**p.options, **({"device_filtering_options": dict(p.device_filtering_options)}
                                  if p.device_filtering_options else {})})
        for p in so.providers
    ]  # fmt: skip
    return session_options_document(so.typed, so.config_entries, providers,
                                    empty_providers="provider_options" not in so.config_entries)  # fmt: skip


def _section_dict(s: GenaiGraphSection, typed: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = dict(s.extra)
    if s.filename is not None:
        out["filename"] = s.filename
    if s.session_options is not None:
        out["session_options"] = _session_dict(s.session_options)
    if s.inputs:
        out["inputs"] = dict(s.inputs)
    if s.outputs:
        out["outputs"] = dict(s.outputs)
    if s.shared_initializers:
        out["shared_initializers"] = [
            {"name": i.name, "data_file": i.data_file, "offset": i.offset, "length": i.length,
             "data_type": i.data_type, "shape": list(i.shape)}
            for i in s.shared_initializers
        ]  # fmt: skip
    out.update({k: v for k, v in typed.items() if v is not None})
    return out


def genai_config_to_dict(cfg: GenaiConfig) -> dict[str, Any]:
    """The JSON document of ``cfg`` (``parse_genai_config`` of it gives ``cfg`` back).

    A config parsed from a document keeps that document's form for every value its records
    still hold unchanged (:class:`SourceForms`): writing back what was read changes nothing,
    and a converter's output differs from its source only where it converted.
    """
    canonical = _canonical_dict(cfg)
    forms = cfg.source_forms
    if forms is None:
        return canonical
    kept = keep_source_forms(forms.document, forms.canonical, canonical)
    if not isinstance(kept, dict):  # unreachable: both sides are objects
        raise TypeError("genai_config.json: the document is not an object")
    return copy.deepcopy(kept)  # the caller may edit it; the source document stays as read


def _canonical_dict(cfg: GenaiConfig) -> dict[str, Any]:
    """The document of ``cfg``'s records in q38's canonical form (``eos_token_id`` a list ...)."""
    m = cfg.model
    d = m.decoder
    model: dict[str, Any] = dict(m.extra)
    model.update({"type": m.type, "context_length": m.context_length})
    for key in ("vocab_size", "bos_token_id", "pad_token_id"):
        if getattr(m, key) is not None:
            model[key] = getattr(m, key)
    if m.eos_token_id:
        model["eos_token_id"] = list(m.eos_token_id)
    model["decoder"] = _section_dict(d, {k: getattr(d, k) for k in (
        "head_size", "hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads")})  # fmt: skip
    if m.mtp is not None:
        model["mtp"] = _section_dict(m.mtp, {k: getattr(m.mtp, k) for k in (
            "enabled", "num_hidden_layers", "num_key_value_heads", "head_size", "main_hidden_states")})  # fmt: skip
    if m.engram is not None:
        model["engram"] = _section_dict(m.engram, {"cache_capacity": m.engram.cache_capacity})
    out: dict[str, Any] = dict(cfg.ignored)
    out["model"] = model
    for key in ("search", "speculative", "engine"):
        if getattr(cfg, key):
            out[key] = dict(getattr(cfg, key))
    if cfg.runtime_profiles:
        out["runtime_profiles"] = [dict(p) for p in cfg.runtime_profiles]
    return out


_UNESCAPED_CONTROLS: Final = frozenset("\b\f\n\r\t")


def dumps_genai_config(cfg: GenaiConfig) -> str:
    r"""Deterministic text: sorted keys, indent 2, raw UTF-8, trailing newline.

    Refuses (ConfigError, naming the key path) what strict JSON cannot carry and what GenAI's
    reader could not read back: a control character JSON would write as a ``\u`` escape.
    """
    doc = genai_config_to_dict(cfg)
    dumps_json(doc, what="genai_config.json", error=ConfigError)  # NaN, >64-bit ints, NUL, surrogates
    _no_u_escapes(doc, "")
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _no_u_escapes(value: object, path: str) -> None:
    texts = [value] if isinstance(value, str) else list(value) if isinstance(value, dict) else []
    for text in texts:
        if any(ord(ch) < 0x20 and ch not in _UNESCAPED_CONTROLS for ch in text):
            raise ConfigError(f"genai_config.json: {path or '(top level)'}: control character in {text!r} "
                              "needs a \\u escape, which onnxruntime-genai 0.18.0 cannot read")  # fmt: skip
    if isinstance(value, dict):
        for k, v in value.items():
            _no_u_escapes(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _no_u_escapes(v, f"{path}[{i}]")
