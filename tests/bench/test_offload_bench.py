"""Benchmark: ``q38 offload`` of the full synthetic package (48 decoder layers + the MTP draft:
49 QMoE nodes), time and peak RSS; and memory that does not grow with weight bytes.

Invariants guarded (no timing assertions), on what was measured:
- the benchmarked conversion's output: 97 router_weights cleared (49 target + 48 prefill), model_s2/s3/s4
  with 49/50/51 QMoE nodes and 2/3/4 verify rows, model.onnx = model_s4.onnx, a cap of 2 on every
  node of model_s4, every routed-expert pool entry cpu_mmap except the MTP draft's (host_mapped,
  4096-aligned in the moved file), every other entry host_mapped;
- peak Python allocation during a conversion is the same (within 25 % + 2 MB) for a package with
  ten times the weight bytes, and both outputs have the same graphs: the source manifest vouches
  for its data files (digest + identity), so their copies move by the kernel's copy path and no
  weight byte is read (the moved MTP experts are hashed once, in one buffer of at most 8 MiB);
- a source without a manifest (a builder export, a ``cp -r`` of a package) has its copies hashed
  in the copy pass: the extra peak is the copy ring (4 x 8 MiB), not the 0.1 GB of weights.
The measured figures go into the benchmark's ``extra_info`` (and ``-s`` output). In the CPU suite's
smoke (tests/bench/conftest.py) the benchmark converts the tiny preset once (8 layers: 17 router_weights,
9/10/11 QMoE nodes); the memory comparison is no timing and always runs on the full preset.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import onnx
import pytest

from q38.offload.convert import convert_package
from q38.offload.options import OFFLOAD_PREFIX, OffloadOptions, parse_node_overrides
from q38.package import open_package
from q38.package.io.copying import HASH_BUFFER, HASH_BUFFERS

REPO = Path(__file__).resolve().parents[2]
_OPTIONS = OffloadOptions(mode="auto", target_resident_slots=2, mtp_moe_placement="host_mapped")

_CHILD = """
import json, resource, sys, time
from pathlib import Path
from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
convert_package(Path(sys.argv[1]), Path(sys.argv[2]),
                OffloadOptions(mode="auto", target_resident_slots=2, mtp_moe_placement="host_mapped"))
print(json.dumps({"seconds": time.perf_counter() - t, "rss_before_kib": base,
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _data_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.data"))


def _qmoe_names(path: Path) -> list[str]:
    return [n.name for n in onnx.load(path, load_external_data=False).graph.node if n.op_type == "QMoE"]


def _assert_converted(src: Path, out: Path, layers: int) -> None:
    """The structure of one converted package of ``layers`` decoder layers (see the module docstring)."""
    target = _qmoe_names(src / "model.onnx")
    assert len(target) == layers + 1
    for rows, extra in ((2, 0), (3, 1), (4, 2)):
        model = onnx.load(out / f"model_s{rows}.onnx", load_external_data=False)
        names = [n.name for n in model.graph.node if n.op_type == "QMoE"]
        assert names[: layers + 1] == target and len(names) == layers + 1 + extra
        assert {p.key: p.value for p in model.metadata_props}["q38.verify_rows"] == str(rows)
    assert (out / "model.onnx").read_bytes() == (out / "model_s4.onnx").read_bytes()
    pkg = open_package(out)
    caps = parse_node_overrides(pkg.config.model.decoder.session_options.config_entries[OFFLOAD_PREFIX + "node_overrides"])
    assert caps == dict.fromkeys(_qmoe_names(out / "model_s4.onnx"), 2)
    experts = set()
    for node in onnx.load(src / "model.onnx", load_external_data=False).graph.node:
        if node.op_type == "QMoE":
            experts.update((node.name.startswith("/mtp/"), name) for name in node.input[2:8] if name)
    for entry in pkg.pool.entries:
        names = {part.split(":", 1)[1] for part in entry.provenance.split(",") if ":" in part}
        if names & {n for mtp, n in experts if mtp}:
            assert entry.placement == "host_mapped" and entry.offset % 4096 == 0, entry
        elif names & {n for mtp, n in experts if not mtp}:
            assert entry.placement == "cpu_mmap", entry
        else:
            assert entry.placement == "host_mapped", entry


@pytest.mark.slow
def test_offload_full_bench(benchmark, bench_package: Path, bench_layers: int, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    full_cpu_package = bench_package  # the full preset under nox -s bench, tiny in the CPU suite's smoke
    counter = itertools.count()

    def run() -> int:
        return convert_package(full_cpu_package, tmp_path / f"out{next(counter)}", _OPTIONS).router_weights_cleared

    rounds = 1 if benchmark.disabled else 3
    # 49 target + 48 prefill on the full preset: (layers + 1) + layers
    assert benchmark.pedantic(run, rounds=rounds, iterations=1) == 2 * bench_layers + 1
    _assert_converted(full_cpu_package, tmp_path / "out0", bench_layers)
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(full_cpu_package), str(tmp_path / "rss")],
        capture_output=True, text=True, check=True, cwd=REPO,
    )
    figures = json.loads(child.stdout)
    figures["weight_bytes"] = _data_bytes(full_cpu_package)
    benchmark.extra_info.update(figures)
    print(f"offload full: {figures}")


@pytest.mark.slow
def test_offload_memory_independent_of_weight_bytes(full_cpu_package: Path, tmp_path: Path) -> None:
    from q38.synth import synthesize

    large = synthesize(tmp_path / "large", preset="large", variant="cpu", weight_gb=0.1)
    assert _data_bytes(large) > 10 * _data_bytes(full_cpu_package)
    peaks = []
    for name, src in (("full", full_cpu_package), ("large", large)):
        tracemalloc.start()
        try:
            convert_package(src, tmp_path / f"out_{name}", _OPTIONS)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    bare = tmp_path / "bare"  # no manifest: nothing vouches for the data, every copy is hashed
    shutil.copytree(large, bare, ignore=shutil.ignore_patterns("package_manifest.json"))
    tracemalloc.start()
    try:
        convert_package(bare, tmp_path / "out_bare", _OPTIONS)
        peaks.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
    print(f"offload peak python allocation: full {peaks[0] / 1e6:.1f} MB, large {peaks[1] / 1e6:.1f} MB, "
          f"large without manifest {peaks[2] / 1e6:.1f} MB")
    assert peaks[1] < 1.25 * peaks[0] + 2_000_000
    ring = HASH_BUFFERS * HASH_BUFFER
    assert peaks[2] < peaks[1] + ring + 2_000_000 < _data_bytes(large)
    for graph in ("model_s2.onnx", "model_s3.onnx", "model_s4.onnx"):
        assert _qmoe_names(tmp_path / "out_full" / graph) == _qmoe_names(tmp_path / "out_large" / graph)
