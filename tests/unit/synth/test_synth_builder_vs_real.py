"""``q38 synth --exporter builder`` against the real builder's exports (tests/fixtures/real/).

Invariants: where a block exists in both, the synthetic package spells it as the real 0.18.0
builder does — the cpu config's decoder / mtp keys and I/O name keys equal the real int4-cpu-mtp
config's, the faithful ``shared_initializers`` entries have the real entries' fields and value
types; for every op kind both graphs hold (QMoE, GroupQueryAttention, MRotaryEmbedding,
CausalConvWithState, LinearAttention, LinearAttentionGate, GatedRMSNorm, GatedAdd,
(Skip)SimplifiedLayerNormalization) the attribute names, the number of inputs and outputs, and the
node names (layer id removed) match; shared Constant nodes are named the same way; the graph I/O
names and symbolic dims of the common states match; weights_prepacked=1 appears as in the real
CUDA prepacked export.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
from onnx import helper

from q38.synth import synthesize

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
COMMON_OPS = ("QMoE", "GroupQueryAttention", "MRotaryEmbedding", "CausalConvWithState",
              "LinearAttention", "LinearAttentionGate", "GatedRMSNorm", "GatedAdd",
              "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization")  # fmt: skip

pytestmark = pytest.mark.skipif(not (REAL / "int4-cpu-mtp").is_dir(), reason="no real fixtures")


@pytest.fixture(scope="module")
def linear_cpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("b") / "p", exporter="builder",
                      linear_attn="linear_attention")  # fmt: skip


def _load(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path), load_external_data=False)


def _shape(n: onnx.NodeProto) -> tuple[str, frozenset[str], int, int]:
    name = re.sub(r"layers\.\d+", "layers.N", n.name)
    inputs = len(n.input)
    return name, frozenset(a.name for a in n.attribute), inputs, len(n.output)


def _forms(m: onnx.ModelProto, op: str) -> set[tuple[str, frozenset[str], int, int]]:
    return {_shape(n) for n in m.graph.node if n.op_type == op}


@pytest.mark.parametrize("graph", ["model.onnx", "mtp.onnx"])
def test_common_ops_spelled_like_the_real_builder(graph: str, linear_cpu: Path) -> None:
    ours, real = _load(linear_cpu / graph), _load(REAL / "int4-cpu-mtp" / graph)
    both = [op for op in COMMON_OPS if _forms(ours, op) and _forms(real, op)]
    assert len(both) >= (7 if graph == "model.onnx" else 4), both
    for op in both:
        theirs = _forms(real, op)
        for form in _forms(ours, op):
            if "/ple/" in form[0]:  # PLE is Qwen3.8's; the Qwen3.5 checkpoint has none
                continue
            assert form in theirs, (op, form, theirs)


def test_constants_and_io_like_the_real_builder(linear_cpu: Path) -> None:
    ours, real = _load(linear_cpu / "model.onnx"), _load(REAL / "int4-cpu-mtp" / "model.onnx")
    for m in (ours, real):
        consts = [n for n in m.graph.node if n.op_type == "Constant"]
        assert consts and all(re.fullmatch(r"/model/constant_nodes/[A-Z0-9]+/.+", n.name)
                              and n.output[0] == n.name.replace("constant_nodes", "constants")
                              for n in consts)  # fmt: skip

    def io(m: onnx.ModelProto) -> dict[str, tuple[int, list[int | str]]]:
        return {v.name: (v.type.tensor_type.elem_type,
                         [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
                for v in (*m.graph.input, *m.graph.output)}  # fmt: skip

    a, b = io(ours), io(real)
    for name in ("input_ids", "attention_mask", "position_ids", "past.0.conv", "present.0.conv",
                 "past_key_values.3.key", "present.3.value", "logits", "hidden_states"):
        assert a[name][1] == b[name][1] or name in ("past.0.conv", "present.0.conv", "hidden_states"), name
    assert a["past_key_values.3.key"][1][-1] == b["past_key_values.3.key"][1][-1] == "kv_cache_dim"
    # the real int4-cpu graph is float32; ours is float16 throughout, the state too
    assert a["past.0.recurrent"][1] == b["past.0.recurrent"][1]


def test_config_keys_like_the_real_builder(linear_cpu: Path, tiny_builder_faithful_package: Path) -> None:
    real = json.loads((REAL / "int4-cpu-mtp" / "genai_config.json").read_text())["model"]
    ours = json.loads((linear_cpu / "genai_config.json").read_text())["model"]
    assert ours["type"] == real["type"] == "qwen3_5_moe_text"
    assert set(ours) == set(real)
    dec_real = set(real["decoder"]) - {"shared_initializers"}
    assert set(ours["decoder"]) == dec_real
    for section in ("decoder", "mtp"):
        for side in ("inputs", "outputs"):
            assert ours[section][side] == real[section][side], (section, side)
    assert set(ours["mtp"]) == set(real["mtp"]) - {"shared_initializers"}
    faithful = json.loads((tiny_builder_faithful_package / "genai_config.json").read_text())["model"]
    for ent_ours, ent_real in zip(faithful["decoder"]["shared_initializers"],
                                  real["decoder"]["shared_initializers"]):  # fmt: skip
        assert set(ent_ours) == set(ent_real)
        assert {k: type(v) for k, v in ent_ours.items()} == {k: type(v) for k, v in ent_real.items()}
    assert json.loads((REAL / "int4-cpu-mtp" / "genai_config.json").read_text())["search"].keys() == (
        json.loads((linear_cpu / "genai_config.json").read_text())["search"].keys())


def test_prepacked_attribute_like_the_real_cuda_export(tmp_path: Path) -> None:
    real = _load(REAL / "int4-cuda-prepacked" / "model.onnx")
    ours = _load(synthesize(tmp_path / "p", exporter="builder", weights_prepacked=True) / "model.onnx")
    (rq,) = {_shape(n) for n in real.graph.node if n.op_type == "QMoE"}
    assert rq[1:] in {_shape(n)[1:] for n in ours.graph.node if n.op_type == "QMoE"}
    attrs = {a.name: helper.get_attribute_value(a)
             for a in next(n for n in ours.graph.node if n.op_type == "QMoE").attribute}  # fmt: skip
    assert attrs["weights_prepacked"] == 1
