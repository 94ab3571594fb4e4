"""Benchmarks of ``q38 build`` (run with ``nox -s bench``; disabled in normal runs).

Recorded in ``extra_info``: bytes and files placed, time per linked file (``--link auto``), and
for ``--copy`` the throughput as a ratio to ``cp`` of the same bytes measured in the same run.
Set Q38_BENCH_PRESET=large (and Q38_BENCH_WEIGHT_GB) for the issue's large-preset figures; the
default is the tiny preset so that the module stays fast when benchmarks are enabled by accident.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from q38.build import BuildRequest, LinkPolicy, build_package

PRESET = os.environ.get("Q38_BENCH_PRESET", "tiny")


@pytest.fixture(scope="module")
def bench_bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    kw = {"weight_gb": float(os.environ.get("Q38_BENCH_WEIGHT_GB", "2"))} if PRESET == "large" else {}
    return synthesize(tmp_path_factory.mktemp("bench") / "bundles", preset=PRESET, variant="cpu", bundles=True, **kw)


def _bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("policy", [LinkPolicy.AUTO, LinkPolicy.COPY])
def test_bench_build(benchmark, bench_bundles, tmp_path, policy):
    outs = iter(range(10**6))
    b = bench_bundles

    def setup():
        out = tmp_path / f"pkg{next(outs)}"
        return (BuildRequest(out=out, target=b / "target", head=b / "head", prefill=b / "prefill", link=policy),), {}

    result = benchmark.pedantic(build_package, setup=setup, rounds=3, iterations=1)
    placed = sum(v for k, v in result.link_modes.items() if k in ("reflink", "hardlink", "copy"))
    data = _bytes(result.packages[0])
    if benchmark.stats is None:  # --benchmark-disable: ran once as a plain test
        assert placed > 0
        return
    info = benchmark.extra_info
    info.update({"preset": PRESET, "files_placed": placed, "package_bytes": data, "modes": dict(result.link_modes)})
    median = benchmark.stats.stats.median
    info["seconds_per_placed_file"] = median / max(placed, 1)
    if policy is LinkPolicy.COPY:
        dst = tmp_path / "cp_ref"
        t0 = time.perf_counter()
        subprocess.run(["cp", "-r", "--reflink=never", os.fspath(b / "target"), os.fspath(dst)], check=True)
        cp_s = time.perf_counter() - t0
        shutil.rmtree(dst)
        info["cp_target_seconds"] = cp_s
        info["cp_target_bytes"] = _bytes(b / "target")
        info["copy_throughput_ratio_to_cp"] = (data / median) / (info["cp_target_bytes"] / cp_s)
