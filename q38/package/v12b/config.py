"""The genai_config.json config surface (v12b), as frozen dataclasses.

Parsing is strict: an unknown key is rejected with its key path (``model.decoder.foo``), a value
of the wrong type names the path and the expected type. The older v12 surface is migrated while
it is read (:func:`_migrate_v12`); writers only write v12b. Serialization is deterministic:
sorted keys, indent 2, trailing newline.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from q38.errors import ConfigError, clip, quote
from q38.package.detect import CONFIG_FILENAME
from q38.package.io.files import CONFIG_LIMIT
from q38.package.io.jsonio import dumps_json, json_kind, read_json
from q38.package.session_options import read_session_options, session_options_document

__all__ = [
    "CONFIG_FILENAME",
    "MODEL_TYPE",
    "SURFACE",
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

MODEL_TYPE: Final = "qwen38_flash_graph"
SURFACE: Final = "v12b"
LEGACY_MODEL_TYPE: Final = "qwen38_flash"

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
)
DECODER_OUTPUT_KEYS: Final = frozenset(
    {
        "logits", "hidden_states", "present_key_names", "present_value_names",
        "present_conv_names", "present_recurrent_names", "present_indexer_names",
    }
)
SEARCH_KEYS: Final = {
    "max_length": int, "min_length": int, "do_sample": bool, "top_k": int, "top_p": float,
    "temperature": float, "num_beams": int, "repetition_penalty": float, "chunk_size": int,
}
# A session config entry: dotted lower-case namespace, e.g. session.moe.offload.mode, ep.cuda.x.
_CONFIG_ENTRY_RE: Final = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_]+)+$")
_TYPED_SESSION_KEYS: Final = frozenset(
    {
        "log_id", "custom_ops_library", "intra_op_num_threads", "inter_op_num_threads",
        "graph_optimization_level", "log_severity_level", "enable_profiling", "provider_options",
    }
)


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


# --------------------------------------------------------------------------------------- parsing
class _Reader:
    """Walks one JSON object, tracking the key path for error messages."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(f"{clip(self.source)}: {clip(path, 200)}: {message}")

    def obj(self, value: object, path: str, allowed: frozenset[str] | set[str] | Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {json_kind(value)}")
        for key in value:
            if key not in allowed:
                raise self.fail(f"{path}.{key}" if path else key, "unknown key")
        return value

    def req(self, data: Mapping[str, object], key: str, path: str) -> object:
        if key not in data:
            raise self.fail(_join(path, key), "required key is missing")
        return data[key]

    def string(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {json_kind(value)}")
        return value

    def integer(self, value: object, path: str, *, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {json_kind(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {quote(value)}")
        if value >= 2**63:
            raise self.fail(path, f"value {quote(value)} does not fit in int64")
        return value

    def choice(self, value: object, path: str, choices: tuple[str, ...]) -> str:
        text = self.string(value, path)
        if text not in choices:
            raise self.fail(path, f"expected one of {', '.join(choices)}, got {quote(text)}")
        return text

    def str_map(self, value: object, path: str, allowed: frozenset[str] | None = None) -> dict[str, str]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {json_kind(value)}")
        out = {}
        for key, item in value.items():
            if allowed is not None and key not in allowed:
                raise self.fail(f"{path}.{key}", "unknown key")
            out[key] = self.string(item, f"{path}.{key}")
        return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key




def _session_options(r: _Reader, value: object, path: str) -> SessionOptions:
    """Validate a v12b ``session_options`` block strictly, then read it with the one reader.

    v12b is stricter than GenAI's catch-all: only the typed options it knows, dotted config-entry
    keys with string values, and the ``cuda`` / ``cpu`` providers, each once, with string options.
    """
    if not isinstance(value, dict):
        raise r.fail(path, f"expected an object, got {json_kind(value)}")
    for key, item in value.items():
        kpath = f"{path}.{key}"
        if key in ("log_id", "custom_ops_library", "enable_profiling"):
            r.string(item, kpath)
        elif key in ("intra_op_num_threads", "inter_op_num_threads"):
            r.integer(item, kpath, minimum=0)
        elif key == "log_severity_level":
            level = r.integer(item, kpath, minimum=0)
            if level > 4:
                raise r.fail(kpath, f"must be in [0, 4], got {level}")
        elif key == "graph_optimization_level":
            r.choice(item, kpath, GRAPH_LEVELS)
        elif key == "provider_options":
            if not isinstance(item, list):
                raise r.fail(kpath, f"expected an array, got {json_kind(item)}")
            seen: set[str] = set()
            for index, entry in enumerate(item):
                epath = f"{kpath}[{index}]"
                if not isinstance(entry, dict) or len(entry) != 1:
                    raise r.fail(epath, "expected an object with exactly one provider name")
                (name, options), = entry.items()
                if name not in PROVIDERS:
                    raise r.fail(f"{epath}.{name}", f"unknown provider (expected one of {', '.join(PROVIDERS)})")
                if name in seen:  # GenAI would merge the two entries; v12b names each provider once
                    raise r.fail(f"{epath}.{name}", "provider listed twice (GenAI merges the entries: write one)")
                seen.add(name)
                r.str_map(options, f"{epath}.{name}")
        elif _CONFIG_ENTRY_RE.match(key):
            # GenAI passes these to ORT as config entries; GenAI 0.18 rejects non-strings.
            r.string(item, kpath)
        else:
            raise r.fail(kpath, "unknown key")
    block = read_session_options(value)  # what GenAI makes of it: providers merged by name
    return SessionOptions(
        **block.typed,
        config_entries=block.session_entries,
        provider_options=tuple(ProviderOptions(p.name, dict(p.options)) for p in block.providers),
    )


def _decoder(r: _Reader, value: object, path: str) -> DecoderConfig:
    allowed = {
        "filename", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_size",
        "num_hidden_layers", "session_options", "inputs", "outputs",
    }
    d = r.obj(value, path, allowed)
    ints = {
        key: r.integer(r.req(d, key, path), _join(path, key), minimum=1)
        for key in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_size", "num_hidden_layers")
    }
    return DecoderConfig(
        filename=r.string(r.req(d, "filename", path), _join(path, "filename")),
        session_options=_session_options(r, d.get("session_options", {}), _join(path, "session_options")),
        inputs=r.str_map(d.get("inputs", {}), _join(path, "inputs"), DECODER_INPUT_KEYS),
        outputs=r.str_map(d.get("outputs", {}), _join(path, "outputs"), DECODER_OUTPUT_KEYS),
        **ints,
    )


def _qwen38_graph(r: _Reader, value: object, path: str) -> Qwen38Graph:
    allowed = {
        "surface", "lineage", "variant", "target", "fold", "prefill", "kv_capacity",
        "weights_pool", "expert_profile", "multidraft", "libraries",
    }
    g = r.obj(value, path, allowed)
    surface = r.string(g.get("surface", SURFACE), _join(path, "surface"))
    if surface != SURFACE:
        raise r.fail(_join(path, "surface"), f"unsupported surface {quote(surface)} (expected {SURFACE!r})")
    target = r.obj(r.req(g, "target", path), _join(path, "target"), {"filename"})
    fold = r.obj(r.req(g, "fold", path), _join(path, "fold"), {"head_r2"})
    head_path = _join(path, "fold.head_r2")
    head = r.obj(r.req(fold, "head_r2", _join(path, "fold")), head_path, {"filename", "session_options"})
    kv_capacity = r.integer(r.req(g, "kv_capacity", path), _join(path, "kv_capacity"), minimum=1)
    prefill = None
    if "prefill" in g:
        ppath = _join(path, "prefill")
        p = r.obj(g["prefill"], ppath, {"filename", "chunk"})
        chunk = r.integer(r.req(p, "chunk", ppath), f"{ppath}.chunk", minimum=1)
        if chunk > kv_capacity:
            raise r.fail(f"{ppath}.chunk", f"chunk {chunk} exceeds kv_capacity {kv_capacity}")
        prefill = PrefillConfig(r.string(r.req(p, "filename", ppath), f"{ppath}.filename"), chunk)
    multidraft = r.str_map(g.get("multidraft", {}), _join(path, "multidraft"), frozenset({"s2", "s3", "s4"}))
    return Qwen38Graph(
        surface=surface,
        lineage=r.choice(g.get("lineage", "contrib"), _join(path, "lineage"), LINEAGES),
        variant=r.choice(g.get("variant", "faithful"), _join(path, "variant"), VARIANTS),
        target=r.string(r.req(target, "filename", _join(path, "target")), _join(path, "target.filename")),
        head_r2=HeadGraph(
            filename=r.string(r.req(head, "filename", head_path), f"{head_path}.filename"),
            session_options=_session_options(r, head.get("session_options", {}), f"{head_path}.session_options"),
        ),
        prefill=prefill,
        kv_capacity=kv_capacity,
        weights_pool=r.string(r.req(g, "weights_pool", path), _join(path, "weights_pool")),
        expert_profile=(
            r.string(g["expert_profile"], _join(path, "expert_profile")) if "expert_profile" in g else None
        ),
        multidraft=multidraft,
        libraries=r.str_map(g.get("libraries", {}), _join(path, "libraries")),
    )


def _model(r: _Reader, value: object, path: str) -> ModelConfig:
    allowed = {
        "type", "bos_token_id", "eos_token_id", "pad_token_id", "vocab_size", "context_length",
        "decoder", "qwen38_graph",
    }
    m = r.obj(value, path, allowed)
    mtype = r.string(r.req(m, "type", path), _join(path, "type"))
    if mtype != MODEL_TYPE:
        raise r.fail(_join(path, "type"), f"expected {MODEL_TYPE!r}, got {quote(mtype)}")
    eos = m.get("eos_token_id", [2])
    eos_ids = tuple(
        r.integer(v, f"{path}.eos_token_id[{i}]", minimum=0) for i, v in enumerate(eos if isinstance(eos, list) else [eos])
    )
    return ModelConfig(
        type=mtype,
        bos_token_id=r.integer(m.get("bos_token_id", 1), _join(path, "bos_token_id"), minimum=0),
        eos_token_id=eos_ids,
        pad_token_id=r.integer(m.get("pad_token_id", 0), _join(path, "pad_token_id"), minimum=0),
        vocab_size=r.integer(r.req(m, "vocab_size", path), _join(path, "vocab_size"), minimum=1),
        context_length=r.integer(r.req(m, "context_length", path), _join(path, "context_length"), minimum=1),
        decoder=_decoder(r, r.req(m, "decoder", path), _join(path, "decoder")),
        qwen38_graph=_qwen38_graph(r, r.req(m, "qwen38_graph", path), _join(path, "qwen38_graph")),
    )


def _profile(r: _Reader, value: object, path: str) -> RuntimeProfile:
    p = r.obj(value, path, {"id", "eligibility", "overlay"})
    pid = r.string(r.req(p, "id", path), f"{path}.id")
    if not pid:
        raise r.fail(f"{path}.id", "must not be empty")
    epath = f"{path}.eligibility"
    e = r.obj(r.req(p, "eligibility", path), epath, {f.name for f in ProfileEligibility.__dataclass_fields__.values()})
    elig = ProfileEligibility(
        **{
            key: r.integer(val, f"{epath}.{key}", minimum=0)
            for key, val in e.items()
        }
    ) if "minimum_total_device_memory_bytes" in e else None
    if elig is None:
        raise r.fail(epath, "is missing minimum_total_device_memory_bytes")
    if elig.maximum_total_device_memory_bytes is not None and (
        elig.maximum_total_device_memory_bytes < elig.minimum_total_device_memory_bytes
    ):
        raise r.fail(epath, "maximum_total_device_memory_bytes is below the minimum")
    opath = f"{path}.overlay"
    o = r.obj(r.req(p, "overlay", path), opath, {"model"})
    om = r.obj(r.req(o, "model", opath), f"{opath}.model", {"decoder"})
    od = r.obj(r.req(om, "decoder", f"{opath}.model"), f"{opath}.model.decoder", {"filename", "session_options"})
    if not od:
        raise r.fail(f"{opath}.model.decoder", "an empty overlay is not allowed")
    return RuntimeProfile(
        id=pid,
        eligibility=elig,
        overlay=ProfileOverlay(
            decoder_filename=(
                r.string(od["filename"], f"{opath}.model.decoder.filename") if "filename" in od else None
            ),
            session_options=(
                _session_options(r, od["session_options"], f"{opath}.model.decoder.session_options")
                if "session_options" in od
                else None
            ),
        ),
    )


def _search(r: _Reader, value: object, path: str) -> dict[str, Any]:
    s = r.obj(value, path, SEARCH_KEYS)
    out: dict[str, Any] = {}
    for key, item in s.items():
        want = SEARCH_KEYS[key]
        ok = (
            isinstance(item, bool)
            if want is bool
            else isinstance(item, int) and not isinstance(item, bool)
            if want is int
            else isinstance(item, (int, float)) and not isinstance(item, bool)
        )
        if not ok:
            raise r.fail(f"{path}.{key}", f"expected {want.__name__}, got {json_kind(item)}")
        if isinstance(item, float) and not math.isfinite(item):
            raise r.fail(f"{path}.{key}", f"{item!r} is not a finite number")
        if isinstance(item, int) and not isinstance(item, bool) and not -(2**63) <= item < 2**63:
            raise r.fail(f"{path}.{key}", f"value {quote(item)} does not fit in int64")
        out[key] = item
    return out


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
    r = _Reader(source)
    top = r.obj(data, "", {"model", "runtime_profiles", "search"})
    model = top.get("model")
    if isinstance(model, dict) and model.get("type") == LEGACY_MODEL_TYPE:
        top = _migrate_v12(top)
    profiles_raw = top.get("runtime_profiles", [])
    if not isinstance(profiles_raw, list):
        raise r.fail("runtime_profiles", f"expected an array, got {json_kind(profiles_raw)}")
    profiles = tuple(_profile(r, p, f"runtime_profiles[{i}]") for i, p in enumerate(profiles_raw))
    seen: set[str] = set()
    for i, profile in enumerate(profiles):
        if profile.id in seen:
            raise r.fail(f"runtime_profiles[{i}].id", f"duplicate runtime profile id {quote(profile.id)}")
        seen.add(profile.id)
    _check_overlaps(r, profiles)
    return Config(
        model=_model(r, r.req(top, "model", ""), "model"),
        runtime_profiles=profiles,
        search=_search(r, top.get("search", {}), "search"),
    )


def _check_overlaps(r: _Reader, profiles: tuple[RuntimeProfile, ...]) -> None:
    # GenAI rejects overlapping device-memory ranges ("runtime profile eligibility ranges overlap").
    spans = sorted(
        (
            p.eligibility.minimum_total_device_memory_bytes,
            p.eligibility.maximum_total_device_memory_bytes if p.eligibility.maximum_total_device_memory_bytes is not None else 2**64,
            i,
        )
        for i, p in enumerate(profiles)
    )
    reach, owner = -1, -1
    for lo, hi, j in spans:
        if lo <= reach:
            raise r.fail(
                f"runtime_profiles[{max(owner, j)}].eligibility",
                f"runtime profile eligibility ranges overlap ({quote(profiles[owner].id)} and {quote(profiles[j].id)})",
            )
        if hi > reach:
            reach, owner = hi, j


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
