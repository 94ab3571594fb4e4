"""Peak memory beside ``q38 fit`` (tests/gpu/q38gpu_memory.py) and figures that report, never raise.

Invariants guarded (issue 41 items 8 and 10):
* the process meter's sampler sees an allocation made inside its window, above the baseline;
* ``fit_prediction`` reads q38 fit's exact sum and labelled estimate for the package and tier;
* ``judge`` sets the ratio and fails (and the gate with it) only when the peak exceeds the exact
  sum by more than fit's estimate;
* a NaN or infinite figure is written as "nan" / "inf" (strict JSON), and the figures carry the
  memory, placement and test-progress fields.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

GPU_DIR = Path(__file__).resolve().parents[2] / "gpu"
sys.path.insert(0, str(GPU_DIR))
import q38gpu_figures as gfig  # noqa: E402
import q38gpu_gate as gate  # noqa: E402
import q38gpu_memory as gmem  # noqa: E402


def test_the_process_meter_sees_an_allocation_in_its_window() -> None:
    meter = gmem.Meter(device=False)
    assert meter.source == "process resident set (/proc/self/statm)"
    with meter.peak() as peak:
        block = np.ones(64 << 20, np.uint8)  # 64 MiB, touched
        assert block.sum() == 64 << 20
    result = peak.result()
    assert result["peak_bytes"] >= 60 << 20 and result["samples"] >= 1
    del block


def test_fit_prediction_and_the_verdict(tiny_cpu_package: Path) -> None:
    fit = gmem.fit_prediction(tiny_cpu_package, context=64)
    assert fit["context"] == 64 and fit["exact_bytes"] > 0 and fit["estimate_bytes"] > 0
    exact, estimate = fit["exact_bytes"], fit["estimate_bytes"]
    ok = gmem.judge({"peak_bytes": exact + estimate}, fit)
    assert ok["within_estimate"] is True and math.isclose(ok["ratio"], (exact + estimate) / exact)
    bad = gmem.judge({"peak_bytes": exact + estimate + (1 << 20)}, fit)
    assert bad["within_estimate"] is False and bad["under_predicted_bytes"] == estimate + (1 << 20)
    lines = gmem.problems({"cpu/2K": bad, "cpu/8K": ok})
    assert len(lines) == 1 and lines[0].startswith("fit under-predicts cpu/2K: peak ")
    verdict = gate.judge(gate.Manifest({"default": 0}, ()), {"t::a": ("passed", "")}, ort_version="1.32.0",
                         klass="small", other_problems=lines)
    assert not verdict.ok and verdict.problems == tuple(lines)
    assert gmem.judge({"peak_bytes": 1}, {"error": "no row"})["within_estimate"] is None


def test_non_finite_figures_are_reported_not_raised(tmp_path: Path) -> None:
    rec = gfig.Recorder()
    rec.tier("cpu/2K", decode_tps=gfig.spread([float("nan"), 1.0]), ttft_ms=float("inf"))
    rec.collected[:] = ["t::a", "t::b"]
    rec.outcomes["t::a"] = "passed"
    rec.stopped = "SIGTERM after 60 s"
    path = gfig.write(tmp_path / "figures.json", rec, png=True)
    doc = json.loads(path.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert doc["tiers"]["cpu/2K"]["ttft_ms"] == "inf" and doc["tiers"]["cpu/2K"]["decode_tps"]["median"] == "nan"
    assert doc["tests"] == {"finished": {"t::a": "passed"}, "not_run": ["t::b"], "stopped": "SIGTERM after 60 s",
                            "order": ["t::a", "t::b"]}
    assert doc["memory"] == {} and doc["placements"] == {}
    assert path.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
