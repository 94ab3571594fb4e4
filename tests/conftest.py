"""Fixtures shared by every test suite: the golden snapshots (see tests/golden.py).

* ``graph_snapshot``: ``assert graph_snapshot == model`` where model is a ``.onnx`` path, an
  ``onnx.ModelProto`` or an ``onnx_ir.Model``; ``graph_snapshot(name="target")`` names the file.
* ``package_snapshot``: ``assert package_snapshot == package_dir``.
* ``messages_snapshot``: ``assert messages_snapshot == {"case": str(err)}`` pins q38's own wording
  (one message, or the lines of a case, per key); texts onnxruntime owns stay exact pins.

Goldens live in ``goldens/<test_module>/<test>[<name>].json``; identical ones are stored once
(the others refer to it). Tests using them are marked ``golden``; update them deliberately with
``nox -s goldens`` (``--goldens-only --snapshot-update``). Unused goldens fail a passing run.
"""

from __future__ import annotations

import os
import tempfile

import golden
import pytest
from hypothesis import HealthCheck, settings
from syrupy.assertion import SnapshotAssertion

# Property tests: no per-example deadline (timings on a loaded 2-core machine are not the
# property), and in CI a fixed example sequence, so a landing never depends on a lucky draw;
# locally the search stays random and keeps exploring.
settings.register_profile(
    "q38", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=bool(os.environ.get("CI"))
)
settings.load_profile("q38")

# The CPU-kernel table (q38.ort_kernels) is probed once per onnxruntime build: keep the tests'
# copy out of the user's cache, shared by the xdist workers and the q38 processes tests spawn.
# Tests of the cache itself point Q38_CACHE_DIR at their own tmp_path.
os.environ.setdefault("Q38_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"q38-tests-cache-{os.getuid()}"))


def pytest_addoption(parser: pytest.Parser) -> None:
    golden.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(golden.GoldenPlugin(config), "q38-goldens")


@pytest.fixture
def graph_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """A snapshot that stores the canonical JSON of a graph."""
    return golden.golden_assertion(snapshot, golden.GraphGoldenExtension)


@pytest.fixture
def package_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """A snapshot that stores the canonical JSON of a package's config, pool and manifest."""
    return golden.golden_assertion(snapshot, golden.PackageGoldenExtension)


@pytest.fixture
def messages_snapshot(snapshot: SnapshotAssertion, tmp_path_factory: pytest.TempPathFactory) -> SnapshotAssertion:
    """A snapshot that stores q38's own messages: case -> message (refusals, declines, explain lines).

    Paths under pytest's temporary directory are stored as ``<tmp>/...`` (see ``canonical_messages``).
    """
    golden.MessagesGoldenExtension.temp_root = str(tmp_path_factory.getbasetemp())
    return golden.golden_assertion(snapshot, golden.MessagesGoldenExtension)
