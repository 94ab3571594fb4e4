"""Benchmark: ``q38 offload`` of the full synthetic package (48 decoder layers + the MTP draft:
49 QMoE nodes), time and peak RSS; and memory that does not grow with weight bytes.

Invariants guarded (no timing assertions):
- the full conversion succeeds and clears all 49 router_weights;
- peak Python allocation during a conversion is the same (within 25 % + 2 MB) for a package with
  ten times the weight bytes: weights are never read into memory.
The measured figures go into the benchmark's ``extra_info`` (and ``-s`` output).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions

REPO = Path(__file__).resolve().parents[3]
_OPTIONS = OffloadOptions(mode="auto", target_resident_slots=2, mtp_moe_placement="host_mapped")

_CHILD = """
import json, resource, sys, time
from pathlib import Path
from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
convert_package(Path(sys.argv[1]), Path(sys.argv[2]),
                OffloadOptions(mode="auto", target_resident_slots=2, mtp_moe_placement="host_mapped"))
print(json.dumps({"seconds": time.perf_counter() - t, "rss_before_kib": base,
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _data_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.data"))


@pytest.mark.slow
def test_offload_full_bench(benchmark, full_cpu_package: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    counter = itertools.count()

    def run() -> int:
        return convert_package(full_cpu_package, tmp_path / f"out{next(counter)}", _OPTIONS).router_weights_cleared

    assert benchmark.pedantic(run, rounds=3, iterations=1) == 97  # 49 target + 48 prefill
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(full_cpu_package), str(tmp_path / "rss")],
        capture_output=True, text=True, check=True, cwd=REPO,
    )
    figures = json.loads(child.stdout)
    figures["weight_bytes"] = _data_bytes(full_cpu_package)
    benchmark.extra_info.update(figures)
    print(f"offload full: {figures}")


@pytest.mark.slow
def test_offload_memory_independent_of_weight_bytes(full_cpu_package: Path, tmp_path: Path) -> None:
    from q38.synth import synthesize

    large = synthesize(tmp_path / "large", preset="large", variant="cpu", weight_gb=0.1)
    assert _data_bytes(large) > 10 * _data_bytes(full_cpu_package)
    peaks = []
    for name, src in (("full", full_cpu_package), ("large", large)):
        tracemalloc.start()
        try:
            convert_package(src, tmp_path / f"out_{name}", _OPTIONS)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    print(f"offload peak python allocation: full {peaks[0] / 1e6:.1f} MB, large {peaks[1] / 1e6:.1f} MB")
    assert peaks[1] < 1.25 * peaks[0] + 2_000_000
