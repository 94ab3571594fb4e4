"""Benchmark of `q38 check` on the full synthetic package, next to its floor in the same run.

Run with `nox -s bench`; in the CPU suite (`--benchmark-disable`) it runs once on the tiny preset
as a plain test and asserts the report's structure (tests/bench/conftest.py). Recorded in `extra_info` when enabled: the whole-process wall
time of `python -m q38 check` (the command a user runs: imports included) and of the floor
(`onnx_ir.load` of the same three graphs without their weights, what any checker must read),
interleaved `ROUNDS` times, their medians and `ratio` = check / floor; the in-process
`check_package` time per graph-node.

Invariants guarded (every run): the cpu-variant package (48 layers; 8 in the smoke) passes with no error,
every graph (target, head, prefill) ran every rule that applies to it, the rules checked include
the generic schema rules of the mirrored version, and the command exits 0.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import onnx_ir as ir
import pytest

from contracts.runner import check_package

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 5
_FLOOR = textwrap.dedent("""
    import sys, onnx_ir as ir
    for path in sys.argv[1:]:
        ir.load(path)
""")


def _wall(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=REPO, check=True, capture_output=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return time.perf_counter() - start


def test_bench_check_full_package(benchmark: pytest.FixtureRequest, bench_package: Path, bench_layers: int) -> None:
    full_cpu_package = bench_package  # the full preset under nox -s bench, tiny in the CPU suite's smoke
    report = benchmark(check_package, full_cpu_package, ort_version="1.32.0")
    assert report.errors == []
    assert report.graphs == ["target", "head", "prefill"]
    assert [c.graph for c in report.graph_checks] == ["target", "head", "prefill"]
    assert all(c.rules >= 40 for c in report.graph_checks)
    assert {"ORT-SCHEMA-002", "ORT-SHAPE-001", "QMOE-CPU-001", "GDN-SCHEMA-001", "HC-SCHEMA-001"} <= set(report.rules_checked)
    graphs = [full_cpu_package / name for name in ("model.onnx", "head_r2.onnx", "prefill.onnx")]
    nodes = sum(ir.load(g).graph.num_nodes() for g in graphs)
    assert nodes > 5000 * bench_layers // 48
    if benchmark.disabled:  # type: ignore[attr-defined]
        return
    check, floor = [], []
    for _ in range(ROUNDS):
        check.append(_wall([sys.executable, "-m", "q38", "check", str(full_cpu_package), "--ort-version", "1.32.0"]))
        floor.append(_wall([sys.executable, "-c", _FLOOR, *map(str, graphs)]))
    benchmark.extra_info.update({  # type: ignore[attr-defined]
        "check_s": statistics.median(check), "floor_s": statistics.median(floor),
        "ratio": statistics.median(check) / statistics.median(floor), "nodes": nodes,
        "in_process_s_per_node": benchmark.stats.stats.median / nodes,  # type: ignore[attr-defined]
    })  # fmt: skip
