"""A third surface is one reader: a test-only stub reader's package goes through ``q38 check``,
``q38 optimize`` and ``q38 offload`` (the real command line) without a line of command or
capability code knowing it (docs/architecture.md, "a new surface")."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from support import stub_surface

from q38.cli import main
from q38.offload.options import OFFLOAD_PREFIX
from q38.package import open_any


@pytest.fixture
def stub_package(tiny_builder_cpu_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    stub_surface.install(monkeypatch)
    return stub_surface.write_stub_package(tiny_builder_cpu_package, tmp_path / "stub")


def _nodes(path: Path) -> int:
    return len(onnx.load(str(path), load_external_data=False).graph.node)


def test_the_stub_package_opens_through_the_package_interface(stub_package: Path) -> None:
    pkg = open_any(stub_package)
    assert pkg.surface == "stub"
    assert [(r.role, r.rel) for r in pkg.graphs()] == [("decoder", "decoder.onnx")]


def test_check_runs_every_contract_on_the_stub_package(stub_package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--json", "--ort", str(stub_package)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["surface"] == "stub"
    assert report["graphs"] == ["decoder"]
    assert [s["status"] for s in report["sessions"]] == ["ok"]


def test_optimize_rewrites_the_stub_graph_and_keeps_its_config(stub_package: Path, tmp_path: Path) -> None:
    out = tmp_path / "opt"
    assert main(["optimize", "--copy", "--target", "cpu", str(stub_package), str(out)]) == 0
    assert (out / "genai_config.json").read_bytes() == (stub_package / "genai_config.json").read_bytes()
    assert _nodes(out / "decoder.onnx") < _nodes(stub_package / "decoder.onnx")  # the shared-expert fusion ran
    ort.InferenceSession(str(out / "decoder.onnx"), providers=["CPUExecutionProvider"])
    assert main(["check", str(out)]) == 0


def test_offload_writes_the_options_into_the_stub_config(stub_package: Path, tmp_path: Path) -> None:
    out = tmp_path / "off"
    assert main(["offload", "--copy", "--offload-mode", "auto", "--from-package", str(stub_package), str(out)]) == 0
    doc = json.loads((out / "genai_config.json").read_text())
    entries = doc["model"]["graphs"]["decoder"]["session_entries"]
    assert entries[OFFLOAD_PREFIX + "mode"] == "auto"
    manifest = json.loads((out / "package_manifest.json").read_text())
    assert manifest["extra"]["surface"] == "stub"
    assert main(["check", str(out)]) == 0


def test_export_refuses_a_surface_it_has_no_plan_for_in_one_line(stub_package: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-genai", str(stub_package), str(tmp_path / "exp")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("q38 export-genai: error: ") and "a stub package" in err[0]
    assert not (tmp_path / "exp").exists()
