"""Fixtures of the build tests: ``bundles`` (see _build_bundles.py) and the rule-9 source check.

An autouse fixture hashes every source tree before and after each test that uses ``bundles``,
failing builds included: q38 build never modifies its inputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.build_bundles import make_bundles, tree_digest


@pytest.fixture
def bundles(tmp_path: Path) -> dict[str, Path]:
    return make_bundles(tmp_path / "src")


@pytest.fixture(autouse=True)
def _sources_unchanged(request: pytest.FixtureRequest):
    """Rule 9: the source tree is byte-identical after every test, failing builds included."""
    if "bundles" not in request.fixturenames:
        yield
        return
    b = request.getfixturevalue("bundles")
    before = tree_digest(b["root"])
    yield
    assert tree_digest(b["root"]) == before, "a source file was modified"
