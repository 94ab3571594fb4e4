"""Fixtures of the benchmarks: one size each for ``nox -s bench`` and for the CPU suite's smoke.

With ``--benchmark-enable`` (``nox -s bench``: the release gate and the placement / scale runs)
each benchmark runs at the sizes ``Q38_BENCH_SIZES`` names (the session sets ``tiny,full``): a
benchmark of a synthetic preset takes the largest preset named (``bench_preset``), the build
benchmark every size. Without it (``nox -s cpu``, plain ``pytest``: ``--benchmark-disable`` is in
addopts) each benchmark runs once at its smallest size, the tiny preset, as a smoke test: the
benchmark's own correctness checks are asserted on what it ran (a broken benchmarked command fails
it), its timing ratios only under ``--benchmark-enable``, where the measured sizes are the ones
the thresholds are for.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.synth_packages import (  # noqa: F401 (fixtures)
    full_cpu_package,
    tiny_cpu_package,
)

PRESET_LAYERS = {"tiny": 8, "full": 48}  # q38.synth.spec: the decoder layers of each preset


def benchmarking(config: pytest.Config) -> bool:
    """Whether this run measures (``--benchmark-enable``) rather than smoke-tests."""
    return bool(config.getoption("benchmark_enable", False))


@pytest.fixture(scope="session")
def bench_preset(request: pytest.FixtureRequest) -> str:
    """``full`` when measuring with ``full`` in ``Q38_BENCH_SIZES`` (default ``tiny,full``), else ``tiny``."""
    if not benchmarking(request.config):
        return "tiny"
    sizes = os.environ.get("Q38_BENCH_SIZES", "tiny,full").split(",")
    return "full" if "full" in sizes else "tiny"


@pytest.fixture(scope="session")
def bench_layers(bench_preset: str) -> int:
    """The decoder layers of ``bench_package`` (8 tiny, 48 full)."""
    return PRESET_LAYERS[bench_preset]


@pytest.fixture(scope="session")
def bench_package(bench_preset: str, request: pytest.FixtureRequest) -> Path:
    """The cpu-variant synthetic package of ``bench_preset`` (session-scoped, shared). Read-only: copy first."""
    return request.getfixturevalue(f"{bench_preset}_cpu_package")
