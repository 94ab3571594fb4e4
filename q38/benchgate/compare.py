"""The gate's comparison: per benchmark an estimate and a verdict, overall an exit code and lines."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Final

from q38.benchgate.samples import Benchmark, Report, SampleSet, identity_mismatches
from q38.benchgate.stats import MIN_ROUNDS, Estimate, Verdict, estimate, verdict

__all__ = [
    "DEFAULT_THRESHOLD",
    "EXIT_INCONCLUSIVE",
    "EXIT_NO_BASELINE",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_REGRESSION",
    "GateResult",
    "Row",
    "compare",
]

DEFAULT_THRESHOLD: Final = 0.15
EXIT_OK: Final = 0
EXIT_REGRESSION: Final = 1
EXIT_REFUSED: Final = 2
EXIT_NO_BASELINE: Final = 3
EXIT_INCONCLUSIVE: Final = 4


@dataclass(frozen=True)
class Row:
    """One benchmark's outcome."""

    bench: Benchmark
    base_median: float
    head_median: float
    estimate: Estimate
    verdict: Verdict

    def line(self, width: int) -> str:
        """The row of the report table: name padded to ``width``, medians, change and its 95% interval, verdict."""
        e = self.estimate
        interval = f"[{100 * (e.lo - 1):+6.1f}%, {100 * (e.hi - 1):+6.1f}%]"
        return (f"{self.bench.name:<{width}} {self.bench.kind:>7} {self.base_median:>11.4g} {self.head_median:>11.4g} "
                f"{100 * e.change:>+7.1f}% {interval}  {self.verdict.upper()}")

    def to_dict(self) -> dict[str, Any]:
        """The row's JSON record, with every paired sample so a verdict can be re-derived."""
        e = self.estimate
        return {"name": self.bench.name, "kind": self.bench.kind, "tier": self.bench.tier,
                "base_median": self.base_median, "head_median": self.head_median, "ratio": e.ratio,
                "ratio_lo": e.lo, "ratio_hi": e.hi, "rounds": e.rounds, "verdict": self.verdict,
                "base": list(self.bench.base), "head": list(self.bench.head)}


@dataclass(frozen=True)
class GateResult:
    """What the gate decided: the exit code, the report lines, and one row per benchmark."""

    exit_code: int
    lines: tuple[str, ...]
    rows: tuple[Row, ...] = ()
    threshold: float = DEFAULT_THRESHOLD

    def rows_with(self, wanted: Verdict) -> list[Row]:
        """The benchmarks whose verdict is ``wanted``, in report order."""
        return [r for r in self.rows if r.verdict == wanted]


def compare(samples: SampleSet, *, threshold: float = DEFAULT_THRESHOLD, fail_on_missing_baseline: bool = False,
            notes: tuple[str, ...] = ()) -> GateResult:
    """Decide on ``samples`` (see :mod:`q38.benchgate.stats` for the verdicts and the exit codes)."""
    if not samples.benchmarks:
        why = samples.base_note or "no benchmark was measured on both sides"
        code = EXIT_NO_BASELINE if fail_on_missing_baseline else EXIT_OK
        return GateResult(code, (f"{'FAIL' if code else 'NOTE'}: no baseline: {why}; nothing gated.", *notes),
                          threshold=threshold)
    mismatches = identity_mismatches(Report(samples.base_machine, {}, {}, {}), Report(samples.machine, {}, {}, {}))
    if samples.base_machine and mismatches:
        return GateResult(EXIT_REFUSED, ("REFUSED: base and head were not measured on the same machine and software:",
                                         *("  " + m for m in mismatches)), threshold=threshold)
    rows = []
    for bench in samples.benchmarks:
        est = estimate(bench.base, bench.head)
        rows.append(Row(bench, statistics.median(bench.base), statistics.median(bench.head), est, verdict(est, threshold)))
    width = max(24, *(len(r.bench.name) for r in rows))
    header = f"{'benchmark':<{width}} {'kind':>7} {'base med':>11} {'head med':>11} {'change':>8}"
    lines = [f"{header} {'95% interval':>18}  verdict (threshold +{threshold:.0%})"]
    lines += [r.line(width) for r in rows]
    lines += list(notes)
    regressions = [r for r in rows if r.verdict == "regression"]
    unsure = [r for r in rows if r.verdict == "inconclusive"]
    rounds = min(r.estimate.rounds for r in rows)
    if regressions:
        lines.append(f"FAIL: {len(regressions)} benchmark(s) slower than base beyond doubt (the 95% interval "
                     f"of the median ratio is above +{threshold:.0%}): {', '.join(r.bench.name for r in regressions)}")
        return GateResult(EXIT_REGRESSION, tuple(lines), tuple(rows), threshold)
    if unsure:
        more = max(2 * rounds, MIN_ROUNDS)
        lines.append(f"INCONCLUSIVE: {len(unsure)} benchmark(s) whose 95% interval straddles +{threshold:.0%} "
                     f"({', '.join(r.bench.name for r in unsure)}); the spread is too wide to decide with "
                     f"{rounds} round(s): rerun with --rounds {more} (or on a quieter machine)")
        return GateResult(EXIT_INCONCLUSIVE, tuple(lines), tuple(rows), threshold)
    lines.append(f"OK: {len(rows)} benchmark(s), none slower than base by more than {threshold:.0%} "
                 f"(95% interval of the median ratio, {rounds} rounds)")
    return GateResult(EXIT_OK, tuple(lines), tuple(rows), threshold)
