"""Property tests (hypothesis) for the package model and the config contracts.

Invariants guarded:
* config round trip: for every generated valid v12b ``Config``, ``parse_config(config_to_dict(c))
  == c``, the same through JSON text, and ``dumps_config`` is a fixed point;
* ``parse_config`` on arbitrary JSON values returns a Config or raises ConfigError, nothing else;
* pool round trip: ``format_pool(parse_pool(t)) == t`` for generated pool text, and
  ``parse_pool`` on arbitrary text raises only PoolError;
* STRP profiles: encode/parse round trip; ``parse_profile`` on arbitrary bytes raises only
  ProfileError;
* the contracts never crash: ``check_genai_config`` on arbitrary JSON values and on mutated valid
  configs, and ``check_offload_config`` on arbitrary string entries, return lists of violations.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from q38.errors import ConfigError, PoolError, ProfileError
from q38.package import (
    Config,
    DecoderConfig,
    ExpertProfile,
    HeadGraph,
    ModelConfig,
    Placement,
    PoolEntry,
    PrefillConfig,
    ProfileEligibility,
    ProfileOverlay,
    ProviderOptions,
    Qwen38Graph,
    RuntimeProfile,
    SessionOptions,
    WeightsPool,
    config_to_dict,
    dumps_config,
    encode_profile,
    format_pool,
    parse_config,
    parse_pool,
    parse_profile,
)
from q38.package.v12b.config import (
    DECODER_INPUT_KEYS,
    DECODER_OUTPUT_KEYS,
    GRAPH_LEVELS,
    LINEAGES,
    MODEL_TYPE,
    SEARCH_KEYS,
    VARIANTS,
)
from q38.package.v12b.pool import DTYPE_SIZES

PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT64 = 2**63 - 1

# Any text strict JSON can carry: no NUL (q38.package.io.jsonio refuses it in every string).
_chars = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
texts = st.text(_chars, max_size=12)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.-/", min_size=1, max_size=16)
entry_keys = st.from_regex(r"\A[a-z][a-z0-9_]{0,5}(\.[A-Za-z0-9_]{1,5}){1,3}\Z")


def _opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


session_options = st.builds(
    SessionOptions,
    log_id=_opt(texts),
    custom_ops_library=_opt(names),
    intra_op_num_threads=_opt(st.integers(0, 256)),
    inter_op_num_threads=_opt(st.integers(0, 256)),
    graph_optimization_level=_opt(st.sampled_from(GRAPH_LEVELS)),
    log_severity_level=_opt(st.integers(0, 4)),
    enable_profiling=_opt(texts),
    config_entries=st.dictionaries(entry_keys, texts, max_size=3),
    provider_options=st.lists(  # each provider once: v12b refuses a second entry (GenAI would merge them)
        st.builds(ProviderOptions, st.sampled_from(("cuda", "cpu")),
                  st.dictionaries(st.text(_chars, min_size=1, max_size=8), texts, max_size=3)),
        max_size=2, unique_by=lambda p: p.name,
    ).map(tuple),
)


@st.composite
def qwen38_graphs(draw: st.DrawFn) -> Qwen38Graph:
    kv = draw(st.integers(1, INT64))
    prefill = draw(_opt(st.builds(PrefillConfig, names, st.integers(1, min(kv, 1 << 20)))))
    return Qwen38Graph(
        target=draw(names),
        head_r2=HeadGraph(draw(names), draw(session_options)),
        prefill=prefill,
        kv_capacity=kv,
        weights_pool=draw(names),
        lineage=draw(st.sampled_from(LINEAGES)),
        variant=draw(st.sampled_from(VARIANTS)),
        expert_profile=draw(_opt(names)),
        multidraft=draw(st.dictionaries(st.sampled_from(("s2", "s3", "s4")), names)),
        libraries=draw(st.dictionaries(st.text(_chars, min_size=1, max_size=8), names, max_size=2)),
    )


@st.composite
def profile_lists(draw: st.DrawFn) -> tuple[RuntimeProfile, ...]:
    bounds = sorted(draw(st.sets(st.integers(0, 2**62), max_size=6)))
    profiles = []
    for i in range(len(bounds) // 2):
        lo, hi = bounds[2 * i], bounds[2 * i + 1]
        last = i == len(bounds) // 2 - 1
        eligibility = ProfileEligibility(
            minimum_total_device_memory_bytes=lo,
            maximum_total_device_memory_bytes=draw(_opt(st.just(hi))) if last else hi,
            minimum_effective_host_memory_bytes=draw(_opt(st.integers(0, INT64))),
            maximum_effective_host_memory_bytes=draw(_opt(st.integers(0, INT64))),
        )
        filename = draw(_opt(names))
        so = draw(session_options) if filename is None else draw(_opt(session_options))
        profiles.append(RuntimeProfile(f"p{i}-{draw(texts)}", eligibility, ProfileOverlay(filename, so)))
    return tuple(draw(st.permutations(profiles)))


def _search_value(key: str) -> st.SearchStrategy[Any]:
    kind = SEARCH_KEYS[key]
    if kind is bool:
        return st.booleans()
    if kind is int:
        return st.integers(-(2**31), 2**31)
    return st.floats(allow_nan=False, allow_infinity=False) | st.integers(-1000, 1000)


searches = st.dictionaries(st.sampled_from(sorted(SEARCH_KEYS)), st.just(None), max_size=4).flatmap(
    lambda d: st.fixed_dictionaries({k: _search_value(k) for k in d})
)

configs = st.builds(
    Config,
    model=st.builds(
        ModelConfig,
        decoder=st.builds(
            DecoderConfig,
            filename=names,
            hidden_size=st.integers(1, INT64),
            num_attention_heads=st.integers(1, 1024),
            num_key_value_heads=st.integers(1, 1024),
            head_size=st.integers(1, 1024),
            num_hidden_layers=st.integers(1, 1024),
            session_options=session_options,
            inputs=st.dictionaries(st.sampled_from(sorted(DECODER_INPUT_KEYS)), names),
            outputs=st.dictionaries(st.sampled_from(sorted(DECODER_OUTPUT_KEYS)), names),
        ),
        qwen38_graph=qwen38_graphs(),
        vocab_size=st.integers(1, INT64),
        context_length=st.integers(1, INT64),
        bos_token_id=st.integers(0, INT64),
        eos_token_id=st.lists(st.integers(0, INT64), max_size=3).map(tuple),
        pad_token_id=st.integers(0, INT64),
        type=st.just(MODEL_TYPE),
    ),
    runtime_profiles=profile_lists(),
    search=searches,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)


@pytest.mark.slow
@PROPS
@given(configs)
def test_config_round_trip_is_identity(cfg: Config) -> None:
    assert parse_config(config_to_dict(cfg)) == cfg
    text = dumps_config(cfg)
    again = parse_config(json.loads(text))
    assert again == cfg
    assert dumps_config(again) == text


@PROPS
@given(json_values)
def test_parse_config_only_raises_config_error(value: Any) -> None:
    try:
        parse_config(value)
    except ConfigError as exc:
        assert "\n" not in str(exc)


def _mutations(doc: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A valid config document with one subtree replaced by an arbitrary JSON value."""
    paths: list[tuple[str, ...]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                paths.append((*path, key))
                walk(child, (*path, key))

    walk(doc, ())

    def apply(path: tuple[str, ...], value: Any) -> dict[str, Any]:
        out = json.loads(json.dumps(doc))
        node = out
        for key in path[:-1]:
            node = node[key]
        if value == "__delete__":
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return out

    return st.builds(apply, st.sampled_from(paths), st.just("__delete__") | json_values)


@pytest.mark.slow
@PROPS
@given(st.data())
def test_contracts_never_crash_on_configs(data: st.DataObject) -> None:
    from contracts.config_surface import check_genai_config

    cfg = data.draw(configs)
    doc = data.draw(_mutations(config_to_dict(cfg)))
    found = check_genai_config(doc)
    assert isinstance(found, list)
    # Any JSON value at the top, not only objects: a violation, never a crash.
    value = data.draw(json_values)
    assert isinstance(check_genai_config(value), list)
    if not isinstance(value, dict):
        assert [v.rule_id for v in check_genai_config(value)] == ["CFG-SURFACE-001"]
    top = data.draw(st.dictionaries(st.sampled_from(("model", "runtime_profiles", "search", "x")), json_values))
    assert isinstance(check_genai_config(top), list)
    model = data.draw(st.dictionaries(st.sampled_from(("decoder", "qwen38_graph", "type", "y")), json_values))
    assert isinstance(check_genai_config({"model": model}), list)


@PROPS
@given(st.dictionaries(
    st.sampled_from((
        "session.moe.offload.mode", "session.moe.offload.placement", "session.moe.offload.device_expert_bytes",
        "session.moe.offload.host_expert_bytes", "session.moe.offload.cpu_execution",
        "session.moe.offload.min_expert_weight", "session.moe.offload.popularity_file",
        "session.moe.offload.node_overrides", "session.moe.offload.target_resident_slots",
    )) | st.text(max_size=30),
    st.text(max_size=20) | st.integers(-(2**70), 2**70).map(str) | st.floats().map(str),
    max_size=6,
))
def test_offload_contract_never_crashes(entries: dict[str, str]) -> None:
    from contracts.offload_config import check_offload_config

    for version in ("1.31.1", "1.32.0"):
        assert isinstance(check_offload_config(entries, ort_version=version), list)


pool_entries = st.builds(
    PoolEntry,
    pool_id=st.from_regex(r"\A[A-Za-z0-9_.:/-]{1,12}\Z"),
    file=st.from_regex(r"\A[a-z0-9_]{1,8}(/[a-z0-9_.]{1,8}){0,2}\Z").filter(lambda p: ".." not in p.split("/")),
    offset=st.integers(0, INT64),
    length=st.none(),
    dtype=st.sampled_from(sorted(DTYPE_SIZES)),
    shape=st.lists(st.integers(0, 4096), max_size=3).map(tuple),
    placement=st.sampled_from(list(Placement)),
    provenance=st.from_regex(r"\A[^\n\r]{0,20}\Z").map(str.strip).filter(lambda s: not s.startswith("#")),
).map(lambda e: e if e.nbytes_expected is None else PoolEntry(
    e.pool_id, e.file, e.offset, e.nbytes_expected, e.dtype, e.shape, e.placement, e.provenance))


@st.composite
def pools(draw: st.DrawFn) -> WeightsPool:
    entries = draw(st.lists(pool_entries, max_size=6, unique_by=lambda e: e.pool_id))
    records: list[PoolEntry | str] = []
    for entry in entries:
        records.extend(draw(st.lists(st.sampled_from(("", "# comment", "#", "   ")), max_size=1)))
        records.append(entry)
    return WeightsPool(tuple(records))


@pytest.mark.slow
@PROPS
@given(pools())
def test_pool_round_trip_is_identity(pool: WeightsPool) -> None:
    text = format_pool(pool)
    parsed = parse_pool(text)
    assert parsed == pool
    assert format_pool(parsed) == text


@PROPS
@given(st.text(max_size=200))
def test_parse_pool_only_raises_pool_error(text: str) -> None:
    try:
        pool = parse_pool(text)
    except PoolError as exc:
        assert "\n" not in str(exc)
    else:
        assert format_pool(pool) == (text if text.endswith("\n") or not text else text + "\n")


@PROPS
@given(st.integers(1, 16), st.integers(1, 16), st.data())
def test_profile_round_trip(layers: int, experts: int, data: st.DataObject) -> None:
    counts = data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=layers * experts, max_size=layers * experts))
    profile = ExpertProfile(np.array(counts, dtype=np.uint64).reshape(layers, experts))
    assert parse_profile(encode_profile(profile)) == profile


@PROPS
@given(st.binary(max_size=64) | st.builds(
    lambda layers, e, v, r, tail: struct.pack("<4sHHII", b"STRP", v, r, layers, e) + tail,
    st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 3), st.integers(0, 2), st.binary(max_size=80),
))
def test_parse_profile_only_raises_profile_error(data: bytes) -> None:
    try:
        parse_profile(data)
    except ProfileError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "\r\n"])
def test_pool_edge_texts_round_trip(text: str) -> None:
    assert format_pool(parse_pool(text)) == text
