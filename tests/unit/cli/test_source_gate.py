"""The source gate and the commit-time output check of the writing commands (q38/commands/_source_gate.py).

Invariants (issue 38): ``optimize`` parses each source graph once -- the gate's models are the
ones the command rewrites, the output check judges the rewritten models in memory -- and the
output is identical to what the command wrote before; ``offload`` and ``export-genai`` parse
each source graph at most as often as the command itself reads it; an output that breaks a rule
its source does not is still refused at commit (one line, nothing written), judged in memory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx_ir as ir
import pytest

from contracts.runner import check_package
from q38.cli import main
from q38.errors import LINE_LIMIT


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The graphs onnx-ir deserializes, by graph name, in order."""
    parsed: list[str] = []
    real = ir.serde.deserialize_model

    def counted(proto):  # type: ignore[no-untyped-def]
        parsed.append(proto.graph.name)
        return real(proto)

    monkeypatch.setattr(ir.serde, "deserialize_model", counted)
    return parsed


def _graph_files(pkg: Path) -> list[Path]:
    return sorted(pkg.rglob("*.onnx"))


def test_optimize_parses_each_source_graph_once(
    tiny_cpu_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parsed = _count_parses(monkeypatch)
    out = tmp_path / "out"
    assert main(["optimize", str(tiny_cpu_package), str(out), "--target", "cpu"]) == 0, capsys.readouterr().err
    assert len(parsed) == len(_graph_files(tiny_cpu_package)) == 3, parsed  # was 9: gate, command, output check
    monkeypatch.undo()
    assert check_package(out).errors == []


def test_optimize_writes_what_it_wrote_when_every_graph_was_parsed_anew(
    tiny_cpu_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The models handed on by the gate carry nothing the rewrite would write (byte-identical graphs)."""
    gated = tmp_path / "gated"
    assert main(["optimize", "-q", str(tiny_cpu_package), str(gated), "--target", "cuda"]) == 0
    monkeypatch.setattr("q38.commands.optimize.gated", _ungated)
    plain = tmp_path / "plain"
    assert main(["optimize", "-q", str(tiny_cpu_package), str(plain), "--target", "cuda"]) == 0
    files = sorted(p.relative_to(gated) for p in gated.rglob("*") if p.is_file() and p.name != "package_manifest.json")
    assert files == sorted(p.relative_to(plain) for p in plain.rglob("*") if p.is_file() and p.name != "package_manifest.json")
    for rel in files:
        assert (gated / rel).read_bytes() == (plain / rel).read_bytes(), rel


def _ungated(source, args):  # type: ignore[no-untyped-def]
    import contextlib

    return contextlib.nullcontext()


@pytest.mark.parametrize("command", ["offload", "export-genai"])
def test_the_gate_adds_no_parse_of_its_own(
    command: str, tiny_cpu_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Gated, the command parses a source graph no more often than ungated (the gate's parse is the command's).

    The output check judges the written models in memory, and a graph placed unchanged as the
    model the command read. Offload's verify graphs s2 and s3 are the one graph grown in place
    into s4 (only s4 is final in memory): the output check may parse those two.
    """
    argv = {
        "offload": lambda out: ["offload", "-q", str(out), "--from-package", str(tiny_cpu_package), "--offload-mode", "auto"],
        "export-genai": lambda out: ["export-genai", "-q", str(tiny_cpu_package), str(out)],
    }[command]
    module = {"offload": "q38.commands.offload", "export-genai": "q38.commands.export_genai"}[command]
    parsed = _count_parses(monkeypatch)
    assert main(argv(tmp_path / "gated")) == 0, capsys.readouterr().err
    gated = len(parsed)
    parsed.clear()
    monkeypatch.setattr(f"{module}.gated", _ungated)
    assert main(argv(tmp_path / "plain")) == 0, capsys.readouterr().err
    grown_in_place = 2 if command == "offload" else 0
    assert gated <= len(parsed) + grown_in_place, (gated, len(parsed))


def test_an_output_defect_is_refused_at_commit_judged_in_memory(
    tiny_cpu_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rewrite that breaks a rule its source keeps (opset 0) is refused; the model is not parsed back."""
    import q38.optimize.driver as driver

    real = driver.optimize_model

    def defective(model, **kw):  # type: ignore[no-untyped-def]
        result = real(model, **kw)
        if model.graph.name and "head" not in str(model.meta.get("q38.path", "")):
            model.opset_imports[""] = 0
        return result

    src = tmp_path / "src"
    shutil.copytree(tiny_cpu_package, src, symlinks=True)
    monkeypatch.setattr(driver, "optimize_model", defective)
    parsed = _count_parses(monkeypatch)
    out = tmp_path / "out"
    assert main(["optimize", str(src), str(out), "--target", "cpu"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= LINE_LIMIT, lines
    assert lines[0].startswith("q38 optimize: error: the output would fail check, ORT-OPSET-001 ["), lines[0]
    assert "a q38 defect" in lines[0] and "nothing written" in lines[0]
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert len(parsed) == len(_graph_files(src))  # the defect was found in the models in memory
