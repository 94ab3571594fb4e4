"""Fixtures for package-model tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.minipkg import build_mini_package


@pytest.fixture
def mini_package(tmp_path: Path) -> Path:
    return build_mini_package(tmp_path / "pkg")
