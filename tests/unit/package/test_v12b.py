"""The v12b reader's graph listing: every graph the config names, with the session entries
runtime profiles overlay on it.

Invariants: a runtime profile's ``overlay.model.decoder`` applies its session options to the
graph its ``filename`` names (default: the decoder's file), never to the head.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from support.minipkg import build_layered_mini_package, build_mini_package, mini_config
from syrupy.assertion import SnapshotAssertion

from q38.errors import PackageError
from q38.package import Manifest, dumps_manifest, open_package
from q38.package.surface import open_any
from q38.package.v12b.config import config_to_dict
from q38.package.v12b.reader import READER, v12b_graph_refs


def test_profile_overlays_reach_the_graph_their_decoder_names(tmp_path: Path) -> None:
    doc = config_to_dict(mini_config(multidraft={"s4": "model_s4.onnx"}))
    doc["runtime_profiles"] = [
        {"id": "small", "eligibility": {"minimum_total_device_memory_bytes": 0},
         "overlay": {"model": {"decoder": {"filename": "model_s4.onnx",
                                           "session_options": {"session.moe.offload.mode": "off"}}}}},
        {"id": "big", "eligibility": {"minimum_total_device_memory_bytes": 100},
         "overlay": {"model": {"decoder": {"session_options": {"session.big": "1"}}}}},
        {"id": "head-file", "eligibility": {"minimum_total_device_memory_bytes": 200},
         "overlay": {"model": {"decoder": {"filename": "head_r2.onnx", "session_options": {"session.h": "1"}}}}},
    ]  # fmt: skip
    refs = {r.role: r for r in v12b_graph_refs(tmp_path, tmp_path, doc)}
    assert sorted(refs) == ["head", "prefill", "s4", "target"]
    assert {role: r.section for role, r in refs.items()} == {
        "target": "model.qwen38_graph", "head": "model.qwen38_graph.fold.head_r2",
        "prefill": "model.qwen38_graph", "s4": "model.qwen38_graph",
    }  # fmt: skip
    assert refs["s4"].path == tmp_path / "model_s4.onnx"
    assert refs["s4"].overlay_entries == ({"session.moe.offload.mode": "off"},)
    assert refs["target"].overlay_entries == ({"session.big": "1"},)
    assert refs["target"].session_entries == {"session.moe.offload.mode": "auto"}
    assert refs["head"].overlay_entries == refs["prefill"].overlay_entries == ()
    assert (refs["head"].providers, refs["target"].providers) == (("cuda",), ())  # the head keeps its own options


def test_a_profile_decoder_that_is_no_other_graph_is_a_graph_of_its_own(tmp_path: Path) -> None:
    """A runtime profile whose decoder is a file of its own (a smaller model for small GPUs) is listed
    as ``profile:ID`` under its config key, with the decoder's options and the overlay on them, so
    ``q38 check`` loads and checks it; profiles naming a listed graph add no second entry."""
    doc = config_to_dict(mini_config())
    doc["runtime_profiles"] = [
        {"id": "same", "eligibility": {"minimum_total_device_memory_bytes": 0},
         "overlay": {"model": {"decoder": {"session_options": {"session.a": "1"}}}}},
        {"id": "small", "eligibility": {"minimum_total_device_memory_bytes": 100},
         "overlay": {"model": {"decoder": {"filename": "model_small.onnx", "session_options": {"session.b": "2"}}}}},
        {"id": "small-again", "eligibility": {"minimum_total_device_memory_bytes": 200},
         "overlay": {"model": {"decoder": {"filename": "model_small.onnx"}}}},
    ]  # fmt: skip
    refs = v12b_graph_refs(tmp_path, tmp_path, doc)
    assert [r.role for r in refs] == ["target", "head", "prefill", "profile:small"]
    small = refs[-1]
    assert (small.path, small.rel, small.section) == (tmp_path / "model_small.onnx", "model_small.onnx",
                                                      "runtime_profiles[1].overlay.model.decoder")  # fmt: skip
    assert (small.session_entries, small.overlay_entries) == (refs[0].session_entries, ({"session.b": "2"},))
    assert small.root == tmp_path  # its external data is confined to the target's directory, like the target's
    assert refs[0].overlay_entries == ({"session.a": "1"},)


@pytest.mark.parametrize(("variant", "providers", "expected"), [
    ("faithful", [], ("cpu", "its session options name no CUDA provider")),
    ("faithful", [{"cuda": {}}], ("cuda", "the package is the faithful variant with a CUDA provider")),
    ("cpu", [{"cuda": {}}], ("cpu", "the package is the cpu variant")),
])  # fmt: skip
def test_the_runtime_a_v12b_package_runs_on_follows_its_variant_and_providers(
        tmp_path: Path, variant: str, providers: list, expected: tuple[str, str]) -> None:  # fmt: skip
    pkg = build_mini_package(tmp_path / "pkg")
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["model"]["qwen38_graph"]["variant"] = variant
    doc["model"]["decoder"]["session_options"]["provider_options"] = providers
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert open_any(pkg).preferred_target() == expected


def _replace_by_directory(name: str) -> Callable[[Path], None]:
    def damage(pkg: Path) -> None:
        (pkg / name).unlink()
        (pkg / name).mkdir()
    return damage


def _drop_pool_data(pkg: Path) -> None:
    pool = pkg / "weights_pool.txt"
    pool.write_text(pool.read_text(encoding="utf-8").replace("w0001 head_r2.onnx.data", "w0001 gone.data"), encoding="utf-8")


@pytest.mark.parametrize("damage", [
    (_replace_by_directory("genai_config.json")),
    (lambda pkg: (pkg / "weights_pool.txt").unlink()),
    (_replace_by_directory("package_manifest.json")),
    (_drop_pool_data),
], ids=["config-dir", "pool-missing", "manifest-dir", "pool-data-missing"])  # fmt: skip
def test_a_missing_or_misplaced_file_is_named_with_the_file_that_names_it(
        tmp_path: Path, damage: Callable[[Path], None], messages_snapshot: SnapshotAssertion) -> None:  # fmt: skip
    pkg = build_mini_package(tmp_path / "pkg")
    damage(pkg)
    with pytest.raises(PackageError) as info:
        open_package(pkg)
    assert messages_snapshot == str(info.value)


def test_the_decode_graph_of_a_v12b_package_is_its_loaded_target(tmp_path: Path) -> None:
    pkg = build_mini_package(tmp_path / "pkg")
    decode = open_any(pkg).decode_graphs()
    (step,) = decode.graphs
    assert (step.role, step.rel, step.root, dict(step.inputs)) == ("decoder", "model.onnx", pkg, {"input_ids": "x"})
    assert [n.op_type for n in step.model.graph] == ["MatMul"]
    assert (decode.head_size, decode.vocab_size) == (4, 16)


def test_a_path_that_is_no_package_directory_is_refused_in_one_line(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    (tmp_path / "layered" / "target").mkdir(parents=True)
    (tmp_path / "layered" / "target" / "genai_config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "file").write_text("x", encoding="utf-8")
    for path in (tmp_path / "layered", tmp_path / "nope", tmp_path / "file"):
        with pytest.raises(PackageError) as info:
            open_package(path)
        assert messages_snapshot == str(info.value)
    with pytest.raises(PackageError) as info:
        open_package(f"{tmp_path}/a\0b")
    assert messages_snapshot == str(info.value)


@pytest.mark.parametrize("offset", [1, 512, 1025])
def test_a_pool_entry_past_the_end_of_its_data_file_is_refused(tmp_path: Path, offset: int, messages_snapshot: SnapshotAssertion) -> None:
    """The mini package's model.onnx.data holds 1024 bytes: a range that ends (or starts) past it is refused."""
    pkg = build_mini_package(tmp_path / "pkg")
    pool = pkg / "weights_pool.txt"
    pool.write_text(pool.read_text(encoding="utf-8").replace(
        "w0000 model.onnx.data 0 1024 ", f"w0000 model.onnx.data {offset} 1024 "), encoding="utf-8")  # fmt: skip
    with pytest.raises(PackageError) as info:
        open_package(pkg)
    assert messages_snapshot == str(info.value)


def test_a_pool_written_with_crlf_line_ends_reads_as_with_lf(tmp_path: Path) -> None:
    lf = open_package(build_mini_package(tmp_path / "lf")).pool.entries
    pkg = build_mini_package(tmp_path / "crlf")
    pool = pkg / "weights_pool.txt"
    pool.write_bytes(pool.read_bytes().replace(b"\n", b"\r\n"))
    assert open_package(pkg).pool.entries == lf


def test_custom_op_libraries_the_config_names_are_opened_with_the_package(tmp_path: Path) -> None:
    """``qwen38_graph.libraries`` and a decoder's ``custom_ops_library`` that exist in the package open."""
    pkg = build_mini_package(tmp_path / "pkg")
    (pkg / "lib").mkdir()
    (pkg / "lib" / "libqmoe.so").write_bytes(b"\x7fELF")
    (pkg / "libops.so").write_bytes(b"\x7fELF")
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["model"]["qwen38_graph"]["libraries"] = {"qmoe": "lib/libqmoe.so"}
    doc["model"]["decoder"]["session_options"]["custom_ops_library"] = "libops.so"
    path.write_text(json.dumps(doc), encoding="utf-8")
    package = open_package(pkg)
    assert package.config.model.qwen38_graph.libraries == {"qmoe": "lib/libqmoe.so"}
    assert package.config.model.decoder.session_options.custom_ops_library == "libops.so"


def test_a_layered_package_keeps_the_head_directorys_own_manifest(tmp_path: Path) -> None:
    """Layered: target/ and head/ each hold a manifest; the package carries both, unmixed."""
    root = build_layered_mini_package(tmp_path / "layered")
    (root / "head" / "package_manifest.json").write_text(dumps_manifest(Manifest(command="head-test")), encoding="utf-8")
    package = open_package(root)
    assert package.layout == "layered"
    assert package.graph_path("head") == root / "head" / "head_r2.onnx"
    assert package.manifest is not None and package.head_manifest is not None
    assert (package.manifest.command, package.head_manifest.command) == ("test", "head-test")


def test_opening_a_package_logs_its_path_and_layout(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """INFO names the package directory being read and whether it is flat or layered."""
    pkg = build_mini_package(tmp_path / "pkg")
    with caplog.at_level(logging.INFO, logger="q38.package.v12b.package"):
        open_package(pkg)
    assert f"reading package {pkg} (flat)" in [r.getMessage() for r in caplog.records if r.name == "q38.package.v12b.package"]


@pytest.mark.parametrize(("variant", "providers", "expected"), [
    ("faithful", ("cuda",), {"cuda"}),
    ("faithful", (), {"cuda", "cpu"}),
    ("cpu", ("cuda",), {"cuda", "cpu"}),
    ("cpu", (), {"cpu"}),
])  # fmt: skip
def test_the_eps_a_v12b_graphs_kernel_rules_concern_follow_variant_and_providers(
        variant: str, providers: tuple[str, ...], expected: set[str]) -> None:  # fmt: skip
    """A faithful graph on CUDA is checked against CUDA rules only; CPU rules apply to the cpu variant or without CUDA."""
    doc = config_to_dict(mini_config(variant=variant))
    assert READER.graph_eps(doc, providers) == frozenset(expected)


def test_each_graph_of_a_layered_package_keeps_its_data_inside_its_own_directory(tmp_path: Path) -> None:
    """A layered package's graphs are confined to their own layer: the target and prefill to
    ``target/``, the head to ``head/`` (the directory their external data must stay inside)."""
    pkg = build_layered_mini_package(tmp_path / "pkg")
    refs = open_any(pkg).graphs()
    assert [(r.role, r.rel, r.root) for r in refs] == [
        ("target", "target/model.onnx", pkg / "target"),
        ("head", "head/head_r2.onnx", pkg / "head"),
        ("prefill", "target/prefill.onnx", pkg / "target"),
    ]  # fmt: skip


def test_a_v12_package_lists_the_graphs_its_strict_reader_opens(tmp_path: Path) -> None:
    """A v12 config (``model.qwen38`` with head_graph / prefill_graph) is migrated for listings too:
    ``list_graphs`` (what q38 check, fit and the offload fit guard walk) names the same graphs as
    the strict reader (it named none, so a v12 package was checked and sized without its graphs)."""
    from q38.package.surface import list_graphs

    pkg = build_mini_package(tmp_path / "pkg")
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    graph = doc["model"].pop("qwen38_graph")
    doc["model"]["type"] = "qwen38_flash"
    doc["model"]["qwen38"] = {"head_graph": graph["fold"]["head_r2"]["filename"], "prefill_graph": "prefill.onnx",
                              "prefill_chunk": graph["prefill"]["chunk"], "kv_capacity": graph["kv_capacity"],
                              "pool": graph["weights_pool"]}  # fmt: skip
    path.write_text(json.dumps(doc), encoding="utf-8")
    strict = [(g.role, g.path) for g in open_any(pkg).graphs()]
    assert strict == [("target", pkg / "model.onnx"), ("head", pkg / "head_r2.onnx"), ("prefill", pkg / "prefill.onnx")]
    assert [(g.role, g.path) for g in list_graphs(pkg).graphs] == strict
    assert json.loads(path.read_text(encoding="utf-8")) == doc  # the listing rewrote nothing
