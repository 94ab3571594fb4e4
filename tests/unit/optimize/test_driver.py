"""``optimize_package`` (q38/optimize/driver.py) on a v12b package: what it returns and records.

Invariants guarded (tiny faithful package, ``--target cuda``):
* every outcome names the package-relative file of the graph it is in (``--explain`` prefixes
  its line with that file: the same node name occurs in the target, head and prefill graphs),
  and every graph of the package has outcomes;
* the node counts are keyed by graph role: (nodes of the source graph, nodes of the written one);
* the manifest lists every file of the output but itself, each with the digest of the bytes in
  the output: the rewritten graphs, their ``.opt.data`` and the pool as written (``write``), every
  other file as placed; its ``extra`` names the target and, for each tensor a pass created, the
  tensors it was made from, and its rewrite counts are the run's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePath
from typing import Any

import onnx
import pytest

from q38.optimize.driver import optimize_package
from q38.optimize.pipeline import OptimizeResult
from q38.package import open_any, sha256_file

Run = tuple[Path, Path, OptimizeResult, dict[str, tuple[int, int]]]


@pytest.fixture(scope="module")
def run(tiny_faithful_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    base = tmp_path_factory.mktemp("driver")
    src, out = base / "src", base / "out"
    shutil.copytree(tiny_faithful_package, src, symlinks=True)
    result, counts = optimize_package(src, out, target="cuda")
    return src, out, result, counts


def _graphs(src: Path) -> dict[str, str]:
    """Role -> package-relative path of its graph file."""
    return {ref.role: PurePath(ref.rel).as_posix() for ref in open_any(src).graphs()}


def _nodes(path: Path) -> int:
    return len(onnx.load(str(path), load_external_data=False).graph.node)


def test_every_outcome_names_the_graph_file_it_is_in(run: Run) -> None:
    src, _, result, _ = run
    files = set(_graphs(src).values())
    assert len(files) == 3
    assert {o.graph for o in result.outcomes} == files
    assert all(o.line().startswith(f"{o.graph}: {o.pass_name}: ") for o in result.outcomes)


def test_node_counts_are_the_source_and_written_graphs_per_role(run: Run) -> None:
    src, out, _, counts = run
    graphs = _graphs(src)
    assert counts == {role: (_nodes(src / rel), _nodes(out / rel)) for role, rel in graphs.items()}
    assert counts["target"][1] < counts["target"][0]  # the passes fused something


def test_the_manifest_records_every_output_file_as_written_or_placed(run: Run) -> None:
    src, out, result, _ = run
    manifest: dict[str, Any] = json.loads(
        (out / "package_manifest.json").read_text(encoding="utf-8")
    )
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == on_disk - {"package_manifest.json"}
    for rel, record in manifest["files"].items():
        assert record["sha256"] == sha256_file(out / rel), rel
    written = {rel for rel, record in manifest["files"].items() if record["link_mode"] == "write"}
    assert written == {*_graphs(src).values(), "model.opt.data", "weights_pool.txt"}
    assert manifest["command"] == "optimize"
    assert manifest["extra"]["optimize_target"] == "cuda"
    assert manifest["extra"]["provenance"] == result.provenance and result.provenance
    assert manifest["rewrites"] == result.rewrites
