"""``q38 offload`` of builder packages (the genai surface): synthetic ``--exporter builder``
packages of both variants and lineages, and the real builder exports.

Invariants guarded:
- the output keeps the genai surface: ``genai_config.json`` parses as onnxruntime-genai 0.18.0
  parses it (og.Config), ``q38 check`` exits 0, og generates the source's greedy tokens;
- QMoE as the public builder writes it (14 inputs, ``weights_prepacked`` absent): ``required``
  names the node and says to re-export with ``qmoe_weights_prepacked=1``; ``auto`` keeps every
  such node on the GPU and converts;
- the MTP graph (``mtp.onnx``) is its own session: its own ``session.moe.offload.*`` entries
  (inheriting the decoder's providers when it had no options), its FP8 QMoE refused by name
  under ``required`` and kept resident under ``auto`` while the decoder's nodes are offloaded;
- the verify graphs ``model_sS.onnx`` are the decoder with the sequence symbol bound to S
  (``position_ids [3, B, S]``, ``input_ids [B, S]``, logits / hidden_states ``[B, S, ...]``) and
  run in ORT with S rows giving the decoder's logits bit for bit;
- a package without MTP converts: offload options, no verify graphs, said in the summary;
- with a profile and ``--total-resident-slots N``: the decoder's and the MTP's caps sum to N,
  each session's popularity file holds exactly its graph's rows;
- the source is byte-identical after every conversion, refused ones included;
- runtime profiles overlaying the decoder (its own file or an alternate) convert; a decoder with
  no QMoE converts when the MTP graph holds one; with none anywhere, or with the old QMoEOffload
  operator, or a QMoE node of no static expert count, the refusal names the file and the node;
- a profile of the decoder layers alone matches (the mtp.onnx node is a draft site); one of
  another layer count is refused naming the profile file;
- a runtime profile's alternate decoder is converted, one overlaying the decoder's file is not
  converted twice; a package with no MoE node at all is refused naming the decoder alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from support.genai_packages import edit_genai_config, real_package_dirs
from support.offload_synthpkg import edit_graph, tree_digest
from support.synth_builder import feeds_for, og_greedy, zero_state
from syrupy.assertion import SnapshotAssertion

from q38.cli import main
from q38.errors import OffloadError, ProfileError
from q38.offload.convert import convert_package
from q38.offload.hitrate import LayerHit
from q38.offload.options import OFFLOAD_PREFIX, OffloadOptions, parse_node_overrides
from q38.package import encode_profile, read_profile
from q38.package.genai.config import read_genai_config
from q38.package.profile import ExpertProfile


@pytest.fixture(scope="session")
def builder_prepacked_faithful(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("offload_src") / "bfp", exporter="builder", variant="faithful",
                      weights_prepacked=True)


def _dims(value: onnx.ValueInfoProto) -> list[object]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def _entries(pkg: Path, section: str) -> dict[str, str]:
    so = json.loads((pkg / "genai_config.json").read_text())["model"][section]["session_options"]
    return {k: v for k, v in so.items() if k.startswith(OFFLOAD_PREFIX)}


def test_builder_cpu_auto_keeps_qmoe_and_generates_the_same_tokens(tiny_builder_cpu_package: Path,
                                                                   tmp_path: Path) -> None:
    og = pytest.importorskip("onnxruntime_genai")
    src = tiny_builder_cpu_package
    before = tree_digest(src)
    out = tmp_path / "out"
    report = convert_package(src, out, OffloadOptions(mode="auto"))
    assert tree_digest(src) == before
    assert report.surface == "genai" and report.offloaded == [] and report.out == str(out)
    assert [n for n, _ in report.kept_resident] == [f"model.onnx:/model/layers.{i}/moe/QMoE" for i in range(8)] + [
        "mtp.onnx:/model/layers.0/moe/QMoE"]
    assert {r for _, r in report.kept_resident} == {(
        "quant_type='int' offload requires (bits=4, weights_prepacked=1, block_size=32), (bits=3, weights_prepacked=0, "
        "block_size in {32,64,128}), or (bits=2, weights_prepacked=1, block_size in {32,64,128})")}
    assert report.graphs == {"s2": "model_s2.onnx", "s3": "model_s3.onnx", "s4": "model_s4.onnx"}
    for section in ("decoder", "mtp"):
        assert _entries(out, section) == {OFFLOAD_PREFIX + "mode": "auto", OFFLOAD_PREFIX + "placement": "adaptive"}
    doc = json.loads((out / "genai_config.json").read_text())
    assert "runtime_profiles" not in doc and doc["model"]["type"] == "qwen3_5_moe_text"
    og.Config(str(out))  # 0.18.0's own parser
    assert main(["check", str(out)]) == 0
    assert og_greedy(out) == og_greedy(src)
    manifest = json.loads((out / "package_manifest.json").read_text())
    assert manifest["extra"]["verify_graphs"] == report.graphs and manifest["extra"]["surface"] == "genai"
    assert {p.name for p in out.iterdir()} == {p.name for p in src.iterdir()} | {
        "model_s2.onnx", "model_s3.onnx", "model_s4.onnx", "package_manifest.json"}


def test_builder_required_names_the_node_and_the_re_export(tiny_builder_cpu_package: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    src = tiny_builder_cpu_package
    before = tree_digest(src)
    assert main(["offload", str(tmp_path / "out"), "--from-package", str(src)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    # the path gives way (to its last two parts) when the line would pass the limit, never the reason
    expected = (f"{src.name}/model.onnx: QMoE node '/model/layers.0/moe/QMoE' would not "
                "be offloaded by onnxruntime (--offload-mode required; re-export with --extra_options "
                "qmoe_weights_prepacked=1, or use --offload-mode auto): quant_type='int' offload requires (bits=4, "
                "weights_prepacked=1, block_size=32) for 4-bit experts; the node has ")
    assert err.startswith("q38 offload: error: ") and expected in err
    assert not (tmp_path / "out").exists()
    assert tree_digest(src) == before


def test_verify_graphs_bind_the_sequence_dim_and_run(tiny_builder_cpu_package: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    convert_package(tiny_builder_cpu_package, out, OffloadOptions(mode="auto"))
    base = onnx.load(out / "model.onnx", load_external_data=False)
    base_in = {v.name: _dims(v) for v in base.graph.input}
    assert base_in["position_ids"] == [3, "batch_size", "sequence_length"]
    decoder = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    for rows in (2, 3, 4):
        path = out / f"model_s{rows}.onnx"
        model = onnx.load(path, load_external_data=False)
        inputs = {v.name: _dims(v) for v in model.graph.input}
        outputs = {v.name: _dims(v) for v in model.graph.output}
        assert inputs["position_ids"] == [3, "batch_size", rows]
        assert inputs["input_ids"] == ["batch_size", rows]
        assert inputs["attention_mask"] == ["batch_size", "total_sequence_length"]
        assert outputs["logits"] == ["batch_size", rows, 512] and outputs["hidden_states"] == ["batch_size", rows, 256]
        assert {k: v for k, v in inputs.items() if k.startswith("past")} == {
            k: v for k, v in base_in.items() if k.startswith("past")}
        assert [n.name for n in model.graph.node] == [n.name for n in base.graph.node]
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = feeds_for(np.arange(3, 3 + rows)[None], 0, zero_state(sess))
        np.testing.assert_array_equal(sess.run(["logits"], feeds)[0], decoder.run(["logits"], feeds)[0])


def test_a_source_file_in_the_place_of_a_verify_graph_is_refused_by_name(tiny_builder_cpu_package: Path,
                                                                         editable_copy: Callable[[Path], Path],
                                                                         tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A ``model_s2.onnx`` the config does not name would be overwritten by the S=2 verify graph: refused naming it."""
    src = editable_copy(tiny_builder_cpu_package)
    (src / "model_s2.onnx").write_bytes((src / "model.onnx").read_bytes())
    before = tree_digest(src)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert messages_snapshot == str(info.value)
    assert not (tmp_path / "out").exists()
    assert tree_digest(src) == before


def test_a_decoder_with_a_verify_graphs_name_is_refused_not_replaced(tiny_builder_cpu_package: Path,
                                                                      editable_copy: Callable[[Path], Path],
                                                                      tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:  # fmt: skip
    """A decoder the config names ``model_s2.onnx`` would be replaced by the S=2 verify graph (two-row
    input_ids: a one-token decode no longer fits it): refused naming the graph, nothing written."""
    src = editable_copy(tiny_builder_cpu_package)
    (src / "model.onnx").rename(src / "model_s2.onnx")
    edit_genai_config(src, lambda d: d["model"]["decoder"].update({"filename": "model_s2.onnx"}))
    before = tree_digest(src)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert messages_snapshot == str(info.value)
    assert not (tmp_path / "out").exists()
    assert tree_digest(src) == before


def test_fp8_mtp_qmoe_is_refused_by_name_or_kept_resident(builder_prepacked_faithful: Path, tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    src = builder_prepacked_faithful
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "req", OffloadOptions(mode="required"))
    assert messages_snapshot == str(info.value)
    assert str(info.value).endswith("): unsupported quant_type='fp8' (expected 'nvfp4' or 'int')")  # the backend's reason: ORT's words
    assert not (tmp_path / "req").exists()
    report = convert_package(src, tmp_path / "auto", OffloadOptions(mode="auto", target_resident_slots=3))
    assert report.offloaded == [f"model.onnx:/model/layers.{i}/moe/QMoE" for i in range(8)]
    assert report.kept_resident == [("mtp.onnx:/model/layers.0/moe/QMoE",
                                     "unsupported quant_type='fp8' (expected 'nvfp4' or 'int')")]
    dec = parse_node_overrides(_entries(tmp_path / "auto", "decoder")[OFFLOAD_PREFIX + "node_overrides"])
    assert dec == {f"/model/layers.{i}/moe/QMoE": 3 for i in range(8)}
    assert OFFLOAD_PREFIX + "node_overrides" not in _entries(tmp_path / "auto", "mtp")
    assert main(["check", str(tmp_path / "auto")]) == 0


def test_profile_total_exact_over_decoder_and_mtp_sessions(builder_prepacked_faithful: Path, tmp_path: Path) -> None:
    """A profile of 8 decoder + 1 MTP rows; the FP8 MTP node stays on the GPU (all its selections
    hit), the 30 slots go to the decoder's offloaded nodes."""
    counts = np.random.default_rng(5).integers(0, 500, size=(9, 8)).astype(np.uint64)
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(counts)))
    out = tmp_path / "out"
    report = convert_package(builder_prepacked_faithful, out, OffloadOptions(
        mode="auto", expert_profile=str(profile), total_resident_slots=30))
    dec = parse_node_overrides(_entries(out, "decoder").get(OFFLOAD_PREFIX + "node_overrides", ""))
    assert sum(dec.values()) == 30 and len(dec) == 8  # the FP8 MTP is kept: all 30 on the decoder
    assert read_profile(out / "expert-profile.bin").counts.tolist() == counts[:8].tolist()
    assert read_profile(out / "mtp.expert-profile.bin").counts.tolist() == counts[8:].tolist()
    assert _entries(out, "mtp")[OFFLOAD_PREFIX + "popularity_file"] == "mtp.expert-profile.bin"
    assert _entries(out, "decoder")[OFFLOAD_PREFIX + "popularity_file"] == "expert-profile.bin"
    assert sum(report.resident_slots.values()) == 30
    (tier,) = report.hit_rates
    assert [h.state for h in tier.layers] == ["offloaded"] * 8 + ["kept"]
    assert tier.layers[-1].hits == tier.layers[-1].selections == int(counts[8].sum())
    assert main(["check", str(out)]) == 0


def test_a_builder_package_without_mtp_converts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = next(p for p in real_package_dirs() if p.name == "int4-cuda-prepacked")
    out = tmp_path / "out"
    assert main(["offload", str(out), "--from-package", str(src), "--target-resident-slots", "2"]) == 0
    text = capsys.readouterr().out
    assert "4 QMoE nodes offloaded, 0 kept resident" in text and "verify graphs none (no MTP draft)" in text
    assert "no model.mtp graph: no verify graphs (model_s2/s3/s4) written" in text
    assert not list(out.glob("model_s*.onnx"))
    entries = _entries(out, "decoder")
    assert entries[OFFLOAD_PREFIX + "mode"] == "required"
    assert parse_node_overrides(entries[OFFLOAD_PREFIX + "node_overrides"]) == {
        f"/model/layers.{i}/moe/QMoE": 2 for i in range(4)}
    cuda = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]["session_options"]["provider_options"]
    assert cuda == [{"cuda": {"enable_cuda_graph": "0", "arena_extend_strategy": "kSameAsRequested"}}]
    assert main(["check", str(out)]) == 0


@pytest.mark.parametrize("src", real_package_dirs(), ids=lambda p: p.name)
def test_real_exports_convert_or_are_refused_in_one_line(src: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_digest(src)
    out = tmp_path / "out"
    code = main(["offload", str(out), "--from-package", str(src), "--offload-mode", "auto"])
    assert tree_digest(src) == before
    decoder = read_genai_config(src / "genai_config.json").model.decoder.filename
    assert decoder is not None
    nodes = onnx.load(src / decoder, load_external_data=False).graph.node
    moe_only = not any(n.op_type == "QMoE" for n in nodes)
    if moe_only:
        assert code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no com.microsoft::QMoE node to offload" in err
        assert not out.exists()
        return
    assert code == 0
    assert main(["check", str(out)]) == 0
    assert bool(list(out.glob("model_s*.onnx"))) == (src / "mtp.onnx").is_file()


def test_an_unnamed_kept_mtp_node_counts_as_kept_in_the_hit_report(builder_prepacked_faithful: Path,
                                                                    editable_copy: Callable[[Path], Path],
                                                                    tmp_path: Path) -> None:
    """The FP8 MTP QMoE node without a name stays on the GPU: its hit-report row is ``kept`` under
    the empty name (every selection a hit), not an uncapped unknown."""
    src = editable_copy(builder_prepacked_faithful)

    def unname(model: onnx.ModelProto) -> None:
        next(n for n in model.graph.node if n.op_type == "QMoE").name = ""

    edit_graph(src / "mtp.onnx", unname)
    counts = np.random.default_rng(5).integers(0, 500, size=(9, 8)).astype(np.uint64)
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(counts)))
    report = convert_package(src, tmp_path / "out", OffloadOptions(
        mode="auto", expert_profile=str(profile), total_resident_slots=30))
    assert [n for n, _ in report.kept_resident] == ["mtp.onnx:"]
    (tier,) = report.hit_rates
    total = int(counts[8].sum())
    assert tier.layers[-1] == LayerHit("mtp.onnx", "", 8, "kept", total, 8, total)
    assert tier.uncapped == []
    assert tier.lines()[-1] == "  mtp.onnx:: 100.0%  resident 8  (kept)"


def test_a_session_package_without_its_own_planner_is_planned_per_session(
        builder_prepacked_faithful: Path, tmp_path: Path) -> None:
    from q38.offload import convert
    from q38.offload.eligibility import resolve_eligibility
    from q38.package import open_any

    options = OffloadOptions(mode="auto")
    want = convert.plan_offload(builder_prepacked_faithful, options, out=tmp_path / "out")
    # the planner's default, what a surface with no method of its own gets
    planner = convert._Planner(builder_prepacked_faithful, options, out=tmp_path / "out",
                               check=resolve_eligibility(None), profile=None)
    plan = planner.other(open_any(builder_prepacked_faithful))
    assert plan.package.root == builder_prepacked_faithful
    assert plan.report == want.report
    assert sorted(plan.blobs) == sorted(want.blobs)


def _route_weights_through_slot_14(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        if node.op_type == "QMoE":
            node.input.extend([""] * (14 - len(node.input)) + [node.input[1]])  # router_probs as router_weights


def test_genai_report_counts_cleared_router_weights_and_names_the_session_options_tier(
        builder_prepacked_faithful: Path, editable_copy: Callable[[Path], Path], tmp_path: Path) -> None:
    src = editable_copy(builder_prepacked_faithful)
    edit_graph(src / "model.onnx", _route_weights_through_slot_14)
    held = sum(n.op_type == "QMoE" for n in onnx.load(src / "model.onnx", load_external_data=False).graph.node)
    assert held > 0
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(np.ones((9, 8), dtype=np.uint64))))
    report = convert_package(src, tmp_path / "out", OffloadOptions(
        mode="auto", expert_profile=str(profile), total_resident_slots=30))
    assert report.router_weights_cleared == held
    assert f", {held} router_weights cleared, " in report.summary()[0]
    (tier,) = report.hit_rates
    assert tier.tier == "session_options"
    assert tier.lines()[0].startswith("expected hit rate [session_options]: ")


def _config_with_profiles(pkg: Path, profiles: list[dict[str, object]]) -> None:
    """Give the builder config at ``pkg`` these ``runtime_profiles`` (rewritten, never through a link)."""
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text())
    doc["runtime_profiles"] = profiles
    path.unlink()
    path.write_text(json.dumps(doc))


def test_runtime_profiles_overlaying_the_decoder_or_an_alternate_convert(tiny_builder_cpu_package: Path,
                                                                        editable_copy: Callable[[Path], Path],
                                                                        tmp_path: Path) -> None:
    """A builder config whose runtime profiles overlay the decoder's own file or an alternate decoder converts, profiles kept."""
    src = editable_copy(tiny_builder_cpu_package)
    onnx.save(onnx.load(src / "model.onnx", load_external_data=False), src / "model_alt.onnx")
    profiles: list[dict[str, object]] = [
        {"id": "same", "eligibility": {"minimum_total_device_memory_bytes": 0,
                                       "maximum_total_device_memory_bytes": (16 << 30) - 1},
         "overlay": {"model": {"decoder": {"filename": "model.onnx"}}}},
        {"id": "alt", "eligibility": {"minimum_total_device_memory_bytes": 16 << 30},
         "overlay": {"model": {"decoder": {"filename": "model_alt.onnx"}}}},
    ]  # fmt: skip
    _config_with_profiles(src, profiles)
    out = tmp_path / "out"
    report = convert_package(src, out, OffloadOptions(mode="auto"))
    assert json.loads((out / "genai_config.json").read_text())["runtime_profiles"] == profiles
    assert (out / "model_alt.onnx").is_file()
    alt = [n.name for n in onnx.load(out / "model_alt.onnx", load_external_data=False).graph.node if n.op_type == "QMoE"]
    assert alt == [f"/model/layers.{i}/moe/QMoE" for i in range(8)]
    assert report.graphs == {"s2": "model_s2.onnx", "s3": "model_s3.onnx", "s4": "model_s4.onnx"}


def test_offload_json_names_the_flat_layout_of_a_builder_package(tiny_builder_cpu_package: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``q38 offload --json`` of a builder package reports its one-directory layout as ``flat``."""
    out = tmp_path / "out"
    assert main(["offload", str(out), "--from-package", str(tiny_builder_cpu_package), "--offload-mode", "auto",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["layout"] == "flat" and doc["surface"] == "genai" and doc["out"] == str(out)


def _demote_qmoe(model: onnx.ModelProto) -> None:
    """Every QMoE node becomes a plain (unquantized-op) MoE node of the same name."""
    for node in model.graph.node:
        if node.op_type == "QMoE":
            node.op_type = "MoE"


def test_a_decoder_without_qmoe_converts_when_the_mtp_graph_holds_one(tiny_builder_cpu_package: Path,
                                                                       editable_copy: Callable[[Path], Path],
                                                                       tmp_path: Path) -> None:
    """Only the MTP graph holds QMoE: still something to offload, so the package converts with MTP offload options."""
    src = editable_copy(tiny_builder_cpu_package)
    edit_graph(src / "model.onnx", _demote_qmoe)
    out = tmp_path / "out"
    report = convert_package(src, out, OffloadOptions(mode="auto"))
    assert [n for n, _ in report.kept_resident if n.startswith("mtp.onnx:")] == ["mtp.onnx:/model/layers.0/moe/QMoE"]
    assert _entries(out, "mtp") == {OFFLOAD_PREFIX + "mode": "auto", OFFLOAD_PREFIX + "placement": "adaptive"}
    assert report.graphs == {"s2": "model_s2.onnx", "s3": "model_s3.onnx", "s4": "model_s4.onnx"}


def test_a_package_of_plain_moe_only_is_refused_naming_a_moe_node(tiny_builder_cpu_package: Path,
                                                                   editable_copy: Callable[[Path], Path],
                                                                   tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """No QMoE anywhere: refused naming the decoder file and the first plain MoE node ORT will not offload."""
    src = editable_copy(tiny_builder_cpu_package)
    edit_graph(src / "model.onnx", _demote_qmoe)
    edit_graph(src / "mtp.onnx", _demote_qmoe)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert messages_snapshot == str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_default_domain_qmoe_offload_node_is_refused_with_the_way_out(tiny_builder_cpu_package: Path,
                                                                         editable_copy: Callable[[Path], Path],
                                                                         tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """The old tool's operator in the default domain is refused naming file, node, ``ai.onnx`` and the ORT options to use."""
    src = editable_copy(tiny_builder_cpu_package)

    def legacy(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.op_type == "QMoE")
        node.op_type, node.domain = "QMoEOffload", ""

    edit_graph(src / "model.onnx", legacy)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert messages_snapshot == str(info.value)


def test_a_qmoe_node_without_a_static_expert_count_is_refused_by_name(tiny_builder_cpu_package: Path,
                                                                       editable_copy: Callable[[Path], Path],
                                                                       tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """FC1 weights fed by a graph input of symbolic expert dim: no site can be sized, refused naming graph and node."""
    src = editable_copy(tiny_builder_cpu_package)

    def symbolic_experts(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.op_type == "QMoE")
        init = next(t for t in model.graph.initializer if t.name == node.input[2])
        model.graph.input.append(onnx.helper.make_tensor_value_info(
            "fc1_experts_weights", init.data_type, ["num_experts", *init.dims[1:]]))
        node.input[2] = "fc1_experts_weights"

    edit_graph(src / "model.onnx", symbolic_experts)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert messages_snapshot == str(info.value)


def test_a_decoder_only_profile_leaves_the_mtp_graph_out(builder_prepacked_faithful: Path, tmp_path: Path) -> None:
    """The mtp.onnx node is a draft site whatever its name, so a profile of the 8 decoder layers alone matches."""
    counts = np.random.default_rng(3).integers(0, 500, size=(8, 8)).astype(np.uint64)
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(counts)))
    out = tmp_path / "out"
    report = convert_package(builder_prepacked_faithful, out, OffloadOptions(mode="auto", expert_profile=str(profile)))
    assert read_profile(out / "expert-profile.bin").counts.tolist() == counts.tolist()
    assert not (out / "mtp.expert-profile.bin").exists()
    assert _entries(out, "decoder")[OFFLOAD_PREFIX + "popularity_file"] == "expert-profile.bin"
    assert OFFLOAD_PREFIX + "popularity_file" not in _entries(out, "mtp")
    (tier,) = report.hit_rates
    assert [h.graph for h in tier.layers] == ["model.onnx"] * 8


def test_a_decoder_only_profile_with_a_total_slot_budget_converts_a_package_with_an_mtp_graph(
        builder_prepacked_faithful: Path, tmp_path: Path) -> None:  # fmt: skip
    """``--total-resident-slots`` with a profile of the decoder layers alone: the MTP session has no
    rows and no popularity file, and the conversion is not refused as if no profile were given
    (it was: "--total-resident-slots needs --expert-profile FILE")."""
    counts = np.random.default_rng(4).integers(0, 500, size=(8, 8)).astype(np.uint64)
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(counts)))
    out = tmp_path / "out"
    options = OffloadOptions(mode="auto", expert_profile=str(profile), total_resident_slots=16)
    convert_package(builder_prepacked_faithful, out, options)
    decoder, mtp = _entries(out, "decoder"), _entries(out, "mtp")
    assert decoder[OFFLOAD_PREFIX + "popularity_file"] == "expert-profile.bin"
    assert OFFLOAD_PREFIX + "popularity_file" not in mtp
    caps = [int(c) for c in re.findall(r"=(\d+)", decoder[OFFLOAD_PREFIX + "node_overrides"])]
    assert len(caps) == 8 and sum(caps) == 16  # the budget goes to the profiled decoder layers


def test_an_alternate_decoder_of_a_runtime_profile_is_converted_once(tiny_builder_cpu_package: Path,
                                                                     editable_copy: Callable[[Path], Path],
                                                                     tmp_path: Path) -> None:
    """A runtime profile's alternate decoder file is converted like the decoder (its router_weights
    cleared in the written copy), and a profile overlaying the decoder's own file is not converted
    a second time: the report counts each graph file's cleared inputs once."""
    src = editable_copy(tiny_builder_cpu_package)
    edit_graph(src / "model.onnx", _route_weights_through_slot_14)
    onnx.save(onnx.load(src / "model.onnx", load_external_data=False), src / "model_alt.onnx")
    held = sum(n.op_type == "QMoE" for n in onnx.load(src / "model.onnx", load_external_data=False).graph.node)
    _config_with_profiles(src, [
        {"id": "same", "eligibility": {"minimum_total_device_memory_bytes": 0,
                                       "maximum_total_device_memory_bytes": (16 << 30) - 1},
         "overlay": {"model": {"decoder": {"filename": "model.onnx"}}}},
        {"id": "alt", "eligibility": {"minimum_total_device_memory_bytes": 16 << 30},
         "overlay": {"model": {"decoder": {"filename": "model_alt.onnx"}}}},
    ])  # fmt: skip
    out = tmp_path / "out"
    report = convert_package(src, out, OffloadOptions(mode="auto"))
    assert report.router_weights_cleared == 2 * held
    for name in ("model.onnx", "model_alt.onnx"):
        qmoe = [n for n in onnx.load(out / name, load_external_data=False).graph.node if n.op_type == "QMoE"]
        assert len(qmoe) == held and all(len(n.input) <= 14 for n in qmoe), name


def test_a_package_with_no_moe_node_at_all_is_refused_naming_the_decoder(tiny_builder_cpu_package: Path,
                                                                          editable_copy: Callable[[Path], Path],
                                                                          tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """Neither QMoE nor plain MoE anywhere: the refusal names the decoder file alone, with no
    "such as" clause pointing at a MoE node that does not exist."""
    src = editable_copy(tiny_builder_cpu_package)

    def no_moe(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type == "QMoE":
                node.op_type = "DenseMlp"

    edit_graph(src / "model.onnx", no_moe)
    edit_graph(src / "mtp.onnx", no_moe)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert messages_snapshot == str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_profile_of_the_wrong_layer_count_is_refused_naming_the_profile_file(tiny_builder_cpu_package: Path,
                                                                               tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A profile that fits neither every QMoE node nor the decoder layers is refused naming the
    profile file the user gave (the one to fix), before anything is written."""
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(np.ones((5, 8), dtype=np.uint64))))
    with pytest.raises(ProfileError) as info:
        convert_package(tiny_builder_cpu_package, tmp_path / "out", OffloadOptions(
            mode="auto", expert_profile=str(profile), total_resident_slots=8))
    assert messages_snapshot == str(info.value)
    assert not (tmp_path / "out").exists()
