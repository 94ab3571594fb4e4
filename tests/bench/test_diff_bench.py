"""Benchmarks of ``q38 diff`` on the full synthetic package (``nox -s bench``; the tiny one in the
CPU suite's smoke, tests/bench/conftest.py).

Each is reported next to its floor in the same run: parsing the same graph files' protobufs
without external data (what any graph comparison must at least do). Figures (extra_info):
the number of graphs and nodes compared. The comparison of a package with a copy reads no
weight byte (the manifests vouch for the data files), so the time is graph work only.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from q38.canonical import load_proto
from q38.diff import diff_packages


@pytest.fixture(scope="module")
def full_pair(bench_package: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The bench package (full under nox -s bench, tiny in the CPU suite's smoke) and a copy of it."""
    copy = tmp_path_factory.mktemp("diff_bench") / "copy"
    shutil.copytree(bench_package, copy, symlinks=True)
    return bench_package, copy


def _graphs(root: Path) -> list[Path]:
    return sorted(root.rglob("*.onnx"))


def test_bench_diff_full_package_with_its_copy(benchmark: Any, full_pair: tuple[Path, Path]) -> None:
    a, b = full_pair
    result = benchmark(diff_packages, a, b)
    assert result.same
    benchmark.extra_info["graphs"] = len(_graphs(a))
    benchmark.extra_info["nodes"] = sum(len(load_proto(p).graph.node) for p in _graphs(a)) * 2


def test_bench_floor_parse_both_packages_graphs(benchmark: Any, full_pair: tuple[Path, Path], bench_layers: int) -> None:
    a, b = full_pair

    def parse() -> int:
        return sum(len(load_proto(p).graph.node) for root in (a, b) for p in _graphs(root))

    nodes = benchmark(parse)
    benchmark.extra_info["nodes"] = nodes
    assert nodes > 4000 * bench_layers // 48
