"""One reader of session options (issue 23): both surfaces, the listing and check see one ORT view.

Invariants guarded:
- ``read_session_options`` gives GenAI's semantics: typed keys apart, every other string key a
  session config entry (a ``config_entries`` object's strings too), non-strings not an entry but
  kept as written, providers merged by name in config order with canonical names.
- The v12b strict parser and the genai parser build their records from that reader: the same block
  gives the same config entries and providers on both surfaces.
- The graph listing of a genai package hands check exactly the reader's entries.
"""

from __future__ import annotations

import json
from pathlib import Path

from q38.package.genai import schema as gs
from q38.package.genai.config import parse_session_options
from q38.package.session_options import (
    TYPED_KEYS,
    Provider,
    provider_names,
    read_session_options,
    session_entries,
)
from q38.package.surface import list_graphs
from q38.package.v12b.config import parse_config

_BLOCK = {
    "log_id": "q38",
    "intra_op_num_threads": 2,
    "session.use_env_allocators": "1",
    "ep.cuda.use_tf32": "0",
    "provider_options": [
        {"cuda": {"enable_cuda_graph": "1"}},
        {"cpu": {}},
        {"cuda": {"tunable_op_enable": "0"}},
    ],
}


def test_typed_keys_are_genai_tables_typed_options() -> None:
    assert set(TYPED_KEYS) == set(gs.SESSION_OPTIONS.fields) - {"provider_options"}
    assert "log_id" in TYPED_KEYS and "session.use_env_allocators" not in TYPED_KEYS


def test_the_reader_follows_genais_catch_all_and_merges_providers_by_name() -> None:
    block = read_session_options({**_BLOCK, "plain": "x", "number": 3,
                                  "config_entries": {"a.b": "1", "bad": 2}})  # fmt: skip
    assert block.typed == {"log_id": "q38", "intra_op_num_threads": 2}
    assert block.session_entries == {"session.use_env_allocators": "1", "ep.cuda.use_tf32": "0", "plain": "x", "a.b": "1"}
    assert block.config_entries["number"] == 3  # kept as written for the write-back, never an ORT entry
    assert block.providers == (
        Provider("cuda", {"enable_cuda_graph": "1", "tunable_op_enable": "0"}),
        Provider("cpu", {}),
    )
    assert block.provider_names == ("cuda", "CPU")
    assert provider_names({"provider_options": [{"CUDAExecutionProvider": {}}]}) == ("cuda",)


def test_a_broken_block_is_read_tolerantly() -> None:
    assert session_entries("not an object") == {}
    block = read_session_options({"provider_options": ["cuda", {"cpu": "x"}, {"cuda": {"k": 1, "s": "v"}}]})
    assert block.providers == (Provider("cpu", {}), Provider("cuda", {"s": "v"}))
    assert read_session_options({"provider_options": "cuda"}).session_entries == {"provider_options": "cuda"}


def test_both_surfaces_parse_one_block_to_the_same_ort_view(tiny_cpu_package: Path) -> None:
    block = {**_BLOCK, "provider_options": [{"cuda": {"enable_cuda_graph": "1"}}, {"cpu": {}}]}  # v12b: each once
    doc = json.loads((tiny_cpu_package / "genai_config.json").read_text())
    doc["model"]["decoder"]["session_options"] = block
    v12b = parse_config(doc).model.decoder.session_options
    genai = parse_session_options(block)
    assert genai is not None
    assert v12b.config_entries == genai.session_entries == session_entries(block)
    assert [(p.name, p.options) for p in v12b.provider_options] == [(p.name, p.options) for p in genai.providers]
    assert (v12b.log_id, v12b.intra_op_num_threads) == ("q38", 2)


def test_the_genai_listing_hands_check_the_readers_entries(tmp_path: Path) -> None:
    from q38.synth import synthesize

    pkg = synthesize(tmp_path / "pkg", preset="tiny", exporter="builder", seed=0)
    cfg = pkg / "genai_config.json"
    doc = json.loads(cfg.read_text())
    so = doc["model"]["decoder"].setdefault("session_options", {})
    so.update({"ep.cuda.use_tf32": "0", "number": 3, "config_entries": {"session.x": "1"}})
    cfg.write_text(json.dumps(doc))
    decoder = next(g for g in list_graphs(pkg).graphs if g.role == "decoder")
    assert decoder.session_entries == session_entries(so)
    assert decoder.session_entries["ep.cuda.use_tf32"] == "0" and "number" not in decoder.session_entries
    assert decoder.session_entries["session.x"] == "1"
