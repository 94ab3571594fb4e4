"""`q38 offload` composes with `q38 optimize` for both targets.

Invariant: an optimized package (fused producers may carry no shapes) converts: the MTP draft
width is recovered from the graph, s2/s3/s4 are written, and the result passes `q38 check`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from q38.cli import main


@pytest.mark.slow
@pytest.mark.parametrize(("variant", "target"), [("faithful", "cuda"), ("cpu", "cpu"), ("cpu", "cuda")])
def test_offload_converts_an_optimized_package(tmp_path: Path, variant: str, target: str) -> None:
    src, opt, off = tmp_path / "src", tmp_path / "opt", tmp_path / "off"
    assert main(["synth", str(src), "--variant", variant]) == 0
    assert main(["optimize", str(src), str(opt), "--target", target]) == 0
    assert main(["offload", str(off), "--from-package", str(opt)]) == 0
    assert sorted(p.name for p in off.glob("model_s*.onnx")) == ["model_s2.onnx", "model_s3.onnx", "model_s4.onnx"]
    assert main(["check", str(off)]) == 0
