"""Benchmark of ``q38 synth --preset full`` (runs once under --benchmark-disable).

Invariant: the full preset synthesizes through the CLI with exit 0.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from q38.cli import main


@pytest.mark.slow
def test_synth_full_bench(benchmark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    counter = itertools.count()

    def run() -> int:
        return main(["synth", str(tmp_path / f"out{next(counter)}"), "--preset", "full"])

    assert benchmark(run) == 0
