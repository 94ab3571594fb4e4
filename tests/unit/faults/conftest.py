"""Fixtures of the fault tests: the signal harness's hook directory and its read-only sources."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.signal_harness import write_hook


@pytest.fixture(scope="session")
def hookdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory of the signal harness's ``sitecustomize.py`` (tests/support/signal_harness.py)."""
    return write_hook(tmp_path_factory.mktemp("signal-hook"))


@pytest.fixture(scope="session")
def signal_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny cpu package and tiny cpu source bundles (seed 0) the signal tests read. Read-only."""
    from q38.synth import synthesize

    root = tmp_path_factory.mktemp("signal-sources")
    return {
        "package": synthesize(root / "pkg", preset="tiny", variant="cpu", seed=0),
        "bundles": synthesize(root / "bundles", preset="tiny", variant="cpu", seed=0, bundles=True),
    }
