"""The memory model's reading of one graph: state outputs, their sizes, what it cannot size.

Invariants: a ``present.*`` output with a dim q38 cannot size is reported in ``unresolved`` (and
not sized); ``B`` / ``T`` / ``BT`` dims of a state tensor scale with the batch and the context;
only an MTP graph's dense tensors count as ``mtp``; a graph outside the package is never read.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from syrupy.assertion import SnapshotAssertion

from q38.errors import GraphError, PackageError
from q38.package.memory import (
    ExpertNode,
    GraphMemory,
    PackageFacts,
    StateTensor,
    TensorBytes,
    breakdown,
    graph_memory,
    load_memory,
    profile_breakdowns,
    read_package_facts,
)

_MTP_PKG = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "int4-cpu-mtp"


def _state_graph(path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch_size", 2, "sequence_length", 4])
    outputs = [
        helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT16, ["batch_size", 2, "sequence_length", 4]),
        helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT16, ["batch_size", "mystery_dim", 4]),
        helper.make_tensor_value_info("logits", TensorProto.FLOAT16, ["batch_size", "anything"]),
    ]
    nodes = [
        helper.make_node("Identity", ["x"], ["present.0.key"], name="k"),
        helper.make_node("Identity", ["x"], ["present.0.value"], name="v"),
        helper.make_node("Identity", ["x"], ["logits"], name="l"),
    ]
    graph = helper.make_graph(nodes, "g", [x], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path.write_bytes(model.SerializeToString())


def test_a_state_output_q38_cannot_size_is_reported_unresolved(tmp_path: Path) -> None:
    _state_graph(tmp_path / "model.onnx")
    gm = graph_memory(tmp_path / "model.onnx", tmp_path)
    assert gm.rel == "model.onnx"
    assert gm.unresolved == ("present.0.value",)
    assert [(s.name, s.kind, s.dims, s.bits) for s in gm.states] == [("present.0.key", "kv", ("B", 2, "T", 4), 16)]
    assert gm.states[0].nbytes(8, batch=3) == 3 * 2 * 8 * 4 * 2


def test_state_dims_scale_with_batch_and_context() -> None:
    kv = StateTensor("model.onnx", "present.0.key", "kv", "GroupQueryAttention", "float16", 16, ("B", 2, "T", 4))
    assert kv.nbytes(8, batch=2) == 2 * 2 * 8 * 4 * 2
    assert kv.nbytes(1) == 2 * 4 * 2
    paged = StateTensor("model.onnx", "present.0.key", "kv", "PagedAttention", "uint8", 8, ("BT", 3))
    assert paged.nbytes(8, batch=2) == 2 * 8 * 3
    conv = StateTensor("model.onnx", "present.0.conv", "conv", "CausalConvWithState", "int4", 4, ("B", 3))
    assert conv.nbytes(100, batch=3) == (3 * 3 * 4 + 7) // 8 and not conv.grows


def test_each_named_dim_of_a_state_output_is_classified(tmp_path: Path) -> None:
    """The exporters' dim names: batch -> B, num_blocks -> BT (paged), block_size -> 1 row, every
    sequence-like name -> T, kv_cache_dim -> the head size; fixed dims stay as they are."""
    names: list[str | int] = ["batch_size", "num_blocks", "block_size", "total_sequence_length", "past_len", "total_len",
             "context", "max_seq_len", "kv_cache_dim", 5]  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1])
    out = helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT16, names)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["present.0.key"], name="k")], "g", [x], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    gm = graph_memory(tmp_path / "model.onnx", tmp_path, head_size=64)
    assert gm.unresolved == ()
    assert [s.dims for s in gm.states] == [("B", "BT", 1, "T", "T", "T", "T", "T", 64, 5)]


@pytest.mark.parametrize(("head_size", "dims", "unresolved"), [(1, (1,), ()), (0, (), ("present.0.key",))])
def test_kv_cache_dim_is_the_head_size_when_the_config_gives_one(tmp_path: Path, head_size: int,
                                                                  dims: tuple[int, ...], unresolved: tuple[str, ...]) -> None:  # fmt: skip
    """``kv_cache_dim`` sizes to any known head size, 1 included; an unknown one (0) leaves it unresolved."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1])
    out = helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT16, ["kv_cache_dim"])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["present.0.key"], name="k")], "g", [x], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    gm = graph_memory(tmp_path / "model.onnx", tmp_path, head_size=head_size)
    assert gm.unresolved == unresolved
    assert [s.dims for s in gm.states] == ([dims] if not unresolved else [])


def test_each_state_output_is_kinded_by_its_producer_or_its_name(tmp_path: Path) -> None:
    """The producing op decides the kind (KV, recurrent, conv, indexer), else the output's name
    suffix; an output no node produces (a pass-through of a graph input) has op ``""``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1])
    passed = helper.make_tensor_value_info("present.9.conv", TensorProto.FLOAT16, [1])
    produced = {
        "present.0.key": "GroupQueryAttention", "present.1.state": "GatedDeltaNet",
        "present.2.state": "CausalConvWithState", "present.3.state": "IndexerCache",
        "present.4.value": "Identity", "present.5.recurrent": "Identity", "present.6.conv": "Identity",
        "present.7.state": "Identity",
    }  # fmt: skip
    nodes = [helper.make_node(op, ["x"], [name], name=name, domain="" if op == "Identity" else "com.microsoft")
             for name, op in produced.items()]  # fmt: skip
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT16, [1]) for name in produced]
    graph = helper.make_graph(nodes, "g", [x, passed], [*outputs, passed])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    kinds = [(s.name, s.kind, s.op) for s in graph_memory(tmp_path / "model.onnx", tmp_path).states]
    assert kinds == [
        ("present.0.key", "kv", "GroupQueryAttention"), ("present.1.state", "recurrent", "GatedDeltaNet"),
        ("present.2.state", "conv", "CausalConvWithState"), ("present.3.state", "indexer", "IndexerCache"),
        ("present.4.value", "kv", "Identity"), ("present.5.recurrent", "recurrent", "Identity"),
        ("present.6.conv", "conv", "Identity"), ("present.7.state", "other", "Identity"),
        ("present.9.conv", "conv", ""),
    ]  # fmt: skip


def _facts(root: Path, **extra: object) -> PackageFacts:
    fields: dict[str, object] = {"root": root, "surface": "genai", "decoder": "model.onnx", "companions": (),
                                 "state_graphs": (), "entries": {}, "gpu_mem_limit": None, "context_length": 0,
                                 "head_size": 0}  # fmt: skip
    return PackageFacts(**(fields | extra))  # type: ignore[arg-type]


def test_only_the_dense_tensors_of_an_mtp_graph_count_as_mtp(tmp_path: Path) -> None:
    """Dense weights of the MTP draft's graph are ``mtp``; its head stays ``head``, and the
    decoder's dense weights stay ``dense``."""
    def t(name: str, graph: str, nbytes: int, kind: str) -> TensorBytes:
        return TensorBytes(name, graph, graph, None, nbytes, "float16", (nbytes // 2,), kind)  # type: ignore[arg-type]

    graphs = {
        "model.onnx": GraphMemory("model.onnx", (t("w", "model.onnx", 10, "dense"), t("lm_head", "model.onnx", 4, "head")), ()),
        "mtp.onnx": GraphMemory("mtp.onnx", (t("m", "mtp.onnx", 6, "dense"), t("lm_head", "mtp.onnx", 2, "head")), ()),
    }
    facts = _facts(tmp_path, companions=("mtp.onnx",), mtp_graphs=("mtp.onnx",))
    mem = breakdown(facts, graphs, decoder="model.onnx", entries={}, context=8)
    assert mem.weights == {"dense": {"device": 10}, "head": {"device": 6}, "mtp": {"device": 6}}
    assert mem.files == {"model.onnx": 14, "mtp.onnx": 8}


def test_a_graph_named_outside_the_package_is_refused_unread(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A graph path that escapes the package root is one error line naming it as the graph."""
    with pytest.raises(PackageError) as info:
        load_memory(_facts(tmp_path), ["../outside.onnx"])
    assert messages_snapshot == str(info.value)


def test_package_facts_of_a_builder_package_with_mtp(tmp_path: Path) -> None:
    """The int4-cpu-mtp builder export: its MTP graph is a companion with a KV cache of its own;
    dims the config leaves out are 0 (unknown), never a guess."""
    pkg = _MTP_PKG
    facts = read_package_facts(pkg)
    assert (facts.surface, facts.decoder, facts.companions) == ("genai", "model.onnx", ("mtp.onnx",))
    assert (facts.state_graphs, facts.mtp_graphs) == (("mtp.onnx",), ("mtp.onnx",))
    doc = json.loads((pkg / "genai_config.json").read_text(encoding="utf-8"))
    assert facts.head_size == doc["model"]["decoder"]["head_size"] > 0
    assert facts.hidden_size == doc["model"]["decoder"]["hidden_size"] > 0
    assert facts.vocab_size == doc["model"]["vocab_size"] > 0
    del doc["model"]["decoder"]["head_size"], doc["model"]["decoder"]["hidden_size"]
    unknown = read_package_facts(pkg, document=doc)
    assert (unknown.head_size, unknown.hidden_size) == (0, 0)


def test_a_runtime_profile_selects_its_overlays_decoder_else_the_packages(tmp_path: Path) -> None:
    """A profile whose overlay names a decoder filename runs that graph; one whose overlay names
    none (or no string) runs the package's decoder."""
    pkg = _MTP_PKG
    doc = json.loads((pkg / "genai_config.json").read_text(encoding="utf-8"))
    doc["runtime_profiles"] = [
        {"id": "own", "overlay": {"model": {"decoder": {"filename": "mtp.onnx"}}}},
        {"id": "none", "overlay": {"model": {"decoder": {"session_options": {}}}}},
        {"id": "number", "overlay": {"model": {"decoder": {"filename": 7}}}},
    ]
    facts = read_package_facts(pkg, document=doc)
    assert [(p.id, p.decoder) for p in facts.profiles] == [("own", "mtp.onnx"), ("none", "model.onnx"), ("number", "model.onnx")]


def test_an_engram_graph_carries_state_but_is_no_mtp_draft(tmp_path: Path) -> None:
    """The research builder's ``model.engram`` section (the MTP export's graph named as engram):
    its graph keeps a KV cache of its own, and it drafts nothing."""
    import shutil

    pkg = tmp_path / "engram"
    shutil.copytree(_MTP_PKG, pkg)
    doc = json.loads((pkg / "genai_config.json").read_text(encoding="utf-8"))
    mtp = doc["model"].pop("mtp")
    doc["model"]["engram"] = {key: mtp[key] for key in ("filename", "inputs", "outputs")}
    (pkg / "genai_config.json").write_text(json.dumps(doc), encoding="utf-8")
    facts = read_package_facts(pkg)
    assert (facts.companions, facts.state_graphs, facts.mtp_graphs) == (("mtp.onnx",), ("mtp.onnx",), ())


def test_each_initializer_is_classed_by_what_reads_it(tmp_path: Path) -> None:
    """A QMoE's expert inputs (2..13, 15, 16) are routed experts of that node (the expert count is
    their first dim), its router input (1) is not; a Gather or GatherBlockQuantized table indexed by a
    graph input is an embedding, and so is an ``embed_tokens`` tensor nothing gathers; lm_head and
    the MTP layers (``mtp.``, ``mtp/``, ``/mtp/``, ``model.mtp`` prefixes) by name; the rest dense."""
    def init(name: str, dims: list[int]) -> TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT16, dims, [0.0] * int(np.prod(dims)))

    inits = [init("router_w", [4, 8]), init("fc1_w", [4, 8, 2]), init("fc2_w", [4, 2, 8]), init("embq", [16, 4]),
             init("emb", [16, 4]), init("lm_head.weight", [4, 16]), init("mtp.norm", [4]), init("other", [4]),
             init("model.embed_tokens.weight", [16, 4]), init("mtp/w", [4]), init("/mtp/w", [4]),
             init("model.mtp.layers.0.w", [4])]
    nodes = [
        helper.make_node("QMoE", ["x", "router_w", "fc1_w", "", "fc2_w"], ["y"], name="moe", domain="com.microsoft"),
        helper.make_node("GatherBlockQuantized", ["embq", "ids", "s"], ["e1"], name="gq", domain="com.microsoft"),
        helper.make_node("Gather", ["emb", "ids"], ["e2"], name="g"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8]),
                                           helper.make_tensor_value_info("ids", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8])], initializer=inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)  # fmt: skip
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    tensors = graph_memory(tmp_path / "model.onnx", tmp_path).tensors
    classes = {t.name: (t.kind, t.node, t.experts, t.dtype) for t in tensors}
    assert classes == {
        "router_w": ("dense", "", 0, "float16"), "fc1_w": ("routed_expert", "moe", 4, "float16"),
        "fc2_w": ("routed_expert", "moe", 4, "float16"), "embq": ("embedding", "", 0, "float16"),
        "emb": ("embedding", "", 0, "float16"), "lm_head.weight": ("head", "", 0, "float16"),
        "mtp.norm": ("mtp", "", 0, "float16"), "other": ("dense", "", 0, "float16"),
        "model.embed_tokens.weight": ("embedding", "", 0, "float16"), "mtp/w": ("mtp", "", 0, "float16"),
        "/mtp/w": ("mtp", "", 0, "float16"), "model.mtp.layers.0.w": ("mtp", "", 0, "float16"),
    }  # fmt: skip
    assert {t.name: (t.shape, t.nbytes) for t in tensors} == {i.name: (tuple(i.dims), 2 * int(np.prod(i.dims))) for i in inits}


def test_a_file_that_is_no_onnx_graph_is_one_line_naming_it_and_the_parse_error(tmp_path: Path) -> None:
    """A truncated or foreign file: GraphError naming the file, the parser's exception type and text."""
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\xff\xff\xff\xff")
    with pytest.raises(GraphError) as info:
        graph_memory(path, tmp_path)
    # the parser's own text after the type differs between protobuf builds (upb, python)
    assert str(info.value).startswith(f"{path}: not a readable ONNX graph: DecodeError: Error parsing message")
    assert "\n" not in str(info.value)


def test_a_runtime_profile_reads_its_context_tier_and_memory_bounds(tmp_path: Path) -> None:
    """A profile's context tier is its overlay's ``search.max_length`` (else the model's
    context_length); its device and effective-host bounds are the eligibility's minimum and maximum."""
    pkg = _MTP_PKG
    doc = json.loads((pkg / "genai_config.json").read_text(encoding="utf-8"))
    doc["model"]["context_length"] = 4096
    doc["runtime_profiles"] = [
        {"id": "short", "overlay": {"search": {"max_length": 512}},
         "eligibility": {"minimum_total_device_memory_bytes": 100, "maximum_total_device_memory_bytes": 200,
                         "minimum_effective_host_memory_bytes": 30, "maximum_effective_host_memory_bytes": 40}},
        {"id": "full", "overlay": {}, "eligibility": {"minimum_total_device_memory_bytes": 200}},
    ]  # fmt: skip
    facts = read_package_facts(pkg, document=doc)
    assert [(p.id, p.context, p.min_device, p.max_device, p.min_host, p.max_host) for p in facts.profiles] == [
        ("short", 512, 100, 200, 30, 40), ("full", 4096, 200, None, None, None)]


def test_a_config_that_names_no_graph_is_refused_naming_the_package(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A config with no decoder filename (nor any other graph) has nothing to size: one PackageError naming the package."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "genai_config.json").write_text(json.dumps({"model": {"type": "qwen3_5_moe_text", "decoder": {}}}), encoding="utf-8")
    with pytest.raises(PackageError) as info:
        read_package_facts(pkg)
    assert messages_snapshot == str(info.value)


def test_each_profiles_breakdown_sizes_its_state_at_the_batch_asked() -> None:
    """``profile_breakdowns(batch=N)`` sizes every profile's state for N sequences, as ``breakdown`` does, not for one."""
    doc = json.loads((_MTP_PKG / "genai_config.json").read_text(encoding="utf-8"))
    doc["runtime_profiles"] = [{"id": "a", "overlay": {"search": {"max_length": 64}},
                                "eligibility": {"minimum_total_device_memory_bytes": 0}}]  # fmt: skip
    facts = read_package_facts(_MTP_PKG, document=doc)
    [(one_profile, one)] = profile_breakdowns(facts)
    [(profile, three)] = profile_breakdowns(facts, batch=3)
    assert profile.id == one_profile.id == "a"
    assert (one.batch, three.batch) == (1, 3)
    assert one.state and three.state == {kind: 3 * n for kind, n in one.state.items()}


def test_config_entries_are_session_entries_beside_the_plain_options() -> None:
    """``session_options.config_entries`` (the builder's form of the offload keys) reach the
    package's and each profile's entries, string values only, as the plain options do."""
    doc = json.loads((_MTP_PKG / "genai_config.json").read_text(encoding="utf-8"))
    doc["model"]["decoder"]["session_options"] = {
        "log_id": "x", "config_entries": {"session.moe.offload.mode": "auto", "ignored": 3}}  # fmt: skip
    overrides = {"session.moe.offload.node_overrides": "moe:max_resident_slots=1"}
    doc["runtime_profiles"] = [{"id": "a", "overlay": {"model": {"decoder": {"session_options": {"config_entries": overrides}}}}}]
    facts = read_package_facts(_MTP_PKG, document=doc)
    assert facts.entries == {"log_id": "x", "session.moe.offload.mode": "auto"}
    assert [p.entries for p in facts.profiles] == [{**facts.entries, **overrides}]


def test_a_qmoe_nodes_experts_are_sized_from_all_its_expert_tensors(tmp_path: Path) -> None:
    """A node's bytes per expert sum every expert tensor of it (fc1 and fc2), named with its graph;
    without offload every expert is resident, and an offload cap keeps only that many on the device."""
    def t(name: str, nbytes: int, offset: int) -> TensorBytes:
        return TensorBytes(name, "model.onnx", "model.onnx.data", offset, nbytes, "uint8", (4, nbytes // 4), "routed_expert",
                           "moe", 4)  # fmt: skip

    graphs = {"model.onnx": GraphMemory("model.onnx", (t("fc1", 64, 0), t("fc2", 32, 64)), ())}
    facts = _facts(tmp_path)
    plain = breakdown(facts, graphs, decoder="model.onnx", entries={}, context=8)
    assert plain.experts == (ExpertNode("model.onnx", "moe", 4, 24, 4),)
    assert (plain.expert_device, plain.expert_host) == (96, 0)
    entries = {"session.moe.offload.mode": "auto", "session.moe.offload.node_overrides": "moe:max_resident_slots=1"}
    offloaded = breakdown(facts, graphs, decoder="model.onnx", entries=entries, context=8)
    assert offloaded.experts == (ExpertNode("model.onnx", "moe", 4, 24, 1),)
    assert (offloaded.expert_device, offloaded.expert_host) == (24, 72)


def test_a_breakdown_without_a_batch_sizes_state_for_one_sequence(tmp_path: Path) -> None:
    """``breakdown`` called without ``batch`` sizes the state for a single sequence (batch 1), as the fit assumes."""
    kv = StateTensor("model.onnx", "present.0.key", "kv", "GroupQueryAttention", "float16", 16, ("B", 2, "T", 4))
    graphs = {"model.onnx": GraphMemory("model.onnx", (), (kv,))}
    mem = breakdown(_facts(tmp_path), graphs, decoder="model.onnx", entries={}, context=8)
    assert mem.batch == 1
    assert mem.state == {"kv": 2 * 8 * 4 * 2}


def test_a_state_output_after_an_unresolved_one_is_still_sized_with_its_dtype_named(tmp_path: Path) -> None:
    """One unsizable ``present.*`` output does not hide the ones after it; each sized state names its
    dtype (a type without a short name by its onnx number, never None)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1])
    outputs = [helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT16, ["mystery_dim"]),
               helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT16, ["batch_size", 4]),
               helper.make_tensor_value_info("present.1.key", TensorProto.FLOAT8E4M3FNUZ, ["batch_size", 2])]  # fmt: skip
    nodes = [helper.make_node("Identity", ["x"], [o.name], name=o.name) for o in outputs]
    graph = helper.make_graph(nodes, "g", [x], outputs)
    (tmp_path / "model.onnx").write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString())
    gm = graph_memory(tmp_path / "model.onnx", tmp_path)
    assert gm.unresolved == ("present.0.key",)
    assert [(s.name, s.dtype, s.bits, s.dims) for s in gm.states] == [
        ("present.0.value", "float16", 16, ("B", 4)), ("present.1.key", str(TensorProto.FLOAT8E4M3FNUZ), 8, ("B", 2))]
