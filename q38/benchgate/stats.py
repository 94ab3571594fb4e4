"""The gate's statistics: ratio of medians with a paired bootstrap 95 % interval, and a verdict.

Each benchmark has one sample per round and side (base and head interleaved round by round,
so a round's two samples share the machine's state: a neighbour's load, the CPU clock). The
estimate is ``median(head) / median(base)``; its interval comes from resampling whole rounds
(pairs) with replacement, which keeps that sharing. The verdict reads the interval against
``1 + threshold``:

* ``regression``: the lower end is above it (slower beyond doubt);
* ``inconclusive``: the interval straddles it (more rounds narrow it);
* ``faster``: the upper end is below ``1 - threshold``;
* ``ok``: otherwise (the interval is at or below the threshold).

Standard library only; the resampling is seeded, so the same samples give the same verdict.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["BOOTSTRAP_RESAMPLES", "MIN_ROUNDS", "Estimate", "Verdict", "estimate", "verdict"]

BOOTSTRAP_RESAMPLES: Final = 4000
MIN_ROUNDS: Final = 4
"""Fewer rounds than this give no interval worth the name: the verdict is inconclusive."""
CONFIDENCE: Final = 0.95

Verdict = Literal["ok", "faster", "inconclusive", "regression"]


@dataclass(frozen=True)
class Estimate:
    """``ratio`` = median(head) / median(base), with its bootstrap interval ``[lo, hi]``."""

    ratio: float
    lo: float
    hi: float
    rounds: int

    @property
    def change(self) -> float:
        """The relative change of the median (+0.3 is 30 % slower)."""
        return self.ratio - 1.0


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def estimate(base: Sequence[float], head: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
             seed: int = 0) -> Estimate:
    """The ratio of medians of paired per-round samples and its percentile bootstrap interval.

    Raises:
        ValueError: the sides have different numbers of rounds, none, or a non-positive time.

    """
    if len(base) != len(head) or not base:
        raise ValueError(f"paired samples expected, got {len(base)} base and {len(head)} head rounds")
    if min(base) <= 0 or min(head) <= 0:
        raise ValueError("benchmark times must be positive")
    ratio = statistics.median(head) / statistics.median(base)
    n = len(base)
    if n < 2:
        return Estimate(ratio, 0.0, float("inf"), n)
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(statistics.median(head[i] for i in picks) / statistics.median(base[i] for i in picks))
    ratios.sort()
    tail = (1.0 - CONFIDENCE) / 2
    return Estimate(ratio, _quantile(ratios, tail), _quantile(ratios, 1.0 - tail), n)


def verdict(est: Estimate, threshold: float) -> Verdict:
    """The verdict of the module docstring; fewer than :data:`MIN_ROUNDS` rounds is inconclusive."""
    limit = 1.0 + threshold
    if est.rounds < MIN_ROUNDS:
        return "inconclusive"
    if est.lo > limit:
        return "regression"
    if est.hi > limit:
        return "inconclusive"
    if est.hi < 1.0 - threshold:
        return "faster"
    return "ok"
