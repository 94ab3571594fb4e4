"""A config string holding a NUL is read as onnxruntime reads it: up to the NUL (issue 24, class a).

Invariants guarded:
- ``q38 check`` of a package whose ``genai_config.json`` has ``"model.onnx\\u0000.txt"`` as a
  filename, or a session config value ``"1\\u0000junk"``, is not refused as unreadable (never exit
  2): the strings are cut at the NUL (the file ORT would open, the value it would store), a
  warning names the key path, and the verdict is that of the cut document.
- A session-config key cut at its NUL becomes the key ORT sees: ``"ep.cpu.qmoe_deferred_scale\\u0000x":
  "2"`` is the deferred-scale key with a bad value (QMOE-CPU-002, exit 1), as in a real session.
- A writing command reads the same document; its output passes ``check``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from q38.cli import main


def _package(tiny_cpu_package: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=2))  # json escapes the NUL as \u0000
    assert "\\u0000" in path.read_text()
    return pkg


def _check(pkg: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["check", str(pkg)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_filename_with_a_nul_is_the_file_before_it(tiny_cpu_package: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    pkg = _package(tiny_cpu_package, tmp_path, lambda d: d["model"]["decoder"].update(filename="model.onnx\u0000.txt"))
    code, out, err = _check(pkg, capsys)
    assert code == 0, (out, err)
    assert "model.decoder.filename: string contains a NUL character; read up to it as onnxruntime does: 'model.onnx'" in err
    assert "error" not in err.lower()


def test_a_session_config_key_with_a_nul_is_the_key_before_it(tiny_cpu_package: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    def edit(d: dict[str, Any]) -> None:
        d["model"]["decoder"]["session_options"]["ep.cpu.qmoe_deferred_scale\u0000x"] = "2"

    pkg = _package(tiny_cpu_package, tmp_path, edit)
    code, out, err = _check(pkg, capsys)
    assert code == 1, (out, err)
    assert "QMOE-CPU-002" in out and "got '2'" in out and "CFG-SURFACE" not in out
    assert "key 'ep.cpu.qmoe_deferred_scale\\x00x' contains a NUL character" in err


def test_a_value_with_a_nul_is_the_value_before_it_and_optimize_output_passes_check(
    tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["model"]["decoder"]["session_options"]["ep.cpu.qmoe_deferred_scale"] = "1\u0000junk"

    pkg = _package(tiny_cpu_package, tmp_path, edit)
    code, out, err = _check(pkg, capsys)
    assert code == 0, (out, err)
    assert "session_options.ep.cpu.qmoe_deferred_scale: string" in err and "read up to it as onnxruntime does: '1'" in err
    out_pkg = tmp_path / "out"
    assert main(["optimize", str(pkg), str(out_pkg)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["check", str(out_pkg)]) == 0, capsys.readouterr()
