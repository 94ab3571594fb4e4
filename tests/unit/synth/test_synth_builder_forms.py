"""The public builder's forms of ``q38 synth --exporter builder``, one test per row of
real-exporter-forms.md §1.

Invariants: exact op counts of the tiny decoders; packed HC MatMul [down|inject] + Split on every
mix and a no-combine final mixer feeding lm_head without a norm; CausalConvWithState output 1 is
``present.{i}.conv`` (ndim 1, silu, state_window 0) with no Concat/Slice carry; GatedDeltaNet
``gate_activation=qwen`` with 9 inputs, slots 1-3 empty and fp32 Casts on decay/beta; DSA
``do_rotary=1`` with 17 inputs reading Gather(position_ids, 0) and the 13-input indexer with
``past_sequence_length`` int32[1]; the cpu substitute (SimplifiedLayerNormalization, MRotary,
GQA); position ids [3, B, S] and a symbolic ``kv_cache_dim``; QMoE with 14 inputs, all-zero biases
at 4 and 7, no quant_type, weights_prepacked absent or 1 (with SM80 bytes); the FP8 MTP head;
PLE (EngramGate, dilated channels-last conv, engram.onnx); bf16 in the faithful graphs;
value_info on every value; shared Constant nodes; every weight external, the rotary caches inline
(> 1 KiB); the config's shared_initializers point at the MTP graph's own external refs.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from q38.synth import synthesize
from q38.synth.qmoe import pack_sm80_int4

MS = "com.microsoft"


def _load(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path), load_external_data=False)


def _attrs(n: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def _ops(m: onnx.ModelProto, op: str) -> list[onnx.NodeProto]:
    return [n for n in m.graph.node if n.op_type == op]


def _producers(m: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in m.graph.node for o in n.output if o}


def _ext(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def _bytes(pkg: Path, t: onnx.TensorProto) -> bytes:
    e = _ext(t)
    with open(pkg / e["location"], "rb") as fh:
        fh.seek(int(e["offset"]))
        return fh.read(int(e["length"]))


CPU_COUNTS = {
    ("", "Add"): 2, ("", "Cast"): 22, ("", "Constant"): 16, ("", "Div"): 16, ("", "Gather"): 2,
    ("", "Identity"): 1, ("", "MatMul"): 101, ("", "Mul"): 34, ("", "ReduceSum"): 1,
    ("", "Reshape"): 27, ("", "Shape"): 1, ("", "Sigmoid"): 51,
    ("", "SimplifiedLayerNormalization"): 4, ("", "Split"): 30, ("", "Sub"): 1, ("", "Tile"): 1,
    ("", "Transpose"): 12,
    (MS, "BranchwiseRMSNorm"): 17, (MS, "CausalConvWithState"): 7, (MS, "EngramGate"): 1,
    (MS, "GatedAdd"): 8, (MS, "GatedDeltaNet"): 6, (MS, "GatedRMSNorm"): 6,
    (MS, "GatherBlockQuantized"): 1, (MS, "GroupQueryAttention"): 2,
    (MS, "HyperConnectionPostMix"): 16, (MS, "HyperConnectionPreMix"): 17,
    (MS, "MRotaryEmbedding"): 4, (MS, "NGramHashMapping"): 1, (MS, "QMoE"): 8,
    (MS, "ScaledSiLU"): 17,
}  # fmt: skip


def _counts(m: onnx.ModelProto) -> dict[tuple[str, str], int]:
    return dict(collections.Counter((n.domain, n.op_type) for n in m.graph.node))


def test_tiny_decoder_op_counts(tiny_builder_cpu_package: Path,
                                tiny_builder_faithful_package: Path) -> None:  # fmt: skip
    cpu = _counts(_load(tiny_builder_cpu_package / "model.onnx"))
    assert cpu == CPU_COUNTS
    faithful = _counts(_load(tiny_builder_faithful_package / "model.onnx"))
    assert faithful[(MS, "DynamicSparseAttention")] == 2
    assert faithful[(MS, "SparseAttentionIndexer")] == 2
    assert (MS, "GroupQueryAttention") not in faithful and (MS, "MRotaryEmbedding") not in faithful
    assert (MS, "NGramHashMapping") not in faithful  # the Engram lookup is engram.onnx's
    assert faithful[("", "GreaterOrEqual")] == faithful[("", "Where")] == 2


@pytest.mark.parametrize("variant", ["cpu", "faithful"])
def test_packed_hyper_connection_mix(variant: str, tiny_builder_cpu_package: Path,
                                     tiny_builder_faithful_package: Path) -> None:  # fmt: skip
    pkg = tiny_builder_cpu_package if variant == "cpu" else tiny_builder_faithful_package
    m = _load(pkg / "model.onnx")
    prod = _producers(m)
    users = collections.defaultdict(list)
    for n in m.graph.node:
        for i in n.input:
            users[i].append(n)
    packed = [n for n in _ops(m, "MatMul") if n.name.endswith("/down_inject/MatMul")]
    assert len(packed) == 2 * 8
    inits = {t.name: t for t in m.graph.initializer}
    for mm in packed:
        assert prod[mm.input[0]].op_type == "BranchwiseRMSNorm"
        assert list(inits[mm.input[1]].dims) == [256, 32 + 4]
        (split,) = users[mm.output[0]]
        assert split.op_type == "Split" and len(split.output) == 2
        down, inj = (users[o] for o in split.output)
        assert [n.op_type for n in down] == ["ScaledSiLU"]
        assert [n.op_type for n in inj] == ["Div"]
    assert not [n for n in m.graph.node if n.name.endswith(("/down/MatMul", "/inject/MatMul"))
                and "/final_" not in n.name]  # fmt: skip
    lm = next(n for n in m.graph.node if n.name == "/lm_head/MatMul")
    pre = prod[lm.input[0]]
    assert pre.name == "/model/final_hyper_connection/HyperConnectionPreMix"
    assert not [n for n in users[pre.output[0]] if n.op_type == "HyperConnectionPostMix"]
    assert not [n for n in m.graph.node if "final_hyper" in n.name and "Norm" in n.op_type
                and n.op_type != "BranchwiseRMSNorm"]  # fmt: skip


def test_conv_state_is_output_1(tiny_builder_cpu_package: Path) -> None:
    m = _load(tiny_builder_cpu_package / "model.onnx")
    convs = [n for n in _ops(m, "CausalConvWithState") if "/linear_attn/" in n.name]
    assert len(convs) == 6
    for n in convs:
        i = int(n.name.split("/")[2].split(".")[1])
        assert list(n.input)[3] == f"past.{i}.conv" and list(n.output) == [
            f"{n.name}/output_0", f"present.{i}.conv"]
        assert _attrs(n) == {"ndim": 1, "activation": b"silu", "state_window": 0}
    assert not _ops(m, "Concat") and not _ops(m, "Slice")


def test_gated_delta_net_form(tiny_builder_faithful_package: Path) -> None:
    m = _load(tiny_builder_faithful_package / "model.onnx")
    prod = _producers(m)
    for n in _ops(m, "GatedDeltaNet"):
        assert len(n.input) == 9 and list(n.input)[1:4] == ["", "", ""]
        assert _attrs(n) == {"update_rule": b"gated_delta", "scale": 0.0, "gate_activation": b"qwen",
                             "beta_activation": b"sigmoid", "qk_l2_norm": 1, "chunk_size": 64}  # fmt: skip
        for slot, tag in ((4, "decay_fp32"), (5, "beta_fp32")):
            cast = prod[n.input[slot]]
            assert cast.op_type == "Cast" and tag in cast.name
            assert _attrs(cast)["to"] == TensorProto.FLOAT
        assert prod[n.input[0]].name.endswith("/conv_out/Transpose")


def test_qsa_faithful_form(tiny_builder_faithful_package: Path) -> None:
    m = _load(tiny_builder_faithful_package / "model.onnx")
    prod = _producers(m)
    ins = {v.name: v for v in m.graph.input}
    psl = ins["past_sequence_length"].type.tensor_type
    assert psl.elem_type == TensorProto.INT32 and [d.dim_value for d in psl.shape.dim] == [1]
    for n in _ops(m, "DynamicSparseAttention"):
        assert len(n.input) == 17 and _attrs(n)["do_rotary"] == 1
        gather = prod[n.input[13]]
        assert gather.op_type == "Gather" and gather.input[0] == "position_ids"
        zero = prod[gather.input[1]]
        assert zero.op_type == "Constant" and numpy_helper.to_array(zero.attribute[0].t) == 0
        assert n.input[14].endswith(".q_norm.weight") and n.input[15].endswith(".k_norm.weight")
        cnt = prod[n.input[8]]
        chain = [cnt.op_type]
        while chain[-1] != "SparseAttentionIndexer":
            cnt = prod[cnt.input[0]]
            chain.append(cnt.op_type)
        assert chain == ["Reshape", "ReduceSum", "Where", "GreaterOrEqual", "SparseAttentionIndexer"]
        assert len(cnt.input) == 13 and cnt.input[12] == "past_sequence_length"
        assert cnt.input[7].startswith("past.") and cnt.input[7].endswith(".indexer_key")
        assert list(cnt.input)[6] == ""  # the fixed cache replaces the mask


def test_qsa_cpu_substitute(tiny_builder_cpu_package: Path) -> None:
    m = _load(tiny_builder_cpu_package / "model.onnx")
    prod = _producers(m)
    for n in _ops(m, "GroupQueryAttention"):
        assert len(n.input) == 12 and _attrs(n)["do_rotary"] == 0
        for slot in (0, 1):
            cast = prod[n.input[slot]]
            assert cast.op_type == "Cast" and _attrs(cast)["to"] == TensorProto.FLOAT16
            rot = prod[cast.input[0]]
            assert rot.op_type == "MRotaryEmbedding" and rot.domain == MS
            assert list(rot.input)[1] == "position_ids" and _attrs(rot)["mrope_section"] == [2, 1, 1]
            assert _attrs(prod[rot.input[0]])["to"] == TensorProto.FLOAT  # float32 MRoPE
            norm = prod[prod[prod[rot.input[0]].input[0]].input[0]]
            assert norm.op_type == "SimplifiedLayerNormalization" and norm.domain == ""
    names = {v.name for v in m.graph.input}
    assert not [x for x in names if "indexer" in x] and "past_sequence_length" not in names


@pytest.mark.parametrize("graph", ["model.onnx", "mtp.onnx"])
def test_position_ids_and_kv_dims(graph: str, tiny_builder_faithful_package: Path) -> None:
    m = _load(tiny_builder_faithful_package / graph)
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in (*m.graph.input, *m.graph.output)}  # fmt: skip
    assert dims["position_ids"] == [3, "batch_size", "sequence_length"]
    kv = [n for n in dims if ".key" in n or ".value" in n]
    assert kv and all(dims[n][-1] == "kv_cache_dim" for n in kv if "indexer" not in n)


def _qmoe_expect(pkg: Path, graph: str, prepacked: bool) -> None:
    m = _load(pkg / graph)
    inits = {t.name: t for t in m.graph.initializer}
    qs = _ops(m, "QMoE")
    assert qs
    for q in qs if graph == "model.onnx" else []:
        a = _attrs(q)
        assert len(q.input) == 14 and "quant_type" not in a
        assert a.get("weights_prepacked") == (1 if prepacked else None)
        assert (a["block_size"], a["swiglu_fusion"], a["expert_weight_bits"]) == (32, 1, 4)
        for slot in (4, 7):
            t = inits[q.input[slot]]
            raw = _bytes(pkg, t)
            assert t.name.endswith(".bias") and raw and not any(raw)
        w1 = inits[q.input[2]]
        assert list(w1.dims) == ([8, 64, 64] if prepacked else [8, 128, 32])


def test_qmoe_forms(tmp_path: Path, tiny_builder_cpu_package: Path) -> None:
    _qmoe_expect(tiny_builder_cpu_package, "model.onnx", prepacked=False)
    pkg = synthesize(tmp_path / "p", exporter="builder", weights_prepacked=True)
    _qmoe_expect(pkg, "model.onnx", prepacked=True)
    # the same raw codes: absent = raw [E, 2I, H/2], prepacked = their SM80 packing
    name = "model.layers.0.moe.experts.gate_up_proj.qweight"
    raw_t = {t.name: t for t in _load(tiny_builder_cpu_package / "model.onnx").graph.initializer}
    packed_t = {t.name: t for t in _load(pkg / "model.onnx").graph.initializer}
    raw = np.frombuffer(_bytes(tiny_builder_cpu_package, raw_t[name]), np.uint8).reshape(8, 128, 32)
    packed = np.frombuffer(_bytes(pkg, packed_t[name]), np.uint8).reshape(8, 64, 64)
    assert np.array_equal(pack_sm80_int4(raw, 128, 64), packed)


def test_mtp_graph(tiny_builder_cpu_package: Path, tiny_builder_faithful_package: Path) -> None:
    f = _load(tiny_builder_faithful_package / "mtp.onnx")
    names = [v.name for v in f.graph.input]
    assert names == ["input_ids", "attention_mask", "position_ids", "past_sequence_length",
                     "hidden_states", "past_key_values.0.key", "past_key_values.0.value",
                     "past.0.indexer_key"]  # fmt: skip
    (q,) = _ops(f, "QMoE")
    a = _attrs(q)
    assert (a["quant_type"], a["expert_weight_bits"], a["block_size"], a["swiglu_fusion"],
            a["activation_type"]) == (b"fp8", 8, 128, 0, b"silu")  # fmt: skip
    inits = {t.name: t for t in f.graph.initializer}
    assert q.input[8].endswith("up_proj.weight")  # fc3 present
    assert inits[q.input[2]].data_type == TensorProto.FLOAT8E4M3FN
    c = _load(tiny_builder_cpu_package / "mtp.onnx")
    (qc,) = _ops(c, "QMoE")
    assert "quant_type" not in _attrs(qc) and _attrs(qc)["swiglu_fusion"] == 1
    assert [n.op_type for n in c.graph.node if n.name.endswith("LayerNorm")] == [
        "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization",
        "SkipSimplifiedLayerNormalization"]  # fmt: skip


def test_ple_and_engram(tiny_builder_cpu_package: Path, tiny_builder_faithful_package: Path) -> None:
    for pkg in (tiny_builder_cpu_package, tiny_builder_faithful_package):
        m = _load(pkg / "model.onnx")
        (gate,) = _ops(m, "EngramGate")
        assert gate.name == "/model/layers.1/ple/EngramGate"
        (conv,) = [n for n in _ops(m, "CausalConvWithState") if "/ple/" in n.name]
        a = _attrs(conv)
        assert (a["dilation"], a["channels_last"], a["activation"]) == (3, 1, b"silu")
    f = _load(tiny_builder_faithful_package / "model.onnx")
    assert "engram_embeddings" in {v.name for v in f.graph.input}
    (conv,) = [n for n in _ops(f, "CausalConvWithState") if "/ple/" in n.name]
    assert conv.input[3] == "past.1.ple_conv" and conv.output[1] == "present.1.ple_conv"
    e = _load(tiny_builder_faithful_package / "engram.onnx")
    assert [n.op_type for n in e.graph.node if n.op_type != "Constant"] == [
        "NGramHashMapping", "GatherBlockQuantized", "Reshape"]  # fmt: skip
    gbq = _ops(e, "GatherBlockQuantized")[0]
    assert {p.key: p.value for p in gbq.metadata_props} == {"layer_ann": "cpu_embedding"}


def test_bf16_where_the_real_model_has_it(tiny_builder_faithful_package: Path) -> None:
    m = _load(tiny_builder_faithful_package / "model.onnx")
    inits = {t.name: t.data_type for t in m.graph.initializer}
    assert inits["model.embed_tokens.weight"] == TensorProto.BFLOAT16
    assert inits["model.layers.0.linear_attn.A_log"] == TensorProto.FLOAT
    outs = {v.name: v.type.tensor_type.elem_type for v in m.graph.output}
    assert outs["logits"] == TensorProto.FLOAT and outs["hidden_states"] == TensorProto.BFLOAT16
    assert outs["present.0.recurrent"] == TensorProto.FLOAT


@pytest.mark.parametrize("graph", ["model.onnx", "mtp.onnx"])
@pytest.mark.parametrize("variant", ["cpu", "faithful"])
def test_hygiene(variant: str, graph: str, tiny_builder_cpu_package: Path,
                 tiny_builder_faithful_package: Path) -> None:  # fmt: skip
    pkg = tiny_builder_cpu_package if variant == "cpu" else tiny_builder_faithful_package
    m = _load(pkg / graph)
    g = m.graph
    assert (m.producer_name, m.opset_import[0].version) == ("onnxruntime-genai", 22)
    io = {v.name for v in (*g.input, *g.output)}
    vi = {v.name: v for v in g.value_info}
    made = [o for n in g.node for o in n.output if o and o not in io]
    assert made and set(made) == set(vi)
    assert all(vi[o].type.tensor_type.elem_type for o in made)
    consts = _ops(m, "Constant")
    assert len({c.output[0] for c in consts}) == len(consts)
    uses = collections.Counter(i for n in g.node for i in n.input)
    assert all(uses[c.output[0]] for c in consts) and max(uses[c.output[0]] for c in consts) > 1
    assert all(c.name == c.output[0].replace("/constants/", "/constant_nodes/") for c in consts)
    inline = {t.name: len(t.raw_data) for t in g.initializer if t.data_location != 1}
    assert sorted(inline) == ["cos_cache", "sin_cache"] and min(inline.values()) > 1024
    names = [n.name for n in g.node]
    assert len(names) == len(set(names)) and all(n.startswith(("/model/", "/lm_head/")) for n in names)


def test_config_and_shared_initializers(tiny_builder_faithful_package: Path,
                                        tiny_builder_cpu_package: Path) -> None:  # fmt: skip
    pkg = tiny_builder_faithful_package
    doc = json.loads((pkg / "genai_config.json").read_text())
    model = doc["model"]
    assert model["type"] == "qwen4_exp_text" and model["decoder"]["hidden_size"] == 256
    assert model["engram"]["filename"] == "engram.onnx" and model["mtp"]["filename"] == "mtp.onnx"
    shared = model["decoder"]["shared_initializers"]
    assert shared == model["mtp"]["shared_initializers"] and len(shared) == 2
    mtp = {t.name: t for t in _load(pkg / "mtp.onnx").graph.initializer}
    dec = {t.name: t for t in _load(pkg / "model.onnx").graph.initializer}
    for entry in shared:
        e = _ext(mtp[entry["name"]])
        assert (e["location"], e["offset"], e["length"]) == (
            entry["data_file"], entry["offset"], entry["length"]) == (
            "model.onnx.data", _ext(dec[entry["name"]])["offset"], _ext(dec[entry["name"]])["length"])
        assert entry["data_type"] == mtp[entry["name"]].data_type
        assert entry["shape"] == list(mtp[entry["name"]].dims)
    # same name, other bytes: the head's own layer-0 router is not the decoder's
    name = "model.layers.0.moe.router.MatMul.weight"
    assert _bytes(pkg, mtp[name]) != _bytes(pkg, dec[name])
    assert not (pkg / "weights_pool.txt").exists() and not (pkg / "package_manifest.json").exists()
    assert (pkg / "tokenizer.json").is_file() and (pkg / "tokenizer_config.json").is_file()
    cpu = json.loads((tiny_builder_cpu_package / "genai_config.json").read_text())["model"]
    assert cpu["type"] == "qwen3_5_moe_text" and "engram" not in cpu
    assert "shared_initializers" not in cpu["decoder"] and "shared_initializers" not in cpu["mtp"]


def test_custom_lineage(tmp_path: Path) -> None:
    pkg = synthesize(tmp_path / "p", exporter="builder", lineage="custom")
    m = _load(pkg / "model.onnx")
    fold = [n for n in m.graph.node if n.domain == "qwen.fold"]
    assert [(n.name, n.op_type) for n in fold] == [("/fold/FoldMid2", "FoldMid2")]
    assert _producers(m)[fold[0].input[0]].op_type == "HyperConnectionPostMix"
    users = [n for n in m.graph.node if fold[0].output[0] in n.input]
    assert [n.name for n in users] == ["/model/final_hyper_connection/BranchwiseRMSNorm"]
    doc = json.loads((pkg / "genai_config.json").read_text())
    so = doc["model"]["decoder"]["session_options"]
    assert so["custom_ops_library"] == "libs/libcustom_ops.so"
    assert (pkg / "libs" / "libcustom_ops.so").is_file()
    assert "custom_ops_library" not in doc["model"]["mtp"].get("session_options", {})


def test_linear_attention_form_runs(tmp_path: Path) -> None:
    """``--linear-attn linear_attention``: the 0.18.0 builder's default form, runnable on CPU."""
    from support.synth_builder import decoder_steps, og_greedy

    pkg = synthesize(tmp_path / "p", exporter="builder", linear_attn="linear_attention")
    m = _load(pkg / "model.onnx")
    prod = _producers(m)
    assert not _ops(m, "GatedDeltaNet") and len(_ops(m, "LinearAttention")) == 6
    for n in _ops(m, "LinearAttention"):
        i = int(n.name.split("/")[2].split(".")[1])
        assert list(n.input)[3] == f"past.{i}.recurrent" and n.output[1] == f"present.{i}.recurrent"
        assert _attrs(n) == {"q_num_heads": 2, "kv_num_heads": 4, "update_rule": b"gated_delta",
                             "scale": 1.0, "state_window": 0}  # fmt: skip
        assert prod[n.input[4]].op_type == "LinearAttentionGate" and n.input[5] == prod[n.input[4]].output[1]
        q = prod[n.input[0]]
        assert q.name.endswith("/q_scaled/Mul") and prod[prod[q.input[0]].input[0]].op_type == "LpNormalization"
    rec = {v.name: v.type.tensor_type.elem_type for v in m.graph.input}["past.0.recurrent"]
    assert rec == TensorProto.FLOAT16  # the LinearAttention state is in the io dtype
    out = decoder_steps(pkg / "model.onnx", steps=1)
    assert all(np.isfinite(v).all() for step in out for v in step.values())
    tokens = og_greedy(pkg, max_length=10)
    assert len(tokens) == 5 and tokens[0] == int(out[0]["logits"][0, -1].argmax())
