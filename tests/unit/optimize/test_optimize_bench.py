"""Benchmark of `q38 optimize` on the full synthetic package (run with `nox -s bench`).

In the CPU suite (`--benchmark-disable`) the benchmark runs once as a plain test and records
nothing. Recorded in `extra_info` when enabled:
* `nodes_before` / `nodes_after`: node count of every graph before and after the rewrites;
* `cycle_graphs`, `cycle_nodes_before` / `cycle_nodes_after`: the nodes one verification cycle
  runs (the target graph, the head graph and the multi-draft verify graphs s2/s3/s4 present);
* `rewrites`: the rewrite counts of the manifest;
* `peak_rss_kib`: peak resident set size of `q38 optimize` run as a child process
  (`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss` in a fresh wrapper process, so no earlier
  child of the test process can inflate it); `weight_bytes`: the package's data bytes, to read the
  RSS against (it must not grow with them: weights a pass does not transform are never read).

Invariants guarded: every pass fires on the full package (--target cuda on the cpu variant), the
node count of every rewritten graph drops, and the optimize child process succeeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from q38.optimize import PASS_NAMES
from q38.optimize.package_io import optimize_package

REPO = Path(__file__).resolve().parents[3]
CYCLE_ROLES = ("target", "head", "s2", "s3", "s4")

_RSS_WRAPPER = textwrap.dedent("""
    import resource, subprocess, sys
    proc = subprocess.run([sys.executable, "-m", "q38", "optimize", *sys.argv[1:]], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr or proc.stdout)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
""")


def _peak_rss_kib(src: Path, out: Path) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_WRAPPER, str(src), str(out), "--target", "cuda"],
        capture_output=True, text=True, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip())


@pytest.mark.slow
def test_bench_optimize_full(benchmark, full_cpu_package: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outs = iter(range(10**6))

    def setup():  # type: ignore[no-untyped-def]
        return (full_cpu_package, tmp_path / f"out{next(outs)}"), {"target": "cuda"}

    result, counts = benchmark.pedantic(optimize_package, setup=setup, rounds=3, iterations=1)
    assert all(result.rewrites[name] > 0 for name in PASS_NAMES), result.rewrites
    assert counts["target"][1] < counts["target"][0] and counts["prefill"][1] < counts["prefill"][0]
    if benchmark.disabled:  # the CPU suite: one plain run, no figures to record
        return
    cycle = [r for r in CYCLE_ROLES if r in counts]
    info = benchmark.extra_info
    info.update({
        "preset": "full",
        "variant": "cpu",
        "target": "cuda",
        "nodes_before": {role: before for role, (before, _) in counts.items()},
        "nodes_after": {role: after for role, (_, after) in counts.items()},
        "cycle_graphs": cycle,
        "cycle_nodes_before": sum(counts[r][0] for r in cycle),
        "cycle_nodes_after": sum(counts[r][1] for r in cycle),
        "rewrites": dict(result.rewrites),
        "weight_bytes": sum(p.stat().st_size for p in full_cpu_package.glob("*.data")),
        "peak_rss_kib": _peak_rss_kib(full_cpu_package, tmp_path / "rss_out"),
    })
    manifest = json.loads((tmp_path / "rss_out" / "package_manifest.json").read_text())
    assert manifest["rewrites"] == dict(sorted(result.rewrites.items()))
