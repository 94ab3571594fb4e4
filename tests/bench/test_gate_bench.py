"""Benchmark of the gate's own decision (``nox -s bench``): the paired bootstrap of one benchmark.

A call benchmark with no fixture and no file work: the gate's interval for 20 rounds, 4000
resamples. Next to it, its floor: the same number of plain median computations.
"""

from __future__ import annotations

import random
import statistics
from typing import Any

from q38.benchgate.stats import BOOTSTRAP_RESAMPLES, estimate

_RNG = random.Random(7)
BASE = [1.0 + 0.1 * _RNG.random() for _ in range(20)]
HEAD = [1.05 + 0.1 * _RNG.random() for _ in range(20)]


def test_bench_bootstrap_interval(benchmark: Any) -> None:
    est = benchmark(estimate, BASE, HEAD)
    assert est.lo < est.ratio < est.hi


def test_bench_floor_medians(benchmark: Any) -> None:
    def medians() -> float:
        return sum(statistics.median(HEAD) / statistics.median(BASE) for _ in range(BOOTSTRAP_RESAMPLES))

    benchmark(medians)
