"""The genai surface: builder packages read through ``q38.package`` (``open_any``).

Invariants guarded:
* every builder package (committed fixtures, ``Q38_REAL_EXPORTS``, and the genai package
  ``q38 export-genai`` writes from a synthetic cpu package) opens as ``surface == "genai"``; its
  ``graphs()`` names every ``.onnx`` of the package with role, file, section and providers;
* a v12b package opens as ``surface == "v12b"`` with its target / head / prefill graphs;
* the config round-trips (``parse(dump(c)) == c``, text canonical, raw UTF-8) and GenAI accepts
  the dump;
* refusals are one line: a model type the builder never writes, a graph the config names that is
  missing or a directory, a config escaping through a symlink;
* shared_initializers of an MTP export resolve; a dangling one, a wrong shape and a range past
  the data file are each reported with the key path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.genai_packages import copy_package, edit_genai_config, real_package_dirs
from syrupy.assertion import SnapshotAssertion

from q38.cli import main
from q38.errors import PackageError
from q38.package.genai.config import dumps_genai_config, parse_genai_config, read_genai_config
from q38.package.genai.package import GenaiPackage, genai_graph_refs, open_genai_package
from q38.package.genai.reader import READER as GENAI_READER
from q38.package.genai.shared_initializers import shared_initializer_problems
from q38.package.graphs import load_graph
from q38.package.surface import open_any, require_surface

REAL = real_package_dirs()
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real"


@pytest.fixture(scope="module")
def exported(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A genai package (model.type qwen3_5_moe_text) written by q38 export-genai."""
    out = tmp_path_factory.mktemp("genai") / "exported"
    assert main(["export-genai", str(tiny_cpu_package), str(out), "--link", "copy"]) == 0
    return out


def _packages(exported: Path) -> list[Path]:
    return [exported, *REAL]


def test_every_builder_package_opens_and_lists_every_onnx(exported: Path) -> None:
    for pkg in _packages(exported):
        opened = open_any(pkg)
        assert opened.surface == "genai" and opened.root == pkg
        refs = opened.graphs()
        assert refs[0].role == "decoder" and refs[0].section == "model.decoder"
        assert {r.rel for r in refs} == {p.name for p in pkg.glob("*.onnx")}, pkg
        for ref in refs:
            assert ref.path == pkg / ref.rel and ref.path.is_file()
            assert ref.provider in ("CPU", "cuda")
            load_graph(ref.path, root=pkg)


def test_providers_come_from_the_config(exported: Path, tmp_path: Path) -> None:
    pkg = copy_package(exported, tmp_path / "pkg")
    edit_genai_config(pkg, lambda d: d["model"]["decoder"]["session_options"].update(
        {"provider_options": [{"cuda": {"enable_cuda_graph": "0"}}], "ep.cuda.fpa_intb_gemm": "1"}))  # fmt: skip
    (ref,) = open_any(pkg).graphs()
    assert ref.providers == ("cuda",) and ref.provider == "cuda"
    assert ref.session_entries == {"ep.cuda.fpa_intb_gemm": "1"}


def test_v12b_package_opens_through_the_same_entry_point(tiny_cpu_package: Path) -> None:
    opened = open_any(tiny_cpu_package)
    assert opened.surface == "v12b"
    assert [(r.role, r.rel) for r in opened.graphs()] == [
        ("target", "model.onnx"), ("head", "head_r2.onnx"), ("prefill", "prefill.onnx")]  # fmt: skip


def test_config_round_trips_canonically_and_og_accepts_the_dump(exported: Path, tmp_path: Path) -> None:
    og = pytest.importorskip("onnxruntime_genai")
    for pkg in _packages(exported):
        cfg = read_genai_config(pkg / "genai_config.json")
        text = dumps_genai_config(cfg)
        assert parse_genai_config(json.loads(text)) == cfg
        assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        out = tmp_path / pkg.name
        out.mkdir()
        (out / "genai_config.json").write_text(text, encoding="utf-8")
        og.Config(str(out))


def test_a_model_type_the_builder_never_writes_is_refused(exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = copy_package(exported, tmp_path / "pkg")
    edit_genai_config(pkg, lambda d: d["model"].update({"type": "whisper"}))
    with pytest.raises(PackageError, match=r"model.type 'whisper' is not a decoder model type the onnxruntime-genai builder writes"):
        open_any(pkg)


@pytest.mark.parametrize("case", ["missing", "directory", "traversal"])
def test_a_graph_the_config_names_must_be_a_file_inside(case: str, exported: Path, tmp_path: Path) -> None:
    pkg = copy_package(exported, tmp_path / "pkg")
    if case == "missing":
        (pkg / "model.onnx").unlink()
        expect = r"model.decoder.filename: 'model.onnx' does not exist"
    elif case == "directory":
        (pkg / "model.onnx").unlink()
        (pkg / "model.onnx").mkdir()
        expect = r"model.decoder.filename: 'model.onnx' is a directory"
    else:
        edit_genai_config(pkg, lambda d: d["model"]["decoder"].update({"filename": "../model.onnx"}))
        expect = r"model.decoder.filename: must not contain path traversal"
    with pytest.raises(PackageError, match=expect) as info:
        open_any(pkg)
    assert "\n" not in str(info.value)


def test_config_symlink_leaving_the_package_is_refused(exported: Path, tmp_path: Path) -> None:
    pkg = copy_package(exported, tmp_path / "pkg")
    outside = tmp_path / "elsewhere.json"
    os.replace(pkg / "genai_config.json", outside)
    (pkg / "genai_config.json").symlink_to(outside)
    with pytest.raises(PackageError, match="outside the package directory"):
        open_any(pkg)


@pytest.mark.parametrize("case", ["missing", "a file", "config a fifo"])
def test_a_path_that_is_no_package_directory_or_whose_config_is_no_file_is_one_line(case: str, tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """Detecting the surface is the first read of every command: a path that is not a directory,
    or a config that is not a regular file (a FIFO never blocks it), is refused naming what it is."""
    pkg = tmp_path / "pkg"
    config = pkg / "genai_config.json"
    if case == "a file":
        pkg.write_text("{}")
    elif case == "config a fifo":
        pkg.mkdir()
        os.mkfifo(config)
    with pytest.raises(PackageError) as info:
        open_any(pkg)
    assert messages_snapshot == str(info.value)


def test_a_command_taking_one_surface_refuses_the_other_in_one_line(exported: Path) -> None:
    # q38 offload takes both surfaces now (tests/unit/offload/test_offload_genai.py)
    with pytest.raises(PackageError, match="q38 diff takes q38's own package"):
        require_surface(exported, ("v12b",), command="diff")


def _mtp_packages() -> list[Path]:
    return [p for p in REAL if (p / "mtp.onnx").is_file()]


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda e: e.update({"name": "no.such.tensor"}), "no initializer 'no.such.tensor' in the decoder graph (dangling shared initializer)"),
        (lambda e: e.update({"shape": [*e["shape"], 1]}), "the entry says data_type"),
        (lambda e: e.update({"offset": str(10**12)}), "lie past the end of 'model.onnx.data'"),
        (lambda e: e.update({"length": "7"}), "needs"),
        (lambda e: e.update({"offset": "0x10"}), "must be decimal byte counts"),
    ],
)
def test_shared_initializers_resolve_and_a_broken_entry_is_named(mutate, expect: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert _mtp_packages(), "the int4 cpu + MTP fixture is committed"
    for src in _mtp_packages():
        pkg = open_any(src)
        models = {r.role: load_graph(r.path, root=src) for r in pkg.graphs()}
        sections = {role: s.shared_initializers for role, s in pkg.config.graph_sections.items() if s.shared_initializers}
        assert sections and shared_initializer_problems(src, sections, models) == []
        broken = copy_package(src, tmp_path / src.name)
        edit_genai_config(broken, lambda d: mutate(d["model"]["mtp"]["shared_initializers"][0]))
        cfg = read_genai_config(broken / "genai_config.json")
        problems = shared_initializer_problems(broken, {"mtp": cfg.model.mtp.shared_initializers}, models)  # type: ignore[union-attr]
        assert problems and problems[0][0] == "model.mtp.shared_initializers[0]"
        assert expect in problems[0][1]


def test_a_shared_range_is_checked_against_the_data_file_beside_its_graph() -> None:
    """A graph's external data resolves next to the graph file, not the root the entry is named
    from: checked from the fixtures directory, entries naming ``PKG/model.onnx.data`` still match."""
    assert _mtp_packages(), "the int4 cpu + MTP fixture is committed"
    for src in _mtp_packages():
        pkg = open_any(src)
        models = {r.role: load_graph(r.path, root=src) for r in pkg.graphs()}
        sections = {role: tuple(replace(e, data_file=f"{src.name}/{e.data_file}") for e in s.shared_initializers)
                    for role, s in pkg.config.graph_sections.items() if s.shared_initializers}  # fmt: skip
        assert sections and shared_initializer_problems(src.parent, sections, models) == []


def test_a_graph_section_without_session_options_runs_with_the_decoders(tmp_path: Path) -> None:
    """GenAI's default: a graph section with no ``session_options`` of its own (``mtp`` here) gets the
    decoder's providers and entries; a section with its own block keeps only those."""
    doc = {"model": {
        "decoder": {"filename": "d.onnx", "session_options": {"provider_options": [{"cuda": {}}], "ep.a": "1"}},
        "mtp": {"filename": "m.onnx"},
        "engram": {"filename": "e.onnx", "session_options": {"ep.own": "2"}},
    }}  # fmt: skip
    refs = {r.role: r for r in genai_graph_refs(tmp_path, doc)}
    assert (refs["mtp"].providers, refs["mtp"].session_entries) == (("cuda",), {"ep.a": "1"})
    assert (refs["engram"].providers, refs["engram"].session_entries) == ((), {"ep.own": "2"})
    assert (refs["decoder"].providers, refs["decoder"].session_entries) == (("cuda",), {"ep.a": "1"})
    assert {(r.path, r.root) for r in refs.values()} == {(tmp_path / f"{c}.onnx", tmp_path) for c in "dme"}


def test_edited_sessions_replace_only_the_entries_under_the_prefix_and_merge_provider_options(
        exported: Path, tmp_path: Path) -> None:
    """``edit_sessions`` (what ``q38 offload`` writes a package's session entries with): the decoder's
    entries under ``drop_prefix`` are replaced by the new ones, every other entry is kept, and the
    provider options merge into the provider the session names."""
    pkg = copy_package(exported, tmp_path / "pkg")
    edit_genai_config(pkg, lambda d: d["model"]["decoder"]["session_options"].update(
        {"provider_options": [{"cuda": {"enable_cuda_graph": "0"}}], "q38.x.old": "1", "keep.me": "2"}))  # fmt: skip
    opened = open_any(pkg)
    edited = opened.edit_sessions({"decoder": {"q38.x.new": "3"}}, drop_prefix="q38.x.",
                                  provider_options={"cuda": {"arena": "1"}}, source="edited")  # fmt: skip
    decoder = edited.config.model.decoder
    assert decoder.session_options is not None
    assert decoder.session_options.session_entries == {"keep.me": "2", "q38.x.new": "3"}
    assert [(p.canonical, p.options) for p in decoder.session_options.providers] == [
        ("cuda", {"enable_cuda_graph": "0", "arena": "1"})]
    assert edited.entries_by_file[decoder.filename] == {"keep.me": "2", "q38.x.new": "3"}


def test_pipeline_stages_are_graphs_of_their_own(tmp_path: Path) -> None:
    """``decoder.pipeline`` (a list of one-stage objects) and ``vision.pipeline`` (one object): every
    stage with a filename is a graph, named by its owner and stage id; a stage repeated is listed once."""
    doc = {"model": {
        "decoder": {"session_options": {"ep.a": "1"}, "pipeline": [
            {"body": {"filename": "body.onnx", "session_options": {"ep.b": "2"}}},
            {"head": {"filename": "head.onnx"}}, {"head": {"filename": "head.onnx"}}, {"nofile": {}}]},
        "vision": {"pipeline": {"patch": {"filename": "patch.onnx"}}},
    }}  # fmt: skip
    refs = genai_graph_refs(tmp_path, doc)
    assert [(r.role, r.section, r.rel, r.session_entries) for r in refs] == [
        ("decoder.pipeline.body", "model.decoder.pipeline.body", "body.onnx", {"ep.b": "2"}),
        ("decoder.pipeline.head", "model.decoder.pipeline.head", "head.onnx", {"ep.a": "1"}),
        ("vision.pipeline.patch", "model.vision.pipeline.patch", "patch.onnx", {"ep.a": "1"}),
    ]  # fmt: skip


def test_an_mtp_section_without_session_options_is_edited_from_the_decoders(tmp_path: Path) -> None:
    """The builder's MTP section has no session_options (it runs with the decoder's): its edited
    block starts from the decoder's entries, drops those under the prefix, and adds its own."""
    pkg = copy_package(FIXTURES / "int4-cpu-mtp", tmp_path / "pkg")
    edit_genai_config(pkg, lambda d: d["model"]["decoder"]["session_options"].update({"q38.x.old": "1", "keep.me": "2"}))
    opened = open_any(pkg)
    edited = opened.edit_sessions({"mtp": {"q38.x.mtp": "3"}}, drop_prefix="q38.x.", provider_options={},
                                  source="edited")  # fmt: skip
    mtp = edited.config.model.mtp
    assert mtp is not None and mtp.session_options is not None
    assert mtp.session_options.session_entries == {"keep.me": "2", "q38.x.mtp": "3"}
    decoder = edited.config.model.decoder.session_options
    assert decoder is not None and decoder.session_entries["q38.x.old"] == "1"  # the decoder is not edited


def test_the_reader_lists_each_graph_sections_own_session_options(tmp_path: Path) -> None:
    """What the session-option rules check besides the decoder's: the blocks other sections write
    themselves (a section without one runs with the decoder's, already checked)."""
    doc = {"model": {"decoder": {"filename": "d.onnx", "session_options": {"a": "1"}},
                     "mtp": {"filename": "m.onnx", "session_options": {"b": "2"}},
                     "engram": {"filename": "e.onnx"}}}  # fmt: skip
    blocks = GENAI_READER.session_blocks(doc, genai_graph_refs(tmp_path, doc))
    assert blocks == [("model.mtp.session_options", {"b": "2"})]


def test_the_reader_reports_a_config_genai_refuses_as_an_error() -> None:
    doc = {"model": {"type": "llama", "context_length": 64, "decoder": {"filename": "m.onnx", "zz": 1}}}
    assert GENAI_READER.config_problem(doc) == ("error", "genai_config.json: model.decoder.zz: unknown key")
    del doc["model"]["decoder"]["zz"]
    assert GENAI_READER.config_problem(doc) is None


def test_a_runtime_profiles_alternate_decoder_is_a_graph_run_with_the_decoders_session(tmp_path: Path) -> None:
    doc = {"model": {"decoder": {"filename": "model.onnx", "session_options": {"ep.a": "1"}}},
           "runtime_profiles": [{"id": "small", "overlay": {"search": {"chunk_size": 8}}},
                                {"id": "big", "overlay": {"model": {"decoder": {"filename": "model_s4.onnx"}}}}]}  # fmt: skip
    refs = genai_graph_refs(tmp_path, doc)
    assert [(r.role, r.section, r.rel, r.session_entries) for r in refs] == [
        ("decoder", "model.decoder", "model.onnx", {"ep.a": "1"}),
        ("profile:big", "runtime_profiles[1].overlay.model.decoder", "model_s4.onnx", {"ep.a": "1"}),
    ]  # fmt: skip


def test_the_decode_graphs_of_a_builder_package_with_mtp() -> None:
    """One decode step runs the decoder and then the MTP graph, each loaded with its config templates."""
    pkg = FIXTURES / "int4-cpu-mtp"
    decode = open_any(pkg).decode_graphs()
    assert [(g.role, g.rel, g.root) for g in decode.graphs] == [("decoder", "model.onnx", pkg), ("mtp", "mtp.onnx", pkg)]
    assert all(any(True for _ in g.model.graph) for g in decode.graphs)
    assert "hidden_states" in decode.graphs[1].inputs and "past_conv_names" in decode.graphs[0].inputs
    assert (decode.head_size, decode.vocab_size, decode.main_hidden) == (16, 512, "hidden_states")


@pytest.mark.parametrize(("edit", "main_hidden"), [
    (lambda d: d["model"]["mtp"].pop("main_hidden_states"), "hidden_states"),  # the decoder's output
    (lambda d: (d["model"]["mtp"].pop("main_hidden_states"), d["model"]["decoder"]["outputs"].update(hidden_states="h")), "h"),
    (lambda d: (d["model"]["mtp"].pop("main_hidden_states"), d["model"]["decoder"]["outputs"].pop("hidden_states")),
     "hidden_states"),
], ids=["decoder-output", "renamed-decoder-output", "default"])  # fmt: skip
def test_the_mtp_graph_reads_the_decoders_hidden_states_output_unless_the_config_names_another(
        tmp_path: Path, edit: Callable[[dict[str, Any]], object], main_hidden: str) -> None:  # fmt: skip
    """Without ``mtp.main_hidden_states`` the MTP graph reads the decoder's ``hidden_states`` output,
    by the name ``model.decoder.outputs`` gives it, else GenAI's default name ``hidden_states``."""
    pkg = copy_package(FIXTURES / "int4-cpu-mtp", tmp_path / "pkg")
    edit_genai_config(pkg, edit)
    assert open_any(pkg).decode_graphs().main_hidden == main_hidden


def test_a_config_that_is_a_directory_is_refused_naming_the_package(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "genai_config.json").mkdir(parents=True)
    with pytest.raises(PackageError) as info:
        open_genai_package(pkg)
    assert messages_snapshot == str(info.value)


def test_a_layered_package_is_refused_as_a_genai_package(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A genai package keeps its config at the top level: q38's layered form (target/, head/) is refused."""
    pkg = tmp_path / "pkg"
    (pkg / "target").mkdir(parents=True)
    (pkg / "head").mkdir()
    (pkg / "target" / "genai_config.json").write_text("{}")
    with pytest.raises(PackageError) as info:
        open_genai_package(pkg)
    assert messages_snapshot == str(info.value)


def test_editing_a_research_configs_sessions_keeps_genais_refusal(tmp_path: Path) -> None:
    """A research-builder config (read with GenAI 0.18.0's refusal kept) stays editable: the edit is re-parsed on its surface."""
    doc = {"model": {"type": "llama", "context_length": 64, "decoder": {"filename": "model.onnx"},
                     "engram": {"filename": "engram.onnx"}}}  # fmt: skip
    cfg = parse_genai_config(doc, source="src", research=True)
    assert cfg.og_refusal == "src: model.engram: unknown key"
    edited = GenaiPackage(root=tmp_path, config=cfg).edit_sessions(
        {"decoder": {"q38.x.a": "1"}}, drop_prefix="q38.x.", provider_options={}, source="edited")
    assert edited.config.og_refusal == "edited: model.engram: unknown key"
    assert edited.entries_by_file == {"model.onnx": {"q38.x.a": "1"}}
    assert json.loads(edited.text)["model"]["engram"] == {"filename": "engram.onnx"}


def test_a_runtime_profile_without_an_id_is_named_by_its_position(tmp_path: Path) -> None:
    """The tolerant graph listing names a runtime profile that lacks an ``id`` by its index, so its
    alternate decoder is still reported under a role the user can find in the config."""
    doc = {"model": {"decoder": {"filename": "model.onnx"}},
           "runtime_profiles": [{"id": "small", "overlay": {"search": {"chunk_size": 8}}},
                                {"overlay": {"model": {"decoder": {"filename": "model_s4.onnx"}}}}]}  # fmt: skip
    refs = genai_graph_refs(tmp_path, doc)
    assert [(r.role, r.section, r.rel) for r in refs] == [
        ("decoder", "model.decoder", "model.onnx"),
        ("profile:1", "runtime_profiles[1].overlay.model.decoder", "model_s4.onnx"),
    ]  # fmt: skip


def test_a_config_the_caller_passes_is_used_instead_of_the_file(tmp_path: Path) -> None:
    """open_genai_package validates and keeps the config a caller already holds (e.g. an edited one)
    rather than re-reading genai_config.json, which here names a model type it would refuse."""
    pkg = copy_package(FIXTURES / "int4-cpu-mtp", tmp_path / "pkg")
    cfg = read_genai_config(pkg / "genai_config.json")
    edit_genai_config(pkg, lambda d: d["model"].update({"type": "whisper"}))
    with pytest.raises(PackageError, match=r"model\.type 'whisper'"):
        open_genai_package(pkg)
    opened = open_genai_package(pkg, config=cfg)
    assert opened.config is cfg
    assert [r.rel for r in opened.graphs()] == ["model.onnx", "mtp.onnx"]
