"""Goldens of the synthetic packages (q38 synth): what every later stage starts from.

Invariants guarded: for tiny cpu/faithful x flat/layered, the package form (config, pool,
manifest, file inventory) and the canonical form of every graph (target, head, prefill) match the
checked-in goldens under goldens/test_synth_goldens/; the full faithful target graph (48 layers)
too. A change to the generator shows up as a reviewable JSON diff; update deliberately with
``nox -s goldens``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

synth = pytest.importorskip("q38.synth", reason="q38.synth is not importable")

GRAPHS = ("target", "head", "prefill")


def _graph_paths(package: Path) -> dict[str, Path]:
    from q38.package import open_package

    pkg = open_package(package)
    return {role: Path(pkg.graph_path(role)) for role in GRAPHS}


@pytest.mark.parametrize("layout", ["flat", "layered"])
@pytest.mark.parametrize("variant", ["cpu", "faithful"])
def test_tiny_package_goldens(
    tmp_path: Path,
    package_snapshot: SnapshotAssertion,
    graph_snapshot: SnapshotAssertion,
    variant: str,
    layout: str,
) -> None:
    package = synth.synthesize(tmp_path / "pkg", preset="tiny", variant=variant, layout=layout)
    assert package_snapshot(name="package") == package
    for role, path in _graph_paths(package).items():
        assert graph_snapshot(name=role) == path


def test_full_faithful_target_graph_golden(tmp_path: Path, graph_snapshot: SnapshotAssertion) -> None:
    package = synth.synthesize(tmp_path / "pkg", preset="full", variant="faithful")
    assert graph_snapshot(name="target") == _graph_paths(package)["target"]


BUILDER_GRAPHS = {"cpu": ("model.onnx", "mtp.onnx"),
                  "faithful": ("model.onnx", "mtp.onnx", "engram.onnx")}  # fmt: skip


@pytest.mark.parametrize("variant", ["cpu", "faithful"])
def test_tiny_builder_package_goldens(
    tmp_path: Path,
    package_snapshot: SnapshotAssertion,
    graph_snapshot: SnapshotAssertion,
    variant: str,
) -> None:
    """``--exporter builder`` packages: genai config + file inventory, and every graph."""
    package = synth.synthesize(tmp_path / "pkg", preset="tiny", variant=variant, exporter="builder")
    assert package_snapshot(name="package") == package
    for graph in BUILDER_GRAPHS[variant]:
        assert graph_snapshot(name=graph.removesuffix(".onnx")) == package / graph


def test_tiny_builder_linear_attention_golden(tmp_path: Path, graph_snapshot: SnapshotAssertion) -> None:
    """``--exporter builder --linear-attn linear_attention``: the decoder graph."""
    package = synth.synthesize(tmp_path / "pkg", exporter="builder", linear_attn="linear_attention")
    assert graph_snapshot(name="model") == package / "model.onnx"
