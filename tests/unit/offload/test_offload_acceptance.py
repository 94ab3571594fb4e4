"""Issue 17.3's acceptance on the command line: ``q38 synth --exporter builder`` (both lineages,
both variants; the full preset for two of them) -> ``q38 offload --offload-mode auto`` -> ``q38
check``, all exit 0, every QMoE node kept (or offloaded, with ``--weights-prepacked``) and the
resident slots exact.

Invariants guarded:
- auto keeps the builder's QMoE nodes (``weights_prepacked`` absent) on the GPU, names them, and
  the package converts; ``q38 check`` of the output exits 0;
- with ``--weights-prepacked`` and a profile, ``--total-resident-slots N``: the caps written in
  the decoder's ``node_overrides`` sum to N, the report's hit rate is the share the caps keep.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from q38.cli import main
from q38.offload.options import OFFLOAD_PREFIX, parse_node_overrides
from q38.package import encode_profile
from q38.package.profile import ExpertProfile


@pytest.mark.parametrize(("preset", "variant", "lineage", "prepacked"), [
    ("tiny", "cpu", "contrib", False), ("tiny", "cpu", "custom", False), ("tiny", "faithful", "contrib", False),
    ("tiny", "faithful", "custom", False),
    pytest.param("full", "cpu", "contrib", False, marks=pytest.mark.slow),
    pytest.param("full", "faithful", "custom", True, marks=pytest.mark.slow),
])  # fmt: skip
def test_synth_builder_offload_check(preset: str, variant: str, lineage: str, prepacked: bool, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    argv = ["synth", str(src), "--exporter", "builder", "--preset", preset, "--variant", variant, "--lineage", lineage]
    assert main([*argv, *(["--weights-prepacked"] if prepacked else [])]) == 0
    layers = 48 if preset == "full" else 8
    extra: list[str] = []
    total = 5 * layers
    if prepacked:
        counts = np.random.default_rng(layers).integers(0, 100, size=(layers + 1, 8)).astype(np.uint64)
        (tmp_path / "p.bin").write_bytes(encode_profile(ExpertProfile(counts)))
        extra = ["--expert-profile", str(tmp_path / "p.bin"), "--total-resident-slots", str(total)]
    capsys.readouterr()
    assert main(["offload", str(out), "--from-package", str(src), "--offload-mode", "auto", "--json", *extra]) == 0
    report = json.loads(capsys.readouterr().out)
    if prepacked:  # the decoder's int4 nodes are offloaded; the FP8 MTP node stays on the GPU
        assert len(report["offloaded"]) == layers and len(report["kept_resident"]) == 1
        so = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]["session_options"]
        caps = parse_node_overrides(so[OFFLOAD_PREFIX + "node_overrides"])
        assert len(caps) == layers and sum(caps.values()) == total == sum(report["resident_slots"].values())
        (tier,) = report["hit_rates"]
        assert tier["selections"] == int(counts.sum())
        assert tier["layers"][-1]["state"] == "kept"
    else:
        assert report["offloaded"] == [] and len(report["kept_resident"]) == layers + 1
        assert report["resident_slots"] == {}
    assert report["graphs"] == {"s2": "model_s2.onnx", "s3": "model_s3.onnx", "s4": "model_s4.onnx"}
    assert main(["check", str(out)]) == 0
