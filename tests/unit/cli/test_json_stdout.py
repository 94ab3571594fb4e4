"""``--json``: stdout is one JSON document and nothing else, for every command (issue 37 item 2).

``q38 optimize SRC OUT --explain --json > x`` wrote 79 text lines and then the JSON object, so
``json.load`` failed. Every command runs here with ``--json`` and ``-v`` (so that q38 logs): its
stdout must parse as JSON as a whole, and what is text (logs, the "wrote" line) is on stderr.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from q38.cli import main

Argv = Callable[[Path, Path, Path], list[str]]  # (package, bundles, tmp_path) -> argv

COMMANDS: dict[str, Argv] = {
    "synth": lambda pkg, bundles, tmp: ["synth", str(tmp / "out")],
    "build": lambda pkg, bundles, tmp: ["build", str(tmp / "out"), "--target", str(bundles / "target"),
                                        "--head", str(bundles / "head")],
    "optimize": lambda pkg, bundles, tmp: ["optimize", str(pkg), str(tmp / "out")],
    "optimize --explain": lambda pkg, bundles, tmp: ["optimize", str(pkg), str(tmp / "out"), "--explain"],
    "offload": lambda pkg, bundles, tmp: ["offload", str(tmp / "out"), "--from-package", str(pkg)],
    "profile": lambda pkg, bundles, tmp: ["profile", str(pkg), "-o", str(tmp / "p.strp"), "--prompt-count", "1",
                                          "--tokens", "1", "--prompt-length", "2"],
    "fit": lambda pkg, bundles, tmp: ["fit", str(pkg), "--plot", str(tmp / "fit.png")],
    "check": lambda pkg, bundles, tmp: ["check", str(pkg), "--write-baseline", str(tmp / "b.json")],
    "rules": lambda pkg, bundles, tmp: ["rules"],
    "explain": lambda pkg, bundles, tmp: ["explain", "ORT-SCHEMA-001"],
    "export-genai": lambda pkg, bundles, tmp: ["export-genai", str(pkg), str(tmp / "out")],
    "diff": lambda pkg, bundles, tmp: ["diff", str(pkg), str(pkg)],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_json_stdout_is_one_json_document(name: str, tiny_cpu_package: Path, tiny_bundles: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    argv = [*COMMANDS[name](tiny_cpu_package, tiny_bundles, tmp_path), "--json", "-v"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)  # the whole of stdout, not its last line
    assert isinstance(doc, (dict, list)) and doc
    if name not in ("rules", "explain", "diff"):  # the commands that read and write files log at -v
        assert err, "-v logs (and the 'wrote' line) belong on stderr"
    if name == "optimize --explain":
        assert doc["explain"] and {"graph", "pass", "anchor", "applied", "reason"} <= set(doc["explain"][0])
        assert {e["graph"] for e in doc["explain"]} == {"model.onnx", "head_r2.onnx", "prefill.onnx"}


def test_check_json_with_an_output_file_leaves_stdout_empty(tiny_cpu_package: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    report = tmp_path / "r.json"
    assert main(["check", str(tiny_cpu_package), "--json", "--output", str(report)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and json.loads(report.read_text())["ok"] is True
    assert err == f"q38 check: wrote {report} (the json report: OK, 0 error(s))\n"


@pytest.mark.slow
def test_demo_json_stdout_is_one_json_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--workdir", str(tmp_path / "demo"), "--preset", "tiny", "--no-ort", "--json", "-v"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    shutil.rmtree(tmp_path / "demo")
