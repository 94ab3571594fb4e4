"""Throughput on CUDA (pytest-benchmark): decode tokens/s and time to first token per context tier,
kernels per verification cycle (ORT profiling). Not assertions: figures for the release gate.

Profiles: ``h200`` (>= 100 GiB: tiers 2K/8K/16K/32K) and ``consumer`` (20-34 GiB class: the
tiers whose KV and weights fit in 80% of memory). The profile follows the GPU's memory, or
Q38_GPU_PROFILE=h200|consumer explicitly; it is recorded in extra_info with the ORT version,
EP, GPU model and driver (the keys the gate compares).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import q38gpu_env as genv
import q38gpu_run as grun

TIERS = {"2K": 2048, "8K": 8192, "16K": 16384, "32K": 32768}
VERIFY_TOKENS = 4  # one verification cycle: the accepted token plus three drafts


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    min_memory_gib: int
    preset: str
    weight_gb: float
    decode_tokens: int


PROFILES = {
    "h200": Profile("h200", 100, "large", 4.0, 64),
    "consumer": Profile("consumer", 20, "large", 2.0, 32),
}


@pytest.fixture(scope="session")
def profile(gpu: genv.GpuInfo) -> Profile:
    chosen = os.environ.get("Q38_GPU_PROFILE")
    if chosen:
        if chosen not in PROFILES:
            pytest.fail(f"Q38_GPU_PROFILE={chosen!r}: expected one of {sorted(PROFILES)}")
        return PROFILES[chosen]
    gib = (gpu.memory_mib or 0) / 1024
    for p in sorted(PROFILES.values(), key=lambda p: -p.min_memory_gib):
        if gib >= p.min_memory_gib:
            return p
    pytest.skip(f"{gpu.name} has {gib:.0f} GiB; the smallest profile (consumer) needs 20 GiB")


def _package(packages: grun.PackageFactory, profile: Profile, variant: str) -> Path:
    # One package per variant serves every tier: its context_length is the largest tier's.
    try:
        return packages.synth(preset=profile.preset, variant=variant, weight_gb=str(profile.weight_gb),
                              context_length=str(max(TIERS.values())))
    except grun.Unavailable as exc:
        pytest.skip(str(exc))


_SESSIONS: dict[Path, Any] = {}


def _cuda_session(ort: Any, model: Path, **kw: Any) -> Any:
    """A CUDA session; plain ones are shared by the tiers (multi-GB weights load once)."""
    if not kw and model in _SESSIONS:
        return _SESSIONS[model]
    try:
        sess = grun.session(ort, model, providers=grun.CUDA_PROVIDERS, **kw)
    except Exception as exc:
        if "NOT_IMPLEMENTED" in str(exc):
            pytest.skip(f"{model.name}: no CUDA session: {str(exc).strip().splitlines()[0][:300]}")
        raise
    if not kw:
        _SESSIONS[model] = sess
    return sess


def _fits(gpu: genv.GpuInfo, package: Path, tier: int) -> None:
    limit = grun.context_length(package)
    if limit is not None and tier > limit:
        pytest.skip(f"tier {tier}: the package's context_length is {limit}")
    weights = sum(p.stat().st_size for p in package.rglob("*") if p.is_file())
    kv = tier * 48 * 2 * 2 * 16 * 2 * 2  # generous: every layer with full-length fp16 K and V
    budget = 0.8 * (gpu.memory_mib or 0) * 2**20
    if weights + kv > budget:
        pytest.skip(f"tier {tier}: {(weights + kv) / 2**30:.1f} GiB needed, 80% of {gpu.name} is {budget / 2**30:.1f} GiB")


def _run_or_skip(stepper: grun.Stepper, feeds: dict[str, np.ndarray], what: str) -> dict[str, np.ndarray]:
    try:
        return stepper.run(feeds)
    except Exception as exc:
        pytest.skip(f"{what}: the package cannot run it: {str(exc).strip().splitlines()[0][:300]}")


@pytest.mark.parametrize("variant", ["faithful", "cpu"])
@pytest.mark.parametrize("tier", list(TIERS))
def test_time_to_first_token(benchmark: Any, ort_module: Any, packages: grun.PackageFactory, gpu: genv.GpuInfo,
                             profile: Profile, env_info: dict[str, Any], tier: str, variant: str) -> None:
    pkg = _package(packages, profile, variant)
    _fits(gpu, pkg, TIERS[tier])
    sess = _cuda_session(ort_module, grun.target_graph(pkg))
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    feeds = stepper.feeds(seq=TIERS[tier], past=0)
    _run_or_skip(stepper, feeds, f"a {tier} prefill")
    benchmark.extra_info.update(env_info, tier=tier, variant=variant, profile=profile.name, preset=profile.preset)
    benchmark.pedantic(stepper.run, args=(feeds,), rounds=5, warmup_rounds=1, iterations=1)
    benchmark.extra_info["ttft_ms_median"] = 1e3 * benchmark.stats.stats.median


@pytest.mark.parametrize("variant", ["faithful", "cpu"])
@pytest.mark.parametrize("tier", list(TIERS))
def test_decode_tokens_per_second(benchmark: Any, ort_module: Any, packages: grun.PackageFactory,
                                  gpu: genv.GpuInfo, profile: Profile, env_info: dict[str, Any],
                                  tier: str, variant: str) -> None:
    pkg = _package(packages, profile, variant)
    _fits(gpu, pkg, TIERS[tier])
    sess = _cuda_session(ort_module, grun.target_graph(pkg))
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    start = TIERS[tier] - profile.decode_tokens
    first = _run_or_skip(stepper, stepper.feeds(seq=1, past=start), f"decode at a {tier} context")

    def decode() -> None:
        state = first
        for k in range(profile.decode_tokens):
            state = stepper.run(stepper.feeds(seq=1, past=start + k, state=state))

    benchmark.extra_info.update(env_info, tier=tier, variant=variant, profile=profile.name, preset=profile.preset,
                                decode_tokens=profile.decode_tokens)
    benchmark.pedantic(decode, rounds=3, warmup_rounds=1, iterations=1)
    benchmark.extra_info["decode_tokens_per_s"] = profile.decode_tokens / benchmark.stats.stats.median


@pytest.mark.parametrize("variant", ["faithful", "cpu"])
def test_kernels_per_verification_cycle(benchmark: Any, ort_module: Any, packages: grun.PackageFactory,
                                        profile: Profile, env_info: dict[str, Any], tmp_path: Path,
                                        variant: str) -> None:
    pkg = _package(packages, profile, variant)
    model = grun.target_graph(pkg)
    past = TIERS["2K"]
    profiled = _cuda_session(ort_module, model, profile_prefix=str(tmp_path / "verify"))
    pstep = grun.Stepper(profiled, grun.vocab_of(profiled))
    feeds = pstep.feeds(seq=VERIFY_TOKENS, past=past)
    _run_or_skip(pstep, feeds, "a verification step")
    pstep.run(feeds)
    kernels, counted = grun.kernels_in_profile(profiled.end_profiling())
    sess = _cuda_session(ort_module, model)
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    benchmark.extra_info.update(env_info, tier="2K", variant=variant, profile=profile.name, preset=profile.preset,
                                kernels_per_cycle=kernels, kernels_counted=counted, verify_tokens=VERIFY_TOKENS)
    benchmark.pedantic(stepper.run, args=(feeds,), rounds=10, warmup_rounds=2, iterations=1)
