"""Structure of the synthetic model (docs/synthetic-model.md).

Invariants: full faithful target has 48 layers = 36 GatedDeltaNet + 12 DynamicSparseAttention;
tiny op counts by (domain, op) are exact; graphs pass onnx.checker (external data replaced by
zeros) and strict shape inference; node and initializer names are unique and hierarchical;
MTP expert tensors sit at offsets that are not multiples of 4096; the head shares lm_head /
final-norm / embedding bytes with the target and has a same-name-different-bytes tensor;
prefill points only into model.onnx.data; custom lineage adds exactly one qwen.fold::FoldMid2.
"""

from __future__ import annotations

import collections
import copy
from pathlib import Path

import onnx
import pytest

from q38.synth import synthesize


def _load(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path), load_external_data=False)


def _ext(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def _zeroed(m: onnx.ModelProto) -> onnx.ModelProto:
    m2 = copy.deepcopy(m)
    for t in m2.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            n = int(_ext(t)["length"])
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
            t.raw_data = bytes(n)
    return m2


def _counts(m: onnx.ModelProto) -> dict[tuple[str, str], int]:
    return dict(collections.Counter((n.domain, n.op_type) for n in m.graph.node))


TINY_COMMON = {
    ("", "Add"): 17, ("", "Cast"): 4, ("", "Div"): 22, ("", "Expand"): 1, ("", "Gather"): 14,
    ("", "Identity"): 1, ("", "Mul"): 77, ("", "Pow"): 2, ("", "Reciprocal"): 2, ("", "ReduceMean"): 8,
    ("", "Shape"): 12, ("", "Sigmoid"): 54, ("", "Slice"): 18, ("", "Softmax"): 9, ("", "Split"): 15,
    ("", "Sqrt"): 8, ("", "Squeeze"): 2, ("", "Sub"): 8, ("", "Tile"): 1, ("", "Transpose"): 12,
    ("", "Unsqueeze"): 12,
    ("com.microsoft", "BranchwiseRMSNorm"): 18, ("com.microsoft", "CausalConvWithState"): 6,
    ("com.microsoft", "GatedAdd"): 9, ("com.microsoft", "GatedDeltaNet"): 6, ("com.microsoft", "GatedRMSNorm"): 6,
    ("com.microsoft", "HyperConnectionPostMix"): 16, ("com.microsoft", "HyperConnectionPreMix"): 17,
    ("com.microsoft", "QMoE"): 9, ("com.microsoft", "ScaledSiLU"): 16,
}  # fmt: skip


def test_tiny_cpu_op_counts(tiny_cpu_package: Path) -> None:
    m = _load(tiny_cpu_package / "model.onnx")
    want = dict(TINY_COMMON)
    want |= {
        ("", "Concat"): 12,
        ("", "MatMul"): 125,
        ("", "ReduceSum"): 1,
        ("", "Reshape"): 45,
        ("com.microsoft", "GroupQueryAttention"): 3,
    }
    assert _counts(m) == want
    assert len(m.graph.node) == 588


def test_tiny_faithful_op_counts(tiny_faithful_package: Path) -> None:
    m = _load(tiny_faithful_package / "model.onnx")
    want = dict(TINY_COMMON)
    want |= {
        ("", "Concat"): 14,
        ("", "MatMul"): 127,
        ("", "ReduceSum"): 3,
        ("", "Reshape"): 49,
        ("", "GreaterOrEqual"): 2,
        ("", "Where"): 2,
        ("com.microsoft", "GroupQueryAttention"): 1,
        ("com.microsoft", "SparseAttentionIndexer"): 2,
        ("com.microsoft", "DynamicSparseAttention"): 2,
    }
    assert _counts(m) == want


def test_full_faithful_has_48_layers(tmp_path: Path) -> None:
    out = synthesize(tmp_path / "p", preset="full", variant="faithful")
    m = _load(out / "model.onnx")
    c = _counts(m)
    assert c[("com.microsoft", "GatedDeltaNet")] == 36
    assert c[("com.microsoft", "DynamicSparseAttention")] == 12
    assert c[("com.microsoft", "QMoE")] == 49  # 48 layers + the MTP draft
    layers = {n.name.split("/")[2] for n in m.graph.node if n.name.startswith("/model/layers.")}
    assert layers == {f"layers.{i}" for i in range(48)}
    dsa = sorted(
        int(n.name.split("/")[2].split(".")[1])
        for n in m.graph.node
        if n.op_type == "DynamicSparseAttention"
    )
    assert dsa == list(range(3, 48, 4))


@pytest.mark.parametrize("graph", ["model.onnx", "prefill.onnx", "head_r2.onnx"])
def test_checker_and_shape_inference(tiny_faithful_package: Path, graph: str) -> None:
    m = _zeroed(_load(tiny_faithful_package / graph))
    onnx.checker.check_model(m, full_check=True)
    onnx.shape_inference.infer_shapes(m, strict_mode=True)


def test_names_unique_and_hierarchical(tiny_faithful_package: Path) -> None:
    m = _load(tiny_faithful_package / "model.onnx")
    names = [n.name for n in m.graph.node]
    assert len(names) == len(set(names))
    assert all(n.startswith(("/model/", "/mtp/0/", "/lm_head/", "/fold/")) for n in names)
    inits = [t.name for t in m.graph.initializer]
    assert len(inits) == len(set(inits))
    assert "model.layers.0.mlp.experts.fc1.weight" in inits
    assert (
        "/lm_head/MatMul" in names
        and "/model/layers.0/moe/QMoE" in names
        and "/mtp/0/moe/QMoE" in names
    )


def test_qmoe_attributes_and_mtp_offsets(tiny_cpu_package: Path) -> None:
    m = _load(tiny_cpu_package / "model.onnx")
    q = next(n for n in m.graph.node if n.name == "/model/layers.0/moe/QMoE")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in q.attribute}
    assert attrs == {
        "quant_type": b"int",
        "expert_weight_bits": 4,
        "block_size": 32,
        "weights_prepacked": 1,
        "activation_type": b"swiglu",
        "swiglu_fusion": 1,
        "k": 2,
        "normalize_routing_weights": 1,
        "use_sparse_mixer": 0,
    }
    assert len(q.input) == 15 and q.input[14] == "/model/layers.0/moe/router/Softmax/output_0"
    inits = {t.name: t for t in m.graph.initializer}
    for suffix in ("fc1.weight", "fc1.scales", "fc2.weight", "fc2.scales"):
        off = int(_ext(inits[f"mtp.0.mlp.experts.{suffix}"])["offset"])
        assert off % 4096 != 0 and off % 64 == 16
    assert list(inits["model.layers.0.mlp.experts.fc1.weight"].dims) == [8, 64, 64]
    assert list(inits["model.layers.0.mlp.experts.fc1.scales"].dims) == [8, 128, 2]


def test_head_and_prefill_share_target_bytes(tiny_cpu_package: Path) -> None:
    target = {
        t.name: _ext(t)
        for t in _load(tiny_cpu_package / "model.onnx").graph.initializer
        if t.external_data
    }
    head = {
        t.name: _ext(t)
        for t in _load(tiny_cpu_package / "head_r2.onnx").graph.initializer
        if t.external_data
    }
    for name in ("lm_head.weight", "model.embed_tokens.weight", "model.norm.hc_gate.weight"):
        assert head[name] == target[name]
    assert head["fold.proj.weight"]["location"] == "head_r2.onnx.data"
    data_t = (tiny_cpu_package / "model.onnx.data").read_bytes()
    data_h = (tiny_cpu_package / "head_r2.onnx.data").read_bytes()
    t, h = target["fold.proj.weight"], head["fold.proj.weight"]
    bt = data_t[int(t["offset"]) : int(t["offset"]) + int(t["length"])]
    bh = data_h[int(h["offset"]) : int(h["offset"]) + int(h["length"])]
    assert len(bt) == len(bh) and bt != bh
    pre = _load(tiny_cpu_package / "prefill.onnx")
    assert {_ext(t)["location"] for t in pre.graph.initializer if t.external_data} == {
        "model.onnx.data"
    }
    pool = (tiny_cpu_package / "weights_pool.txt").read_text().splitlines()
    assert pool[0] == "# q38 weights pool v1" and len(pool) == 5


def test_custom_lineage_fold_node(tmp_path: Path) -> None:
    out = synthesize(tmp_path / "p", lineage="custom")
    m = _load(out / "model.onnx")
    fold = [n for n in m.graph.node if n.domain == "qwen.fold"]
    assert [(n.name, n.op_type) for n in fold] == [("/fold/FoldMid2", "FoldMid2")]


def test_nvfp4_attribute_set(tmp_path: Path) -> None:
    out = synthesize(tmp_path / "p", variant="faithful", experts="nvfp4")
    m = _load(out / "model.onnx")
    q = next(n for n in m.graph.node if n.name == "/model/layers.0/moe/QMoE")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in q.attribute}
    assert attrs["quant_type"] == b"nvfp4" and attrs["block_size"] == 16 and len(q.input) == 17
    inits = {t.name: t for t in m.graph.initializer}
    assert inits["model.layers.0.mlp.experts.fc1.scales"].data_type == onnx.TensorProto.FLOAT8E4M3FN
