"""The gate's picture: % change per benchmark with its 95 % interval, against the threshold.

Two panels: left, the change of each benchmark's median (head vs base) as a point with its
bootstrap interval, coloured by verdict, the threshold as a line, a legend; right, the medians
themselves (base and head), on a log scale where the benchmarks' times differ by more than
:data:`LOG_SPAN`. The title names base and head (SHA and ref), the machine, the ORT version and
the rounds. matplotlib is optional (``nox -s bench`` installs it); without it there is no plot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from q38.benchgate.compare import GateResult
from q38.benchgate.samples import SampleSet

__all__ = ["COLOURS", "LOG_SPAN", "describe_machine", "write_plot"]

LOG_SPAN: Final = 20.0
COLOURS: Final = {"ok": "#4c72b0", "faster": "#55a868", "inconclusive": "#dd8452", "regression": "#c44e52"}


def describe_machine(machine: dict[str, Any]) -> str:
    """One line naming what measured: CPU and cores, OS and architecture, onnxruntime, GPU if any."""
    cpu = machine.get("cpu") or {}
    env = machine.get("q38_env") or {}
    parts = [str(cpu.get("brand_raw") or machine.get("processor") or "unknown CPU")]
    if cpu.get("count"):
        parts.append(f"{cpu['count']} cores")
    parts.append(f"{machine.get('system', '?')} {machine.get('machine', '')}".strip())
    parts.append(f"onnxruntime {env.get('ort_version') or '?'}")
    if env.get("gpu_model"):
        parts.append(f"{env['gpu_model']} (driver {env.get('gpu_driver')})")
    return ", ".join(parts)


def _short(name: str) -> str:
    return name.rsplit("::", 1)[-1] if "::" in name else name


def write_plot(result: GateResult, samples: SampleSet, path: Path) -> bool:
    """Write ``path`` (PNG); False when matplotlib is missing or there is nothing to draw."""
    if not result.rows:
        return False
    try:
        import matplotlib  # deferred: heavy and optional (ImportError: no plot)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # deferred: heavy; after matplotlib.use("Agg")
        from matplotlib.lines import Line2D  # deferred: heavy and optional (ImportError: no plot)
    except ImportError:
        return False
    rows = list(result.rows)
    n = len(rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 1.6 + 0.45 * n), width_ratios=(3, 2), sharey=True)
    ys = list(range(n))[::-1]
    for y, row in zip(ys, rows):
        e = row.estimate
        change, lo, hi = 100 * e.change, 100 * (e.lo - 1), 100 * (min(e.hi, 10.0) - 1)
        colour = COLOURS[row.verdict]
        left.errorbar(change, y, xerr=[[change - lo], [hi - change]], fmt="o", color=colour, capsize=4, lw=2)
        left.annotate(f"{change:+.1f}%", (change, y), textcoords="offset points", xytext=(0, 7), ha="center",
                      fontsize=8, color=colour)
    limit = 100 * result.threshold
    left.axvline(limit, color="#c44e52", ls="--", lw=1.2)
    left.axvline(0, color="#888888", lw=0.8)
    left.set_yticks(ys, [f"{_short(r.bench.name)} [{r.bench.kind}]" for r in rows], fontsize=8)
    left.set_xlabel("change of the median, head vs base (%), with its 95% bootstrap interval")
    handles = [Line2D([], [], color=c, marker="o", ls="", label=v) for v, c in COLOURS.items()]
    handles.append(Line2D([], [], color="#c44e52", ls="--", label=f"threshold +{limit:.0f}%"))
    left.legend(handles=handles, fontsize=8, loc="best")
    left.grid(axis="x", alpha=0.3)
    base_med = [r.base_median for r in rows]
    head_med = [r.head_median for r in rows]
    right.barh([y + 0.18 for y in ys], base_med, height=0.35, color="#9aa9c8", label="base median")
    right.barh([y - 0.18 for y in ys], head_med, height=0.35, color="#4c72b0", label="head median")
    every = base_med + head_med
    log = max(every) / max(min(every), 1e-12) > LOG_SPAN
    if log:
        right.set_xscale("log")
    right.set_xlabel(f"median {samples.clock} seconds per round" + (" (log scale)" if log else ""))
    right.legend(fontsize=8, loc="best")
    right.grid(axis="x", alpha=0.3)
    base = f"{(samples.base_sha or '?')[:10]}" + (f" ({samples.base_ref})" if samples.base_ref else "")
    head = (samples.head_sha or "?")[:10]
    rounds = min(r.estimate.rounds for r in rows)
    fig.suptitle(f"q38 release gate: head {head} vs base {base}, {rounds} interleaved rounds\n"
                 f"{describe_machine(samples.machine)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
