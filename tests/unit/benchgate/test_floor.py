"""``python -m q38.benchgate.floor``: a command measured against its floor (issue 27, item 4).

Invariants guarded (no timed assertion: the verdict is tested on given figures, the runner on
real processes with a ratio no machine can miss):
- the ratio is command / floor, ``ok`` iff it is at most ``--max-ratio``; the report prints both
  figures side by side, the ratio and the verdict;
- each side's figure is its fastest run; a command that fails is exit 2 with one line;
- ``nox -s bench`` runs the floor of ``q38 check`` of the tiny preset against ``import onnx``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from q38.benchgate.floor import FloorResult, main

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("seconds", "floor", "ok"), [(1.4, 1.0, True), (1.5, 1.0, True), (1.6, 1.0, False), (1.0, 0.0, False)])
def test_the_verdict_is_the_ratio_against_the_maximum(seconds: float, floor: float, ok: bool) -> None:
    result = FloorResult("check-tiny", seconds, "import-onnx", floor, 1.5, "cpu")
    assert result.ok is ok
    lines = result.lines()
    assert lines[0] == f"floor check-tiny: {seconds:.3f} s cpu (fastest run)"
    assert lines[1] == f"floor import-onnx: {floor:.3f} s cpu (fastest run)"
    assert lines[2].startswith("floor check-tiny / import-onnx: ") and lines[2].endswith("ok" if ok else "ABOVE")


def test_real_processes_within_and_above_the_floor(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--name", "a", "--command", "{python} -c pass", "--floor-name", "b", "--rounds", "1"]
    assert main([*args, "--floor", "{python} -c pass", "--max-ratio", "1000"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[2].endswith(": ok")
    # the command spins 0.5 s of CPU; the floor does nothing: no machine puts them within 1 %
    busy = "{python} -c 'import time; t = time.process_time()\nwhile time.process_time() - t < 0.5: pass'"
    assert main(["--name", "a", "--command", busy, "--floor-name", "b", "--rounds", "1",
                 "--floor", "{python} -c pass", "--max-ratio", "1.01"]) == 1  # fmt: skip
    assert capsys.readouterr().out.splitlines()[2].endswith(": ABOVE")


def test_a_failing_command_is_exit_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--name", "a", "--command", "{python} -c 'raise SystemExit(3)'", "--floor-name", "b",
                 "--floor", "{python} -c pass", "--max-ratio", "2", "--rounds", "1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("q38 benchgate floor: error: ")


def test_nox_bench_measures_the_tiny_check_against_import_onnx() -> None:
    tree = ast.parse((REPO / "noxfile.py").read_text(encoding="utf-8"))
    bench = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "bench")
    text = ast.unparse(bench)
    assert "q38.benchgate.floor" in text and "import onnx" in text and "-m q38 check " in text
    assert "1.5" in text
