"""Goldens of what `q38 optimize` emits (goldens/test_optimize_goldens/).

Invariants guarded (a change to any emitted node, attribute, name, initializer byte, opset
import, config, pool entry or manifest field shows up as a reviewable golden diff):
* the graph each rewrite emits on its micro-graph (RMSNormRotary, shared-expert projection,
  hyper-connection mix with its PostMix prologue, the three CausalConvWithState carry forms, the
  FP8 head), and on the same micro-graph with every node unnamed (the names a rewrite derives
  when the anchor has none);
* the optimized tiny faithful package (--target cuda): target and head graphs, config, pool and
  manifest.

Update deliberately with `nox -s goldens` (pytest --snapshot-update).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import support.optimize_graphs as G
from support.optimize_helpers import apply
from syrupy.assertion import SnapshotAssertion

from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.driver import optimize_package
from q38.optimize.fp8_head import QuantizeFp8HeadPass
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass
from q38.optimize.shared_expert import FuseSharedExpertPass


def _fp8_head() -> object:
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 200])
    w = g.init("lm_head.weight", (0.1 * G.rng(0).standard_normal((200, 16))).astype(np.float16))
    g.op("MatMul", [n, w], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 16])
    return g.model(ms=False)


def _unnamed(build: object) -> object:
    """The same micro-graph with every node name empty: the rewrite derives its names from nothing."""

    def unnamed() -> object:
        proto = build()  # type: ignore[operator]
        for node in proto.graph.node:
            node.name = ""
        return proto

    return unnamed


CASES = {
    "rms_norm_rotary": (FuseRMSNormRotaryPass, lambda: G.rms_rotary_model()),
    "shared_expert": (FuseSharedExpertPass, lambda: G.shared_expert_model()),
    "hyper_connection": (FuseHyperConnectionPass, lambda: G.hc_model(two_blocks=True)),
    "causal_conv_state_channels_first": (FuseCausalConvStatePass, lambda: G.conv_carry_model()),
    "causal_conv_state_first_token": (FuseCausalConvStatePass, lambda: G.conv_carry_model(form="first_token", S=1)),
    "causal_conv_state_channels_last": (FuseCausalConvStatePass, lambda: G.conv_carry_model(form="channels_last")),
    "fp8_head": (QuantizeFp8HeadPass, _fp8_head),
}
CASES.update({f"{case}_unnamed": (cls, _unnamed(build)) for case, (cls, build) in list(CASES.items())})


@pytest.mark.parametrize("case", sorted(CASES))
def test_emitted_micro_graph_matches_golden(case: str, graph_snapshot: SnapshotAssertion) -> None:
    cls, build = CASES[case]
    model, p = apply(cls, build())  # type: ignore[arg-type]
    assert p.count >= 1
    assert graph_snapshot == model


@pytest.fixture(scope="module")
def optimized_faithful(tiny_faithful_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("golden_opt")
    src = base / "src"
    shutil.copytree(tiny_faithful_package, src, symlinks=True)
    out = base / "pkg"
    optimize_package(src, out, target="cuda")
    return out


def test_optimized_tiny_faithful_graphs_match_goldens(optimized_faithful: Path, graph_snapshot: SnapshotAssertion) -> None:
    assert graph_snapshot(name="target") == optimized_faithful / "model.onnx"
    assert graph_snapshot(name="head") == optimized_faithful / "head_r2.onnx"


def test_optimized_tiny_faithful_package_matches_golden(optimized_faithful: Path, package_snapshot: SnapshotAssertion) -> None:
    assert package_snapshot == optimized_faithful
