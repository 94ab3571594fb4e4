"""Every package `q38 optimize` emits from a synthetic package passes `q38 check`.

Invariants guarded:
* `q38 check` exits 0 (no contract violation; warnings allowed) on: the tiny cpu variant
  optimized for `--target cpu`, the tiny faithful variant optimized for `--target cuda` (flat and
  layered), and the full cpu variant optimized for `--target cpu`;
* the optimized cpu package also passes the real onnxruntime CPU session creation that
  `q38 check` runs where the installed ORT can.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from q38.cli import main


def _optimize_and_check(src_pkg: Path, tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]) -> str:
    src = tmp_path / "src"
    shutil.copytree(src_pkg, src, symlinks=True)
    out = tmp_path / "out"
    assert main(["optimize", str(src), str(out), "--target", target]) == 0
    capsys.readouterr()
    rc = main(["check", str(out)])
    report = capsys.readouterr().out
    assert rc == 0, report
    return report


def test_optimized_tiny_cpu_package_passes_check(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _optimize_and_check(tiny_cpu_package, tmp_path, "cpu", capsys)
    assert "OK: 0 error(s)" in report


def test_optimized_tiny_faithful_package_passes_check(tiny_faithful_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _optimize_and_check(tiny_faithful_package, tmp_path, "cuda", capsys)
    assert "OK: 0 error(s)" in report


def test_optimized_layered_faithful_package_passes_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from q38.synth import synthesize

    src = synthesize(tmp_path / "layered", preset="tiny", variant="faithful", layout="layered")
    report = _optimize_and_check(src, tmp_path / "run", "cuda", capsys)
    assert "OK: 0 error(s)" in report


@pytest.mark.slow
def test_optimized_full_cpu_package_passes_check(full_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _optimize_and_check(full_cpu_package, tmp_path, "cpu", capsys)
    assert "OK: 0 error(s)" in report
