"""The genai-surface config records: what parse_genai_config carries from the document.

Invariants: a ``speculative`` block is carried verbatim; a research-builder config keeps
onnxruntime-genai 0.18.0's refusal (one line naming the file and key) in ``og_refusal``, and
the genai reader reports it as a warning.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import ConfigError
from q38.package.genai.config import dumps_genai_config, parse_genai_config, read_genai_config
from q38.package.genai.reader import READER

SOURCE = "pkg/genai_config.json"


def _doc() -> dict[str, Any]:
    return {"model": {"type": "llama", "context_length": 64, "vocab_size": 32, "decoder": {"filename": "model.onnx"}}}


def test_a_speculative_block_is_carried() -> None:
    doc = _doc()
    doc["speculative"] = {"max_draft_tokens": 4, "ngram_size": 3}
    assert parse_genai_config(doc, source=SOURCE).speculative == {"max_draft_tokens": 4, "ngram_size": 3}
    assert parse_genai_config(_doc(), source=SOURCE).speculative == {}


def test_a_search_block_is_carried() -> None:
    """The ``search`` block is read into the config as written (a converter edits and writes it back)."""
    doc = _doc()
    doc["search"] = {"max_length": 32, "top_k": 5}
    assert parse_genai_config(doc, source=SOURCE).search == {"max_length": 32, "top_k": 5}
    assert parse_genai_config(_doc(), source=SOURCE).search == {}


def test_a_research_config_keeps_genais_refusal() -> None:
    doc = _doc()
    doc["model"]["engram"] = {"filename": "engram.onnx"}
    cfg = parse_genai_config(doc, source=SOURCE, research=True)
    assert cfg.og_refusal == f"{SOURCE}: model.engram: unknown key"
    assert cfg.model.engram is not None and cfg.model.engram.filename == "engram.onnx"
    assert parse_genai_config(_doc(), source=SOURCE, research=True).og_refusal == ""
    assert READER.config_problem(doc) == (
        "warning", "onnxruntime-genai 0.18.0 refuses this config: genai_config.json: model.engram: unknown key"
    )


def _profiles() -> list[dict[str, Any]]:
    return [
        {"id": "small", "eligibility": {"minimum_total_device_memory_bytes": 0,
                                        "maximum_total_device_memory_bytes": (16 << 30) - 1},
         "overlay": {"search": {"chunk_size": 32}}},
        {"id": "large", "eligibility": {"minimum_total_device_memory_bytes": 16 << 30},
         "overlay": {"model": {"decoder": {"filename": "model_large.onnx"}}}},
    ]  # fmt: skip


def test_runtime_profiles_are_carried_and_written_back() -> None:
    doc = _doc()
    doc["runtime_profiles"] = _profiles()
    cfg = parse_genai_config(doc, source=SOURCE)
    assert cfg.runtime_profiles == tuple(_profiles())
    written = json.loads(dumps_genai_config(cfg))
    assert written["runtime_profiles"] == _profiles()
    assert (written["model"]["type"], written["model"]["context_length"]) == ("llama", 64)
    longer = replace(cfg, model=replace(cfg.model, context_length=128))  # a converter's change is written
    assert json.loads(dumps_genai_config(longer))["model"]["context_length"] == 128


def test_a_config_that_json_cannot_carry_is_refused_when_written() -> None:
    """A value strict JSON has no form for (NaN) is refused, naming the file and key path, rather
    than written as a token GenAI's reader cannot read back."""
    cfg = replace(parse_genai_config(_doc(), source=SOURCE), search={"temperature": math.nan})
    with pytest.raises(ConfigError, match=r"genai_config\.json.*search.*temperature"):
        dumps_genai_config(cfg)


def test_only_one_block_drafter_may_be_configured(messages_snapshot: SnapshotAssertion) -> None:
    """GenAI 0.18.0 refuses the second of model.dflash2 / model.dspark as it reads it, even empty
    (probed: "Only one of model.dflash2 and model.dspark may be configured")."""
    for first, second in (("dflash2", "dspark"), ("dspark", "dflash2")):
        doc = _doc()
        doc["model"][first] = {"filename": "draft.onnx"}
        doc["model"][second] = {}
        with pytest.raises(ConfigError) as caught:
            parse_genai_config(doc, source=SOURCE)
        assert messages_snapshot == str(caught.value)
        del doc["model"][second]
        assert parse_genai_config(doc, source=SOURCE).model.type == "llama"


def test_a_drafters_independent_sampling_must_agree_with_its_sampled_proposal() -> None:
    """independent_sampling true goes only with sampled_proposal "independent", false only with the
    others (GenAI 0.18.0: "independent_sampling conflicts with sampled_proposal"); either alone is fine."""
    def verdict(**drafter: object) -> str | None:
        doc = _doc()
        doc["model"]["dspark"] = {"filename": "draft.onnx", **drafter}
        try:
            parse_genai_config(doc, source=SOURCE)
        except ConfigError as exc:
            return str(exc)
        return None

    conflict = f"{SOURCE}: model.dspark.independent_sampling: conflicts with sampled_proposal; set only sampled_proposal"
    assert verdict(independent_sampling=True, sampled_proposal="independent") is None
    assert verdict(independent_sampling=False, sampled_proposal="lattice") is None
    assert verdict(independent_sampling=True, sampled_proposal="greedy_path") == conflict
    assert verdict(independent_sampling=False, sampled_proposal="independent") == conflict
    assert verdict(independent_sampling=True) is None and verdict(sampled_proposal="none") is None
    assert "sampled_proposal" in (verdict(sampled_proposal=True) or "")  # a string enum, not a bool


def test_a_graph_sections_keys_land_in_their_records_and_only_the_rest_in_extra() -> None:
    doc = _doc()
    doc["model"]["mtp"] = {"filename": "mtp.onnx", "enabled": True, "num_hidden_layers": 1, "num_key_value_heads": 2,
                           "head_size": 16, "main_hidden_states": "hidden_states",
                           "inputs": {"input_ids": "input_ids"}, "outputs": {"logits": "logits"}}  # fmt: skip
    mtp = parse_genai_config(doc, source=SOURCE).model.mtp
    assert mtp is not None
    assert (mtp.filename, mtp.enabled, mtp.num_hidden_layers, mtp.num_key_value_heads, mtp.head_size,
            mtp.main_hidden_states) == ("mtp.onnx", True, 1, 2, 16, "hidden_states")  # fmt: skip
    assert (mtp.inputs, mtp.outputs, mtp.extra) == ({"input_ids": "input_ids"}, {"logits": "logits"}, {})
    doc["model"]["mtp"].update(num_hidden_layers=1.0, num_key_value_heads=2.0, head_size=16.0)  # JSON numbers GenAI reads as ints
    mtp = parse_genai_config(doc, source=SOURCE).model.mtp
    assert mtp is not None
    assert [(v, type(v)) for v in (mtp.num_hidden_layers, mtp.num_key_value_heads, mtp.head_size)] == [
        (1, int), (2, int), (16, int)]
    doc["model"]["decoder"].update(head_size=16, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                   num_key_value_heads=2)  # fmt: skip
    d = parse_genai_config(doc, source=SOURCE).model.decoder
    assert (d.head_size, d.hidden_size, d.num_attention_heads, d.num_hidden_layers, d.num_key_value_heads, d.extra) == (
        16, 64, 4, 2, 2, {})


@pytest.mark.parametrize("edit", [
    lambda c: replace(c, ignored={"a\x01b": 1}),
    lambda c: replace(c, search={"k\x02": 1}),
    lambda c: replace(c, search={"k": "v\x03"}),
], ids=["top-level-key", "nested-key", "string-value"])  # fmt: skip
def test_a_control_character_json_would_escape_is_refused_when_written(
        edit: Callable[[Any], Any], messages_snapshot: SnapshotAssertion) -> None:  # fmt: skip
    """A key or a string value with a control character JSON writes as a ``\\u`` escape is refused,
    naming where it is (a top-level key has no path of its own), since GenAI 0.18.0 cannot read it back."""
    cfg = edit(parse_genai_config(_doc(), source=SOURCE))
    with pytest.raises(ConfigError) as info:
        dumps_genai_config(cfg)
    assert messages_snapshot == str(info.value)


@pytest.mark.parametrize("text", [
    '{"model": {"type": "a\\\\u",\n "x": "\\u0041",\n "context_length": 64,\n "vocab_size": 32}}',
    '\n{"model": {"type": "\\u0041", "context_length": 64}}',
], ids=["escaped-backslash-before-u-is-no-escape", "a-leading-blank-line-counts"])  # fmt: skip
def test_a_unicode_escape_is_refused_naming_its_line(tmp_path: Path, text: str, messages_snapshot: SnapshotAssertion) -> None:
    r"""GenAI 0.18.0's reader refuses every ``\uXXXX`` escape, named by its line (a newline that opens
    the file counts); an escaped backslash before a ``u`` is no escape."""
    path = tmp_path / "genai_config.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_genai_config(path)
    assert messages_snapshot == str(info.value)


def test_a_research_configs_engram_section_is_written_back() -> None:
    doc = _doc()
    doc["model"]["engram"] = {"filename": "engram.onnx", "cache_capacity": 8}
    cfg = parse_genai_config(doc, source=SOURCE, research=True)
    assert cfg.model.engram is not None and cfg.model.engram.cache_capacity == 8
    changed = replace(cfg, model=replace(cfg.model, engram=replace(cfg.model.engram, cache_capacity=16)))
    written = json.loads(dumps_genai_config(changed))
    assert written["model"]["engram"] == {"filename": "engram.onnx", "cache_capacity": 16}


def test_a_config_built_without_a_source_document_is_written_in_full() -> None:
    """A config assembled by a converter (no source form to keep) is written from its records:
    every field of a graph section, shared initializers included, parses back to the same config."""
    from q38.package.genai.config import SharedInitializer

    cfg = parse_genai_config(_doc(), source=SOURCE)
    shared = (SharedInitializer("w", "model.onnx.data", "64", "128", 10, (4, 16)),)
    decoder = replace(cfg.model.decoder, inputs={"input_ids": "ids"}, outputs={"logits": "out"}, shared_initializers=shared)
    built = replace(cfg, model=replace(cfg.model, decoder=decoder), source_forms=None)
    written = json.loads(dumps_genai_config(built))
    assert written["model"]["decoder"] == {
        "filename": "model.onnx", "inputs": {"input_ids": "ids"}, "outputs": {"logits": "out"},
        "shared_initializers": [{"name": "w", "data_file": "model.onnx.data", "offset": "64", "length": "128",
                                 "data_type": 10, "shape": [4, 16]}],
    }  # fmt: skip
    again = parse_genai_config(written, source=SOURCE).model.decoder
    assert (again.inputs, again.outputs, again.shared_initializers) == ({"input_ids": "ids"}, {"logits": "out"}, shared)


def test_the_models_token_ids_land_in_their_records_and_are_written_back_as_read() -> None:
    """``pad_token_id`` (0 included) is carried, and a scalar ``eos_token_id`` is written back as the
    number it was read as, not the list q38 keeps it as."""
    doc = _doc()
    doc["model"].update(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg = parse_genai_config(doc, source=SOURCE)
    m = cfg.model
    assert (m.bos_token_id, m.eos_token_id, m.pad_token_id, m.vocab_size) == (1, (2,), 0, 32)
    assert json.loads(dumps_genai_config(cfg)) == doc


@pytest.mark.parametrize(
    ("edit", "refusal"),
    [
        (lambda m: m.__setitem__("engram", {"filename": "engram.onnx", "run_options": {"log_tag": "e"}}), "model.engram"),
        (lambda m: m["decoder"].__setitem__("ple_token_pad_id", 0), "model.decoder.ple_token_pad_id"),
        (lambda m: m.__setitem__("mtp", {"filename": "mtp.onnx", "inputs": {"past_indexer_names": "past_indexer.%d"}}),
         "model.mtp.inputs.past_indexer_names"),
        (lambda m: m.__setitem__("mtp", {"filename": "mtp.onnx", "outputs": {"present_indexer_names": "present_indexer.%d"}}),
         "model.mtp.outputs.present_indexer_names"),
        (lambda m: m["decoder"].update(num_hidden_layers=2, state_groups=[
            {"kind": "fixed_conv", "layer_ids": [0, 1], "state_update": {"capacity": 2, "compress_ratio": 4}}]),
         "model.decoder.state_groups[0].state_update.compress_ratio"),
        (lambda m: m.__setitem__("engram", {"filename": "engram.onnx", "session_options": {"log_id": "e"}}), "model.engram"),
        (lambda m: m.__setitem__("engram", {"filename": "engram.onnx",
                                            "inputs": {"input_ids": "ids", "past_ple_token_names": "past_ple.%d"}}),
         "model.engram"),
        (lambda m: m["decoder"].__setitem__("inputs", {"past_indexer_names": "past_indexer.%d"}),
         "model.decoder.inputs.past_indexer_names"),
        (lambda m: m["decoder"].__setitem__("inputs", {"engram_embeddings": "engram_embeddings"}),
         "model.decoder.inputs.engram_embeddings"),
        (lambda m: m.__setitem__("mtp", {"filename": "mtp.onnx", "index_share": 2}), "model.mtp.index_share"),
    ],
    ids=["engram-run-options", "decoder-ple-token-pad-id", "mtp-past-indexer-names", "mtp-present-indexer-names",
         "state-update-compress-ratio", "engram-session-options", "engram-inputs", "decoder-past-indexer-names",
         "decoder-engram-embeddings", "mtp-index-share"],
)  # fmt: skip
def test_each_research_builder_key_is_accepted_with_genais_refusal_kept(
        edit: Callable[[dict[str, Any]], None], refusal: str) -> None:  # fmt: skip
    """A key only the Qwen3.8 research builder writes parses with ``research=True``; 0.18.0's refusal
    names the key (or its unknown section)."""
    doc = _doc()
    edit(doc["model"])
    cfg = parse_genai_config(doc, source=SOURCE, research=True)
    assert cfg.og_refusal == f"{SOURCE}: {refusal}: unknown key"
    assert json.loads(dumps_genai_config(cfg)) == doc


@pytest.mark.parametrize("kind", ["fixed_indexer", "fixed_ple"])
def test_a_research_state_group_kind_is_read_with_genais_refusal_kept(kind: str, messages_snapshot: SnapshotAssertion) -> None:
    """The research builder's indexer and PLE state groups (a KeyError, an internal error, before):
    read with ``research=True``, their layer ids checked as any group's, refused by 0.18.0."""
    doc = _doc()
    doc["model"]["decoder"].update(num_hidden_layers=2, state_groups=[{"kind": kind, "layer_ids": [0, 1]}])
    cfg = parse_genai_config(doc, source=SOURCE, research=True)
    assert cfg.og_refusal.startswith(f"{SOURCE}: model.decoder.state_groups[0].kind: "), cfg.og_refusal
    assert json.loads(dumps_genai_config(cfg)) == doc
    with pytest.raises(ConfigError) as refused:
        parse_genai_config(doc, source=SOURCE)
    assert str(refused.value) == cfg.og_refusal
    doc["model"]["decoder"]["state_groups"][0]["layer_ids"] = [2]
    with pytest.raises(ConfigError) as outside:
        parse_genai_config(doc, source=SOURCE, research=True)
    assert messages_snapshot == str(outside.value)


def test_the_runtime_profiles_that_swap_the_decoder_graph_are_listed_with_their_files() -> None:
    doc = _doc()
    doc["runtime_profiles"] = _profiles()
    assert parse_genai_config(doc, source=SOURCE).profile_decoder_files() == [("large", "model_large.onnx")]


def test_a_config_files_refusals_name_the_file_read(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """read_genai_config names the path it read in a refusal and in the kept 0.18.0 refusal, not a
    default file name."""
    path = tmp_path / "genai_config.json"
    doc = _doc()
    doc["model"]["engram"] = {"filename": "engram.onnx"}
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert read_genai_config(path).og_refusal == f"{path}: model.engram: unknown key"
    doc["model"]["mystery"] = 1
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_genai_config(path)
    assert messages_snapshot == str(info.value)


def test_a_non_array_provider_options_is_written_back_as_the_entry_it_is() -> None:
    """A ``provider_options`` that is not an array is one more catch-all entry to GenAI: a config
    built from the records writes it back as it was, not as an empty provider list."""
    doc = _doc()
    doc["model"]["decoder"]["session_options"] = {"provider_options": "cuda"}
    cfg = parse_genai_config(doc, source=SOURCE)
    assert cfg.model.decoder.session_options is not None and cfg.model.decoder.session_options.providers == ()
    written = json.loads(dumps_genai_config(replace(cfg, source_forms=None)))
    assert written["model"]["decoder"]["session_options"] == {"provider_options": "cuda"}


def test_a_shared_initializer_missing_its_string_fields_reads_them_as_empty() -> None:
    """GenAI 0.18.0 accepts a ``shared_initializers`` entry without ``data_file``/``offset``/``length``:
    the record holds empty strings (no byte range), never None a caller's string method would trip on."""
    from q38.package.genai.config import SharedInitializer

    doc = _doc()
    doc["model"]["decoder"]["shared_initializers"] = [{"name": "w"}]
    (shared,) = parse_genai_config(doc, source=SOURCE).model.decoder.shared_initializers
    assert shared == SharedInitializer(name="w", data_file="", offset="", length="")
    assert shared.byte_range() is None


def test_a_parsed_config_is_written_back_as_read_after_its_source_document_is_edited() -> None:
    """The config keeps its own copy of the document it was parsed from: a caller editing a nested
    part of that document afterwards does not change what the config writes back."""
    doc = _doc()
    cfg = parse_genai_config(doc, source=SOURCE)
    doc["model"]["decoder"]["filename"] = "other.onnx"
    doc["model"]["vocab_size"] = 64
    assert json.loads(dumps_genai_config(cfg)) == _doc()


def test_an_unreadable_config_is_refused_as_the_config_naming_its_path(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A missing or non-regular genai config is refused naming it as the config and its path, so the
    user knows which file of the package is at fault."""
    missing = tmp_path / "genai_config.json"
    with pytest.raises(ConfigError) as info:
        read_genai_config(missing)
    assert messages_snapshot == str(info.value)
    with pytest.raises(ConfigError) as info:
        read_genai_config(tmp_path)
    assert messages_snapshot == str(info.value)


def test_dropping_a_sections_shared_initializers_drops_them_from_the_written_config() -> None:
    """``shared_initializers`` is read into its records only, not also kept in ``extra``: a converter
    that clears them writes a config without them."""
    doc = _doc()
    doc["model"]["decoder"]["shared_initializers"] = [{"name": "w", "data_file": "model.onnx.data", "offset": "0",
                                                       "length": "8", "data_type": 1, "shape": [2]}]  # fmt: skip
    cfg = parse_genai_config(doc, source=SOURCE)
    assert cfg.model.decoder.extra == {}
    cleared = replace(cfg, model=replace(cfg.model, decoder=replace(cfg.model.decoder, shared_initializers=())))
    assert json.loads(dumps_genai_config(cleared)) == _doc()


def test_dropping_the_runtime_profiles_drops_them_from_the_written_config() -> None:
    """``runtime_profiles`` is read into its records, not into the ignored top-level keys: a converter
    that clears the profiles writes a config without them."""
    doc = _doc()
    doc["runtime_profiles"] = _profiles()
    cfg = parse_genai_config(doc, source=SOURCE)
    assert cfg.ignored == {}
    assert json.loads(dumps_genai_config(replace(cfg, runtime_profiles=()))) == _doc()


def test_an_engine_block_is_carried_and_written_from_the_records() -> None:
    """The ``engine`` block is read into the config as written, and a config built from the records
    (no source form) writes it back."""
    doc = _doc()
    doc["engine"] = {"dynamic_batching": {"block_size": 16, "max_batch_size": 4}}
    cfg = parse_genai_config(doc, source=SOURCE)
    assert cfg.engine == {"dynamic_batching": {"block_size": 16, "max_batch_size": 4}}
    assert json.loads(dumps_genai_config(replace(cfg, source_forms=None))) == doc


@pytest.mark.parametrize("options", [
    {}, {"device_id": "0", "device_filtering_options": {"hardware_device_type": "gpu"}},
], ids=["plain", "device-filtering"])  # fmt: skip
def test_a_providers_options_are_written_from_the_records_as_read(options: dict[str, Any]) -> None:
    """A provider's ``device_filtering_options`` is written back under its own key, and only when the
    provider has some (no empty block invented for a provider without)."""
    doc = _doc()
    doc["model"]["decoder"]["session_options"] = {"provider_options": [{"cuda": options}]}
    cfg = parse_genai_config(doc, source=SOURCE)
    out = json.loads(dumps_genai_config(replace(cfg, source_forms=None)))
    assert out["model"]["decoder"]["session_options"] == {"provider_options": [{"cuda": options}]}


def test_editing_the_written_document_leaves_the_config_unchanged() -> None:
    """genai_config_to_dict hands the caller its own copy: editing a nested part of it does not change
    what the config writes next time."""
    from q38.package.genai.config import genai_config_to_dict

    cfg = parse_genai_config(_doc(), source=SOURCE)
    out = genai_config_to_dict(cfg)
    out["model"]["decoder"]["filename"] = "other.onnx"
    out["model"]["vocab_size"] = 64
    assert genai_config_to_dict(cfg) == _doc()


def test_a_sections_session_options_land_in_its_record_not_in_extra() -> None:
    """A graph section's ``session_options`` is read into its record; ``extra`` keeps only keys no record field
    holds (else the block would be written back twice or treated as unknown)."""
    doc = _doc()
    doc["model"]["decoder"]["session_options"] = {"log_id": "d"}
    doc["model"]["mtp"] = {"filename": "mtp.onnx", "session_options": {"log_id": "m"}}
    model = parse_genai_config(doc, source=SOURCE).model
    assert model.mtp is not None
    assert (model.decoder.extra, model.mtp.extra) == ({}, {})
    assert json.loads(dumps_genai_config(parse_genai_config(doc, source=SOURCE))) == doc
