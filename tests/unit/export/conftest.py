"""Fixtures of the export tests: the tiny cpu package exported once per session (read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def exported(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``q38 export-genai`` of the tiny cpu package (defaults). Read-only: copy first."""
    from q38.cli import main

    out = tmp_path_factory.mktemp("export") / "genai"
    assert main(["export-genai", str(tiny_cpu_package), str(out)]) == 0
    return out
