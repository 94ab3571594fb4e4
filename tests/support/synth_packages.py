"""Shared, session-scoped synthetic packages for the unit tests and the benchmarks.

tests/unit/conftest.py and tests/bench/conftest.py import these fixtures (one definition).

Each fixture returns the Path of a package built once per test session (per xdist worker) with
``q38.synth.synthesize``. The trees are SHARED: consumers must treat them as read-only and copy
them (``shutil.copytree(src, tmp_path / "pkg", symlinks=True)``) before modifying anything.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _synth(factory: pytest.TempPathFactory, name: str, **kw: object) -> Path:
    """A synthetic package built once per session, or once per ``Q38_SYNTH_CACHE`` directory.

    The cache (set by ``nox -s mutation``, whose every mutant is a new pytest session) is safe to
    share: synthesize is deterministic and the trees are read-only to their consumers.
    """
    from q38.synth import synthesize

    cache = os.environ.get("Q38_SYNTH_CACHE")
    if not cache:
        return synthesize(factory.mktemp("synth") / name, **kw)  # type: ignore[arg-type]
    path = Path(cache) / name
    if not path.exists():
        try:
            synthesize(path, **kw)  # type: ignore[arg-type]
        except Exception:  # another process built it first
            if not path.exists():
                raise
    return path


@pytest.fixture(scope="session")
def tiny_cpu_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Flat tiny cpu-variant contrib package (runs on ORT 1.32.0 CPU). Read-only: copy first."""
    return _synth(tmp_path_factory, "tiny_cpu", preset="tiny", variant="cpu")


@pytest.fixture(scope="session")
def tiny_faithful_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Flat tiny faithful-variant contrib package (QSA ops; no CPU kernel). Read-only: copy first."""
    return _synth(tmp_path_factory, "tiny_faithful", preset="tiny", variant="faithful")


@pytest.fixture(scope="session")
def tiny_bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny cpu-variant source bundles (target/, head/, prefill/, libs/). Read-only: copy with
    ``symlinks=True`` first (the copy loses the hard links; rebuild with synthesize if you need them)."""
    return _synth(tmp_path_factory, "tiny_bundles", preset="tiny", variant="cpu", bundles=True)


@pytest.fixture(scope="session")
def full_cpu_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Flat full-preset (48 layers) cpu-variant contrib package. Read-only: copy first."""
    return _synth(tmp_path_factory, "full_cpu", preset="full", variant="cpu")


@pytest.fixture(scope="session")
def tiny_builder_cpu_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny ``--exporter builder`` cpu-variant package (genai surface, model.onnx + mtp.onnx; runs
    on ORT 1.32.0 CPU and generates with onnxruntime-genai 0.18.0). Read-only: copy first."""
    return _synth(tmp_path_factory, "tiny_builder_cpu", exporter="builder", variant="cpu")


@pytest.fixture(scope="session")
def tiny_builder_faithful_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny ``--exporter builder`` faithful-variant package (qwen4_exp_text: QSA ops, FP8 MTP
    experts, engram.onnx, shared_initializers; bf16). Read-only: copy first."""
    return _synth(tmp_path_factory, "tiny_builder_faithful", exporter="builder", variant="faithful")


@pytest.fixture(scope="session")
def full_builder_cpu_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Full-preset (48 layers) ``--exporter builder`` cpu-variant package. Read-only: copy first."""
    return _synth(tmp_path_factory, "full_builder_cpu", preset="full", exporter="builder", variant="cpu")
