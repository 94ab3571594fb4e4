"""Goldens of converted packages (q38 offload) for flat and layered sources.

Invariants guarded: the package form (config with runtime profiles and offload options, pool
placements, manifest, file inventory) and the canonical form of model_s2/s3/s4.onnx match the
checked-in goldens under goldens/test_offload_goldens/ (model.onnx is asserted byte-equal to
model_s4.onnx elsewhere). Update deliberately with ``nox -s goldens``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions
from q38.package import open_package


@pytest.mark.parametrize("layout", ["flat", "layered"])
def test_converted_package_goldens(
    layout: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    package_snapshot: SnapshotAssertion,
    graph_snapshot: SnapshotAssertion,
) -> None:
    from q38.synth import synthesize

    monkeypatch.chdir(tmp_path)  # relative paths: the manifest's source path (and size) are stable
    src = synthesize(Path("src"), preset="tiny", variant="cpu", layout=layout)
    out = Path("out")
    convert_package(src, out, OffloadOptions(target_resident_slots=2, mtp_moe_placement="host_mapped"))
    assert package_snapshot(name="package") == out
    if layout == "layered":
        assert package_snapshot(name="target") == out / "target"
    pkg = open_package(out)
    for role in ("s2", "s3", "s4"):
        assert graph_snapshot(name=role) == pkg.graph_path(role)
