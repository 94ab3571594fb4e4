"""Benchmark: ``q38 profile`` of the full synthetic package (48 decoder layers + the MTP draft:
49 QMoE nodes) per generated token, next to its floor in the same run: a plain onnxruntime
session of the same graph stepping the same greedy tokens (no taps, nothing counted).

Invariants guarded (no timing assertions), on what was measured:
- the profiled workload generated prompts x tokens tokens and every profile row sums to rows
  processed x k (48 decoder layers + /mtp/0, k = 2);
- the plain run generates the same greedy tokens as the tapped run: the taps (extra outputs)
  do not change what the graph computes, so the two timings are of the same work.
The figures (seconds per token, the ratio) go into the benchmark's ``extra_info`` and ``-s``. The
CPU suite's smoke profiles the tiny preset once (8 layers + /mtp/0; tests/bench/conftest.py).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from q38.profile.run import _prompt_steps, open_runnable, profile_package
from q38.profile.stepper import Stepper
from q38.profile.taps import TappedGraph, tapped_graph
from q38.profile.workload import Workload, synthetic_prompts

PROMPTS, LENGTH, TOKENS = 2, 8, 8


def _greedy(stepper: Stepper, workload: Workload) -> list[int]:
    tokens = []
    for prompt in workload.prompts:
        stepper.reset()
        tokens += [token for _ids, _out, token in _prompt_steps(prompt, workload.tokens, stepper, "logits")]
    return tokens


def _plain(src: Path, workload: Workload) -> tuple[list[int], float]:
    """The floor: open a plain CPU session of model.onnx (one thread, as the profile) and step."""
    import onnxruntime as ort

    start = time.perf_counter()
    pkg = open_runnable(src)
    _role, rel, graph_dir, _model = pkg.graphs[0]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(graph_dir / rel), options, providers=["CPUExecutionProvider"])
    tokens = _greedy(Stepper(TappedGraph(str(src), session, ()), pkg.names["decoder"], pkg.dims), workload)
    return tokens, time.perf_counter() - start


def test_profile_full_bench(benchmark, bench_package: Path, bench_layers: int) -> None:  # type: ignore[no-untyped-def]
    full_cpu_package = bench_package  # the full preset under nox -s bench, tiny in the CPU suite's smoke
    pkg = open_runnable(full_cpu_package)
    workload = Workload(synthetic_prompts(PROMPTS, LENGTH, pkg.vocab, 0), TOKENS, "bench")
    runs = []

    def run() -> int:
        runs.append(profile_package(full_cpu_package, workload))
        return runs[-1].generated

    assert benchmark.pedantic(run, rounds=1 if benchmark.disabled else 3, iterations=1) == PROMPTS * TOKENS
    profiled = runs[-1]
    rows = PROMPTS * (LENGTH + TOKENS - 1)
    assert profiled.rows_processed == {"model.onnx": rows}
    sites = bench_layers + 1  # 48 decoder layers + /mtp/0 on the full preset
    assert profiled.counts.shape == (sites, profiled.sites[0].experts)
    assert profiled.counts.sum(axis=1).tolist() == [rows * 2] * sites
    plains = [_plain(full_cpu_package, workload) for _ in runs]  # as many rounds as the profile had
    _role, rel, graph_dir, model = open_runnable(full_cpu_package).graphs[0]
    tapped = Stepper(tapped_graph(model, graph_dir, where=rel), pkg.names["decoder"], pkg.dims)
    assert plains[0][0] == _greedy(tapped, workload)  # the same tokens: the same work was timed
    assert len(set(map(tuple, (p[0] for p in plains)))) == 1
    per_token = statistics.median(r.seconds for r in runs) / profiled.generated
    plain_per_token = statistics.median(p[1] for p in plains) / profiled.generated
    figures = {"profile_s_per_token": round(per_token, 4), "plain_s_per_token": round(plain_per_token, 4),
               "ratio": round(per_token / plain_per_token, 3), "tokens": profiled.generated, "rows": rows}
    benchmark.extra_info.update(figures)
    print(f"profile full: {figures}")
