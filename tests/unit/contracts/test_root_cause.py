"""Which files of a package are missing: the faults ``contracts.root_cause`` folds violations into.

``package_faults`` gathers every file a package refers to (each graph, each graph's external-data
files, each path field of the config) and keeps those that do not exist. The folding of
violations into one root cause per file is pinned end to end in
``tests/unit/faults/test_missing_files.py``; here the fault list itself, which names the file by
every spelling a message may use and the graphs that keep data in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syrupy.assertion import SnapshotAssertion

from contracts.package_view import GraphFile
from contracts.path_fields import path_view
from contracts.root_cause import package_faults


def _pkg(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "model.onnx").write_bytes(b"graph")
    (root / "head.onnx").write_bytes(b"graph")
    (root / "head.onnx.data").write_bytes(b"data")
    return root


def test_a_graphs_missing_data_file_is_named_from_the_root_and_as_the_graph_spells_it(
        tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:  # fmt: skip
    root = _pkg(tmp_path)
    target = GraphFile(
        "target", root / "sub" / "model.onnx", root / "sub", (("w", "model.onnx.data"), ("b", ""))
    )
    head = GraphFile("head", root / "head.onnx", root, (("h", "head.onnx.data"),))
    faults = package_faults(path_view(root, root, {}), [target, head])
    (fault,) = faults  # the graphs and the head's data exist; an empty location names no file
    assert fault.rel == "sub/model.onnx.data"
    assert fault.spellings == (
        "sub/model.onnx.data",
        str(root / "sub" / "model.onnx.data"),
        "model.onnx.data",
    )
    # the graph that keeps data there, by its path from the package root (not from the cwd)
    assert fault.data_of == ("sub/model.onnx (target)",)
    assert messages_snapshot == {f.rel: f.state for f in faults}


def test_a_data_file_two_graphs_share_names_both_once(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    refs = (("w", "../shared.data"), ("v", "../shared.data"))
    target = GraphFile("target", root / "sub" / "model.onnx", root, refs)
    head = GraphFile("head", root / "head.onnx", root, (("h", "shared.data"),))
    (fault,) = package_faults(path_view(root, root, {}), [target, head])
    assert fault.rel == "shared.data"
    assert fault.spellings == ("shared.data", str(root / "shared.data"), "../shared.data")
    assert fault.data_of == ("sub/model.onnx (target)", "head.onnx (head)")


def test_a_missing_graph_is_a_fault_and_a_file_outside_the_package_is_left_to_its_rule(
    tmp_path: Path,
) -> None:
    root = _pkg(tmp_path)
    gone = GraphFile("prefill", root / "prefill.onnx", root, (("w", "../../elsewhere.data"),))
    (fault,) = package_faults(path_view(root, root, {}), [gone])
    assert (fault.rel, fault.spellings, fault.data_of) == (
        "prefill.onnx",
        ("prefill.onnx", str(root / "prefill.onnx")),
        (),
    )


def _config(**decoder: Any) -> dict[str, Any]:
    return {
        "model": {"decoder": decoder, "qwen38_graph": {"weights_pool": "pool/weights_pool.txt"}}
    }


def test_the_configs_path_fields_are_checked(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    (root / "pool").mkdir()
    faults = package_faults(path_view(root, root, _config(filename="missing.onnx")), [])
    assert [(f.rel, f.spellings, f.data_of) for f in faults] == [
        ("missing.onnx", ("missing.onnx", str(root / "missing.onnx")), ()),
        (
            "pool/weights_pool.txt",
            ("pool/weights_pool.txt", str(root / "pool" / "weights_pool.txt")),
            (),
        ),
    ]
    # relative to the config's directory, as GenAI resolves them
    (root / "sub" / "missing.onnx").write_bytes(b"graph")
    (root / "sub" / "pool").mkdir()
    assert [f.rel for f in package_faults(path_view(root, root / "sub", _config(filename="missing.onnx")), [])] == [
        "sub/pool/weights_pool.txt"]  # fmt: skip


def test_a_path_field_that_names_no_file_is_no_fault(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    (root / "pool").mkdir()
    (root / "pool" / "weights_pool.txt").write_text("")
    for value in ("", "missing\0.onnx", 7, None):
        # empty, not a path the OS can open, not a string: PATH-FIELD-001 refuses those, not a missing file
        assert package_faults(path_view(root, root, _config(filename=value)), []) == [], value
    assert [
        f.rel for f in package_faults(path_view(root, root, _config(filename="gone.onnx")), [])
    ] == ["gone.onnx"]
