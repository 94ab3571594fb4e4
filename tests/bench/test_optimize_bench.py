"""Benchmarks of `q38 optimize` (run with `nox -s bench`), each next to its floor in the same run.

In the CPU suite (`--benchmark-disable`) each benchmark runs once as a plain test on the tiny preset
(tests/bench/conftest.py), asserts the output's structure and records nothing. Recorded in `extra_info` when enabled:

* `test_bench_optimize_full`: the in-process `optimize_package` on the full package; node counts
  per graph before/after, the rewrite counts, the verification-cycle nodes, peak RSS of the
  command in a fresh process against the package's weight bytes (it must not grow with them);
* `test_bench_optimize_vs_floor`: `python -m q38 optimize` and the floor (`onnx_ir.load` +
  `onnx_ir.save` of the same graphs, the other files copied) each run whole-process, interleaved,
  `ROUNDS` times; medians and `ratio` = optimize / floor (issue 14: at most 1.2), in wall time and
  (`cpu_ratio`) in the child's CPU time (user + system), which other processes on a shared
  machine disturb far less than the wall clock;
* `test_bench_node_scaling`: `optimize_model` in-process on the target graph of the tiny preset
  (8 layers), the full preset (48) and a 4x-layer graph (192, built with the synthesizer's graph
  builder), rounds interleaved across the sizes; seconds per node for each (best round) and
  `spread` = max/min per-node time (flat: within 1.3), in wall time and (`cpu_*`) in CPU time.

Invariants guarded (every run): exact rewrite counts per pass and exact counts of the fused and
the removed operators in every graph, all derived from the preset's layer schedule; no pass
needed a sort; the optimize child process succeeds and its manifest matches.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import onnx_ir as ir
import pytest
from support.bench_floor import floor_script

from q38._ops import MS_DOMAIN
from q38.optimize import optimize_model
from q38.optimize.driver import optimize_package
from q38.package import read_tensor

REPO = Path(__file__).resolve().parents[2]
CYCLE_ROLES = ("target", "head", "s2", "s3", "s4")
ROUNDS = 5

_RSS_WRAPPER = textwrap.dedent("""
    import resource, subprocess, sys
    proc = subprocess.run([sys.executable, "-m", "q38", "optimize", *sys.argv[1:]], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr or proc.stdout)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
""")

# The floor: what any tool that rewrites these graphs must do at least (load, save, place files).
_FLOOR = floor_script("copy")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _peak_rss_kib(src: Path, out: Path) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_WRAPPER, str(src), str(out), "--target", "cuda"],
        capture_output=True, text=True, env=_env(), check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip())


def expected_rewrites(layers: int, *, graphs: int = 2) -> dict[str, int]:
    """The rewrite counts on a synthetic package of ``layers`` layers (target + prefill + head).

    Per target/prefill graph: two mixes per layer (phase one) and one prologue per mix but the
    first; a shared expert per layer (+ the MTP's in the target); a carry per GDN layer; q and k
    per QSA layer (+ the MTP attention's two in the target). FP8: logits of target, prefill and
    head, and the MTP's logits.
    """
    qsa = layers // 4
    gdn = layers - qsa
    return {
        "rms_norm_rotary": graphs * 2 * qsa + 2,
        "shared_expert": graphs * layers + 1,
        "hyper_connection": graphs * (2 * layers + 2 * layers - 1),
        "causal_conv_state": graphs * gdn,
        "fp8_head": graphs + 2,
    }


def op_counts(model: ir.Model) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((n.domain, n.op_type) for n in model.graph)


def check_target_structure(before: collections.Counter[tuple[str, str]], after: collections.Counter[tuple[str, str]],
                           layers: int, *, mtp: bool) -> None:
    """The fused graph of a target (``mtp``) or prefill graph has exactly the expected operators."""
    qsa, gdn = layers // 4, layers - layers // 4
    ms = MS_DOMAIN
    assert after[(ms, "HyperConnectionLowRankMix")] == 2 * layers
    assert after[(ms, "HyperConnectionPreMix")] == 1  # the final norm mixer (per-branch gates): declined
    assert after[(ms, "HyperConnectionPostMix")] == 1  # the last block's: no mix after it to absorb it
    assert after[(ms, "BranchwiseRMSNorm")] == before[(ms, "BranchwiseRMSNorm")] - 2 * layers
    assert after[(ms, "ScaledSiLU")] == 0
    assert after[(ms, "RMSNormRotary")] == 2 * qsa + (2 if mtp else 0)
    assert after[(ms, "CausalConvWithState")] == gdn
    assert after[(ms, "MatMulBlockQuantizedFp8Weight")] == (2 if mtp else 1)
    shared = layers + (1 if mtp else 0)
    assert after[("", "Split")] == before[("", "Split")] + shared
    assert after[("", "Sqrt")] == before[("", "Sqrt")] - 2 * qsa - (2 if mtp else 0)


def test_bench_optimize_full(benchmark, bench_package: Path, bench_layers: int, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    full_cpu_package = bench_package  # the full preset under nox -s bench, tiny in the CPU suite's smoke
    outs = iter(range(10**6))

    def setup():  # type: ignore[no-untyped-def]
        return (full_cpu_package, tmp_path / f"out{next(outs)}"), {"target": "cuda"}

    result, counts = benchmark.pedantic(optimize_package, setup=setup, rounds=3, iterations=1)
    assert result.rewrites == expected_rewrites(bench_layers)
    out = tmp_path / "out0"
    for role, name, mtp in (("target", "model.onnx", True), ("prefill", "prefill.onnx", False)):
        before, after = ir.load(full_cpu_package / name), ir.load(out / name)
        assert counts[role] == (len(before.graph), len(after.graph))
        check_target_structure(op_counts(before), op_counts(after), bench_layers, mtp=mtp)
    if benchmark.disabled:  # the CPU suite: one plain run, no figures to record
        return
    cycle = [r for r in CYCLE_ROLES if r in counts]
    info = benchmark.extra_info
    info.update({
        "preset": "full" if bench_layers == 48 else "tiny",
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


def _timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one child process."""
    start, before = time.perf_counter(), os.times()
    proc = subprocess.run(args, capture_output=True, text=True, env=_env(), check=False)
    elapsed, after = time.perf_counter() - start, os.times()
    assert proc.returncode == 0, proc.stderr
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return elapsed, cpu


@pytest.mark.slow
def test_bench_optimize_vs_floor(benchmark, bench_package: Path, bench_layers: int, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    full_cpu_package = bench_package  # the full preset under nox -s bench, tiny in the CPU suite's smoke
    rounds = 1 if benchmark.disabled else ROUNDS
    runs: dict[str, list[float]] = {"optimize": [], "floor": []}
    cpu: dict[str, list[float]] = {"optimize": [], "floor": []}
    for i in range(rounds):  # interleaved, so load on the machine hits both alike
        for key, args in (
            ("optimize", [sys.executable, "-m", "q38", "optimize", str(full_cpu_package), str(tmp_path / f"opt{i}"),
                          "--target", "cuda"]),
            ("floor", [sys.executable, "-c", _FLOOR, str(full_cpu_package), str(tmp_path / f"floor{i}")]),
        ):
            wall, used = _timed(args)
            runs[key].append(wall)
            cpu[key].append(used)
    manifest = json.loads((tmp_path / "opt0" / "package_manifest.json").read_text())
    assert manifest["rewrites"] == expected_rewrites(bench_layers)
    assert sorted(p.name for p in (tmp_path / "floor0").iterdir()) == sorted(p.name for p in full_cpu_package.iterdir())
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    if benchmark.disabled:
        return
    med = {k: statistics.median(v) for k, v in runs.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    benchmark.extra_info.update({
        "preset": "full" if bench_layers == 48 else "tiny", "rounds": rounds, "optimize_s": runs["optimize"], "floor_s": runs["floor"],
        "optimize_median_s": med["optimize"], "floor_median_s": med["floor"],
        "ratio": med["optimize"] / med["floor"],
        "optimize_cpu_s": cpu["optimize"], "floor_cpu_s": cpu["floor"],
        "optimize_cpu_median_s": cpu_med["optimize"], "floor_cpu_median_s": cpu_med["floor"],
        "cpu_ratio": cpu_med["optimize"] / cpu_med["floor"],
    })


def _reader(graph: Path):  # type: ignore[no-untyped-def]
    # q38's own reader: onnx_ir refuses data files other runs' hard links point at.
    return lambda value: read_tensor(value, graph_path=graph, root=graph.parent)


def _graph_x4(tmp: Path, layers: int) -> Path:
    """The target graph of a ``layers``-layer synthetic model (the synthesizer's own builder)."""
    from q38.synth.graph import DataFile
    from q38.synth.model import build_target
    from q38.synth.spec import Spec
    from q38.synth.weights import Weights

    tmp.mkdir(parents=True, exist_ok=True)
    data = DataFile(tmp / "model.onnx.data", "model.onnx.data")
    try:
        proto = build_target(Weights(0, data), Spec("x4", layers), variant="cpu", experts="int4",
                             lineage="contrib", prefill=False)
    finally:
        data.close()
    (tmp / "model.onnx").write_bytes(proto.SerializeToString())
    return tmp / "model.onnx"


def test_bench_node_scaling(benchmark, tiny_cpu_package: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    graphs = {8: tiny_cpu_package / "model.onnx"}
    if not benchmark.disabled:  # the full preset and the 192-layer graph take a while to build: benchmarks only
        graphs[48] = request.getfixturevalue("full_cpu_package") / "model.onnx"
        graphs[192] = _graph_x4(tmp_path / "x4", 192)
    nodes: dict[int, int] = {}
    walls: dict[int, list[float]] = {layers: [] for layers in graphs}
    cpus: dict[int, list[float]] = {layers: [] for layers in graphs}
    for _ in range(1 if benchmark.disabled else 5):
        for layers, path in graphs.items():  # rounds interleaved across the sizes
            model = ir.load(path)
            before = op_counts(model)
            nodes[layers] = len(model.graph)
            start, cpu_start = time.perf_counter(), time.process_time()
            result = optimize_model(model, target="cuda", reader=_reader(path))
            walls[layers].append(time.perf_counter() - start)
            cpus[layers].append(time.process_time() - cpu_start)
            expected = expected_rewrites(layers, graphs=1)
            expected["fp8_head"] = 2  # target graph alone: logits and mtp.0.logits
            assert result.rewrites == expected
            check_target_structure(before, op_counts(model), layers, mtp=True)
    per_node = {layers: min(t) / nodes[layers] for layers, t in walls.items()}
    cpu_per_node = {layers: min(t) / nodes[layers] for layers, t in cpus.items()}
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    if benchmark.disabled:
        return
    benchmark.extra_info.update({
        "layers": list(per_node), "nodes": nodes, "seconds_per_node": per_node,
        "spread": max(per_node.values()) / min(per_node.values()),
        "cpu_seconds_per_node": cpu_per_node,
        "cpu_spread": max(cpu_per_node.values()) / min(cpu_per_node.values()),
    })
