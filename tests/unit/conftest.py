"""Shared, session-scoped synthetic packages for every unit-test area.

Each fixture returns the Path of a package built once per test session (per xdist worker) with
``q38.synth.synthesize``. The trees are SHARED: consumers must treat them as read-only and copy
them (``shutil.copytree(src, tmp_path / "pkg", symlinks=True)``) before modifying anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_cpu_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Flat tiny cpu-variant contrib package (runs on ORT 1.32.0 CPU). Read-only: copy first."""
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("synth") / "tiny_cpu", preset="tiny", variant="cpu")


@pytest.fixture(scope="session")
def tiny_faithful_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Flat tiny faithful-variant contrib package (QSA ops; no CPU kernel). Read-only: copy first."""
    from q38.synth import synthesize

    return synthesize(
        tmp_path_factory.mktemp("synth") / "tiny_faithful", preset="tiny", variant="faithful"
    )


@pytest.fixture(scope="session")
def tiny_bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny cpu-variant source bundles (target/, head/, prefill/, libs/). Read-only: copy with
    ``symlinks=True`` first (the copy loses the hard links; rebuild with synthesize if you need them)."""
    from q38.synth import synthesize

    return synthesize(
        tmp_path_factory.mktemp("synth") / "tiny_bundles",
        preset="tiny",
        variant="cpu",
        bundles=True,
    )


@pytest.fixture(scope="session")
def full_cpu_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Flat full-preset (48 layers) cpu-variant contrib package. Read-only: copy first."""
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("synth") / "full_cpu", preset="full", variant="cpu")


@pytest.fixture(scope="session")
def tiny_builder_cpu_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny ``--exporter builder`` cpu-variant package (genai surface, model.onnx + mtp.onnx; runs
    on ORT 1.32.0 CPU and generates with onnxruntime-genai 0.18.0). Read-only: copy first."""
    from q38.synth import synthesize

    return synthesize(
        tmp_path_factory.mktemp("synth") / "tiny_builder_cpu", exporter="builder", variant="cpu"
    )


@pytest.fixture(scope="session")
def tiny_builder_faithful_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny ``--exporter builder`` faithful-variant package (qwen4_exp_text: QSA ops, FP8 MTP
    experts, engram.onnx, shared_initializers; bf16). Read-only: copy first."""
    from q38.synth import synthesize

    return synthesize(
        tmp_path_factory.mktemp("synth") / "tiny_builder_faithful",
        exporter="builder",
        variant="faithful",
    )


@pytest.fixture(scope="session")
def full_builder_cpu_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Full-preset (48 layers) ``--exporter builder`` cpu-variant package. Read-only: copy first."""
    from q38.synth import synthesize

    return synthesize(
        tmp_path_factory.mktemp("synth") / "full_builder_cpu",
        preset="full",
        exporter="builder",
        variant="cpu",
    )
