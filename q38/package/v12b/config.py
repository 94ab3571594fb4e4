"""The genai_config.json config surface (v12b), as frozen dataclasses.

Parsing is strict: an unknown key is rejected with its key path (``model.decoder.foo``), a value
of the wrong type names the path and the expected type. The document is validated against the
declarative table of :mod:`q38.package.v12b.schema` first, then the records are built from it.
The older v12 surface is migrated before it is validated (:func:`_migrate_v12`); writers only
write v12b. Serialization is deterministic: sorted keys, indent 2, trailing newline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from q38.errors import ConfigError
from q38.package.detect import CONFIG_FILENAME
from q38.package.io.files import CONFIG_LIMIT
from q38.package.io.jsonio import dumps_json, read_json
from q38.package.session_options import read_session_options, session_options_document
from q38.package.v12b.schema import (
    CONFIG_ENTRY_RE,
    DECODER_INPUT_KEYS,
    DECODER_OUTPUT_KEYS,
    DIMENSIONS,
    GRAPH_LEVELS,
    LINEAGES,
    MODEL_TYPE,
    SEARCH_KEYS,
    SURFACE,
    VARIANTS,
    validate,
)

__all__ = [
    "CONFIG_FILENAME",
    "DECODER_INPUT_KEYS",
    "DECODER_OUTPUT_KEYS",
    "GRAPH_LEVELS",
    "LINEAGES",
    "MODEL_TYPE",
    "SEARCH_KEYS",
    "SURFACE",
    "VARIANTS",
    "Config",
    "DecoderConfig",
    "HeadGraph",
    "ModelConfig",
    "PrefillConfig",
    "ProfileEligibility",
    "ProfileOverlay",
    "ProviderOptions",
    "Qwen38Graph",
    "RuntimeProfile",
    "SessionOptions",
    "as_v12b_document",
    "config_to_dict",
    "dumps_config",
    "parse_config",
    "read_config",
]

LEGACY_MODEL_TYPE: Final = "qwen38_flash"
_CONFIG_ENTRY_RE: Final = CONFIG_ENTRY_RE  # the assembly keeps only these session_options keys


# --------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class ProviderOptions:
    """One execution provider entry: ``{"cuda": {"enable_cuda_graph": "1"}}``."""

    name: str
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionOptions:
    """ORT session options as GenAI passes them; ``config_entries`` are the dotted string keys."""

    log_id: str | None = None
    custom_ops_library: str | None = None
    intra_op_num_threads: int | None = None
    inter_op_num_threads: int | None = None
    graph_optimization_level: str | None = None
    log_severity_level: int | None = None
    enable_profiling: str | None = None
    config_entries: dict[str, str] = field(default_factory=dict)
    provider_options: tuple[ProviderOptions, ...] = ()


@dataclass(frozen=True)
class DecoderConfig:
    """``model.decoder``: the target graph's file, its dimensions (all >= 1) and session options.

    ``inputs`` / ``outputs`` map the binding keys of :data:`DECODER_INPUT_KEYS` /
    :data:`DECODER_OUTPUT_KEYS` to graph names; any other key is refused by the parser.
    """

    filename: str
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_size: int
    num_hidden_layers: int
    session_options: SessionOptions = field(default_factory=SessionOptions)
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HeadGraph:
    """``fold.head_r2``: the head graph; its session options carry the CUDA-graph defaults."""

    filename: str
    session_options: SessionOptions = field(default_factory=SessionOptions)


@dataclass(frozen=True)
class PrefillConfig:
    """``qwen38_graph.prefill``: the chunked-prefill graph; ``chunk`` is at most ``kv_capacity``."""

    filename: str
    chunk: int


@dataclass(frozen=True)
class Qwen38Graph:
    """``model.qwen38_graph``: the v12b graph set (target, head, optional prefill and s2..s4 drafts).

    Also the pool, lineage (``contrib`` / ``custom`` ops), variant (``faithful`` / ``cpu``), KV
    capacity and custom-op libraries; ``surface`` must be ``v12b`` (older surfaces are migrated).
    """

    target: str
    head_r2: HeadGraph
    prefill: PrefillConfig | None
    kv_capacity: int
    weights_pool: str
    surface: str = SURFACE
    lineage: str = "contrib"
    variant: str = "faithful"
    expert_profile: str | None = None
    multidraft: dict[str, str] = field(default_factory=dict)
    libraries: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelConfig:
    """``model``: the token ids, vocabulary and context length around the decoder and graph set.

    ``type`` is always :data:`MODEL_TYPE`; the parser refuses any other model type.
    """

    decoder: DecoderConfig
    qwen38_graph: Qwen38Graph
    vocab_size: int
    context_length: int
    bos_token_id: int = 1
    eos_token_id: tuple[int, ...] = (2,)
    pad_token_id: int = 0
    type: str = MODEL_TYPE


@dataclass(frozen=True)
class ProfileEligibility:
    """When a runtime profile applies: the device / host memory bounds of its ``eligibility`` block."""

    minimum_total_device_memory_bytes: int
    maximum_total_device_memory_bytes: int | None = None
    minimum_effective_host_memory_bytes: int | None = None
    maximum_effective_host_memory_bytes: int | None = None


@dataclass(frozen=True)
class ProfileOverlay:
    """``overlay.model.decoder`` of a runtime profile: a decoder file and/or session options.

    At least one is set: the parser refuses an empty overlay.
    """

    decoder_filename: str | None = None
    session_options: SessionOptions | None = None


@dataclass(frozen=True)
class RuntimeProfile:
    """One ``runtime_profiles`` entry: a non-empty id, when it applies, and what it overlays."""

    id: str
    eligibility: ProfileEligibility
    overlay: ProfileOverlay


@dataclass(frozen=True)
class Config:
    """A parsed v12b ``genai_config.json``; only :func:`parse_config` builds one from a document.

    ``search`` keeps the validated ``search`` keys as JSON values.
    """

    model: ModelConfig
    runtime_profiles: tuple[RuntimeProfile, ...] = ()
    search: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------- building
# Each builder reads a document that :func:`q38.package.v12b.schema.validate` has passed: every
# required key is there and every value has its kind, so nothing here checks again.
def _session_options(value: Mapping[str, Any]) -> SessionOptions:
    block = read_session_options(value)  # what GenAI makes of it: providers merged by name
    return SessionOptions(
        **block.typed,
        config_entries=block.session_entries,
        provider_options=tuple(ProviderOptions(p.name, dict(p.options)) for p in block.providers),
    )


def _decoder(d: Mapping[str, Any]) -> DecoderConfig:
    return DecoderConfig(
        filename=d["filename"],
        session_options=_session_options(d.get("session_options", {})),
        inputs=dict(d.get("inputs", {})),
        outputs=dict(d.get("outputs", {})),
        **{key: d[key] for key in DIMENSIONS},
    )


def _qwen38_graph(g: Mapping[str, Any]) -> Qwen38Graph:
    head = g["fold"]["head_r2"]
    prefill = g.get("prefill")
    return Qwen38Graph(
        surface=g.get("surface", SURFACE),
        lineage=g.get("lineage", "contrib"),
        variant=g.get("variant", "faithful"),
        target=g["target"]["filename"],
        head_r2=HeadGraph(head["filename"], _session_options(head.get("session_options", {}))),
        prefill=None if prefill is None else PrefillConfig(prefill["filename"], prefill["chunk"]),
        kv_capacity=g["kv_capacity"],
        weights_pool=g["weights_pool"],
        expert_profile=g.get("expert_profile"),
        multidraft=dict(g.get("multidraft", {})),
        libraries=dict(g.get("libraries", {})),
    )


def _model(m: Mapping[str, Any]) -> ModelConfig:
    eos = m.get("eos_token_id", [2])
    return ModelConfig(
        type=m["type"],
        bos_token_id=m.get("bos_token_id", 1),
        eos_token_id=tuple(eos if isinstance(eos, list) else [eos]),
        pad_token_id=m.get("pad_token_id", 0),
        vocab_size=m["vocab_size"],
        context_length=m["context_length"],
        decoder=_decoder(m["decoder"]),
        qwen38_graph=_qwen38_graph(m["qwen38_graph"]),
    )


def _profile(p: Mapping[str, Any]) -> RuntimeProfile:
    od = p["overlay"]["model"]["decoder"]
    return RuntimeProfile(
        id=p["id"],
        eligibility=ProfileEligibility(**p["eligibility"]),
        overlay=ProfileOverlay(
            decoder_filename=od.get("filename"),
            session_options=_session_options(od["session_options"]) if "session_options" in od else None,
        ),
    )


def _migrate_v12(data: dict[str, Any]) -> dict[str, Any]:
    """Rewrite the v12 surface into v12b; leaves anything unexpected for the strict parser."""
    model = dict(data.get("model", {}))
    legacy = model.pop("qwen38", None)
    model["type"] = MODEL_TYPE
    if isinstance(legacy, dict):
        legacy = dict(legacy)
        graph: dict[str, Any] = {"surface": SURFACE}
        decoder = model.get("decoder")
        if isinstance(decoder, dict) and "filename" in decoder:
            graph["target"] = {"filename": decoder["filename"]}
        if "head_graph" in legacy:
            graph["fold"] = {"head_r2": {"filename": legacy.pop("head_graph")}}
        if "prefill_graph" in legacy or "prefill_chunk" in legacy:
            # Only the keys the user wrote: a missing one is then "required key is missing", not a null.
            graph["prefill"] = {new: legacy.pop(old) for old, new in (("prefill_graph", "filename"), ("prefill_chunk", "chunk"))
                                if old in legacy}  # fmt: skip
        if "pool" in legacy:
            graph["weights_pool"] = legacy.pop("pool")
        for key in ("kv_capacity", "lineage", "variant"):
            if key in legacy:
                graph[key] = legacy.pop(key)
        for key in legacy:  # an unknown v12 key: keep it so the strict parser names it
            graph[key] = legacy[key]
        model["qwen38_graph"] = graph
    decoder = model.get("decoder")
    if isinstance(decoder, dict) and isinstance(decoder.get("session_options"), dict):
        so = dict(decoder["session_options"])
        if isinstance(so.get("provider_options"), list):
            so["provider_options"] = [_stringify_provider(entry) for entry in so["provider_options"]]
        decoder = dict(decoder, session_options=so)
        model["decoder"] = decoder
    return dict(data, model=model)


def _stringify_provider(entry: object) -> object:
    if not isinstance(entry, dict):
        return entry
    out: dict[str, object] = {}
    for name, options in entry.items():
        if isinstance(options, dict):
            out[name] = {
                k: (str(int(v)) if isinstance(v, bool) else str(v) if isinstance(v, (int, float)) else v)
                for k, v in options.items()
            }
        else:
            out[name] = options
    return out


def as_v12b_document(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A v12 document (``model.type`` qwen38_flash) rewritten into v12b keys, else ``data`` itself.

    Tolerant: anything unexpected is left for the strict parser, so a listing of a v12 package
    finds the graphs the parser would.
    """
    model = data.get("model")
    if isinstance(model, dict) and model.get("type") == LEGACY_MODEL_TYPE:
        return _migrate_v12(dict(data))
    return data


def parse_config(data: object, *, source: str = CONFIG_FILENAME) -> Config:
    """Parse and validate a genai_config.json document (v12b, or v12 migrated)."""
    if isinstance(data, dict):
        model = data.get("model")
        if isinstance(model, dict) and model.get("type") == LEGACY_MODEL_TYPE:
            data = _migrate_v12(data)
    validate(data, source=source)
    assert isinstance(data, dict)
    return Config(
        model=_model(data["model"]),
        runtime_profiles=tuple(_profile(p) for p in data.get("runtime_profiles", [])),
        search=dict(data.get("search", {})),
    )


def read_config(path: Path) -> Config:
    """Read and parse the v12b config at ``path``; any problem is one ConfigError line naming the file.

    The file must be a regular file of at most :data:`CONFIG_LIMIT` bytes holding strict JSON.
    """
    data = read_json(path, what="config", limit=CONFIG_LIMIT, error=ConfigError)
    return parse_config(data, source=str(path))


# --------------------------------------------------------------------------------- serialization
def _session_dict(so: SessionOptions) -> dict[str, Any]:
    typed = {
        key: getattr(so, key)
        for key in ("log_id", "custom_ops_library", "intra_op_num_threads", "inter_op_num_threads",
                    "graph_optimization_level", "log_severity_level", "enable_profiling")
        if getattr(so, key) is not None
    }  # fmt: skip
    providers = [(p.name, p.options) for p in so.provider_options]
    return session_options_document(typed, so.config_entries, providers, empty_providers=False)


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The JSON document of ``cfg`` (v12b)."""
    m = cfg.model
    d = m.decoder
    g = m.qwen38_graph
    graph: dict[str, Any] = {
        "surface": g.surface,
        "lineage": g.lineage,
        "variant": g.variant,
        "target": {"filename": g.target},
        "fold": {"head_r2": {"filename": g.head_r2.filename}},
        "kv_capacity": g.kv_capacity,
        "weights_pool": g.weights_pool,
    }
    head_so = _session_dict(g.head_r2.session_options)
    if head_so:
        graph["fold"]["head_r2"]["session_options"] = head_so
    if g.prefill is not None:
        graph["prefill"] = {"filename": g.prefill.filename, "chunk": g.prefill.chunk}
    if g.expert_profile is not None:
        graph["expert_profile"] = g.expert_profile
    if g.multidraft:
        graph["multidraft"] = dict(g.multidraft)
    if g.libraries:
        graph["libraries"] = dict(g.libraries)
    decoder: dict[str, Any] = {
        "filename": d.filename,
        "hidden_size": d.hidden_size,
        "num_attention_heads": d.num_attention_heads,
        "num_key_value_heads": d.num_key_value_heads,
        "head_size": d.head_size,
        "num_hidden_layers": d.num_hidden_layers,
        "inputs": dict(d.inputs),
        "outputs": dict(d.outputs),
    }
    so = _session_dict(d.session_options)
    if so:
        decoder["session_options"] = so
    out: dict[str, Any] = {
        "model": {
            "type": m.type,
            "bos_token_id": m.bos_token_id,
            "eos_token_id": list(m.eos_token_id),
            "pad_token_id": m.pad_token_id,
            "vocab_size": m.vocab_size,
            "context_length": m.context_length,
            "decoder": decoder,
            "qwen38_graph": graph,
        }
    }
    if cfg.runtime_profiles:
        out["runtime_profiles"] = [_profile_dict(p) for p in cfg.runtime_profiles]
    if cfg.search:
        out["search"] = dict(cfg.search)
    return out


def _profile_dict(p: RuntimeProfile) -> dict[str, Any]:
    elig = {k: v for k, v in vars(p.eligibility).items() if v is not None}
    dec: dict[str, Any] = {}
    if p.overlay.decoder_filename is not None:
        dec["filename"] = p.overlay.decoder_filename
    if p.overlay.session_options is not None:
        dec["session_options"] = _session_dict(p.overlay.session_options)
    return {"id": p.id, "eligibility": elig, "overlay": {"model": {"decoder": dec}}}


def dumps_config(cfg: Config) -> str:
    """Deterministic JSON text of ``cfg``: sorted keys, indent 2, trailing newline.

    A value strict JSON cannot carry (NaN, an infinity, an integer beyond 64 bits) is refused
    with its key path (ConfigError).
    """
    return dumps_json(config_to_dict(cfg), what=CONFIG_FILENAME, error=ConfigError)
