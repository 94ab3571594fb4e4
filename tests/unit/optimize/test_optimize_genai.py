"""``q38 optimize`` on packages the onnxruntime-genai builder wrote (genai surface).

Invariants guarded:
* every builder package (committed fixtures, ``Q38_REAL_EXPORTS``, the genai packages of
  ``q38 synth --exporter builder`` and of ``q38 export-genai``) optimizes with exit 0; the output
  passes ``q38 check``; the source is byte-identical afterwards;
* the output has the same graph files, every non-graph file byte-identical (tokenizer, data,
  config), each rewritten graph loads, and new tensors live in ``<stem>.opt.data`` only;
* no weights pool or manifest appears in a builder package;
* greedy generation with onnxruntime-genai is identical before and after ``--target cpu``;
* a shared-initializer entry a rewrite broke is dropped from every list that names it (and the
  config is then rewritten); entries left intact are kept byte for byte;
* a runtime profile naming the decoder's own file is not optimized twice, and a graph file a
  later profile names is still optimized and written.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from support.fsnap import tree_snapshot
from support.genai_packages import (
    builder_packages,
    copy_package,
    edit_genai_config,
    real_package_dirs,
)
from syrupy.assertion import SnapshotAssertion

from q38.cli import main
from q38.package.genai.package import open_genai_package
from q38.package.graphs import load_graph

REAL = real_package_dirs()


@pytest.fixture(scope="module")
def packages(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return builder_packages(tmp_path_factory.mktemp("genai"), tiny_cpu_package)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_every_builder_package_optimizes_and_the_output_passes_check(packages: list[Path], tmp_path: Path) -> None:
    for i, src in enumerate(packages):
        before = tree_snapshot(src)
        out = tmp_path / f"out{i}"
        assert main(["optimize", str(src), str(out)]) == 0, src
        assert tree_snapshot(src) == before, f"{src} was modified"
        assert main(["check", str(out)]) == 0, out
        graphs = {r.rel for r in open_genai_package(src).graphs()}
        assert {p.name for p in out.glob("*.onnx")} == {p.name for p in src.glob("*.onnx")}
        for path in src.rglob("*"):
            rel = path.relative_to(src).as_posix()
            if path.is_file() and rel not in graphs:
                assert _digest(out / rel) == _digest(path), f"{rel} changed"
        extra = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {
            p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()
        }
        assert all(name.endswith(".opt.data") for name in extra), extra
        assert not (out / "weights_pool.txt").exists() and not (out / "package_manifest.json").exists()
        for rel in graphs:
            load_graph(out / rel, root=out)


def test_cpu_optimize_keeps_the_greedy_tokens(packages: list[Path], tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime_genai")
    from q38.export_genai import generate_tokens
    from q38.package.genai.config import OG_MODEL_TYPES

    runnable = [p for p in packages if open_genai_package(p).config.model.type in OG_MODEL_TYPES
                and not open_genai_package(p).config.model.decoder.shared_initializers
                and not open_genai_package(p).config.model.decoder.session_options.providers]  # fmt: skip
    assert runnable
    for i, src in enumerate(runnable):
        out = tmp_path / f"cpu{i}"
        assert main(["optimize", str(src), str(out), "--target", "cpu"]) == 0
        assert generate_tokens(out, [1, 5, 9, 17], 8) == generate_tokens(src, [1, 5, 9, 17], 8), src


def test_a_shared_initializer_a_rewrite_broke_is_dropped_from_every_list(tmp_path: Path) -> None:
    """The reconciliation on its own: the decoder loses a shared tensor, both entries go."""
    from q38.optimize.driver import _reconciled_config

    mtp_pkgs = [p for p in REAL if (p / "mtp.onnx").is_file()]
    assert mtp_pkgs, "the int4 cpu + MTP fixture is committed"
    pkg = open_genai_package(mtp_pkgs[0])
    models = {r.role: load_graph(r.path, root=pkg.root) for r in pkg.graphs()}
    kept, dropped = _reconciled_config(pkg, models, pkg.root)
    assert dropped == [] and kept is pkg.config
    victim = pkg.config.model.decoder.shared_initializers[0].name
    models["decoder"].graph.initializers.pop(victim)
    cfg, dropped = _reconciled_config(pkg, models, pkg.root)
    assert dropped == [victim]
    assert victim not in {e.name for e in cfg.model.decoder.shared_initializers}
    assert cfg.model.mtp is not None and victim not in {e.name for e in cfg.model.mtp.shared_initializers}
    assert len(cfg.model.decoder.shared_initializers) == len(pkg.config.model.decoder.shared_initializers) - 1


def test_a_pass_subset_reaches_builder_packages_and_a_second_run_writes_a_new_data_file(tmp_path: Path) -> None:
    """`--pass` / `--skip` select the passes on the genai surface too, and optimizing an optimized
    package again keeps its `model.opt.data` (placed as is) and writes the new tensors to
    `model.opt1.data`."""
    from q38.optimize.driver import optimize_package

    src = next(p for p in REAL if p.name == "fp16-cuda-gdn")
    once, _ = optimize_package(src, tmp_path / "once", passes=["fp8_head"])
    assert {k: v for k, v in once.rewrites.items() if v} == {"fp8_head": 1}
    skipped, _ = optimize_package(src, tmp_path / "skipped", skip=("fp8_head",))
    assert {k: v for k, v in skipped.rewrites.items() if v} == {"shared_expert": 4}
    twice, _ = optimize_package(tmp_path / "once", tmp_path / "twice", passes=["shared_expert"])
    assert {k: v for k, v in twice.rewrites.items() if v} == {"shared_expert": 4}
    assert sorted(p.name for p in (tmp_path / "twice").glob("*.opt*.data")) == ["model.opt.data", "model.opt1.data"]
    assert _digest(tmp_path / "twice" / "model.opt.data") == _digest(tmp_path / "once" / "model.opt.data")
    model = load_graph(tmp_path / "twice" / "model.onnx", root=tmp_path / "twice")
    fused = [n for n in model.graph if n.op_type == "MatMulBlockQuantizedFp8Weight"]
    assert len(fused) == 1


@pytest.mark.parametrize("empty", ["mtp", "decoder"])
def test_a_graph_section_without_shared_initializers_keeps_an_empty_list(empty: str, tmp_path: Path) -> None:
    """One graph section lists no shared tensors, the other loses one of its own (its graph no longer
    has it): the entry is dropped there, and the section that listed none stays an empty tuple (the
    deterministic writer's empty list), never None."""
    import dataclasses

    from q38.optimize.driver import _reconciled_config
    from q38.package.genai.config import dumps_genai_config

    src = next(p for p in REAL if (p / "mtp.onnx").is_file())
    pkg = open_genai_package(src)
    m = pkg.config.model
    assert m.mtp is not None
    lister = "decoder" if empty == "mtp" else "mtp"
    emptied = {empty: dataclasses.replace(getattr(m, empty), shared_initializers=())}
    lone = dataclasses.replace(pkg, config=dataclasses.replace(pkg.config, model=dataclasses.replace(m, **emptied)))
    models = {r.role: load_graph(r.path, root=pkg.root) for r in pkg.graphs()}
    victim = getattr(m, lister).shared_initializers[0].name
    models[lister].graph.initializers.pop(victim)
    cfg, dropped = _reconciled_config(lone, models, pkg.root)
    assert dropped == [victim]
    section = getattr(cfg.model, empty)
    assert section is not None and section.shared_initializers == ()
    assert [e.name for e in getattr(cfg.model, lister).shared_initializers] == [
        e.name for e in getattr(m, lister).shared_initializers if e.name != victim]
    assert cfg.model.engram is None
    dumps_genai_config(cfg)  # writable as it is


def test_an_engram_section_keeps_its_intact_shared_initializers(tmp_path: Path) -> None:
    """A config with an engram section listing the same shared tensors: the decoder loses one, and
    that entry is dropped from every list, the engram's included; the engram's other entries are
    kept, in the written config too."""
    import dataclasses
    import json

    from q38.optimize.driver import _reconciled_config
    from q38.package.genai.config import GenaiEngram, dumps_genai_config

    src = next(p for p in REAL if (p / "mtp.onnx").is_file())
    pkg = open_genai_package(src)
    m = pkg.config.model
    assert m.mtp is not None
    engram = GenaiEngram(filename="engram.onnx", shared_initializers=m.mtp.shared_initializers)
    with_engram = dataclasses.replace(pkg, config=dataclasses.replace(pkg.config, model=dataclasses.replace(
        m, engram=engram)))
    models = {r.role: load_graph(r.path, root=pkg.root) for r in pkg.graphs()}
    victim = m.decoder.shared_initializers[0].name
    models["decoder"].graph.initializers.pop(victim)
    cfg, dropped = _reconciled_config(with_engram, models, pkg.root)
    assert dropped == [victim]
    kept = [e.name for e in m.mtp.shared_initializers if e.name != victim]
    assert kept and cfg.model.engram is not None
    assert [e.name for e in cfg.model.engram.shared_initializers] == kept
    written = json.loads(dumps_genai_config(cfg))["model"]
    assert [e["name"] for e in written["engram"]["shared_initializers"]] == kept
    assert [e["name"] for e in written["decoder"]["shared_initializers"]] == kept


def test_a_config_without_an_mtp_section_is_reconciled_without_one(tmp_path: Path) -> None:
    """A decoder-only config (no ``model.mtp``) whose decoder loses a shared tensor: the entry is
    dropped and the config keeps no MTP section (none is invented), and it is still writable."""
    import dataclasses

    from q38.optimize.driver import _reconciled_config
    from q38.package.genai.config import dumps_genai_config

    src = next(p for p in REAL if (p / "mtp.onnx").is_file())
    pkg = open_genai_package(src)
    m = pkg.config.model
    alone = dataclasses.replace(pkg, config=dataclasses.replace(pkg.config, model=dataclasses.replace(m, mtp=None)))
    models = {r.role: load_graph(r.path, root=pkg.root) for r in pkg.graphs() if r.role == "decoder"}
    victim = m.decoder.shared_initializers[0].name
    models["decoder"].graph.initializers.pop(victim)
    cfg, dropped = _reconciled_config(alone, models, pkg.root)
    assert dropped == [victim]
    assert cfg.model.mtp is None and cfg.model.engram is None
    assert [e.name for e in cfg.model.decoder.shared_initializers] == [
        e.name for e in m.decoder.shared_initializers if e.name != victim]
    dumps_genai_config(cfg)


def test_every_runtime_profile_graph_after_one_naming_the_decoder_is_optimized(tmp_path: Path) -> None:
    """Runtime profiles overlaying the decoder: the first names the decoder's own file (already
    written: skipped), a later one another graph file -- that one is still optimized and written,
    with its own new data file, and counted in the rewrites."""
    from q38.optimize.driver import optimize_package

    src = copy_package(next(p for p in REAL if p.name == "fp16-cuda-gdn"), tmp_path / "src")
    shutil.copyfile(src / "model.onnx", src / "small.onnx")  # reads the decoder's model.onnx.data
    edit_genai_config(src, lambda d: d.update({"runtime_profiles": [
        {"id": "same", "eligibility": {"minimum_total_device_memory_bytes": 1001},
         "overlay": {"model": {"decoder": {"filename": "model.onnx"}}}},
        {"id": "small", "eligibility": {"minimum_total_device_memory_bytes": 1, "maximum_total_device_memory_bytes": 1000},
         "overlay": {"model": {"decoder": {"filename": "small.onnx"}}}},
    ]}))
    assert [r.rel for r in open_genai_package(src).graphs()] == ["model.onnx", "model.onnx", "small.onnx"]
    result, counts = optimize_package(src, tmp_path / "out", passes=["fp8_head"])
    assert {k: v for k, v in result.rewrites.items() if v} == {"fp8_head": 2}
    assert sorted(counts) == ["decoder", "profile:small"]
    for name in ("model.onnx", "small.onnx"):
        model = load_graph(tmp_path / "out" / name, root=tmp_path / "out")
        assert [n.op_type for n in model.graph].count("MatMulBlockQuantizedFp8Weight") == 1, name
    assert (tmp_path / "out" / "small.opt.data").is_file()


def test_a_link_out_of_the_package_appearing_after_it_was_opened_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages_snapshot: SnapshotAssertion
) -> None:
    """The package changes under the command: a link to a file outside it appears after the
    package was opened and checked. The walk that places the unchanged files refuses it with one
    line naming the link and where it leads, and nothing is written."""
    from q38.errors import PackageError
    from q38.optimize import driver

    src = copy_package(next(p for p in REAL if p.name == "int4-cuda-prepacked"), tmp_path / "src")
    outside = tmp_path / "outside.txt"
    outside.write_text("not part of the package\n")
    link = src / "notes.txt"
    opened = driver.open_any

    def open_then_link(path: Path | str):  # type: ignore[no-untyped-def]
        pkg = opened(path)
        link.symlink_to(outside)
        return pkg

    monkeypatch.setattr(driver, "open_any", open_then_link)
    with pytest.raises(PackageError) as caught:
        driver.optimize_package(src, tmp_path / "out")
    assert messages_snapshot == str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_package_whose_weights_are_hard_linked_optimizes_reading_them_itself(tmp_path: Path) -> None:
    """``--link hardlink`` leaves the output's data file one inode with the source's, which onnx-ir
    refuses to read; the fusions read the weights through q38's own reader, so optimizing that
    output again still works, and each concatenated weight holds its source tensors' values."""
    import os

    import numpy as np

    from q38.optimize.driver import optimize_package
    from q38.package import LinkPolicy, read_tensor

    src = copy_package(next(p for p in REAL if p.name == "fp16-cuda-gdn"), tmp_path / "src")
    once, _ = optimize_package(src, tmp_path / "once", passes=["fp8_head"], link=LinkPolicy.HARDLINK)
    assert {k: v for k, v in once.rewrites.items() if v} == {"fp8_head": 1}
    assert os.path.samefile(tmp_path / "once" / "model.onnx.data", src / "model.onnx.data")  # the premise
    twice, _ = optimize_package(tmp_path / "once", tmp_path / "twice", passes=["shared_expert"])
    assert {k: v for k, v in twice.rewrites.items() if v} == {"shared_expert": 4}
    assert [o.applied for o in twice.outcomes] == [True] * 4
    before_path, after_path = tmp_path / "once" / "model.onnx", tmp_path / "twice" / "model.onnx"
    before = load_graph(before_path, root=before_path.parent).graph.initializers
    after = load_graph(after_path, root=after_path.parent).graph.initializers
    assert len(twice.provenance) == 4
    for name, sources in twice.provenance.items():
        parts = [read_tensor(before[s], graph_path=before_path, root=before_path.parent) for s in sources]
        fused = read_tensor(after[name], graph_path=after_path, root=after_path.parent)
        np.testing.assert_array_equal(fused, np.concatenate(parts, axis=1))


def test_an_engram_section_listing_no_shared_initializers_keeps_an_empty_list(tmp_path: Path) -> None:
    """The engram section lists no shared tensors while the decoder loses one of its own: the
    reconciled engram section stays an empty tuple, never None. (The private reconciliation is
    called directly, as above: the written config is the same for both, so only its result shows it.)"""
    import dataclasses
    import json

    from q38.optimize.driver import _reconciled_config
    from q38.package.genai.config import GenaiEngram, dumps_genai_config

    src = next(p for p in REAL if (p / "mtp.onnx").is_file())
    pkg = open_genai_package(src)
    m = pkg.config.model
    with_engram = dataclasses.replace(pkg, config=dataclasses.replace(pkg.config, model=dataclasses.replace(
        m, engram=GenaiEngram(filename="engram.onnx"))))
    models = {r.role: load_graph(r.path, root=pkg.root) for r in pkg.graphs()}
    victim = m.decoder.shared_initializers[0].name
    models["decoder"].graph.initializers.pop(victim)
    cfg, dropped = _reconciled_config(with_engram, models, pkg.root)
    assert dropped == [victim]
    assert cfg.model.engram is not None
    assert (cfg.model.engram.filename, cfg.model.engram.shared_initializers) == ("engram.onnx", ())
    assert json.loads(dumps_genai_config(cfg))["model"]["engram"] == {"filename": "engram.onnx"}
