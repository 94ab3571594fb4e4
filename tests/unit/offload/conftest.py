"""Offload-test fixtures: more synthetic sources (layered, custom lineage) and converted outputs.

Every fixture here is module- or session-scoped and read-only; tests that modify a package copy
it first (``editable_copy``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_layered_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("offload_src") / "tiny_layered", preset="tiny", variant="cpu",
                      layout="layered")


@pytest.fixture(scope="session")
def tiny_custom_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("offload_src") / "tiny_custom", preset="tiny", variant="cpu",
                      lineage="custom")


@pytest.fixture(scope="session")
def converted_cpu(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny cpu package converted with defaults (mode=required) and MTP experts host_mapped."""
    from q38.offload.convert import convert_package
    from q38.offload.options import OffloadOptions

    out = tmp_path_factory.mktemp("offload_out") / "cpu"
    convert_package(tiny_cpu_package, out, OffloadOptions(target_resident_slots=2, mtp_moe_placement="host_mapped"))
    return out


@pytest.fixture(scope="session")
def converted_auto(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """tiny cpu package converted with mode=auto and 2 target resident slots, and the session config
    entries its decoder graphs run with in a CPU session (mode auto): the setup of the ORT and parity tests.
    """
    from support.offload_synthpkg import AUTO_MODE

    from q38.offload.convert import convert_package
    from q38.offload.options import OffloadOptions
    from q38.package import open_package

    out = tmp_path_factory.mktemp("offload_auto") / "out"
    convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto", target_resident_slots=2))
    return out, {**open_package(out).config.model.decoder.session_options.config_entries, **AUTO_MODE}


@pytest.fixture
def editable_copy(tmp_path: Path) -> Callable[[Path], Path]:
    def copy(src: Path) -> Path:
        dest = tmp_path / "src"
        shutil.copytree(src, dest, symlinks=True)
        return dest

    return copy
