"""GPU classes, profiles and the run-time estimate (tests/gpu: q38gpu_gate, q38gpu_env, the bench).

Invariants guarded (issue 41 items 3 and 9):
* an H100 (nvidia-smi reports 81,559 MiB) is the ``80gb`` class and profile, not "consumer"; the
  manifest has a floor for it and its class-free rules hold for it; the consumer class has a rule
  for the slice it does not run;
* Q38_GPU_PROFILE overrides the choice by memory and an unknown name is refused;
* the h200 and 80gb profiles' run, estimated from their step counts, is at most 6 minutes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parents[2] / "gpu"
sys.path.insert(0, str(GPU_DIR))
import q38gpu_env as genv  # noqa: E402
import q38gpu_gate as gate  # noqa: E402
import test_throughput_bench as bench  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3, 570.86.15, 9.0, 81559"


def test_a_faked_h100_is_the_80gb_class_with_its_manifest_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(f'#!/bin/sh\ncase "$*" in *-L*) echo "GPU 0: NVIDIA H100";; *) echo "{H100}";; esac\n')
    (fake / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("Q38_GPU_PROFILE", raising=False)
    info, why = genv.query_nvidia_smi()
    assert info is not None and why == "" and info.memory_mib == 81559 and info.sm == 90
    assert gate.gpu_class(info.memory_mib) == "80gb"
    profile = bench.choose_profile(info.memory_mib)
    assert profile.name == "80gb" and profile.slice_preset == "slice" and profile.tiers[-1] == 32768
    manifest = gate.load_manifest()
    assert manifest.min_passed["80gb"] == manifest.min_passed["h200"]
    offload = manifest.rule("ort-1.31.1-no-offload")
    assert offload is not None and offload.holds("1.31.1", "80gb")
    small = manifest.rule("small-gpu-no-h200-tiers")
    assert small is not None and not small.holds("1.31.1", "80gb")
    no_slice = manifest.rule("consumer-gpu-no-slice")
    assert no_slice is not None and no_slice.holds("1.32.0", "consumer") and not no_slice.holds("1.32.0", "80gb")
    assert no_slice.covers("tests/gpu/test_throughput_bench.py::test_slice_decode_extrapolated[cpu]")


def test_classes_by_memory_and_the_profile_override(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [gate.gpu_class(m) for m in (143771, 102400, 81559, 71680, 24564, 8000)] == [
        "h200", "h200", "80gb", "80gb", "consumer", "small"]
    monkeypatch.delenv("Q38_GPU_PROFILE", raising=False)
    assert [bench.choose_profile(m).name for m in (143771, 81559, 24564)] == ["h200", "80gb", "consumer"]
    monkeypatch.setenv("Q38_GPU_PROFILE", "consumer")
    assert bench.choose_profile(143771).name == "consumer"
    monkeypatch.setenv("Q38_GPU_PROFILE", "h100")
    with pytest.raises(ValueError, match="Q38_GPU_PROFILE='h100': expected one of"):
        bench.choose_profile(81559)


def test_the_full_profiles_are_estimated_within_six_minutes() -> None:
    for name in ("h200", "80gb"):
        est = bench.estimate_s(bench.PROFILES[name])
        assert est["total_s"] <= 360, (name, est)
        # 2 variants x 4 tiers x (8 warm-up + 3 rounds x 128) + the slice's 3 x 64 steps
        assert est["decode_steps"] == 2 * 4 * (8 + 3 * 128) + 3 * 64
    assert bench.estimate_s(bench.PROFILES["consumer"])["total_s"] < bench.estimate_s(bench.PROFILES["h200"])["total_s"]
