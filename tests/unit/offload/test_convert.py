"""``q38 offload`` conversion of synthetic packages (flat, layered, contrib, custom).

Invariants guarded:
- every QMoE node stays a com.microsoft::QMoE node, router_weights cleared (manifest count 9 =
  8 layers + the MTP draft); model_s2/s3/s4 carry 1/2/3 drafts and 2/3/4 verify rows;
- model.onnx is a written copy of model_s4.onnx (same bytes, its own inode, never a link);
- the config has four non-overlapping 20-34 GiB profiles selecting model_s4.onnx with the
  offload entries, CUDA-graph capture and kSameAsRequested, and passes the strict parser;
- the source is byte-identical after every conversion, failed ones included, and a refused
  conversion writes nothing (no OUT, no staging directory);
- ``required`` names the first node ORT would not offload and its reason; ``auto`` keeps it resident;
- QMoEOffload sources, custom lineage without FoldMid2, chunk > kv_capacity are refused;
- every pool entry and every graph external-data reference resolves; moved MTP expert entries are
  4096-aligned, hold the source bytes, and the graphs point at the same bytes;
- a profile-driven total is met exactly (or refused before writing).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from support.offload_synthpkg import drop_mtp_draft, edit_graph, tree_digest
from syrupy.assertion import SnapshotAssertion

from q38.errors import ConfigError, FlagError, GraphError, OffloadError, Q38Error
from q38.offload.convert import convert_package, preview_offload
from q38.offload.eligibility import contracts_eligibility
from q38.offload.options import OFFLOAD_PREFIX, OffloadOptions, parse_node_overrides
from q38.offload.report import OffloadReport
from q38.package import encode_profile, external_refs, open_package
from q38.package.profile import ExpertProfile

GIB = 1 << 30


def _qmoe(model: ir.Model) -> list[ir.Node]:
    return [n for n in model.graph if n.op_type == "QMoE"]


def _assert_nothing_written(out: Path) -> None:
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")], "staging left behind"


def test_flat_conversion_graphs(converted_cpu: Path) -> None:
    pkg = open_package(converted_cpu)
    rows = {}
    for role, drafts in (("s2", 1), ("s3", 2), ("s4", 3)):
        model = pkg.load(role)
        nodes = _qmoe(model)
        assert len(nodes) == 8 + drafts
        assert all(n.domain == "com.microsoft" for n in nodes)
        assert all(len(n.inputs) <= 14 for n in nodes), "router_weights (slot 14) must be cleared"
        outs = [v.name or "" for v in model.graph.outputs]
        assert [o for o in outs if o.startswith("mtp.")] == [f"mtp.{j}.logits" for j in range(drafts)]
        assert not [n for n in model.graph if n.op_type == "Softmax" and "/moe/router" in (n.name or "")]
        rows[role] = model.metadata_props["q38.verify_rows"]
        ids = next(v for v in model.graph.inputs if v.name == "input_ids")
        assert ids.shape is not None and ids.shape[1] == int(rows[role])
    assert rows == {"s2": "2", "s3": "3", "s4": "4"}
    target = converted_cpu / "model.onnx"
    s4 = converted_cpu / "model_s4.onnx"
    assert target.read_bytes() == s4.read_bytes()
    assert target.stat().st_ino != s4.stat().st_ino
    for name in ("model.onnx", "model_s2.onnx", "model_s3.onnx", "model_s4.onnx"):
        assert (converted_cpu / name).stat().st_nlink == 1


def test_flat_conversion_manifest_and_config(converted_cpu: Path) -> None:
    manifest = json.loads((converted_cpu / "package_manifest.json").read_text())
    assert manifest["command"] == "offload"
    assert manifest["router_weights_cleared"] == 17  # 9 target (8 layers + MTP) + 8 prefill
    assert manifest["resident_slots"]["/model/layers.0/moe/QMoE"] == 2
    assert manifest["resident_slots"]["/mtp/2/moe/QMoE"] == 2
    assert manifest["files"]["model.onnx"]["link_mode"] == "write"
    cfg = open_package(converted_cpu).config
    so = cfg.model.decoder.session_options
    assert so.config_entries["session.moe.offload.mode"] == "required"
    assert so.config_entries["session.moe.offload.placement"] == "adaptive"
    assert so.config_entries["session.moe.offload.node_overrides"].startswith(
        "/model/layers.0/moe/QMoE:max_resident_slots=2;/model/layers.1/moe/QMoE:max_resident_slots=2;"
    )
    cuda = next(p for p in so.provider_options if p.name == "cuda")
    assert cuda.options["arena_extend_strategy"] == "kSameAsRequested"
    assert cuda.options["enable_cuda_graph"] == "1"
    graph = cfg.model.qwen38_graph
    assert graph.multidraft == {"s2": "model_s2.onnx", "s3": "model_s3.onnx", "s4": "model_s4.onnx"}
    profiles = cfg.runtime_profiles
    assert [p.id for p in profiles] == ["20gib-to-24gib", "24gib-to-28gib", "28gib-to-32gib", "32gib-to-34gib"]
    assert profiles[0].eligibility.minimum_total_device_memory_bytes == 20 * GIB
    assert profiles[-1].eligibility.maximum_total_device_memory_bytes == 34 * GIB
    for a, b in itertools.pairwise(profiles):
        assert a.eligibility.maximum_total_device_memory_bytes == b.eligibility.minimum_total_device_memory_bytes - 1
    data_bytes = (converted_cpu / "model.onnx.data").stat().st_size
    for p in profiles:
        assert p.overlay.decoder_filename == "model_s4.onnx"
        assert p.overlay.session_options is not None
        assert p.overlay.session_options.config_entries == so.config_entries
        assert 0 < (p.eligibility.minimum_effective_host_memory_bytes or 0) <= data_bytes + (1 << 20)


def test_pool_bindings_never_dangle(converted_cpu: Path, tiny_cpu_package: Path) -> None:
    pkg = open_package(converted_cpu)  # validates every pool entry's file
    sizes: dict[str, int] = {}
    for entry in pkg.pool.entries:
        size = sizes.setdefault(entry.file, (converted_cpu / entry.file).stat().st_size)
        assert entry.length is not None and entry.offset + entry.length <= size, entry
    moved = [e for e in pkg.pool.entries if e.file == "mtp_experts.aligned.data"]
    assert len(moved) == 4 and all(e.offset % 4096 == 0 and e.placement == "host_mapped" for e in moved)
    experts = [e for e in pkg.pool.entries if ".mlp.experts." in e.provenance and not e.provenance.startswith("target:mtp")]
    assert len(experts) == 32 and all(e.placement == "cpu_mmap" for e in experts)
    dense = [e for e in pkg.pool.entries if ".mlp.experts." not in e.provenance]
    assert dense and all(e.placement == "host_mapped" for e in dense)
    src_model = open_package(tiny_cpu_package).load("target")
    src_refs = {r.name: r for r in external_refs(src_model)}
    for role in pkg.roles():
        model = pkg.load(role)  # load_graph checks every external reference resolves
        refs = {r.name: r for r in external_refs(model)}
        for entry in moved:
            name = entry.provenance.split(":", 1)[1]
            if name in refs:
                assert (refs[name].location, refs[name].offset) == (entry.file, entry.offset)
    for entry in moved:
        src = src_refs[entry.provenance.split(":", 1)[1]]
        with open(tiny_cpu_package / src.location, "rb") as fh:
            fh.seek(src.offset)
            want = fh.read(src.length or 0)
        with open(converted_cpu / entry.file, "rb") as fh:
            fh.seek(entry.offset)
            assert fh.read(entry.length or 0) == want


@pytest.mark.parametrize("fixture", ["tiny_cpu_package", "tiny_faithful_package", "tiny_layered_package",
                                     "tiny_custom_package"])


def test_sources_untouched_and_outputs_open(fixture: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    src: Path = request.getfixturevalue(fixture)
    before = tree_digest(src)
    report = convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert tree_digest(src) == before
    pkg = open_package(tmp_path / "out")
    assert report.router_weights_cleared == 17  # target 9 + prefill 8
    assert not report.kept_resident
    for role in pkg.roles():
        pkg.load(role)
    if fixture == "tiny_layered_package":
        assert pkg.layout == "layered"
        head_src = tree_digest(src / "head")
        assert tree_digest(tmp_path / "out" / "head") == head_src


def test_reconverting_an_offload_package_regenerates(converted_cpu: Path, tmp_path: Path) -> None:
    before = tree_digest(converted_cpu)
    report = convert_package(converted_cpu, tmp_path / "again", OffloadOptions(mode="auto"))
    assert tree_digest(converted_cpu) == before
    assert report.router_weights_cleared == 0
    pkg = open_package(tmp_path / "again")
    s4 = pkg.load("s4")
    assert len(_qmoe(s4)) == 11  # still three drafts, not more
    assert (tmp_path / "again" / "model.onnx").stat().st_nlink == 1
    assert (tmp_path / "again" / "model.onnx").read_bytes() == (tmp_path / "again" / "model_s4.onnx").read_bytes()


def _edit_target(pkg: Path, edit: Callable[[onnx.ModelProto], None]) -> None:
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    edit(model)
    onnx.save(model, pkg / "model.onnx")


def _set_sparse_mixer(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        if node.name == "/model/layers.3/moe/QMoE":
            for a in node.attribute:
                if a.name == "use_sparse_mixer":
                    a.i = 1


def test_required_refuses_before_writing(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                         tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    src = editable_copy(tiny_cpu_package)
    _edit_target(src, _set_sparse_mixer)
    before = tree_digest(src)
    out = tmp_path / "out"
    with pytest.raises(OffloadError) as info:
        convert_package(src, out, OffloadOptions(mode="required"))
    assert messages_snapshot == str(info.value)
    assert str(info.value).endswith("): use_sparse_mixer=1 is not supported by the QMoE offload backend")  # the backend's reason: ORT's words
    _assert_nothing_written(out)
    assert tree_digest(src) == before


def _set_block_size_64(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        if node.name == "/model/layers.3/moe/QMoE":
            for a in node.attribute:
                if a.name == "block_size":
                    a.i = 64


def test_required_does_not_tell_a_prepacked_node_to_re_export_prepacked(
    tiny_cpu_package: Path, editable_copy: Callable[[Path], Path], tmp_path: Path
) -> None:
    """An int4 node already weights_prepacked=1 but refused for its block_size (64, not 32) is not told to
    re-export with qmoe_weights_prepacked=1 (it would not help): the refusal offers --offload-mode auto."""
    src = editable_copy(tiny_cpu_package)
    _edit_target(src, _set_block_size_64)
    out = tmp_path / "out"
    with pytest.raises(OffloadError) as info:
        convert_package(src, out, OffloadOptions(mode="required"))
    assert str(info.value).startswith(
        f"{src / 'model.onnx'}: QMoE node '/model/layers.3/moe/QMoE' would not be offloaded by onnxruntime "
        "(--offload-mode required; --offload-mode auto keeps it on the GPU): quant_type='int' offload requires "
    )
    _assert_nothing_written(out)


def test_auto_keeps_ineligible_nodes_resident(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                              tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)
    _edit_target(src, _set_sparse_mixer)
    report = convert_package(src, tmp_path / "out", OffloadOptions(mode="auto", target_resident_slots=1))
    assert report.kept_resident == [
        ("/model/layers.3/moe/QMoE", "use_sparse_mixer=1 is not supported by the QMoE offload backend")
    ]
    assert "/model/layers.3/moe/QMoE" not in report.resident_slots
    manifest = json.loads((tmp_path / "out" / "package_manifest.json").read_text())
    assert manifest["extra"]["kept_resident"][0]["node"] == "/model/layers.3/moe/QMoE"
    overrides = open_package(tmp_path / "out").config.model.decoder.session_options.config_entries[
        "session.moe.offload.node_overrides"]
    assert "/model/layers.3/moe/QMoE:" not in overrides


def test_qmoe_offload_source_refused(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                     tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)

    def legacy(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.name == "/model/layers.0/moe/QMoE":
                node.op_type = "QMoEOffload"

    _edit_target(src, legacy)
    before = tree_digest(src)
    with pytest.raises(OffloadError, match=r"node '/model/layers.0/moe/QMoE' is a com.microsoft::QMoEOffload node "
                                           r"of the old offload tool"):
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    _assert_nothing_written(tmp_path / "out")
    assert tree_digest(src) == before


def test_custom_lineage_needs_foldmid2(tiny_custom_package: Path, editable_copy: Callable[[Path], Path],
                                       tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    src = editable_copy(tiny_custom_package)

    def drop_fold(model: onnx.ModelProto) -> None:
        fold = next(n for n in model.graph.node if n.op_type == "FoldMid2")
        src_name, dst_name = fold.input[0], fold.output[0]
        model.graph.node.remove(fold)
        for node in model.graph.node:
            for i, name in enumerate(node.input):
                if name == dst_name:
                    node.input[i] = src_name

    _edit_target(src, drop_fold)
    with pytest.raises(GraphError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert messages_snapshot == str(info.value)
    _assert_nothing_written(tmp_path / "out")


def test_prefill_chunk_over_kv_capacity_refused(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                                tmp_path: Path) -> None:
    """The package's config parser is the one check that fires for a file (the converter kept no
    second, unreachable copy of it): the refusal names the config file and the field."""
    src = editable_copy(tiny_cpu_package)
    cfg = json.loads((src / "genai_config.json").read_text())
    graph = cfg["model"]["qwen38_graph"]
    graph["prefill"]["chunk"] = graph["kv_capacity"] + 1
    (src / "genai_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"genai_config\.json.*prefill\.chunk: chunk \d+ exceeds kv_capacity \d+"):
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    _assert_nothing_written(tmp_path / "out")


@pytest.mark.parametrize("chunk", [0, -1, 1 << 30])
def test_offload_config_refuses_a_prefill_chunk_a_caller_built(tiny_cpu_package: Path, chunk: int) -> None:
    """apply_offload_config's own guard, for a Config built in code (the parser cannot produce one):
    a chunk that is not positive or exceeds kv_capacity is refused, a fitting one is kept."""
    from q38.offload.profiles import apply_offload_config

    cfg = open_package(tiny_cpu_package).config
    g = cfg.model.qwen38_graph
    assert g.prefill is not None
    prefill = g.prefill

    def with_chunk(n: int):  # type: ignore[no-untyped-def]
        graph = dataclasses.replace(g, prefill=dataclasses.replace(prefill, chunk=n))
        return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, qwen38_graph=graph))

    with pytest.raises(ConfigError, match=rf"x\.json: model\.qwen38_graph\.prefill\.chunk {chunk} exceeds kv_capacity"):
        apply_offload_config(with_chunk(chunk), {}, min_host_bytes=1, source="x.json")
    for fits in (1, g.kv_capacity):
        out = apply_offload_config(with_chunk(fits), {}, min_host_bytes=1, source="x.json")
        assert out.model.qwen38_graph.prefill is not None and out.model.qwen38_graph.prefill.chunk == fits


def test_profile_total_met_exactly(tiny_cpu_package: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 1000, size=(8, 8)).astype(np.uint64)  # one row per decoder layer
    profile = tmp_path / "profile.strp"
    profile.write_bytes(encode_profile(ExpertProfile(counts)))
    report = convert_package(
        tiny_cpu_package, tmp_path / "out",
        OffloadOptions(mode="auto", expert_profile=str(profile), total_resident_slots=21, min_slots_per_layer=1),
    )
    layer_caps = {k: v for k, v in report.resident_slots.items() if k.startswith("/model/")}
    assert sum(layer_caps.values()) == 21 and min(layer_caps.values()) >= 1
    assert (tmp_path / "out" / "expert-profile.bin").read_bytes() == profile.read_bytes()
    cfg = open_package(tmp_path / "out").config
    assert cfg.model.qwen38_graph.expert_profile == "expert-profile.bin"
    assert cfg.model.decoder.session_options.config_entries["session.moe.offload.popularity_file"] == "expert-profile.bin"


@pytest.mark.parametrize(("total", "kwargs"), [(65, {}), (20, {"uniform_profile_slots": True})])
def test_profile_total_refused_before_writing(tiny_cpu_package: Path, tmp_path: Path, total: int,
                                              kwargs: dict[str, object]) -> None:
    profile = tmp_path / "profile.strp"
    profile.write_bytes(encode_profile(ExpertProfile(np.ones((8, 8), dtype=np.uint64))))
    before = tree_digest(tiny_cpu_package)
    with pytest.raises(FlagError, match=r"^--total-resident-slots"):
        convert_package(tiny_cpu_package, tmp_path / "out",
                        OffloadOptions(mode="auto", expert_profile=str(profile), total_resident_slots=total,
                                       **kwargs))  # type: ignore[arg-type]
    _assert_nothing_written(tmp_path / "out")
    assert tree_digest(tiny_cpu_package) == before


def test_output_inside_source_refused(tiny_cpu_package: Path) -> None:
    with pytest.raises(Q38Error, match="must not be inside the source package"):
        convert_package(tiny_cpu_package, tiny_cpu_package / "out", OffloadOptions())
    assert not (tiny_cpu_package / "out").exists()


def test_existing_destination_refused(tiny_cpu_package: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(Exception, match="exists"):
        convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto"))
    assert os.listdir(out) == ["keep"]


S_GRAPHS = ("model_s2.onnx", "model_s3.onnx", "model_s4.onnx")


def _nothing_written(out: Path) -> bool:
    return not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


def _rename_first(op: str, to: str) -> Callable[[onnx.ModelProto], None]:
    def edit(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.op_type == op)
        node.op_type, node.domain = to, "com.microsoft"

    return edit


def test_an_inline_16_kib_initializer_converts(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                               tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)
    name = "model.layers.0.attn_hc.down.weight"

    def inline(model: onnx.ModelProto) -> None:
        tensor = next(t for t in model.graph.initializer if t.name == name)
        info = {e.key: e.value for e in tensor.external_data}
        with open(src / info["location"], "rb") as fh:
            fh.seek(int(info["offset"]))
            tensor.raw_data = fh.read(int(info["length"]))
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT

    edit_graph(src / "model.onnx", inline)
    want = next(t for t in onnx.load(src / "model.onnx", load_external_data=False).graph.initializer if t.name == name)
    assert len(want.raw_data) == 16384
    convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    for graph in (*S_GRAPHS, "model.onnx"):
        got = next(t for t in onnx.load(tmp_path / "out" / graph, load_external_data=False).graph.initializer
                   if t.name == name)
        assert got.data_location == onnx.TensorProto.DEFAULT and got.raw_data == want.raw_data


def test_a_target_without_mtp_draft_converts(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                             tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)

    edit_graph(src / "model.onnx", drop_mtp_draft)
    report = convert_package(src, tmp_path / "out", OffloadOptions(mode="auto", target_resident_slots=2))
    out = tmp_path / "out"
    assert report.graphs == {}
    assert not [p for p in out.iterdir() if p.name.startswith("model_s")]
    assert any("no MTP draft (/mtp/0/): no verify graphs" in n for n in report.notes)
    assert "verify graphs none (no MTP draft)" in report.summary()[0]
    pkg = open_package(out)
    cfg = pkg.config
    assert cfg.model.qwen38_graph.multidraft == {}
    assert {p.overlay.decoder_filename for p in cfg.runtime_profiles} == {"model.onnx"}
    entries = cfg.model.decoder.session_options.config_entries
    assert parse_node_overrides(entries[OFFLOAD_PREFIX + "node_overrides"]) == {
        f"/model/layers.{i}/moe/QMoE": 2 for i in range(8)
    }
    target = pkg.load("target")
    assert [n.name for n in target.graph if n.op_type == "QMoE"] == [f"/model/layers.{i}/moe/QMoE" for i in range(8)]
    assert all(len(n.inputs) <= 14 for n in target.graph if n.op_type == "QMoE")


@pytest.mark.parametrize(("graph", "op"), [("head_r2.onnx", "HyperConnectionPreMix"), ("prefill.onnx", "QMoE")])
def test_qmoe_offload_in_head_or_prefill_refused(graph: str, op: str, tiny_cpu_package: Path,
                                                 editable_copy: Callable[[Path], Path], tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)
    edit_graph(src / graph, _rename_first(op, "QMoEOffload"))
    before = tree_digest(src)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert str(info.value).startswith(f"{src / graph}: node ")
    assert "is a com.microsoft::QMoEOffload node of the old offload tool" in str(info.value)
    assert _nothing_written(tmp_path / "out")
    assert tree_digest(src) == before


def test_required_checks_the_prefill_graph(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                           tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    src = editable_copy(tiny_cpu_package)

    def sparse_mixer(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.name == "/model/layers.5/moe/QMoE")
        next(a for a in node.attribute if a.name == "use_sparse_mixer").i = 1

    edit_graph(src / "prefill.onnx", sparse_mixer)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="required"))
    assert messages_snapshot == str(info.value)
    assert str(info.value).endswith("): use_sparse_mixer=1 is not supported by the QMoE offload backend")  # the backend's reason: ORT's words
    assert _nothing_written(tmp_path / "out")
    convert_package(src, tmp_path / "auto", OffloadOptions(mode="auto"))  # auto: kept on the GPU


def test_required_checks_the_chained_drafts(tiny_cpu_package: Path, tmp_path: Path) -> None:
    """ORT sees /mtp/1/ and /mtp/2/ as candidates of their own: a checker refusing only those
    (as ORT would if a copy differed) must stop the conversion at model_s3.onnx."""

    def only_drafts_refused(model, mode):  # type: ignore[no-untyped-def]
        return [(n, "refused copy" if (n.name or "").startswith("/mtp/1/") else r)
                for n, r in contracts_eligibility(model, mode)]

    with pytest.raises(OffloadError) as info:
        convert_package(tiny_cpu_package, tmp_path / "out", OffloadOptions(mode="required"),
                        eligibility=only_drafts_refused)
    assert str(info.value).startswith(f"model_s3.onnx (built from {tiny_cpu_package / 'model.onnx'}): QMoE node "
                                      "'/mtp/1/moe/QMoE' would not be offloaded")
    assert _nothing_written(tmp_path / "out")


def test_reconversion_writes_every_graph_and_links_nothing_to_the_source(converted_cpu: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    src_links = {p.name: p.stat().st_nlink for p in converted_cpu.iterdir() if p.is_file()}
    convert_package(converted_cpu, out, OffloadOptions(mode="auto"))
    src_inodes = {p.stat().st_ino for p in converted_cpu.rglob("*") if p.is_file()}
    for path in out.rglob("*"):
        if path.is_file():
            assert path.stat().st_nlink == 1, path
            assert path.stat().st_ino not in src_inodes, path
    graphs = [p.name for p in out.glob("*.onnx")]
    assert sorted(graphs) == ["head_r2.onnx", "model.onnx", *S_GRAPHS, "prefill.onnx"]
    manifest = json.loads((out / "package_manifest.json").read_text())
    for name in ("model.onnx", *S_GRAPHS, "prefill.onnx"):
        assert manifest["files"][name]["link_mode"] == "write"
    assert {p.name: p.stat().st_nlink for p in converted_cpu.iterdir() if p.is_file()} == src_links


def test_summary_names_three_kept_nodes_per_reason_and_counts_the_rest() -> None:
    report = OffloadReport(out="out", surface="genai", layout="flat", router_weights_cleared=0, offloaded=[],
                           kept_resident=[(n, "fp8") for n in "abcde"] + [(n, "bits") for n in "xyz"],
                           resident_slots={}, graphs={}, pool={})
    assert report.summary() == [
        ("q38 offload: wrote out (genai): 0 QMoE nodes offloaded, 8 kept resident, 0 router_weights cleared, "
         "verify graphs none (no MTP draft)"),
        "  kept resident (5): a, b, c and 2 more: fp8",
        "  kept resident (3): x, y, z: bits",
    ]


def test_an_unknown_mtp_moe_placement_is_refused(messages_snapshot: SnapshotAssertion) -> None:
    with pytest.raises(FlagError) as info:
        OffloadOptions(mtp_moe_placement="gpu")  # type: ignore[arg-type]
    assert messages_snapshot == str(info.value)


def test_a_graph_over_the_protobuf_limit_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, messages_snapshot: SnapshotAssertion) -> None:
    from q38.offload.package_io import serialize_graph

    model = ir.Model(ir.Graph([], [], nodes=[], opset_imports={"": 21}, name="g"), ir_version=10)

    def too_big(model: ir.Model) -> object:
        raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB: 2147483700")

    monkeypatch.setattr(ir.serde, "serialize_model", too_big)
    with pytest.raises(OffloadError) as info:
        serialize_graph(model, where="model_s3.onnx")
    assert messages_snapshot == str(info.value)



def test_offload_profiles_config_writes_the_given_caps(tiny_cpu_package: Path) -> None:
    """With caps, the decoder's offload entries carry them as per-node resident-slot overrides."""
    from q38.offload.build import offload_profiles_config

    cfg = open_package(tiny_cpu_package).config
    s4 = ir.Model(ir.Graph([], [], nodes=[], name="s4"), ir_version=10)
    caps = {"/model/layers.0/moe/QMoE": 2, "/model/layers.1/moe/QMoE": 3}
    out = offload_profiles_config(cfg, s4, OffloadOptions(mode="auto"), caps)
    entries = out.model.decoder.session_options.config_entries
    assert entries[OFFLOAD_PREFIX + "node_overrides"] == (
        "/model/layers.0/moe/QMoE:max_resident_slots=2;/model/layers.1/moe/QMoE:max_resident_slots=3"
    )
    assert entries[OFFLOAD_PREFIX + "mode"] == "auto"


def test_apply_offload_config_keeps_other_entries_and_replaces_old_offload_ones(tiny_cpu_package: Path) -> None:
    from q38.offload.profiles import apply_offload_config

    cfg = open_package(tiny_cpu_package).config
    so = cfg.model.decoder.session_options
    old = {**so.config_entries, "custom.keep.me": "1",
           OFFLOAD_PREFIX + "mode": "required", OFFLOAD_PREFIX + "host_expert_bytes": "7"}
    decoder = dataclasses.replace(cfg.model.decoder, session_options=dataclasses.replace(so, config_entries=old))
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, decoder=decoder))
    out = apply_offload_config(cfg, {OFFLOAD_PREFIX + "mode": "auto"}, min_host_bytes=1)
    entries = out.model.decoder.session_options.config_entries
    assert entries["custom.keep.me"] == "1"  # a non-offload entry survives
    assert entries[OFFLOAD_PREFIX + "mode"] == "auto"  # replaced
    assert OFFLOAD_PREFIX + "host_expert_bytes" not in entries  # old offload entries are not merged


def test_conversion_logs_its_plan_in_one_info_line(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                                   tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Before writing, ``q38 offload`` logs at INFO the offloaded, kept-resident and
    cleared router_weights counts of its plan, each in its place."""
    src = editable_copy(tiny_cpu_package)
    _edit_target(src, _set_sparse_mixer)
    with caplog.at_level(logging.INFO, logger="q38.offload"):
        report = convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert (len(report.offloaded), len(report.kept_resident), report.router_weights_cleared) == (8, 1, 17)
    assert [r.getMessage() for r in caplog.records if r.name == "q38.offload"] == [
        "offload: 8 QMoE nodes offloaded, 1 kept resident, 17 router_weights cleared"
    ]


def test_preview_gives_the_conversion_report_and_writes_nothing(tiny_cpu_package: Path, tmp_path: Path) -> None:
    """``q38 profile --plan``'s preview (source given as a str) reports what the conversion would, names
    SRC.offload-preview as its output and creates nothing, next to the source or in it."""
    before = tree_digest(tiny_cpu_package)
    siblings = sorted(p.name for p in tiny_cpu_package.parent.iterdir())
    options = OffloadOptions(mode="auto", target_resident_slots=2)
    preview = preview_offload(str(tiny_cpu_package), options)
    assert preview.out == str(tiny_cpu_package.parent / f"{tiny_cpu_package.name}.offload-preview")
    assert sorted(p.name for p in tiny_cpu_package.parent.iterdir()) == siblings
    assert tree_digest(tiny_cpu_package) == before
    report = convert_package(tiny_cpu_package, tmp_path / "out", options)
    assert dataclasses.replace(preview, out=report.out) == report
