"""Weights created by `q38 optimize` are pooled, and sharing survives the rewrites.

Invariants guarded (tiny faithful package, --target cuda, every pass fires):
* every tensor a pass writes to a `<stem>.opt.data` file has exactly one `weights_pool.txt` entry
  with its file, offset, length, dtype and shape, placement `device`, and a provenance naming
  every graph that reads it (`ROLE:NAME`), the pass (`pass:PASS`) and its sources (`from:NAME`);
* a tensor derived from a weight the target, head and prefill graphs shared before is written
  once (one entry, one byte range) and read by all three graphs;
* a source entry that no graph reads any more (`lm_head.weight`, replaced by its FP8 form in every
  graph) is dropped and recorded in the manifest (`extra.pool_dropped`); the others are unchanged;
* same-name unrelated weights stay distinct (the head's own `fold.proj.weight` is not merged with
  the target's);
* on a layered package, derived tensors of the head directory are pooled in `head/`, and both
  manifests are written in place (the optimized package opens): the target manifest counts the
  rewrites, the head manifest lists every file of `head/` with the digest of its written bytes;
  an entry of the head's own pool that the head stops reading is dropped from that pool (and
  named in `extra.pool_dropped`), and a layered package without a head manifest gets none;
* the pool written is fresh, never a hard link to the source pool.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from q38.optimize.driver import optimize_package
from q38.package import Placement, external_refs, open_package, read_pool, sha256_file


@pytest.fixture(scope="module")
def optimized(tiny_faithful_package: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("pool")
    src = base / "src"
    shutil.copytree(tiny_faithful_package, src, symlinks=True)
    out = base / "out"
    optimize_package(src, out, target="cuda")
    return src, out


def _opt_refs(pkg_dir: Path) -> dict[tuple[str, int], list[str]]:
    """(file, offset) -> ROLE:NAME of every graph tensor stored in a `.opt.data` file."""
    pkg = open_package(pkg_dir)
    refs: dict[tuple[str, int], list[str]] = {}
    for role in pkg.roles():
        for ref in external_refs(pkg.load(role)):
            if ".opt" in ref.location:
                refs.setdefault((ref.location, ref.offset), []).append(f"{role}:{ref.name}")
    return refs


def test_every_tensor_a_pass_writes_has_one_pool_entry(optimized: tuple[Path, Path]) -> None:
    _, out = optimized
    pool = read_pool(out / "weights_pool.txt")
    derived = {(e.file, e.offset): e for e in pool.entries if e.pool_id.startswith("opt")}
    refs = _opt_refs(out)
    assert set(refs) == set(derived)
    provenance = json.loads((out / "package_manifest.json").read_text())["extra"]["provenance"]
    for loc, users in refs.items():
        entry = derived[loc]
        parts = entry.provenance.split(",")
        assert entry.placement is Placement.DEVICE
        assert [p for p in parts if not p.startswith(("pass:", "from:"))] == users
        name = users[0].split(":", 1)[1]
        assert [p for p in parts if p.startswith("from:")] == [f"from:{s}" for s in provenance[name]]
        assert len([p for p in parts if p.startswith("pass:")]) == 1
        assert entry.nbytes_expected == entry.length
        assert (out / entry.file).stat().st_size >= entry.offset + (entry.length or 0)


def test_weights_shared_before_a_rewrite_stay_shared_after_it(optimized: tuple[Path, Path]) -> None:
    _, out = optimized
    pool = read_pool(out / "weights_pool.txt")
    by_users = {e.provenance.split(",pass:")[0]: e for e in pool.entries}
    fp8 = by_users["target:lm_head.weight.fp8,head:lm_head.weight.fp8,prefill:lm_head.weight.fp8"]
    assert fp8.provenance.endswith(",pass:fp8_head,from:lm_head.weight")
    assert (fp8.file, fp8.dtype, fp8.shape) == ("model.opt.data", "float8e4m3fn", (512, 64))
    # The shared-expert weights the target and the prefill graph read from one byte range.
    fused = [e for e in pool.entries if "shared_expert.gate_up_sg_proj" in e.provenance and "pass:shared_expert" in e.provenance]
    assert len(fused) == 9  # 8 layers + the MTP draft
    assert sum("prefill:" in e.provenance for e in fused) == 8
    # The head's own fold.proj (next_embeds, not a logits projection) keeps precision: no
    # derived data of the head alone, and its same-name-different-bytes weight stays its own.
    assert sorted(p.name for p in out.glob("*.opt*.data")) == ["model.opt.data"]
    assert not [e for e in pool.entries if "fold.proj" in e.provenance and "pass:" in e.provenance]


def test_entries_no_graph_reads_any_more_are_dropped_and_others_kept(optimized: tuple[Path, Path]) -> None:
    src, out = optimized
    before = read_pool(src / "weights_pool.txt")
    after = read_pool(out / "weights_pool.txt")
    kept = {e.pool_id: e for e in after.entries if not e.pool_id.startswith("opt")}
    assert sorted(kept) == ["w0001", "w0002"]
    assert all(kept[i] == before.by_id()[i] for i in kept)
    manifest = json.loads((out / "package_manifest.json").read_text())
    assert manifest["extra"]["pool_dropped"] == ["w0000"]
    assert before.records[:2] == after.records[:2]  # the header comments round-trip
    assert os.stat(out / "weights_pool.txt").st_nlink == 1


def test_layered_package_pools_head_tensors_in_head_dir(tmp_path: Path) -> None:
    from q38.synth import synthesize

    src = synthesize(tmp_path / "src", preset="tiny", variant="faithful", layout="layered")
    out = tmp_path / "out"
    result, _ = optimize_package(src, out, target="cuda")
    pkg = open_package(out)
    assert pkg.manifest is not None and pkg.manifest.command == "optimize"
    assert pkg.head_manifest is not None and pkg.head_manifest.command == "optimize"
    assert pkg.manifest.rewrites == dict(sorted(result.rewrites.items())) and pkg.manifest.rewrites["fp8_head"] > 0
    # The head manifest lists every file of head/ with the digest of the bytes written there: the
    # rewritten head graph and its new .opt.data included (not the source's records).
    head_files = {p.relative_to(out / "head").as_posix() for p in (out / "head").rglob("*") if p.is_file()}
    assert set(pkg.head_manifest.files) == head_files - {"package_manifest.json"}
    assert "head_r2.opt.data" in pkg.head_manifest.files
    for rel, record in pkg.head_manifest.files.items():
        assert record.sha256 == sha256_file(out / "head" / rel), rel
    assert not (out / "package_manifest.json").exists()
    head_pool = read_pool(out / "head" / "weights_pool.txt")
    assert sorted(e.provenance.split(",")[0] for e in head_pool.entries) == [
        "head:lm_head.weight.fp8", "head:lm_head.weight.fp8_scale",
    ]
    assert all((out / "head" / e.file).is_file() for e in head_pool.entries)
    target_files = {e.file for e in pkg.pool.entries if e.pool_id.startswith("opt")}
    assert target_files == {"model.opt.data"}



def _layered(tmp_path: Path) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path / "src", preset="tiny", variant="faithful", layout="layered")


def test_a_head_pool_entry_the_head_stops_reading_is_dropped_from_the_head_pool(tmp_path: Path) -> None:
    src = _layered(tmp_path)
    # The head graph reads lm_head.weight (replaced by its FP8 form) and fold.proj.weight (kept)
    # from its own data file; list both in the head's pool.
    with (src / "head" / "weights_pool.txt").open("a", encoding="utf-8") as pool:
        pool.write("h0000 head_r2.onnx.data 2048 65536 float16 64x512 device head:lm_head.weight\n"
                   "h0001 head_r2.onnx.data 133120 8192 float16 64x64 device head:fold.proj.weight\n")
    before = read_pool(src / "head" / "weights_pool.txt").by_id()
    out = tmp_path / "out"
    optimize_package(src, out, target="cuda")
    after = read_pool(out / "head" / "weights_pool.txt").by_id()
    assert "h0000" not in after
    assert after["h0001"] == before["h0001"]
    manifest = json.loads((out / "target" / "package_manifest.json").read_text())
    assert "h0000" in manifest["extra"]["pool_dropped"]


def test_a_layered_package_without_a_head_manifest_is_optimized_without_one(tmp_path: Path) -> None:
    src = _layered(tmp_path)
    (src / "head" / "package_manifest.json").unlink()
    out = tmp_path / "out"
    result, _ = optimize_package(src, out, target="cuda")
    pkg = open_package(out)
    assert pkg.head_manifest is None and not (out / "head" / "package_manifest.json").exists()
    assert pkg.manifest is not None and pkg.manifest.rewrites == dict(sorted(result.rewrites.items()))


def test_tensor_refs_are_keyed_by_the_data_file_relative_to_the_pool_dir(tmp_path: Path) -> None:
    """(file relative to the pool's directory, offset) -> tensor names, whatever the process's cwd."""
    import numpy as np
    import onnx
    import onnx_ir as ir
    from onnx import helper, numpy_helper

    from q38.optimize.derived_weights import source_identities, tensor_refs

    graph_dir = tmp_path / "target"
    graph_dir.mkdir()
    inits = [numpy_helper.from_array(np.full((64, 64), i, np.float32), f"w{i}") for i in range(2)]
    graph = helper.make_graph([helper.make_node("Add", ["w0", "w1"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [64, 64])], inits)
    onnx.save(helper.make_model(graph), str(graph_dir / "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.onnx.data", size_threshold=0)
    model = ir.load(graph_dir / "m.onnx")
    refs = tensor_refs(model, graph_dir, tmp_path)
    assert sorted(refs) == [("target/m.onnx.data", 0), ("target/m.onnx.data", 64 * 64 * 4)]
    assert sorted(n for names in refs.values() for n in names) == ["w0", "w1"]
    assert tensor_refs(model, graph_dir, graph_dir) == {("m.onnx.data", k[1]): v for k, v in refs.items()}
    ids = source_identities(model, graph_dir)
    st = (graph_dir / "m.onnx.data").stat()
    assert ids == {"w0": ("file", st.st_dev, st.st_ino, 0, 16384), "w1": ("file", st.st_dev, st.st_ino, 16384, 16384)}
