"""The path fields of a config document: every file it names, by JSON key path and kind.

Invariants: custom-op libraries of the qwen38 graph are listed under
``model.qwen38_graph.libraries.<name>``; a runtime profile's overlay decoder file is listed
under ``runtime_profiles[i].overlay.model.decoder.filename``.
"""

from __future__ import annotations

from pathlib import Path

from q38.package.path_fields import PathField, path_fields


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
