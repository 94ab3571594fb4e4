"""The GPU suite's gate and dry run (issue 28): a skip is not a pass, and the suite's own code runs on CPU.

Invariants guarded:
* judge(): a skip passes only when a manifest rule holds for the run's onnxruntime version and GPU
  class, or ``--allow-skip`` names the rule / a test glob; an --allow-skip that names nothing, a probe
  error, and fewer passes than the floor each fail the verdict with a line saying so;
* the committed manifest parses and its rules' globs match real test ids of tests/gpu;
* with ``nvidia-smi`` faked to list an H200 and the CPU onnxruntime installed, ``pytest tests/gpu``
  exits 1 with the gate's FAIL line and the probe error (before: every test skipped, exit 0);
* ``--dry-run-cpu`` on a subset (the kernel-registry dump compared with the committed CPU kernels,
  CUDA-vs-CPU parity and IOBinding decode on the tiny preset) passes the gate and writes the
  figures JSON and PNG, with the EP assignment, the memory beside fit and the tests that finished;
* figures.compare() reports the median change per tier with an interval.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parents[2] / "gpu"
ROOT = GPU_DIR.parents[1]
sys.path.insert(0, str(GPU_DIR))
import q38gpu_figures as gfig  # noqa: E402
import q38gpu_gate as gate  # noqa: E402

_RULE = gate.SkipRule("old-ort", ("*offload*",), "no offload in 1.31.1", ort=("1.31.1",))
_MANIFEST = gate.Manifest({"h200": 2, "default": 1}, (_RULE,))


def test_a_skip_passes_only_by_a_rule_that_holds() -> None:
    outcomes = {"t::a": ("passed", ""), "t::b": ("passed", ""), "t::offload[x]": ("skipped", "no offload")}
    ok = gate.judge(_MANIFEST, outcomes, ort_version="1.31.1", klass="h200")
    assert ok.ok and ok.allowed == ("t::offload[x] [old-ort: no offload in 1.31.1]",)
    bad = gate.judge(_MANIFEST, outcomes, ort_version="1.32.0", klass="h200")
    assert not bad.ok and bad.problems == ("skip is not a pass: t::offload[x]: no offload",)
    assert gate.judge(_MANIFEST, outcomes, ort_version="1.32.0", klass="h200", allow=["old-ort"]).ok
    assert gate.judge(_MANIFEST, outcomes, ort_version="1.32.0", klass="h200", allow=["t::off*"]).ok
    nothing = gate.judge(_MANIFEST, outcomes, ort_version="1.31.1", klass="h200", allow=["nope"])
    assert nothing.problems == ("--allow-skip nope: neither a manifest rule nor a test id glob that matches",)


def test_too_few_passes_and_probe_errors_fail() -> None:
    one = {"t::a": ("passed", "")}
    assert gate.judge(_MANIFEST, one, ort_version="1.32.0", klass="small").ok  # default floor 1
    few = gate.judge(_MANIFEST, one, ort_version="1.32.0", klass="h200")
    assert few.problems == ("1 test(s) passed; the manifest expects at least 2 on a h200 GPU (onnxruntime 1.32.0)",)
    assert gate.judge(_MANIFEST, one, ort_version="1.32.0", klass="h200", floor=1).ok
    probe = gate.judge(_MANIFEST, one, ort_version="1.32.0", klass="small", probe_errors=["CUDA EP missing"])
    assert probe.problems == ("probe error: CUDA EP missing",) and probe.lines()[0].startswith("q38 gpu gate: FAIL")
    assert gate.gpu_class(143771) == "h200" and gate.gpu_class(24564) == "consumer" and gate.gpu_class(8000) == "small"
    assert gate.gpu_class(81559) == "80gb"


def test_the_committed_manifest_parses() -> None:
    manifest = gate.load_manifest()
    assert manifest.min_passed["h200"] >= manifest.min_passed["dry-run-cpu"] > 0
    offload = manifest.rule("ort-1.31.1-no-offload")
    assert offload is not None and offload.holds("1.31.1", "h200") and not offload.holds("1.32.0", "h200")
    assert offload.covers("tests/gpu/test_cuda_parity.py::test_offload_matches_resident_on_cuda[cpu-auto]")
    dry = manifest.rule("dry-run-cpu-cuda-only")
    assert dry is not None and dry.covers("tests/gpu/test_throughput_bench.py::test_decode_tokens_per_second[2K-faithful]")
    assert not dry.covers("tests/gpu/test_throughput_bench.py::test_decode_tokens_per_second[2K-cpu]")


def _pytest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "--benchmark-disable", "-o", "addopts="], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, check=False, timeout=600)


@pytest.mark.slow
def test_a_visible_gpu_with_every_test_skipped_fails(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in *-L*) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)";; '
                   '*) echo "NVIDIA H200, 570.00, 9.0, 143771";; esac\n')
    smi.chmod(0o755)
    proc = _pytest(str(GPU_DIR / "test_cuda_kernels.py"), env={"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "q38 gpu gate: FAIL: 0 passed, 2 skipped (0 allowed)" in proc.stdout
    assert "probe error: onnxruntime" in proc.stdout and "has no CUDAExecutionProvider" in proc.stdout


@pytest.mark.slow
def test_the_dry_run_passes_the_gate_and_writes_figures(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    proc = _pytest(f"{GPU_DIR}/test_cuda_kernels.py::test_dump_the_ep_kernel_registry",
                   f"{GPU_DIR}/test_cuda_parity.py::test_cuda_matches_cpu_on_the_cpu_variant",
                   f"{GPU_DIR}/test_cuda_parity.py::test_the_cuda_ep_runs_on_the_detected_gpu",
                   f"{GPU_DIR}/test_throughput_bench.py::test_decode_tokens_per_second[2K-cpu]",
                   f"{GPU_DIR}/test_throughput_bench.py::test_slice_decode_extrapolated[cpu]",
                   "--dry-run-cpu", "--gate-min-passed", "5", "--figures", str(figures),
                   env={"Q38_GPU_OUT": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "q38 gpu gate: PASS: 5 passed, 0 skipped" in proc.stdout
    doc = json.loads(figures.read_text())
    assert doc["format"] == gfig.FORMAT and doc["dry_run_cpu"] is True and doc["gate"]["ok"] is True
    tier = doc["tiers"]["cpu/2K"]
    assert tier["decode_tokens"] == 4 and tier["decode_tps"]["median"] > 0 and tier["iobinding"] is True
    assert doc["env"]["ep"] == "CPUExecutionProvider" and doc["env"]["ort_build"]["version"]
    extra = doc["extrapolated"]["cpu/slice-32"]  # the dry run's slice: the tiny preset's 8 layers
    assert extra["kind"] == "extrapolation" and extra["measured_layers"] == [8] and extra["full_layers"] == 48
    assert extra["tokens_per_s"] > 0 and "cpu/slice-32" not in doc["tiers"]
    assert all(len(p["sha256"]) == 64 for p in doc["packages"].values())
    memory = doc["memory"]["cpu/2K"]  # the dry run fills the memory fields with the process's memory
    assert memory["measured"]["source"] == "process resident set (/proc/self/statm)"
    assert memory["measured"]["peak_bytes"] > 0 and memory["fit"]["exact_bytes"] > 0
    assert memory["ratio"] > 0 and memory["within_estimate"] is True
    placed = next(v for k, v in doc["placements"].items() if k.endswith("/model.onnx"))
    assert placed["recorded"] and placed["cpu_compute_nodes"] == [] and placed["cpu_nodes"]
    assert tier["prefill"] == "real" and tier["cuda_graph"]["status"] == "not attempted"
    assert sorted(doc["tests"]["finished"].values()) == ["passed"] * 5 and doc["tests"]["not_run"] == []
    assert figures.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(tmp_path.glob("cpu-kernels-*.json"))


def test_compare_reports_the_change_with_an_interval() -> None:
    base = {"tiers": {"cpu/2K": {"decode_tps_samples": [100.0, 101.0, 99.0]}}, "kernels_per_verification_cycle":
            {"cpu/optimized": {"kernels": 1046}}, "parity": {}}
    head = {"tiers": {"cpu/2K": {"decode_tps_samples": [110.0, 111.0, 109.0]}}, "kernels_per_verification_cycle":
            {"cpu/optimized": {"kernels": 1042}}, "parity": {}}
    lines = gfig.compare(base, head)
    assert lines[1].split()[:5] == ["cpu/2K", "decode_tps", "100.00", "110.00", "+10.0%"]
    assert lines[2].split() == ["kernels", "cpu/optimized", "1046", "1042"]
