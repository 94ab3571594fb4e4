"""Defects of ``q38 offload`` on v12b packages (issues 16 and 17), each a test that fails on the
code that had it.

Invariants guarded:
- MRoPE ``position_ids [3, B, S]`` stays ``[3, B, S]`` in every verify graph (was ``[3, S, S]``:
  dim 1 was always set), and every graph input / output bound to the sequence symbol gets S;
- one inline 16 KiB initializer converts (was ``internal error``, exit 70) and stays inline;
- a target with no MTP draft converts: no verify graphs, profiles select model.onnx, said so;
- with a profile and ``--total-resident-slots N`` the caps of every emitted graph (s2, s3, s4,
  model.onnx), of every runtime-profile overlay and of the manifest sum to exactly N (chained
  drafts used to inherit ``/mtp/0/``'s cap: N + 2 caps in model_s4);
- a QMoEOffload node in the head or the prefill graph is refused, naming that graph;
- ``required`` checks the prefill graph and the chained drafts, naming the graph;
- reconverting an offload package writes every graph fresh (no hard link to the source, one
  link each) and never hard-links data files to the source;
- ``router_weights_cleared`` (top level and ``rewrites``) is the count of slot-14 inputs the
  source graphs hold, and the emitted graphs hold none.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from support.offload_synthpkg import tree_digest

from q38.errors import OffloadError
from q38.offload.convert import convert_package
from q38.offload.eligibility import contracts_eligibility
from q38.offload.options import OFFLOAD_PREFIX, OffloadOptions, parse_node_overrides
from q38.package import encode_profile, open_package
from q38.package.profile import ExpertProfile

S_GRAPHS = ("model_s2.onnx", "model_s3.onnx", "model_s4.onnx")


def _dims(value: onnx.ValueInfoProto) -> list[object]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def _edit(path: Path, edit: Callable[[onnx.ModelProto], None]) -> None:
    model = onnx.load(path, load_external_data=False)
    edit(model)
    onnx.save(model, path)


def _nothing_written(out: Path) -> bool:
    return not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


def test_mrope_position_ids_keep_their_layout(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                              tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)

    def mrope(model: onnx.ModelProto) -> None:
        pos = next(v for v in model.graph.input if v.name == "position_ids")
        dims = pos.type.tensor_type.shape.dim
        dims.insert(0, onnx.TensorShapeProto.Dimension(dim_value=3))

    _edit(src / "model.onnx", mrope)
    convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    for rows, name in zip((2, 3, 4), S_GRAPHS):
        model = onnx.load(tmp_path / "out" / name, load_external_data=False)
        inputs = {v.name: _dims(v) for v in model.graph.input}
        outputs = {v.name: _dims(v) for v in model.graph.output}
        assert inputs["position_ids"] == [3, "batch_size", rows]
        assert inputs["input_ids"] == ["batch_size", rows]
        assert inputs["attention_mask"] == ["batch_size", "total_sequence_length"]
        assert outputs["logits"] == ["batch_size", rows, 512]
        assert [outputs[f"mtp.{j}.logits"] for j in range(rows - 1)] == [["batch_size", rows, 512]] * (rows - 1)
        assert inputs["past.0.conv"] == ["batch_size", 128, 3]  # state shapes untouched


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

    _edit(src / "model.onnx", inline)
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

    def drop_mtp(model: onnx.ModelProto) -> None:
        keep = [n for n in model.graph.node if not n.name.startswith("/mtp/")]
        del model.graph.node[:]
        model.graph.node.extend(keep)
        outs = [o for o in model.graph.output if not o.name.startswith("mtp.")]
        del model.graph.output[:]
        model.graph.output.extend(outs)

    _edit(src / "model.onnx", drop_mtp)
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


def _caps_of_graph(entries: dict[str, str], graph: Path) -> dict[str, int]:
    caps = parse_node_overrides(entries.get(OFFLOAD_PREFIX + "node_overrides", ""))
    nodes = [n.name for n in onnx.load(graph, load_external_data=False).graph.node if n.op_type == "QMoE"]
    return {n: caps[n] for n in nodes if n in caps}


@pytest.mark.parametrize(("rows", "total", "floor"), [(9, 40, 0), (8, 21, 1)])
def test_slot_totals_exact_in_every_graph_and_the_manifest(tiny_cpu_package: Path, tmp_path: Path, rows: int,
                                                           total: int, floor: int) -> None:
    counts = np.random.default_rng(rows).integers(0, 1000, size=(rows, 8)).astype(np.uint64)
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(counts)))
    out = tmp_path / "out"
    convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto", expert_profile=str(profile),
                                                          total_resident_slots=total, min_slots_per_layer=floor))
    cfg = open_package(out).config
    tiers = [cfg.model.decoder.session_options.config_entries]
    tiers += [p.overlay.session_options.config_entries for p in cfg.runtime_profiles if p.overlay.session_options]
    assert len(tiers) == 5
    for entries in tiers:
        for graph in (*S_GRAPHS, "model.onnx"):
            caps = _caps_of_graph(entries, out / graph)
            assert sum(caps.values()) == total, (graph, caps)
            assert all(c >= floor for n, c in caps.items() if n.startswith("/model/"))
    manifest = json.loads((out / "package_manifest.json").read_text())
    assert sum(manifest["resident_slots"].values()) == total
    s4 = _caps_of_graph(tiers[0], out / "model_s4.onnx")
    if rows == 9:  # the profile covers the draft: the chained copies share its bank, 0 slots of their own
        assert s4["/mtp/0/moe/QMoE"] >= 0 and s4["/mtp/1/moe/QMoE"] == s4["/mtp/2/moe/QMoE"] == 0
    else:  # a profile of the decoder layers only: the draft nodes are left uncapped, and said so
        assert not [n for n in s4 if n.startswith("/mtp/")]
        assert "no profile row (uncapped): model.onnx:/mtp/0/moe/QMoE" in manifest["notes"]


def _rename_first(op: str, to: str) -> Callable[[onnx.ModelProto], None]:
    def edit(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.op_type == op)
        node.op_type, node.domain = to, "com.microsoft"

    return edit


@pytest.mark.parametrize(("graph", "op"), [("head_r2.onnx", "HyperConnectionPreMix"), ("prefill.onnx", "QMoE")])
def test_qmoe_offload_in_head_or_prefill_refused(graph: str, op: str, tiny_cpu_package: Path,
                                                 editable_copy: Callable[[Path], Path], tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)
    _edit(src / graph, _rename_first(op, "QMoEOffload"))
    before = tree_digest(src)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert str(info.value).startswith(f"{src / graph}: node ")
    assert "is a com.microsoft::QMoEOffload node of the old offload tool" in str(info.value)
    assert _nothing_written(tmp_path / "out")
    assert tree_digest(src) == before


def test_required_checks_the_prefill_graph(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                           tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)

    def sparse_mixer(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.name == "/model/layers.5/moe/QMoE")
        next(a for a in node.attribute if a.name == "use_sparse_mixer").i = 1

    _edit(src / "prefill.onnx", sparse_mixer)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="required"))
    assert str(info.value) == (
        f"{src / 'prefill.onnx'}: QMoE node '/model/layers.5/moe/QMoE' would not be offloaded by onnxruntime "
        "(--offload-mode required; --offload-mode auto keeps it on the GPU): use_sparse_mixer=1 is not supported "
        "by the QMoE offload backend"
    )
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


def _slot14(path: Path) -> int:
    nodes = onnx.load(path, load_external_data=False).graph.node
    return sum(1 for n in nodes if n.op_type == "QMoE" and len(n.input) > 14 and n.input[14])


def test_router_weights_cleared_is_what_the_source_held(tiny_cpu_package: Path, tmp_path: Path) -> None:
    held = _slot14(tiny_cpu_package / "model.onnx") + _slot14(tiny_cpu_package / "prefill.onnx")
    assert held > 0
    out = tmp_path / "out"
    report = convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto"))
    manifest = json.loads((out / "package_manifest.json").read_text())
    assert report.router_weights_cleared == manifest["router_weights_cleared"] == held
    assert manifest["rewrites"]["router_weights_cleared"] == held
    assert manifest["rewrites"]["multidraft_graphs"] == 3
    for graph in (*S_GRAPHS, "model.onnx", "prefill.onnx"):
        assert _slot14(out / graph) == 0
    assert os.stat(out / "model.onnx").st_ino != os.stat(out / "model_s4.onnx").st_ino


def _copies(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Record (size, digest) of every copy the placement makes (digest: read through a buffer)."""
    import q38.package.links as links

    calls: list[tuple[int, bool]] = []
    real = links.copy_fd

    def spy(src: int, dst: int, size: int, *, digest: bool, **kw: object) -> object:
        calls.append((size, digest))
        return real(src, dst, size, digest=digest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(links, "copy_fd", spy)
    return calls


def test_copies_reuse_the_source_digests_and_read_no_weight_byte(tiny_cpu_package: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The source manifest vouches for its files (a digest, and the file not modified after the
    manifest was written): their copies move by the kernel's copy path, never through a hashing
    buffer, and keep the source's digest. (Synth's records carry no identity and were never
    trusted: offload read and hashed every weight byte, its memory growing with the data file up
    to the 32 MiB copy ring.)"""
    from q38.package import LinkPolicy

    calls = _copies(monkeypatch)
    out = tmp_path / "out"
    convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto"), link=LinkPolicy.COPY)
    data = (tiny_cpu_package / "model.onnx.data").stat().st_size
    assert (data, False) in calls and not [c for c in calls if c[1]]
    src = json.loads((tiny_cpu_package / "package_manifest.json").read_text())["files"]
    got = json.loads((out / "package_manifest.json").read_text())["files"]
    assert got["model.onnx.data"]["link_mode"] == "copy"
    assert got["model.onnx.data"]["sha256"] == src["model.onnx.data"]["sha256"]
    # What offload writes carries its identity too: the next command reuses those digests.
    for name in (*S_GRAPHS, "model.onnx", "mtp_experts.aligned.data"):
        if name in got:
            assert got[name]["identity"]["size"] == (out / name).stat().st_size, name


def test_a_data_file_rewritten_since_its_manifest_is_hashed_again(tiny_cpu_package: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from q38.package import LinkPolicy, Manifest, dumps_manifest, read_manifest, written_record

    src = tmp_path / "src"
    shutil.copytree(tiny_cpu_package, src, symlinks=True)
    manifest = read_manifest(src / "package_manifest.json")
    files = {rel: written_record(src / rel) for rel in manifest.files}
    (src / "package_manifest.json").write_text(dumps_manifest(Manifest(command="synth", files=files)))
    data = src / "model.onnx.data"
    with open(data, "r+b") as fh:  # one byte changed in place: same inode, same size
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    calls = _copies(monkeypatch)
    out = tmp_path / "out"
    convert_package(src, out, OffloadOptions(mode="auto"), link=LinkPolicy.COPY)
    # the stale digest is not carried over: the copy is recorded by its identity alone
    assert (st.st_size, False) in calls
    rec = json.loads((out / "package_manifest.json").read_text())["files"]["model.onnx.data"]
    assert "sha256" not in rec and rec["identity"]["size"] == st.st_size
    calls.clear()
    convert_package(src, tmp_path / "digested", OffloadOptions(mode="auto"), link=LinkPolicy.COPY, digest=True)
    assert (st.st_size, True) in calls  # --digest: hashed in the copy pass, not trusted
    got = json.loads((tmp_path / "digested" / "package_manifest.json").read_text())["files"]["model.onnx.data"]["sha256"]
    assert got == hashlib.sha256(data.read_bytes()).hexdigest() != files["model.onnx.data"].sha256
