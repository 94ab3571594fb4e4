"""The graph memo of a gated command: each graph parsed once, never a stale or foreign model.

Invariants: outside a memo every load parses; while recording (the source gate) a file loaded
twice is parsed once; after recording the command's first load takes the gate's model with the
``meta`` it had when loaded (no rule's cached facts), later loads parse afresh; a file whose
identity changed since the gate read it is parsed again, and its external references are
checked again on every take; a written model answers a load only when the file holds exactly the
bytes ``save_graph(keep=True)`` wrote, and only in the output check (``judge``); nothing is kept
once the block is left.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
from support.minipkg import WEIGHT, _external, write_matmul_graph

from q38.errors import GraphError
from q38.package import load_graph, save_graph
from q38.package.graph_memo import active_memo, graph_memo


def _pkg(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "model.onnx.data").write_bytes(WEIGHT.tobytes())
    write_matmul_graph(pkg / "model.onnx", weight=_external("w", "model.onnx.data", 0, WEIGHT))
    return pkg


def _parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of onnx-ir deserializations (one per graph parsed)."""
    calls: list[int] = []
    real = ir.serde.deserialize_model

    def counted(proto):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(proto)

    monkeypatch.setattr(ir.serde, "deserialize_model", counted)
    return calls


def test_without_a_memo_every_load_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _pkg(tmp_path)
    parses = _parses(monkeypatch)
    first, second = load_graph(pkg / "model.onnx", root=pkg), load_graph(pkg / "model.onnx", root=pkg)
    assert first is not second and len(parses) == 2
    assert active_memo() is None


def test_the_gates_model_is_handed_once_to_the_command_without_its_cached_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = _pkg(tmp_path)
    parses = _parses(monkeypatch)
    with graph_memo() as memo:
        gate = load_graph(pkg / "model.onnx", root=pkg)
        assert load_graph(pkg / "model.onnx", root=pkg) is gate  # the gate reading it again
        gate.meta["contracts.facts"] = "facts of the gate"
        memo.stop_recording()
        taken = load_graph(pkg / "model.onnx", root=pkg)
        assert taken is gate
        assert "contracts.facts" not in taken.meta and taken.meta["q38.path"] == str(pkg / "model.onnx")
        again = load_graph(pkg / "model.onnx", root=pkg)  # the command's second load: its own parse
        assert again is not gate
        assert len(parses) == 2 and memo.parsed == 2
    assert active_memo() is None


def test_a_load_under_another_root_or_check_is_not_the_gates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _pkg(tmp_path)
    with graph_memo() as memo:
        gate = load_graph(pkg / "model.onnx", root=pkg)
        memo.stop_recording()
        assert load_graph(pkg / "model.onnx", root=pkg, check_structure=False) is not gate
        assert load_graph(pkg / "model.onnx", root=tmp_path) is not gate


def test_a_graph_file_changed_after_the_gate_is_parsed_again(tmp_path: Path) -> None:
    pkg = _pkg(tmp_path)
    with graph_memo() as memo:
        gate = load_graph(pkg / "model.onnx", root=pkg)
        write_matmul_graph(pkg / "model.onnx", weight=_external("w", "model.onnx.data", 0, WEIGHT), out_name="z")
        memo.stop_recording()
        taken = load_graph(pkg / "model.onnx", root=pkg)
        assert taken is not gate and taken.graph.outputs[0].name == "z"


def test_a_reference_broken_after_the_gate_is_refused_on_the_take(tmp_path: Path) -> None:
    pkg = _pkg(tmp_path)
    with graph_memo() as memo:
        load_graph(pkg / "model.onnx", root=pkg)
        os.truncate(pkg / "model.onnx.data", 16)
        memo.stop_recording()
        with pytest.raises(GraphError, match=r"model\.onnx"):
            load_graph(pkg / "model.onnx", root=pkg)


def test_a_kept_written_model_answers_only_its_exact_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _pkg(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.onnx.data").write_bytes(WEIGHT.tobytes())
    model = load_graph(pkg / "model.onnx", root=pkg)
    parses = _parses(monkeypatch)
    with graph_memo() as memo:
        memo.stop_recording()
        model.meta["contracts.facts"] = "facts of the rewrite"
        save_graph(model, out / "model.onnx", keep=True)
        assert load_graph(out / "model.onnx", root=out) is not model  # the command's own load: parsed
        with memo.judge():
            judged = load_graph(out / "model.onnx", root=out)
        assert judged is model and len(parses) == 1
        assert "contracts.facts" not in judged.meta and judged.meta["q38.path"] == str(out / "model.onnx")
        other = ir.load(pkg / "model.onnx")
        save_graph(other, out / "other.onnx")  # keep=False: its writer may still change it
        proto = onnx.load(out / "model.onnx", load_external_data=False)
        proto.doc_string = "edited after the write"
        onnx.save(proto, out / "model.onnx")  # valid, but not the bytes written
        with memo.judge():
            assert load_graph(out / "other.onnx", root=out) is not other
            reread = load_graph(out / "model.onnx", root=out)
        assert reread is not model and reread.doc_string == "edited after the write"
    assert len(parses) == 3


def test_a_graph_placed_unchanged_is_judged_as_the_model_the_command_only_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = _pkg(tmp_path)
    out = tmp_path / "out"
    parses = _parses(monkeypatch)
    with graph_memo() as memo:
        load_graph(pkg / "model.onnx", root=pkg)
        memo.stop_recording()
        read = load_graph(pkg / "model.onnx", root=pkg)
        memo.keep_unchanged(read)
        assert load_graph(pkg / "model.onnx", root=pkg) is not read  # the command's next load: its own
        shutil.copytree(pkg, out)
        with memo.judge():
            assert load_graph(out / "model.onnx", root=out) is read
    assert len(parses) == 2


def test_a_taken_model_keeps_its_verdict_only_once_registered_unchanged(tmp_path: Path) -> None:
    pkg = _pkg(tmp_path)
    with graph_memo() as memo:
        gate = load_graph(pkg / "model.onnx", root=pkg)
        memo.keep_verdict(gate, "cpu", ["violation"])
        assert memo.verdict(gate, "cpu") == ["violation"] and memo.verdict(gate, "cuda") is None
        memo.stop_recording()
        taken = load_graph(pkg / "model.onnx", root=pkg)
        assert memo.verdict(taken, "cpu") is None  # the command may rewrite it
        memo.keep_unchanged(taken)
        assert memo.verdict(taken, "cpu") == ["violation"]
        rewritten = load_graph(pkg / "model.onnx", root=pkg)
        assert memo.verdict(rewritten, "cpu") is None  # another model: no verdict of its own yet
