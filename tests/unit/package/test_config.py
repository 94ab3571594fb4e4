"""The config surface: strict parsing with key paths, deterministic JSON, v12 migration.

Invariants: parse(dump(c)) == c; dump is byte-stable (sorted keys, indent 2, newline); unknown
keys and wrong types name their key path; provider options are strings; prefill.chunk <=
kv_capacity; runtime profiles unique and non-overlapping; v12 configs migrate on read.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from support.minipkg import mini_config
from syrupy.assertion import SnapshotAssertion

from q38.errors import ConfigError
from q38.package import config_to_dict, dumps_config, parse_config


def _doc() -> dict:
    return config_to_dict(mini_config())


def test_round_trip_is_identity_and_text_is_canonical() -> None:
    cfg = mini_config()
    text = dumps_config(cfg)
    assert parse_config(json.loads(text)) == cfg
    assert text.endswith("}\n")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert dumps_config(parse_config(json.loads(text))) == text


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["model"].__setitem__("foo", 1), "model.foo: unknown key"),
        (lambda d: d["model"]["decoder"].__setitem__("bar", 1), "model.decoder.bar: unknown key"),
        (lambda d: d["model"]["qwen38_graph"]["fold"]["head_r2"].__setitem__("x", 1), "model.qwen38_graph.fold.head_r2.x: unknown key"),
        (lambda d: d["model"]["decoder"]["inputs"].__setitem__("past_foo_names", "a"), "model.decoder.inputs.past_foo_names: unknown key"),
        (lambda d: d["model"]["decoder"]["outputs"].__setitem__("past_foo_names", "a"), "model.decoder.outputs.past_foo_names: unknown key"),
        (lambda d: d["model"]["decoder"].__setitem__("hidden_size", "16"), "model.decoder.hidden_size: expected an integer, got a string"),
        (lambda d: d["model"]["decoder"].__setitem__("hidden_size", True), "model.decoder.hidden_size: expected an integer, got a bool"),
        (lambda d: d["model"]["decoder"].__setitem__("hidden_size", 2**64), "does not fit in int64"),
        (lambda d: d["model"]["decoder"].__setitem__("head_size", 0), "model.decoder.head_size: must be >= 1, got 0"),
        (lambda d: d["model"].__setitem__("type", "qwen3_5"), "model.type: expected 'qwen38_flash_graph'"),
        (lambda d: d["model"]["decoder"].pop("filename"), "model.decoder.filename: required key is missing"),
        (
            lambda d: d["model"]["qwen38_graph"]["fold"]["head_r2"]["session_options"]["provider_options"][0]["cuda"].__setitem__("gpu_mem_limit", 8589934592),
            "provider_options[0].cuda.gpu_mem_limit: expected a string, got a number",
        ),
        (lambda d: d["model"]["decoder"]["session_options"].__setitem__("session.moe.offload.mode", 1), "session_options.session.moe.offload.mode: expected a string"),
        (lambda d: d["model"]["decoder"]["session_options"].__setitem__("config_entries", {}), "session_options.config_entries: unknown key"),
        (
            lambda d: d["model"]["qwen38_graph"]["fold"]["head_r2"]["session_options"].__setitem__("provider_options", [{"cuda": {}}, {"cuda": {"a": "1"}}]),
            "provider_options[1].cuda: provider listed twice",
        ),
        (lambda d: d["model"]["qwen38_graph"]["prefill"].__setitem__("chunk", 512), "model.qwen38_graph.prefill.chunk: chunk 512 exceeds kv_capacity 256"),
        (lambda d: d["model"]["qwen38_graph"]["prefill"].__setitem__("chunk", 0), "model.qwen38_graph.prefill.chunk: must be >= 1, got 0"),
        (lambda d: d["model"]["qwen38_graph"].pop("weights_pool"), "model.qwen38_graph.weights_pool: required key is missing"),
        (lambda d: d["model"]["qwen38_graph"].__setitem__("variant", "gpu"), "model.qwen38_graph.variant: expected one of faithful, cpu"),
        (lambda d: d.__setitem__("search", {"max_length": 1.5}), "search.max_length: expected int, got a number"),
        (lambda d: d.__setitem__("search", {"temperature": "0.7"}), "search.temperature: expected float, got a string"),
        (lambda d: d["model"]["qwen38_graph"]["fold"].pop("head_r2"), "model.qwen38_graph.fold.head_r2: required key is missing"),
        (lambda d: d.__setitem__("weights_pool", 1), "weights_pool: unknown key"),
    ],
)
def test_invalid_documents_name_the_key_path(mutate, message: str) -> None:
    doc = _doc()
    mutate(doc)
    with pytest.raises(ConfigError) as info:
        parse_config(doc, source="pkg/genai_config.json")
    text = str(info.value)
    assert text.startswith("pkg/genai_config.json: ")
    assert message in text
    assert "\n" not in text


def _profile(pid: str, lo: int, hi: int | None) -> dict:
    elig = {"minimum_total_device_memory_bytes": lo}
    if hi is not None:
        elig["maximum_total_device_memory_bytes"] = hi
    return {"id": pid, "eligibility": elig, "overlay": {"model": {"decoder": {"filename": "model_s4.onnx"}}}}


def test_runtime_profiles_round_trip_and_overlap_is_refused(messages_snapshot: SnapshotAssertion) -> None:
    doc = _doc()
    doc["runtime_profiles"] = [_profile("a", 0, 99), _profile("b", 100, 199), _profile("c", 200, None)]
    cfg = parse_config(doc)
    assert [p.id for p in cfg.runtime_profiles] == ["a", "b", "c"]
    assert config_to_dict(cfg)["runtime_profiles"] == doc["runtime_profiles"]
    overlapping = copy.deepcopy(doc)
    overlapping["runtime_profiles"][1]["eligibility"]["minimum_total_device_memory_bytes"] = 99
    with pytest.raises(ConfigError) as info:
        parse_config(overlapping, source="c")
    assert messages_snapshot == str(info.value)
    nested = copy.deepcopy(doc)
    nested["runtime_profiles"] = [_profile("outer", 0, 1000), _profile("x", 10, 20), _profile("y", 30, 40)]
    with pytest.raises(ConfigError, match="overlap"):
        parse_config(nested)
    dup = copy.deepcopy(doc)
    dup["runtime_profiles"][2]["id"] = "a"
    with pytest.raises(ConfigError, match=r"runtime_profiles\[2\]\.id: duplicate runtime profile id 'a'"):
        parse_config(dup)
    empty = copy.deepcopy(doc)
    empty["runtime_profiles"][0]["overlay"]["model"]["decoder"] = {}
    with pytest.raises(ConfigError, match="an empty overlay is not allowed"):
        parse_config(empty)
    missing = copy.deepcopy(doc)
    del missing["runtime_profiles"][0]["eligibility"]["minimum_total_device_memory_bytes"]
    with pytest.raises(ConfigError, match="is missing minimum_total_device_memory_bytes"):
        parse_config(missing)


def test_v12_surface_is_migrated_on_read(messages_snapshot: SnapshotAssertion) -> None:
    v12: dict[str, Any] = {
        "model": {
            "type": "qwen38_flash",
            "vocab_size": 16,
            "context_length": 256,
            "decoder": {
                "filename": "model.onnx", "hidden_size": 16, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_size": 4, "num_hidden_layers": 1,
                "session_options": {"provider_options": [{"cuda": {"enable_cuda_graph": 1, "gpu_mem_limit": 8589934592}}]},
            },
            "qwen38": {
                "head_graph": "head_r2.onnx", "prefill_graph": "prefill.onnx", "prefill_chunk": 64,
                "kv_capacity": 256, "pool": "weights_pool.txt", "variant": "cpu",
            },
        }
    }
    cfg = parse_config(v12)
    g = cfg.model.qwen38_graph
    assert (g.target, g.head_r2.filename, g.weights_pool, g.kv_capacity) == ("model.onnx", "head_r2.onnx", "weights_pool.txt", 256)
    assert g.prefill is not None and (g.prefill.filename, g.prefill.chunk) == ("prefill.onnx", 64)
    assert cfg.model.decoder.session_options.provider_options[0].options == {"enable_cuda_graph": "1", "gpu_mem_limit": "8589934592"}
    written = json.loads(dumps_config(cfg))
    assert written["model"]["type"] == "qwen38_flash_graph" and "qwen38" not in written["model"]
    v12["model"]["decoder"]["session_options"]["provider_options"][0]["cuda"]["gpu_mem_limit"] = None
    with pytest.raises(ConfigError) as info:
        parse_config(v12, source="c")
    assert messages_snapshot == str(info.value)
    v12["model"]["decoder"]["session_options"]["provider_options"][0]["cuda"]["gpu_mem_limit"] = 8589934592
    v12["model"]["qwen38"]["mystery"] = 1
    with pytest.raises(ConfigError, match=r"model\.qwen38_graph\.mystery: unknown key"):
        parse_config(v12)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["model"].__setitem__("pad_token_id", -1), "model.pad_token_id: must be >= 0"),
        (lambda d: d["model"].__setitem__("vocab_size", 0), "model.vocab_size: must be >= 1"),
        (lambda d: d["model"].__setitem__("context_length", 0), "model.context_length: must be >= 1"),
        (lambda d: d["model"]["qwen38_graph"].__setitem__("kv_capacity", 0), "model.qwen38_graph.kv_capacity: must be >= 1"),
        (lambda d: d["model"]["qwen38_graph"]["fold"]["head_r2"].__setitem__("filename", 3),
         "model.qwen38_graph.fold.head_r2.filename: expected a string"),
        (lambda d: d["model"]["decoder"]["session_options"].__setitem__("log_severity_level", 5),
         "model.decoder.session_options.log_severity_level: must be in [0, 4], got 5"),
        (lambda d: d["model"]["decoder"]["session_options"].__setitem__("log_severity_level", "3"),
         "model.decoder.session_options.log_severity_level: expected an integer, got a string"),
        (lambda d: d["model"]["decoder"]["session_options"].__setitem__("log_severity_level", -1),
         "model.decoder.session_options.log_severity_level: must be >= 0, got -1"),
        (lambda d: d["model"]["decoder"]["session_options"].__setitem__("intra_op_num_threads", -1),
         "model.decoder.session_options.intra_op_num_threads: must be >= 0, got -1"),
        (lambda d: d["model"]["qwen38_graph"].__setitem__("multidraft", {"s5": "model_s5.onnx"}),
         "model.qwen38_graph.multidraft.s5: unknown key"),
        (lambda d: d["model"].pop("type"), "model.type: required key is missing"),
        (lambda d: d.__setitem__("runtime_profiles", [{**_profile("", 0, None)}]), "runtime_profiles[0].id: must not be empty"),
        (lambda d: d.__setitem__("runtime_profiles", [{"id": "a", "eligibility": {"minimum_total_device_memory_bytes": 0},
                                                      "overlay": {}}]), "runtime_profiles[0].overlay.model: required key is missing"),
        (lambda d: d.__setitem__("runtime_profiles", [{"id": "a", "overlay": {"model": {"decoder": {"filename": "m.onnx"}}}}]),
         "runtime_profiles[0].eligibility: required key is missing"),
        (lambda d: d.__setitem__("runtime_profiles", {}), "runtime_profiles: expected an array, got an object"),
        (lambda d: d["model"]["qwen38_graph"]["prefill"].pop("filename"), "model.qwen38_graph.prefill.filename: required key is missing"),
        (lambda d: d["model"]["decoder"]["session_options"].__setitem__("provider_options", [{}]),
         "model.decoder.session_options.provider_options[0]: expected an object with exactly one provider name"),
        (lambda d: d["model"]["decoder"]["session_options"].__setitem__("provider_options", [{"rocm": {}}]),
         "model.decoder.session_options.provider_options[0].rocm: unknown provider (expected one of cuda, cpu)"),
    ],
)  # fmt: skip
def test_bounds_and_types_name_the_key_path(mutate, message: str) -> None:
    """Each bound and type check names its own key path (not a neighbour's, not a crash)."""
    doc = _doc()
    mutate(doc)
    with pytest.raises(ConfigError) as info:
        parse_config(doc, source="pkg/genai_config.json")
    assert message in str(info.value), str(info.value)


def test_values_at_their_bounds_and_defaults_are_read_as_written() -> None:
    doc = _doc()
    doc["model"].update(bos_token_id=7, pad_token_id=0, vocab_size=1, context_length=1)
    doc["model"]["qwen38_graph"]["kv_capacity"] = 1
    doc["model"]["qwen38_graph"].pop("prefill", None)
    doc["model"]["decoder"]["session_options"].update(enable_profiling="prof", log_severity_level=3)
    cfg = parse_config(doc)
    m = cfg.model
    assert (m.bos_token_id, m.pad_token_id, m.vocab_size, m.context_length) == (7, 0, 1, 1)
    assert m.qwen38_graph.kv_capacity == 1
    so = m.decoder.session_options
    assert (so.enable_profiling, so.log_severity_level) == ("prof", 3)
    del doc["model"]["bos_token_id"]
    del doc["model"]["qwen38_graph"]["variant"]
    cfg = parse_config(doc)
    assert cfg.model.bos_token_id == 1  # GenAI's default
    assert cfg.model.qwen38_graph.variant == "faithful"


def test_a_runtime_profiles_overlay_session_options_are_read() -> None:
    doc = _doc()
    profile = _profile("a", 0, None)
    profile["overlay"]["model"]["decoder"]["session_options"] = {"session.moe.offload.mode": "auto", "log_id": "p"}
    doc["runtime_profiles"] = [profile]
    cfg = parse_config(doc)
    so = cfg.runtime_profiles[0].overlay.session_options
    assert so is not None and so.config_entries == {"session.moe.offload.mode": "auto"} and so.log_id == "p"
    assert config_to_dict(cfg)["runtime_profiles"][0]["overlay"]["model"]["decoder"]["session_options"] == {
        "log_id": "p", "session.moe.offload.mode": "auto"}


def _v12_without_prefill(**qwen38: object) -> dict[str, Any]:
    """A v12 config with no prefill graph; ``qwen38``: its extra ``model.qwen38`` keys."""
    return {
        "model": {
            "type": "qwen38_flash", "vocab_size": 16, "context_length": 256,
            "decoder": {"filename": "model.onnx", "hidden_size": 16, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "head_size": 4, "num_hidden_layers": 1},
            "qwen38": {"head_graph": "head_r2.onnx", "kv_capacity": 256, "pool": "weights_pool.txt", **qwen38},
        }
    }  # fmt: skip


def test_a_v12_config_without_prefill_migrates_without_one() -> None:
    g = parse_config(_v12_without_prefill(lineage="contrib")).model.qwen38_graph
    assert g.prefill is None
    assert g.lineage == "contrib"


def test_a_v12_key_that_v12b_also_has_is_carried_with_its_value() -> None:
    """A v12 ``qwen38`` key the migration does not rename (``expert_profile``) moves into
    ``qwen38_graph`` with its value, not as a placeholder."""
    assert parse_config(_v12_without_prefill(expert_profile="experts.json")).model.qwen38_graph.expert_profile == "experts.json"


def _full_doc() -> dict:
    """The mini config with every optional part present: expert profile, libraries, multidraft,
    search and a runtime profile whose overlay has its own session options."""
    doc = _doc()
    graph = doc["model"]["qwen38_graph"]
    graph.update(expert_profile="experts.json", libraries={"qmoe": "libqmoe.so"}, multidraft={"s2": "model_s2.onnx"})
    doc["search"] = {"max_length": 64}
    doc["runtime_profiles"] = [{"id": "a", "eligibility": {"minimum_total_device_memory_bytes": 0}, "overlay": {
        "model": {"decoder": {"filename": "model_s2.onnx", "session_options": {"log_id": "p"}}}}}]  # fmt: skip
    return doc


def _key_paths(value: object, path: str = "", parts: tuple = ()) -> list[tuple[str, tuple]]:
    """Every key of a document: its path as the refusals spell it (``a.b``, ``a[0].b``) and its keys."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    out = []
    for key, child in items:
        here = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
        out += [(here, (*parts, key)), *_key_paths(child, here, (*parts, key))]
    return out


def _replace_at(doc: dict, parts: tuple) -> None:
    """Give the key at ``parts`` a value of another kind: a number for a string, an object or an
    array; a string for a number or a bool."""
    cur = doc
    for part in parts[:-1]:
        cur = cur[part]
    cur[parts[-1]] = 7 if isinstance(cur[parts[-1]], (str, dict, list)) else "x"


def test_a_value_of_the_wrong_kind_anywhere_is_refused_naming_its_own_key_path() -> None:
    """Every key of a full config, given a value of another JSON kind, is refused by a message that
    starts with that key's own path. ``eos_token_id`` alone takes two kinds (an id or an array of ids)."""
    doc = _full_doc()
    parse_config(doc, source="c")
    paths = [(p, parts) for p, parts in _key_paths(doc) if p != "model.eos_token_id"]
    assert len(paths) > 50 and "model.qwen38_graph.libraries.qmoe" in dict(paths)
    for path, parts in paths:
        wrong = copy.deepcopy(doc)
        _replace_at(wrong, parts)
        with pytest.raises(ConfigError) as info:
            parse_config(wrong, source="c")
        assert str(info.value).startswith(f"c: {path}: "), (path, str(info.value))


def test_a_missing_top_level_key_is_named_without_a_leading_dot(messages_snapshot: SnapshotAssertion) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({}, source="c")
    assert messages_snapshot == str(info.value)
    doc = _doc()
    doc["model"]["decoder"]["session_options"] = []
    with pytest.raises(ConfigError) as info:
        parse_config(doc, source="c")
    assert messages_snapshot == str(info.value)
    doc = _doc()
    doc["model"]["decoder"]["hidden_size"] = 2**64
    with pytest.raises(ConfigError) as info:
        parse_config(doc, source="c")
    assert messages_snapshot == str(info.value)


def test_a_config_with_every_optional_part_round_trips() -> None:
    """Multidraft graphs, custom-op libraries, the expert profile, search and runtime profiles are
    read into the config and written back as they were."""
    doc = _full_doc()
    cfg = parse_config(doc, source="c")
    g = cfg.model.qwen38_graph
    assert (g.multidraft, g.libraries) == ({"s2": "model_s2.onnx"}, {"qmoe": "libqmoe.so"})
    assert config_to_dict(cfg) == doc


def test_a_v12_prefill_graph_without_its_chunk_is_refused_naming_the_prefill_chunk(messages_snapshot: SnapshotAssertion) -> None:
    """A v12 ``prefill_graph`` alone still migrates into ``qwen38_graph.prefill``: the refusal names its chunk."""
    with pytest.raises(ConfigError) as info:
        parse_config(_v12_without_prefill(prefill_graph="prefill.onnx"), source="c")
    assert messages_snapshot == str(info.value)


def test_a_v12_prefill_chunk_without_its_graph_is_refused_naming_the_prefill_filename(messages_snapshot: SnapshotAssertion) -> None:
    """A v12 ``prefill_chunk`` alone also migrates into ``qwen38_graph.prefill``: the refusal names the missing filename, not an unknown key."""
    with pytest.raises(ConfigError) as info:
        parse_config(_v12_without_prefill(prefill_chunk=64), source="c")
    assert messages_snapshot == str(info.value)


@pytest.mark.parametrize("mutate", [
    (lambda d: d["model"].pop("context_length")),
    (lambda d: d["model"]["qwen38_graph"]["target"].pop("filename")),
    (lambda d: d["model"].__setitem__("decoder", 7)),
    (lambda d: d["model"]["qwen38_graph"].__setitem__("target", "model.onnx")),
    (lambda d: d["model"]["qwen38_graph"].pop("target")),
], ids=["missing-context_length", "missing-target.filename", "decoder-not-object", "target-not-object", "missing-target"])  # fmt: skip
def test_a_refusal_is_exactly_one_line_with_the_full_key_path_and_the_reason(
        mutate: Callable[[dict[str, Any]], object], messages_snapshot: SnapshotAssertion) -> None:  # fmt: skip
    """The whole refusal line: the full key path (not a shortened or re-cased one) and the reason."""
    doc = _doc()
    mutate(doc)
    with pytest.raises(ConfigError) as info:
        parse_config(doc, source="c")
    assert messages_snapshot == str(info.value)


def test_a_surface_other_than_v12b_is_refused_naming_the_surface_key(messages_snapshot: SnapshotAssertion) -> None:
    """An unsupported ``qwen38_graph.surface`` is refused with its own key path, so the user knows which key to fix."""
    doc = _doc()
    doc["model"]["qwen38_graph"]["surface"] = "v13"
    with pytest.raises(ConfigError) as info:
        parse_config(doc, source="c")
    assert messages_snapshot == str(info.value)


def test_a_value_json_cannot_carry_is_refused_on_write_naming_the_config_file(messages_snapshot: SnapshotAssertion) -> None:
    """dumps_config refuses a NaN search value with a ConfigError naming genai_config.json and the key path."""
    cfg = dataclasses.replace(mini_config(), search={"temperature": float("nan")})
    with pytest.raises(ConfigError) as info:
        dumps_config(cfg)
    assert messages_snapshot == str(info.value)
