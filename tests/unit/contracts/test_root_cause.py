"""How ``contracts.root_cause`` finds a package's missing files and folds their violations.

``package_faults`` gathers every file a package refers to (each graph, each graph's external-data
files, each path field of the config) and keeps those that do not exist; ``fold_file_faults``
keeps one violation per such file. Pinned end to end in ``tests/unit/faults/test_missing_files.py``
(which the contracts mutation run does not select); here the parts: the fault list (every
spelling a message may use, the graphs that keep data in the file), which violation is the
root, where it stands and what it says (q38's wording: ``messages_snapshot``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from contracts._rule import Violation
from contracts.package_view import GraphFile
from contracts.path_fields import path_view
from contracts.root_cause import FileFault, fold_file_faults, package_faults


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


_DATA = FileFault(
    "model.onnx.data",
    ("model.onnx.data", "/p/model.onnx.data"),
    "does not exist",
    ("model.onnx (target)", "head.onnx (head)"),
)
_POOL = FileFault("weights_pool.txt", ("weights_pool.txt", "/p/weights_pool.txt"), "does not exist")


def test_a_files_violations_fold_into_the_rule_about_the_file_where_the_first_stood(
    messages_snapshot: SnapshotAssertion,
) -> None:
    found = [
        Violation("ORT-MODEL-004", "initializer 'a': model.onnx.data: no such file", "target"),
        Violation("OTHER-001", "an unrelated violation", "target"),
        Violation("PKG-GRAPH-001", "graph reads model.onnx.data", "head", severity="warning"),
        Violation(
            "PKG-EXTDATA-001",
            "initializer 'a' external data 'model.onnx.data' is missing",
            "target",
        ),
        Violation("PKG-GRAPH-001", "graph reads model.onnx.data", "target"),
        Violation(
            "PKG-EXTDATA-001", "initializer 'b' external data 'model.onnx.data' is missing", "head"
        ),
        Violation("PKG-GRAPH-001", "graph reads model.onnx.data", ""),
    ]
    folded = fold_file_faults(found, [_POOL, _DATA])
    # the first PKG-EXTDATA-001 error is the root (the rules about the file before the ones failing
    # because of it), in the place of the group's first violation; the others are counted in it
    assert [(v.rule_id, v.graph, v.folded) for v in folded] == [
        ("PKG-EXTDATA-001", "target", 5),
        ("OTHER-001", "target", 0),
    ]
    assert folded[1] is found[1]
    assert messages_snapshot == {"data file": folded[0].message}


def test_a_file_no_graph_keeps_data_in_names_the_graphs_of_its_violations(
    messages_snapshot: SnapshotAssertion,
) -> None:
    found = [
        Violation("ORT-MODEL-004", "weights_pool.txt is not there", "target"),
        Violation("X-002", "weights_pool.txt again", ""),
        Violation("X-001", "weights_pool.txt again", "head"),
        Violation("X-001", "weights_pool.txt again", "target"),
    ]
    (root,) = fold_file_faults(found, [_POOL])
    assert (root.rule_id, root.graph, root.folded) == ("ORT-MODEL-004", "target", 3)
    about_file = [
        Violation("X-001", "weights_pool.txt: not a regular file", "head"),
        Violation("X-002", "reads weights_pool.txt", "head"),
    ]
    (own,) = fold_file_faults(about_file, [_POOL])
    assert own.message.startswith("weights_pool.txt: not a regular file")  # its own words first
    assert messages_snapshot == {"pool": root.message, "pool, about the file": own.message}


@pytest.mark.parametrize(
    ("group", "root"),
    [
        # an error of a rule about the file first; a warning of one is not the root
        ([("X-001", "error"), ("PKG-READ-001", "warning"), ("PATH-FIELD-003", "error")], 2),
        ([("PATH-FIELD-003", "error"), ("PKG-READ-001", "error")], 1),
        ([("ORT-MODEL-004", "error"), ("PKG-GRAPH-001", "error")], 1),
        ([("X-001", "warning"), ("X-002", "error"), ("X-003", "error")], 1),  # else the first error
        ([("X-001", "warning"), ("X-002", "warning")], 0),  # else the first violation
    ],
)
def test_the_root_of_a_group_is_chosen_by_rule_then_severity(
    group: list[tuple[str, str]], root: int
) -> None:
    found = [
        Violation(rule, f"weights_pool.txt problem {i}", severity=sev)
        for i, (rule, sev) in enumerate(group)
    ]
    (folded,) = fold_file_faults(found, [_POOL])
    assert (folded.rule_id, folded.severity, folded.folded) == (
        group[root][0],
        group[root][1],
        len(group) - 1,
    )
