"""The manifest's QSA constants record a DynamicSparseAttention's own q/k norm epsilon.

Invariant (issue 25, survivor "DSA qk_norm_epsilon from the wrong attribute"): a
``DynamicSparseAttention`` with ``qk_norm_epsilon`` (and q_norm / k_norm weights at inputs 14 and
15) is a norm site; its epsilon is the ``qk_norm_epsilon`` attribute as float32 -- not ``scale``,
not a missing ``epsilon`` -- and it sits in ``extra.qsa_constants.target.epsilon`` beside the
epsilon of the target's decomposed norm chain.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from support.build_bundles import EPS, make_bundles

from q38._ops import DYNAMIC_SPARSE_ATTENTION
from q38.assembly import BuildRequest, build_package

QK_EPS = 3.5e-6  # differs from the norm chain's EPS (1e-6), the scale and every default
SCALE = 0.125


def _add_dsa(graph_path: Path) -> None:
    model = onnx.load(os.fspath(graph_path), load_external_data=False)
    g = model.graph
    for name, seed in (("dsa.q_norm.weight", 1), ("dsa.k_norm.weight", 2)):
        w = 1 + 0.1 * np.random.default_rng(seed).standard_normal(16)
        g.initializer.append(numpy_helper.from_array(w.astype(np.float32), name))
    inputs = ["x", *[""] * 13, "dsa.q_norm.weight", "dsa.k_norm.weight"]
    g.node.append(helper.make_node(
        DYNAMIC_SPARSE_ATTENTION, inputs, ["dsa_out"], domain="com.microsoft", name="/model/layers.0/attn/DSA",
        num_heads=4, kv_num_heads=4, scale=SCALE, qk_norm_epsilon=QK_EPS, do_rotary=0,
    ))
    g.output.append(helper.make_tensor_value_info("dsa_out", TensorProto.FLOAT, None))
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    os.unlink(graph_path)  # the bundle files are hard links: never write through them
    onnx.save(model, os.fspath(graph_path))


def test_dsa_qk_norm_epsilon_is_a_manifest_constant(tmp_path: Path) -> None:
    bundles = make_bundles(tmp_path / "src")  # not the fixture: this test edits its target graph
    pkg = tmp_path / "pkg"
    plain = _constants(bundles, tmp_path / "plain")
    _add_dsa(bundles["target"] / "model.onnx")
    qsa = _constants(bundles, pkg)
    assert qsa["epsilon"] == sorted([float(EPS), float(np.float32(QK_EPS))])
    assert qsa["norm_sites"] == plain["norm_sites"] + 1
    assert {"dsa.q_norm.weight", "dsa.k_norm.weight"} <= set(qsa["norm_weights"])


def _constants(bundles: dict[str, Path], out: Path) -> dict:
    build_package(BuildRequest(out=out, target=bundles["target"], head=bundles["head"], prefill=bundles["prefill"],
                                provider="cuda"))  # a CPU build refuses a graph with QSA ops
    return json.loads((out / "package_manifest.json").read_text())["extra"]["qsa_constants"]["target"]
