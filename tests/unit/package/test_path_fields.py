"""The path fields of a config document: every file it names, by JSON key path and kind.

Invariants: custom-op libraries of the qwen38 graph are listed under
``model.qwen38_graph.libraries.<name>``; a runtime profile's overlay decoder file is listed
under ``runtime_profiles[i].overlay.model.decoder.filename``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import UnsafePathError, quote
from q38.package.path_fields import (
    PathField,
    Problem,
    check_path_fields,
    field_problem,
    path_fields,
)


def test_qwen38_graph_libraries_are_listed_by_name(tmp_path: Path) -> None:
    doc = {"model": {"qwen38_graph": {"libraries": {"qsa": "lib/libqsa.so", "dsa": "lib/libdsa.so"}}}}
    assert path_fields(doc, config_dir=tmp_path) == [
        PathField("model.qwen38_graph.libraries.dsa", "lib/libdsa.so", "library", tmp_path),
        PathField("model.qwen38_graph.libraries.qsa", "lib/libqsa.so", "library", tmp_path),
    ]


def test_a_runtime_profiles_overlay_decoder_file_is_listed(tmp_path: Path) -> None:
    doc = {
        "model": {"decoder": {"filename": "model.onnx"}},
        "runtime_profiles": [
            {"id": "a", "overlay": {"model": {"decoder": {"session_options": {"log_id": "a"}}}}},
            {"id": "b", "overlay": {"model": {"decoder": {"filename": "model_s4.onnx",
                                                          "session_options": {"custom_ops_library": "libx.so"}}}}},
        ],
    }  # fmt: skip
    assert path_fields(doc, config_dir=tmp_path) == [
        PathField("model.decoder.filename", "model.onnx", "graph", tmp_path),
        PathField("runtime_profiles[1].overlay.model.decoder.filename", "model_s4.onnx", "graph", tmp_path),
        PathField("runtime_profiles[1].overlay.model.decoder.session_options.custom_ops_library", "libx.so",
                  "library", tmp_path),
    ]  # fmt: skip


def test_pipeline_stages_and_the_head_graphs_library_are_listed_by_their_key_paths(tmp_path: Path) -> None:
    doc = {"model": {
        "decoder": {"filename": "model.onnx", "pipeline": [{"body": {"filename": "body.onnx"}}]},
        "qwen38_graph": {"fold": {"head_r2": {"filename": "head.onnx", "session_options": {"custom_ops_library": "libh.so"}}}},
    }}  # fmt: skip
    assert path_fields(doc, config_dir=tmp_path) == [
        PathField("model.decoder.filename", "model.onnx", "graph", tmp_path),
        PathField("model.decoder.pipeline[0].body.filename", "body.onnx", "graph", tmp_path),
        PathField("model.qwen38_graph.fold.head_r2.filename", "head.onnx", "graph", tmp_path),
        PathField("model.qwen38_graph.fold.head_r2.session_options.custom_ops_library", "libh.so", "library", tmp_path),
    ]  # fmt: skip


def test_the_first_bad_shared_initializer_range_is_the_one_reported(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    (tmp_path / "w.bin").write_bytes(b"\0" * 16)
    doc = {"model": {
        "decoder": {"shared_initializers": [{"name": "a", "data_file": "w.bin", "offset": "8", "length": "16"}]},
        "mtp": {"shared_initializers": [{"name": "b", "data_file": "w.bin", "offset": "x", "length": "1"}]},
    }}  # fmt: skip
    with pytest.raises(UnsafePathError) as info:
        check_path_fields(doc, root=tmp_path, config_dir=tmp_path, source="c")
    assert messages_snapshot == str(info.value)


@pytest.mark.parametrize(("name", "value"), [("offset", "-8"), ("length", "1.5"), ("offset", 8)])
def test_a_malformed_shared_initializer_range_names_its_key_and_value(tmp_path: Path, name: str, value: object, messages_snapshot: SnapshotAssertion) -> None:
    """An offset or length that is no decimal string is refused naming its key path and the value written."""
    (tmp_path / "w.bin").write_bytes(b"\0" * 16)
    entry = {"name": "a", "data_file": "w.bin", "offset": "0", "length": "1", name: value}
    doc = {"model": {"mtp": {"shared_initializers": [entry]}}}
    with pytest.raises(UnsafePathError) as info:
        check_path_fields(doc, root=tmp_path, config_dir=tmp_path, source="c")
    assert messages_snapshot == str(info.value)


def test_multidraft_graphs_are_listed_by_role(tmp_path: Path) -> None:
    doc = {"model": {"qwen38_graph": {"multidraft": {"s3": "model_s3.onnx", "s2": "model_s2.onnx"}}}}
    assert path_fields(doc, config_dir=tmp_path) == [
        PathField("model.qwen38_graph.multidraft.s2", "model_s2.onnx", "graph", tmp_path),
        PathField("model.qwen38_graph.multidraft.s3", "model_s3.onnx", "graph", tmp_path),
    ]



def test_an_offload_popularity_file_is_listed_as_a_profile_either_way_it_is_written(tmp_path: Path) -> None:
    """As a session option of its own, or inside ``config_entries`` (the builder's form)."""
    key = "session.moe.offload.popularity_file"
    doc = {"model": {"decoder": {"filename": "model.onnx", "session_options": {key: "pop.bin"}},
                     "mtp": {"filename": "mtp.onnx", "session_options": {"config_entries": {key: "pop_mtp.bin"}}}}}  # fmt: skip
    fields = [f for f in path_fields(doc, config_dir=tmp_path) if f.kind == "profile"]
    assert fields == [
        PathField(f"model.decoder.session_options.{key}", "pop.bin", "profile", tmp_path),
        PathField(f"model.mtp.session_options.config_entries.{key}", "pop_mtp.bin", "profile", tmp_path),
    ]


def test_the_qwen38_graphs_files_are_listed_with_their_kinds(tmp_path: Path) -> None:
    """Graphs are ``graph``, the weights pool ``pool`` and the expert profile ``profile`` (the kind
    decides which contract rules look at a field)."""
    doc = {"model": {"qwen38_graph": {"target": {"filename": "model.onnx"}, "prefill": {"filename": "prefill.onnx"},
                                      "weights_pool": "weights_pool.txt", "expert_profile": "experts.json"}}}  # fmt: skip
    assert path_fields(doc, config_dir=tmp_path) == [
        PathField("model.qwen38_graph.target.filename", "model.onnx", "graph", tmp_path),
        PathField("model.qwen38_graph.prefill.filename", "prefill.onnx", "graph", tmp_path),
        PathField("model.qwen38_graph.weights_pool", "weights_pool.txt", "pool", tmp_path),
        PathField("model.qwen38_graph.expert_profile", "experts.json", "profile", tmp_path),
    ]


def test_each_shared_initializers_data_file_is_listed_and_checked(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A ``shared_initializers`` entry's ``data_file`` is a ``data`` field under its own key path,
    so a missing data file is refused naming that entry."""
    (tmp_path / "w.bin").write_bytes(b"\0" * 16)
    doc: dict[str, Any] = {"model": {
        "decoder": {"filename": "model.onnx", "shared_initializers": [{"name": "a", "offset": "0", "length": "1"},
                                                                      {"name": "b", "data_file": "w.bin"}]},
        "mtp": {"shared_initializers": [{"name": "c", "data_file": "missing.bin", "offset": "0", "length": "1"}]},
    }}  # fmt: skip
    assert path_fields(doc, config_dir=tmp_path) == [
        PathField("model.decoder.filename", "model.onnx", "graph", tmp_path),
        PathField("model.decoder.shared_initializers[1].data_file", "w.bin", "data", tmp_path),
        PathField("model.mtp.shared_initializers[0].data_file", "missing.bin", "data", tmp_path),
    ]
    del doc["model"]["decoder"]["filename"]
    with pytest.raises(UnsafePathError) as info:
        check_path_fields(doc, root=tmp_path, config_dir=tmp_path, source="c")
    assert messages_snapshot == str(info.value)


@pytest.mark.parametrize(
    ("value", "category", "problem"),
    [
        ("../model.onnx", "syntax", "path '../model.onnx' escapes the package directory"),
        ("out.onnx", "escape", "'out.onnx' resolves to {outside}, outside the package directory"),
        ("missing.onnx", "file", "'missing.onnx' does not exist in {root}"),
    ],
)
def test_a_field_problem_names_its_key_and_its_category(tmp_path: Path, value: str, category: str, problem: str) -> None:
    """A bad spelling is ``syntax``, a link leading out of the package ``escape``, a missing file
    ``file``; every message starts with the field's key path."""
    root = tmp_path / "pkg"
    root.mkdir()
    outside = tmp_path / "elsewhere.onnx"
    outside.write_bytes(b"x")
    (root / "out.onnx").symlink_to(outside)
    field = PathField("model.decoder.filename", value, "graph", root)
    found = field_problem(field, root=root)
    assert found is not None
    assert (found.category, found.message) == (
        category, "model.decoder.filename: " + problem.format(outside=quote(os.fspath(outside.resolve())), root=root))


@pytest.mark.parametrize(("kind", "described"), [("directory", "a directory"), ("fifo", "a FIFO (named pipe)")])
def test_a_field_naming_no_regular_file_is_a_file_problem_of_that_field(tmp_path: Path, kind: str, described: str) -> None:
    """A directory or FIFO where a file belongs is a ``file`` problem that carries the field itself
    (the contract runner reads from it which graph not to open) and says what is there instead."""
    if kind == "directory":
        (tmp_path / "model.onnx").mkdir()
    else:
        os.mkfifo(tmp_path / "model.onnx")
    field = PathField("model.decoder.filename", "model.onnx", "graph", tmp_path)
    assert field_problem(field, root=tmp_path) == Problem(
        field, "file", f"model.decoder.filename: 'model.onnx' is {described}, not a regular file")


def test_a_path_field_that_is_no_string_is_refused_naming_its_key_and_value(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A file name written as a number is a ``syntax`` problem whose one line names the key path and the value written."""
    doc = {"model": {"decoder": {"filename": 7}}}
    with pytest.raises(UnsafePathError) as info:
        check_path_fields(doc, root=tmp_path, config_dir=tmp_path, source="c")
    assert messages_snapshot == str(info.value)
