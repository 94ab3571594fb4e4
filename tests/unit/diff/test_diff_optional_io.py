"""``q38 diff`` compares node inputs and outputs as ONNX reads them (issue 27, item 2).

Invariants guarded:
- trailing empty inputs / outputs are absent: a node whose only change is that its optional
  tail was dropped (what ``q38 offload`` does to every QMoE) is not a difference;
- a changed input or output list is shown by position (``input[14]: "x" -> absent``,
  ``input[1]: "a" -> "b"``, ``absent -> "d"``), one line each, never as two truncated lists;
  ``--json`` carries the index and ``null`` for the absent side;
- ``q38 diff`` of a package and its offload conversion lists no node whose only change is
  trailing empty inputs: none at all for a real builder export (it has no router_weights), and
  for a synthetic research package exactly the cleared ``router_weights`` (input 14) per QMoE.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.genai_packages import FIXTURES

from q38.cli import main
from q38.diff import diff_packages
from q38.diff.graph import diff_graph, present_names


def _graph(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": list(nodes)}


def _node(inputs: list[str], outputs: list[str]) -> dict[str, Any]:
    return {"domain": "com.microsoft", "op": "QMoE", "name": "/moe", "attributes": {}, "inputs": inputs, "outputs": outputs}


@pytest.mark.parametrize(
    ("names", "present"),
    [([], []), (["", ""], []), (["a", "", "b", "", ""], ["a", "", "b"]), (["a"], ["a"])],
)
def test_present_names_drops_only_the_trailing_empty_names(names: list[str], present: list[str]) -> None:
    assert present_names(names) == present


def test_a_node_that_only_lost_its_trailing_empty_inputs_is_the_same_node() -> None:
    a = _graph(_node(["x", "r", "", "", "w", "", ""], ["y", ""]))
    b = _graph(_node(["x", "r", "", "", "w"], ["y"]))
    assert list(diff_graph("model.onnx", a, b)) == []
    assert list(diff_graph("model.onnx", b, a)) == []


@pytest.mark.parametrize(
    ("a", "b", "lines"),
    [
        (["x", "r", "", "p"], ["x", "r"], ['input[3]: "p" -> absent']),
        (["x", "r"], ["x", "s", "", "d"], ['input[1]: "r" -> "s"', 'input[3]: absent -> "d"']),
        (["x", "", "p"], ["x", "q", "p", ""], ['input[1]: "" -> "q"']),
    ],
)
def test_a_changed_input_list_is_shown_by_position(a: list[str], b: list[str], lines: list[str]) -> None:
    diffs = list(diff_graph("model.onnx", _graph(_node(a, ["y"])), _graph(_node(b, ["y"]))))
    assert [d.line() for d in diffs] == [f'  ~ node "/moe" (com.microsoft::QMoE) {line}' for line in lines]
    assert [d.facts["index"] for d in diffs] == [int(re.search(r"\[(\d+)\]", x)[1]) for x in lines]  # type: ignore[index]


def test_a_changed_output_is_shown_by_position_with_null_for_absent_in_json() -> None:
    (d,) = diff_graph("model.onnx", _graph(_node(["x"], ["y", "z"])), _graph(_node(["x"], ["y"])))
    assert d.line() == '  ~ node "/moe" (com.microsoft::QMoE) output[1]: "z" -> absent'
    assert d.to_dict() == {
        "file": "model.onnx", "change": "changed", "where": 'node "/moe" (com.microsoft::QMoE) output[1]',
        "section": "node", "node": "/moe", "op": "QMoE", "domain": "com.microsoft", "field": "output", "index": 1,
        "a": "z", "b": None,
    }  # fmt: skip


def _offload(src: Path, out: Path, *args: str) -> None:
    assert main(["offload", str(out), "--from-package", str(src), *args]) == 0


def test_a_real_builder_export_and_its_offload_conversion_differ_in_no_node(tmp_path: Path) -> None:
    src = FIXTURES / "int4-cuda-prepacked"  # QMoE without router_weights: offload drops only empty inputs
    out = tmp_path / "out"
    _offload(src, out)
    diff = diff_packages(src, out)
    assert [d.where for d in diff.differences if d.facts.get("section") == "node"] == []
    files = {d.file for d in diff.differences}
    assert "genai_config.json" in files  # the offload options: the diff still sees the conversion


def test_a_research_package_and_its_offload_conversion_differ_in_router_weights_only(
    tiny_cpu_package: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    _offload(tiny_cpu_package, out, "--target-resident-slots", "2")
    nodes = [d for d in diff_packages(tiny_cpu_package, out).differences
             if d.file == "model.onnx" and d.facts.get("op") == "QMoE"]  # fmt: skip
    assert nodes
    for d in nodes:
        assert (d.facts["field"], d.facts["index"], d.to_dict()["b"]) == ("input", 14, None)
        assert re.fullmatch(r'  ~ node "[^"]+/moe/QMoE" \(com\.microsoft::QMoE\) input\[14\]: "[^"]+Softmax[^"]*" -> absent',
                            d.line())  # fmt: skip
