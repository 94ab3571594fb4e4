"""What `q38 optimize` shows on a terminal: one bar placing the files, one over the graphs.

Invariants guarded (both package surfaces): the bars are labelled "optimize: placing files" and
"optimize: graphs", the graphs bar counts every graph of the package once and closes. The bars
themselves draw only on a terminal (tests/unit/cli/test_progress.py); here the labels and counts
the optimizer hands them are recorded.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from support.genai_packages import real_package_dirs

import q38.progress
from q38.optimize import driver
from q38.optimize.driver import optimize_package


class _Recorder:
    bars: list[list[Any]] = []

    def __init__(self, total: int, label: str, **_: Any) -> None:
        self.record = [label, total, 0, False]
        _Recorder.bars.append(self.record)

    def advance(self, n: int = 1) -> None:
        self.record[2] += n

    def close(self) -> None:
        self.record[3] = True

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    _Recorder.bars = []
    for module in (driver, q38.progress):  # the placer imports it from q38.progress
        monkeypatch.setattr(module, "Progress", _Recorder)
    return _Recorder.bars


def test_v12b_optimize_labels_its_bars(tiny_faithful_package: Path, tmp_path: Path, bars: list[list[Any]]) -> None:
    src = tmp_path / "src"
    shutil.copytree(tiny_faithful_package, src, symlinks=True)
    optimize_package(src, tmp_path / "out")
    roles = 3  # target, head, prefill
    assert [b[0] for b in bars] == ["optimize: placing files", "optimize: graphs"]
    assert bars[1][1:] == [roles, roles, True]


def test_genai_optimize_labels_its_bars(tmp_path: Path, bars: list[list[Any]]) -> None:
    src = next(p for p in real_package_dirs() if p.name == "fp16-cuda-gdn")
    optimize_package(src, tmp_path / "out")
    assert [b[0] for b in bars] == ["optimize: placing files", "optimize: graphs"]
    assert bars[1][1:] == [1, 1, True]
