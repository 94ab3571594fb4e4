"""Benchmark: reading the full package's metadata without weights (nox -s bench).

Records the time of open_package + loading every graph of the full synthetic package; the
weights are never read, so memory and time do not grow with weight bytes. The CPU suite's smoke
reads the tiny preset once (tests/bench/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

from q38.package import external_refs, open_package


def _load_all(path: Path) -> int:
    package = open_package(path)
    nodes = 0
    for role in package.roles():
        model = package.load(role)
        nodes += sum(1 for _ in model.graph.all_nodes())
        external_refs(model)
    return nodes


def test_bench_open_full_package_without_weights(benchmark, bench_package: Path, bench_layers: int) -> None:
    nodes = benchmark(_load_all, bench_package)  # the full preset under nox -s bench, tiny in the smoke
    benchmark.extra_info["nodes"] = nodes
    assert nodes > 2000 * bench_layers // 48
