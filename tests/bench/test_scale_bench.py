"""Scale benchmark: the ``large`` synthetic package through build -> optimize -> offload -> check.

Measures only with ``--benchmark-enable`` (``nox -s bench``; several GB of disk and minutes); the
CPU suite's smoke runs the same steps once on the tiny preset, each child succeeding and reporting
its figures. For each weight size
(default 1 GB and 8 GB of routed-expert weights, ``Q38_SCALE_GB=1,8``) every step runs in a child
process (``tests/support/rss_child.py``) that reports its peak RSS (VmHWM) and its peak anonymous
memory (RssAnon sampled every 10 ms; file-backed pages of mapped weights are reported separately
as RssFile). All figures go to ``extra_info``.

Invariant guarded: peak anonymous memory stays flat as weights grow: for every step, the largest
size's RssAnon peak is at most 1.5x the smallest size's plus 256 MiB (weights are linked, copied
with copy_file_range or read in ranges, never loaded whole).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SIZES = tuple(float(x) for x in os.environ.get("Q38_SCALE_GB", "1,8").split(","))
CHILD = Path(__file__).resolve().parents[1] / "support" / "rss_child.py"
REPO = Path(__file__).resolve().parents[2]


def _step(workdir: Path, name: str, args: list[str]) -> dict[str, Any]:
    report = workdir / f"{name}.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(CHILD), str(report), *args], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"
    data: dict[str, Any] = json.loads(report.read_text())
    return data


def _pipeline(root: Path, weight_gb: float | None) -> dict[str, dict[str, Any]]:
    """Every step of the pipeline on the large preset of ``weight_gb`` (None: the tiny preset)."""
    work = root / (f"gb{weight_gb:g}" if weight_gb is not None else "tiny")
    work.mkdir()
    b, pkg, opt, off = work / "bundles", work / "pkg", work / "opt", work / "off"
    preset = ["--preset", "large", "--weight-gb", f"{weight_gb:g}"] if weight_gb is not None else ["--preset", "tiny"]
    steps = {
        "synth": ["synth", str(b), "--bundles", *preset, "--variant", "cpu"],
        "build": ["build", str(pkg), "--target", str(b / "target"), "--head", str(b / "head"),
                  "--prefill", str(b / "prefill")],
        "optimize": ["optimize", str(pkg), str(opt), "--target", "cpu"],  # as `q38 demo` does for cpu
        "offload": ["offload", str(off), "--from-package", str(opt), "--offload-mode", "auto"],
        "check": ["check", str(off)],
    }
    results = {name: _step(work, name, args) for name, args in steps.items()}
    results["synth"]["weight_bytes"] = sum(
        p.stat().st_size for p in (b / "target").rglob("*") if p.is_file() and not p.is_symlink()
    )
    shutil.rmtree(work)
    return results


@pytest.mark.slow
def test_scale_large_pipeline_rss(benchmark: Any, tmp_path: Path) -> None:
    if benchmark.disabled:  # the CPU suite's smoke: the same steps on the tiny preset, each must succeed
        steps = _pipeline(tmp_path, None)
        assert list(steps) == ["synth", "build", "optimize", "offload", "check"]
        assert steps["synth"]["weight_bytes"] > 0
        assert all(data["rss_anon_peak_kib"] > 0 and data["vm_hwm_kib"] > 0 for data in steps.values())
        return
    figures: dict[str, dict[str, dict[str, Any]]] = {}

    def run() -> None:
        for gb in SIZES:
            figures[f"{gb:g}GB"] = _pipeline(tmp_path, gb)

    benchmark.pedantic(run, rounds=1, iterations=1)
    mib = 1024
    for size, steps in figures.items():
        for step, data in steps.items():
            benchmark.extra_info[f"{size}.{step}.seconds"] = round(data["seconds"], 2)
            benchmark.extra_info[f"{size}.{step}.vm_hwm_mib"] = round(data["vm_hwm_kib"] / mib, 1)
            benchmark.extra_info[f"{size}.{step}.rss_anon_peak_mib"] = round(data["rss_anon_peak_kib"] / mib, 1)
            benchmark.extra_info[f"{size}.{step}.rss_file_peak_mib"] = round(data["rss_file_peak_kib"] / mib, 1)
        benchmark.extra_info[f"{size}.weight_bytes"] = steps["synth"]["weight_bytes"]
    print("\n" + json.dumps(benchmark.extra_info, indent=1, sort_keys=True))
    small, large = figures[f"{min(SIZES):g}GB"], figures[f"{max(SIZES):g}GB"]
    for step in ("build", "optimize", "offload", "check"):
        lo, hi = small[step]["rss_anon_peak_kib"], large[step]["rss_anon_peak_kib"]
        assert hi <= 1.5 * lo + 256 * mib, f"{step}: anonymous memory grows with weights ({lo} KiB -> {hi} KiB)"
