"""Throughput on the device (pytest-benchmark + tests/gpu/q38gpu_figures.py): what the anchor measures.

* decode tokens/s per context tier (2K / 8K / 16K / 32K on an H200) after a prefilled cache, greedy,
  with IOBinding (state stays on the device) -- and with CUDA Graph where the graph's shapes allow
  it (recorded either way, with ORT's reason when it does not);
* time to first token per tier (a prefill of the tier's length);
* kernels per verification cycle (4 tokens at a 2K context) from ORT's profiler, of the package
  before and after ``q38 optimize``.

Device sessions set ``session.disable_cpu_ep_fallback=1``: a node the CUDA EP cannot take fails
the session, naming it (recorded as a fallback, and the test fails). A run error fails the test;
only a package that cannot exist on this build (no kernel, recorded by the gate's manifest) skips.

Profiles: ``h200`` (>= 100 GiB), ``consumer`` (>= 20 GiB), ``tiny`` (``--dry-run-cpu``: short tiers
named like the real ones). Q38_GPU_PROFILE overrides; the decoded-token count per request is the
profile's ``decode_tokens`` (h200: 512, as the anchor) and is recorded with every figure.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import q38gpu_env as genv
import q38gpu_figures as gfig
import q38gpu_run as grun

TIER_NAMES = ("2K", "8K", "16K", "32K")
VERIFY_TOKENS = 4  # one verification cycle: the accepted token plus three drafts


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    min_memory_gib: int
    preset: str
    weight_gb: float | None
    decode_tokens: int
    tiers: tuple[int, int, int, int]
    rounds: int = 3
    # The real-dimension slice (q38 synth --preset slice) whose per-layer decode time is extrapolated
    # to 48 layers; None: not run. The dry run uses the tiny preset (8 layers) to test the logic.
    slice_preset: str | None = None

    def tier(self, name: str) -> int:
        return self.tiers[TIER_NAMES.index(name)]


PROFILES = {
    "h200": Profile("h200", 100, "large", 4.0, 512, (2048, 8192, 16384, 32768), slice_preset="slice"),
    "consumer": Profile("consumer", 20, "large", 2.0, 128, (2048, 8192, 16384, 32768)),
    "tiny": Profile("tiny", 0, "tiny", None, 4, (32, 64, 96, 128), rounds=1, slice_preset="tiny"),
}


@pytest.fixture(scope="session")
def profile(gpu: genv.GpuInfo, request: pytest.FixtureRequest) -> Profile:
    try:
        return choose_profile(gpu.memory_mib, dry_run=bool(request.config.getoption("--dry-run-cpu")))
    except ValueError as exc:
        pytest.fail(str(exc))
    except LookupError as exc:
        pytest.skip(f"{gpu.name} has {exc}")


def synth_args(profile: Profile) -> dict[str, str]:
    """The ``packages.synth`` arguments of a profile's package (run-offline.sh prepares the same)."""
    # One package per variant serves every tier: its context_length covers the largest tier.
    extra = {"preset": profile.preset, "context_length": str(max(256, 2 * max(profile.tiers)))}
    if profile.weight_gb is not None:
        extra["weight_gb"] = str(profile.weight_gb)
    return extra


def choose_profile(memory_mib: int | None, *, dry_run: bool = False) -> Profile:
    """The profile of a device of ``memory_mib`` (Q38_GPU_PROFILE overrides; tiny for a dry run)."""
    chosen = os.environ.get("Q38_GPU_PROFILE") or ("tiny" if dry_run else "")
    if chosen:
        if chosen not in PROFILES:
            raise ValueError(f"Q38_GPU_PROFILE={chosen!r}: expected one of {sorted(PROFILES)}")
        return PROFILES[chosen]
    gib = (memory_mib or 0) / 1024
    for p in sorted(PROFILES.values(), key=lambda p: -p.min_memory_gib):
        if p.name != "tiny" and gib >= p.min_memory_gib:
            return p
    raise LookupError(f"{gib:.0f} GiB; the smallest profile (consumer) needs 20 GiB")


def _package(packages: grun.PackageFactory, profile: Profile, variant: str, *, optimized: bool = False) -> Path:
    try:
        pkg = packages.synth(variant=variant, **synth_args(profile))
        if optimized:
            pkg = packages.optimize(pkg, target="cuda" if grun.device_ep() == genv.CUDA_EP else "cpu")
    except grun.Unavailable as exc:
        pytest.skip(str(exc))
    gfig.RECORDER.package(pkg.name, pkg)
    return pkg


_SESSIONS: dict[tuple[Path, bool], Any] = {}


def _device_session(ort: Any, model: Path, *, cuda_graph: bool = False, **kw: Any) -> Any:
    """A device session with CPU fallback disabled; plain ones are shared by the tiers."""
    key = (model, cuda_graph)
    if not kw and key in _SESSIONS:
        return _SESSIONS[key]
    try:
        sess = grun.session(ort, model, providers=grun.CUDA_PROVIDERS, cuda_graph=cuda_graph, **kw)
    except Exception as exc:
        text = (str(exc).strip().splitlines() or [""])[0][:300]
        if "NOT_IMPLEMENTED" in str(exc) or "fallback" in str(exc):
            gfig.RECORDER.fallbacks.append(f"{model}: {text}")
            pytest.skip(f"{model.name}: no {grun.device_ep()} session (CPU fallback disabled): {text}")
        raise
    if not kw:
        _SESSIONS[key] = sess
    return sess


def _fits(gpu: genv.GpuInfo, package: Path, tier: int) -> None:
    limit = grun.context_length(package)
    assert limit is None or tier <= limit, f"the package's context_length {limit} is below the tier {tier}"
    weights = sum(p.stat().st_size for p in package.rglob("*") if p.is_file())
    kv = tier * 48 * 2 * 2 * 16 * 2 * 2  # generous: every layer with full-length fp16 K and V
    budget = 0.8 * (gpu.memory_mib or 0) * 2**20
    if weights + kv > budget:
        pytest.skip(f"tier {tier}: {(weights + kv) / 2**30:.1f} GiB needed, 80% of {gpu.name} is {budget / 2**30:.1f} GiB")


@pytest.mark.parametrize("variant", ["faithful", "cpu"])
@pytest.mark.parametrize("tier", TIER_NAMES)
def test_time_to_first_token(benchmark: Any, ort_module: Any, packages: grun.PackageFactory, gpu: genv.GpuInfo,
                             profile: Profile, env_info: dict[str, Any], tier: str, variant: str) -> None:
    length = profile.tier(tier)
    pkg = _package(packages, profile, variant)
    _fits(gpu, pkg, length)
    sess = _device_session(ort_module, grun.target_graph(pkg))
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    feeds = stepper.feeds(seq=length, past=0)
    first = stepper.run(feeds)  # a run error fails the test
    assert np.isfinite(first["logits"].astype(np.float32)).all(), f"{tier} prefill: non-finite logits"
    samples: list[float] = []

    def prefill() -> None:
        t0 = time.perf_counter()
        stepper.run(feeds)
        samples.append(1e3 * (time.perf_counter() - t0))

    benchmark.extra_info.update(env_info, tier=tier, tokens=length, variant=variant, profile=profile.name)
    benchmark.pedantic(prefill, rounds=profile.rounds + 2, warmup_rounds=1, iterations=1)
    gfig.RECORDER.tier(f"{variant}/{tier}", tokens=length, ttft_ms=gfig.spread(samples), ttft_ms_samples=samples,
                       package=pkg.name)


@pytest.mark.parametrize("variant", ["faithful", "cpu"])
@pytest.mark.parametrize("tier", TIER_NAMES)
def test_decode_tokens_per_second(benchmark: Any, ort_module: Any, packages: grun.PackageFactory,
                                  gpu: genv.GpuInfo, profile: Profile, env_info: dict[str, Any],
                                  tier: str, variant: str) -> None:
    length = profile.tier(tier)
    pkg = _package(packages, profile, variant)
    _fits(gpu, pkg, length)
    model = grun.target_graph(pkg)
    sess = _device_session(ort_module, model)
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    start = length - profile.decode_tokens if length > profile.decode_tokens else length
    tps: list[float] = []
    ids: list[int] = []

    def decode() -> None:
        nonlocal ids
        times, ids = grun.decode_iobinding(ort_module, stepper, start=start, tokens=profile.decode_tokens)
        tps.append(len(times) / sum(times))

    benchmark.extra_info.update(env_info, tier=tier, variant=variant, profile=profile.name,
                                decode_tokens=profile.decode_tokens, iobinding=True)
    benchmark.pedantic(decode, rounds=profile.rounds, warmup_rounds=1, iterations=1)
    assert len(ids) == profile.decode_tokens and all(0 <= t < stepper.vocab for t in ids)
    graph_note = _cuda_graph_decode(ort_module, model, start, profile, tier)
    gfig.RECORDER.tier(f"{variant}/{tier}", tokens=length, decode_tokens=profile.decode_tokens, prefilled=start,
                       decode_tps=gfig.spread(tps), decode_tps_samples=tps, iobinding=True, cuda_graph=graph_note,
                       package=pkg.name)


FULL_LAYERS = 48  # the real model's layer count (the slice's figures are extrapolated to it)
SLICE_DECODE_TOKENS = 64  # per timed request of the slice (state the count: it is recorded)


@pytest.mark.parametrize("variant", ["cpu"])  # the variant every targeted ORT build runs (8 GB: one only)
def test_slice_decode_extrapolated(ort_module: Any, packages: grun.PackageFactory, gpu: genv.GpuInfo,
                                   profile: Profile, variant: str) -> None:
    """Decode on the real-dimension slice at the 2K tier; the per-layer time, extrapolated to 48
    layers, is recorded under ``extrapolated`` (never as a measured tier)."""
    if profile.slice_preset is None:
        pytest.skip(f"profile {profile.name} runs no slice")
    past = profile.tier("2K")
    try:
        pkg = packages.synth(variant=variant, **slice_synth_args(profile))
    except grun.Unavailable as exc:
        pytest.skip(str(exc))
    gfig.RECORDER.package(pkg.name, pkg)
    _fits(gpu, pkg, past)
    sess = _device_session(ort_module, grun.target_graph(pkg))
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    layers = grun.layer_count(pkg)
    tokens = min(SLICE_DECODE_TOKENS, profile.decode_tokens)
    steps: list[float] = []
    for _ in range(profile.rounds):
        times, ids = grun.decode_iobinding(ort_module, stepper, start=past, tokens=tokens)
        assert len(ids) == tokens and all(0 <= t < stepper.vocab for t in ids)
        steps.append(sum(times) / len(times))
    step = float(np.median(steps))
    fig = gfig.extrapolate_layers({layers: step}, FULL_LAYERS)
    fig.update(preset=profile.slice_preset, variant=variant, past=past, decode_tokens=tokens,
               step_s_samples=steps, package=pkg.name)
    gfig.RECORDER.extrapolations[f"{variant}/slice-{past}"] = fig
    assert fig["tokens_per_s"] > 0


def slice_synth_args(profile: Profile) -> dict[str, str]:
    """The ``packages.synth`` arguments of a profile's slice package (run-offline.sh prepares it)."""
    assert profile.slice_preset is not None
    return {"preset": profile.slice_preset, "context_length": str(max(256, 2 * profile.tier("2K")))}


def _cuda_graph_decode(ort: Any, model: Path, start: int, profile: Profile, tier: str) -> dict[str, Any]:
    """Decode with ``enable_cuda_graph=1`` (CUDA only): tokens/s, or ORT's reason it cannot run."""
    if grun.device_ep() != genv.CUDA_EP:
        return {"status": "not on CUDA (dry run)"}
    try:
        sess = _device_session(ort, model, cuda_graph=True)
        stepper = grun.Stepper(sess, grun.vocab_of(sess))
        times, _ids = grun.decode_iobinding(ort, stepper, start=start, tokens=profile.decode_tokens)
    except Exception as exc:  # recorded: CUDA Graph needs static shapes the growing cache may not give
        return {"status": "unavailable", "reason": (str(exc).strip().splitlines() or [""])[0][:300]}
    return {"status": "ok", "tps": len(times) / sum(times)}


@pytest.mark.parametrize("optimized", [False, True], ids=["unoptimized", "optimized"])
@pytest.mark.parametrize("variant", ["faithful", "cpu"])
def test_kernels_per_verification_cycle(benchmark: Any, ort_module: Any, packages: grun.PackageFactory,
                                        profile: Profile, env_info: dict[str, Any], tmp_path: Path,
                                        variant: str, optimized: bool) -> None:
    pkg = _package(packages, profile, variant, optimized=optimized)
    model = grun.target_graph(pkg)
    past = profile.tier("2K")
    profiled = _device_session(ort_module, model, profile_prefix=str(tmp_path / "verify"))
    pstep = grun.Stepper(profiled, grun.vocab_of(profiled))
    feeds = pstep.feeds(seq=VERIFY_TOKENS, past=past)
    pstep.run(feeds)  # warm-up; a run error fails the test
    pstep.run(feeds)
    kernels, counted = grun.kernels_in_profile(profiled.end_profiling(), ep=grun.device_ep())
    assert kernels > 0, f"no {counted} in the profile of a verification step"
    gfig.RECORDER.kernels[f"{variant}/{'optimized' if optimized else 'unoptimized'}"] = {
        "kernels": kernels, "counted": counted, "verify_tokens": VERIFY_TOKENS, "past": past, "package": pkg.name}
    sess = _device_session(ort_module, model)
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    benchmark.extra_info.update(env_info, tier="2K", variant=variant, profile=profile.name, optimized=optimized,
                                kernels_per_cycle=kernels, kernels_counted=counted, verify_tokens=VERIFY_TOKENS)
    benchmark.pedantic(stepper.run, args=(feeds,), rounds=profile.rounds + 2, warmup_rounds=1, iterations=1)
