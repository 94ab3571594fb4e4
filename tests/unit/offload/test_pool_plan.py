"""The offload plan of a v12b package (``q38.offload.pool_plan``), seen through ``convert_package``.

Invariants guarded:
- files the conversion does not regenerate are carried over: a source's expert profile when no
  new one is given, and a flat package's own ``head/`` folder;
- the hit-rate report names the base tier ``decoder`` and then each runtime profile;
- a QMoE node without a name that stays resident is reported under its (empty) name;
- a target without an MTP draft that protobuf cannot hold is refused naming ``model.onnx``;
- each tier's hit rates use the resident-slot caps its own options carry; a kept node (named or
  not) has every expert resident;
- each graph's QMoE candidates are checked once: model_s2 is the target's own nodes, only the
  chained drafts of model_s3/s4 are checked again;
- the profiles' minimum host memory counts the bytes the decoder maps: a zero-byte external
  tensor adds none;
- a profile without a slot flag caps nothing: every tier's hit report lists each layer uncapped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from support.offload_synthpkg import drop_mtp_draft, edit_graph

from q38.errors import OffloadError
from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions
from q38.package import encode_profile, open_package
from q38.package.profile import ExpertProfile

SPARSE_NODE = "/model/layers.3/moe/QMoE"
SPARSE_REASON = "use_sparse_mixer=1 is not supported by the QMoE offload backend"


def _profile(tmp_path: Path) -> Path:
    """An expert profile of the tiny package's 8 decoder layers (8 experts each)."""
    counts = np.random.default_rng(5).integers(0, 1000, size=(8, 8)).astype(np.uint64)
    path = tmp_path / "profile.strp"
    path.write_bytes(encode_profile(ExpertProfile(counts)))
    return path


def test_reconverting_without_a_profile_keeps_the_sources_expert_profile(tiny_cpu_package: Path,
                                                                         tmp_path: Path) -> None:
    """A package converted with a profile, converted again without one, still ships the profile its
    config names (the file is copied, not dropped as if regenerated)."""
    profile = _profile(tmp_path)
    first = tmp_path / "first"
    convert_package(tiny_cpu_package, first, OffloadOptions(mode="auto", expert_profile=str(profile),
                                                            total_resident_slots=16))
    second = tmp_path / "second"
    convert_package(first, second, OffloadOptions(mode="auto"))
    assert open_package(second).config.model.qwen38_graph.expert_profile == "expert-profile.bin"
    assert (second / "expert-profile.bin").read_bytes() == profile.read_bytes()


def test_a_flat_packages_head_folder_is_copied(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                               tmp_path: Path) -> None:
    """Only a layered package's head/ is the head graph's directory: a flat package's own head/
    folder is an ordinary source file tree and is carried over unchanged."""
    src = editable_copy(tiny_cpu_package)
    (src / "head").mkdir()
    (src / "head" / "notes.txt").write_text("kept\n")
    out = tmp_path / "out"
    convert_package(src, out, OffloadOptions(mode="auto"))
    assert (out / "head" / "notes.txt").read_text() == "kept\n"


def test_hit_rates_name_the_decoder_tier_then_each_runtime_profile(tiny_cpu_package: Path, tmp_path: Path) -> None:
    """With a profile, one hit-rate report per tier: the base options are the ``decoder`` tier (the
    name the summary prints, grouped with the profiles of the same outcome), then the profiles by id."""
    report = convert_package(tiny_cpu_package, tmp_path / "out", OffloadOptions(
        mode="auto", expert_profile=str(_profile(tmp_path)), total_resident_slots=16))
    assert [h.tier for h in report.hit_rates] == [
        "decoder", "20gib-to-24gib", "24gib-to-28gib", "28gib-to-32gib", "32gib-to-34gib"
    ]
    assert any(line.startswith("  expected hit rate [decoder, 20gib-to-24gib, ") for line in report.summary())


def _unnamed_sparse_mixer(model: onnx.ModelProto) -> None:
    """One QMoE node becomes ineligible for offload (sparse mixer) and loses its name."""
    node = next(n for n in model.graph.node if n.name == SPARSE_NODE)
    next(a for a in node.attribute if a.name == "use_sparse_mixer").i = 1
    node.name = ""


def test_an_unnamed_node_kept_resident_is_reported_by_its_empty_name(tiny_cpu_package: Path,
                                                                     editable_copy: Callable[[Path], Path],
                                                                     tmp_path: Path) -> None:
    """``--offload-mode auto`` keeps an ineligible QMoE node on the GPU; a node without a name is
    reported as "" (the name the graph gives it), never an invented one."""
    src = editable_copy(tiny_cpu_package)

    edit_graph(src / "model.onnx", _unnamed_sparse_mixer)
    report = convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert report.kept_resident == [("", SPARSE_REASON)]


def test_a_target_without_draft_too_big_for_protobuf_is_refused_naming_it(
    tiny_cpu_package: Path, editable_copy: Callable[[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an MTP draft the target itself is written; past protobuf's 2 GiB the refusal names
    model.onnx. (The limit is simulated: a 2 GiB graph is too large to build in a unit test.)"""
    src = editable_copy(tiny_cpu_package)

    edit_graph(src / "model.onnx", drop_mtp_draft)

    def too_big(model: ir.Model) -> object:
        raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB: 2147483700")

    monkeypatch.setattr(ir.serde, "serialize_model", too_big)
    with pytest.raises(OffloadError) as info:
        convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert str(info.value).startswith("model.onnx: the graph does not fit in one protobuf (2 GiB): ")
    assert not (tmp_path / "out").exists()


def test_hit_rates_read_each_tiers_resident_slot_caps(tiny_cpu_package: Path, tmp_path: Path) -> None:
    """The expected hit rate of a tier is computed from the caps its options carry: every decoder
    layer is reported offloaded with its planned resident slots, none as uncapped."""
    report = convert_package(tiny_cpu_package, tmp_path / "out", OffloadOptions(
        mode="auto", expert_profile=str(_profile(tmp_path)), total_resident_slots=16))
    for tier in report.hit_rates:
        assert tier.uncapped == [], tier.tier
        assert [(h.node, h.state, h.resident) for h in tier.layers] == [
            (f"/model/layers.{i}/moe/QMoE", "offloaded", report.resident_slots[f"/model/layers.{i}/moe/QMoE"])
            for i in range(8)
        ], tier.tier
        assert 0 < tier.hits < tier.selections


def test_an_unnamed_node_kept_resident_has_every_expert_hit(tiny_cpu_package: Path,
                                                            editable_copy: Callable[[Path], Path],
                                                            tmp_path: Path) -> None:
    """A node kept on the GPU has all its experts resident, so its hit rate is 100%, also when the
    graph gives it no name (it is matched by its empty name, never left uncapped)."""
    src = editable_copy(tiny_cpu_package)

    edit_graph(src / "model.onnx", _unnamed_sparse_mixer)
    report = convert_package(src, tmp_path / "out", OffloadOptions(
        mode="auto", expert_profile=str(_profile(tmp_path)), target_resident_slots=2))
    decoder = report.hit_rates[0]
    row = next(h for h in decoder.layers if h.node == "")
    assert (row.row, row.state, row.resident, row.hits) == (3, "kept", 8, row.selections)
    assert decoder.uncapped == []


def test_the_s2_graph_is_not_checked_again_only_the_chained_drafts(tiny_cpu_package: Path, tmp_path: Path) -> None:
    """model_s2.onnx holds the target's own QMoE nodes (checked once, before the verify graphs are
    built); only model_s3/s4, whose chained drafts are new candidates, are checked again, then the
    prefill graph: each graph's candidates are checked exactly once."""
    from q38.offload.eligibility import Verdict, contracts_eligibility

    checked: list[int] = []

    def counting(model: ir.Model, mode: str) -> list[Verdict]:
        checked.append(sum(1 for n in model.graph if n.op_type == "QMoE"))
        return contracts_eligibility(model, mode)

    convert_package(tiny_cpu_package, tmp_path / "out", OffloadOptions(mode="required"), eligibility=counting)
    assert checked == [9, 10, 11, 8]  # target (8 layers + /mtp/0/), s3, s4, prefill


def test_an_empty_external_tensor_adds_no_host_memory(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                                      tmp_path: Path) -> None:
    """The runtime profiles' minimum host memory is the bytes the decoder maps: an external tensor
    of zero bytes (length 0, at the end of the data file) maps none and leaves it unchanged."""
    src = editable_copy(tiny_cpu_package)
    size = (src / "model.onnx.data").stat().st_size

    def empty_external(model: onnx.ModelProto) -> None:
        tensor = onnx.TensorProto(name="empty.external", data_type=onnx.TensorProto.FLOAT, dims=[0])
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", "model.onnx.data"), ("offset", str(size)), ("length", "0")):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        model.graph.initializer.append(tensor)

    def min_host(out: Path) -> set[int | None]:
        return {p.eligibility.minimum_effective_host_memory_bytes for p in open_package(out).config.runtime_profiles}

    convert_package(tiny_cpu_package, tmp_path / "plain", OffloadOptions(mode="auto"))
    edit_graph(src / "model.onnx", empty_external)
    convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert any(t.name == "empty.external" for t in onnx.load(tmp_path / "out" / "model_s4.onnx",
                                                              load_external_data=False).graph.initializer)
    assert min_host(tmp_path / "out") == min_host(tmp_path / "plain")
    assert len(min_host(tmp_path / "plain")) == 1


def test_an_external_tensor_without_a_length_counts_its_bytes_in_host_memory(
        tiny_cpu_package: Path, editable_copy: Callable[[Path], Path], tmp_path: Path) -> None:  # fmt: skip
    """A reference without a ``length`` occupies what its dtype and shape need (ORT and the loader
    read it so): removing the field from one weight leaves the profiles' minimum host memory as it
    was (it once dropped by exactly that tensor's bytes, so a host could be judged big enough when
    it was not)."""
    src = editable_copy(tiny_cpu_package)
    model = onnx.load(src / "model.onnx", load_external_data=False)
    weight = next(t for t in model.graph.initializer
                  if t.data_location == onnx.TensorProto.EXTERNAL and any(e.key == "length" and int(e.value) > 0
                                                                           for e in t.external_data))  # fmt: skip

    def drop_length(m: onnx.ModelProto) -> None:
        tensor = next(t for t in m.graph.initializer if t.name == weight.name)
        kept = [e for e in tensor.external_data if e.key != "length"]
        del tensor.external_data[:]
        tensor.external_data.extend(kept)

    def min_host(out: Path) -> set[int | None]:
        return {p.eligibility.minimum_effective_host_memory_bytes for p in open_package(out).config.runtime_profiles}

    convert_package(tiny_cpu_package, tmp_path / "plain", OffloadOptions(mode="auto"))
    edit_graph(src / "model.onnx", drop_length)
    convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    assert min_host(tmp_path / "out") == min_host(tmp_path / "plain")


def test_hit_rates_with_a_profile_and_no_slot_flag_report_every_node_uncapped(tiny_cpu_package: Path,
                                                                              tmp_path: Path) -> None:
    """A profile without a slot flag caps nothing (no ``node_overrides`` emitted): each tier's hit
    report still comes back, every offloaded layer uncapped (ORT sizes residency), none invented."""
    report = convert_package(tiny_cpu_package, tmp_path / "out", OffloadOptions(
        mode="auto", expert_profile=str(_profile(tmp_path))))
    assert report.resident_slots == {}
    assert report.hit_rates[0].tier == "decoder" and len(report.hit_rates) == 5
    for tier in report.hit_rates:
        assert tier.uncapped == [f"/model/layers.{i}/moe/QMoE" for i in range(8)], tier.tier
        assert {h.state for h in tier.layers} == {"uncapped"}, tier.tier
