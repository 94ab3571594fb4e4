"""Benchmark of ``q38 synth --preset full`` (the CPU suite's smoke: ``--preset tiny`` once, under
--benchmark-disable; tests/bench/conftest.py).

Invariant: the preset synthesizes through the CLI with exit 0 and writes a package.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from q38.cli import main


def test_synth_full_bench(benchmark, bench_preset: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    counter = itertools.count()

    def run() -> int:
        return main(["synth", str(tmp_path / f"out{next(counter)}"), "--preset", bench_preset])

    assert benchmark(run) == 0
    assert (tmp_path / "out0" / "genai_config.json").is_file()
