"""``q38 fit --plot FILE.png``: stacked device bytes per (row, tier) with each row's budget line.

One bar per report row (a runtime profile or ``--gpu`` at a context tier): device weights,
resident routed experts, state that grows with the context, fixed per-sequence state, and the
labelled estimate hatched on top; a horizontal tick marks the row's device budget. matplotlib is
imported here only (the Agg backend: no display needed).
"""

from __future__ import annotations

from pathlib import Path

from q38.fit.report import GIB, FitReport

__all__ = ["plot_report"]


def plot_report(report: FitReport, path: Path) -> None:
    """Write the report's stacked-bar chart as a PNG at ``path``."""
    import matplotlib  # deferred: heavy; only q38 fit --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: heavy; after matplotlib.use("Agg")

    rows = report.rows
    labels = [f"{r.name}\n@{r.context}" for r in rows]
    parts = [
        ("device weights", [r.memory.weights_device for r in rows], "#4c72b0"),
        ("resident experts", [r.memory.expert_device for r in rows], "#dd8452"),
        ("state (grows)", [r.memory.state_total - r.memory.fixed_state for r in rows], "#55a868"),
        ("state (fixed)", [r.memory.fixed_state for r in rows], "#8172b3"),
    ]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2), 4.8), dpi=100)
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for label, values, color in parts:
        gib = [v / GIB for v in values]
        ax.bar(xs, gib, bottom=bottom, label=label, color=color, width=0.6)
        bottom = [b + g for b, g in zip(bottom, gib, strict=True)]
    est = [r.estimate.total / GIB for r in rows]
    ax.bar(xs, est, bottom=bottom, label="estimate (not exact)", color="none", edgecolor="#c44e52",
           hatch="//", width=0.6)  # fmt: skip
    budget_drawn = False
    for x, r in zip(xs, rows, strict=True):
        if r.budget is not None:
            ax.hlines(r.budget / GIB, x - 0.4, x + 0.4, colors="black", linewidth=2,
                      label="_nolegend_" if budget_drawn else "device budget")  # fmt: skip
            budget_drawn = True
            ax.annotate(r.verdict, (x, r.budget / GIB), textcoords="offset points", xytext=(0, 4), ha="center",
                        fontsize=8)  # fmt: skip
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set_ylabel("GiB")
    ax.set_title(f"q38 fit: {Path(report.package).name} (batch {report.base.batch})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
