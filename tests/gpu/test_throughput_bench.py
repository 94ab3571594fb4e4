"""Throughput on the device (pytest-benchmark + tests/gpu/q38gpu_figures.py): what the anchor measures.

* decode tokens/s per context tier (2K / 8K / 16K / 32K on an H200) after a cache made by a real
  prefill, greedy, with IOBinding (state stays on the device), warm-up steps outside the samples;
  the peak memory of the decode beside ``q38 fit``'s prediction (q38gpu_memory); a CUDA Graph
  decode only where ORT allows it (q38gpu_graph), else "not attempted" with the reason;
* time to first token per tier (a prefill of the tier's length, outputs bound to the device);
* kernels per verification cycle (4 tokens at a 2K context) from ORT's profiler, of the package
  before and after ``q38 optimize``.

Device sessions record ORT's EP assignment (q38gpu_assign): the list goes into the figures, and a
compute node on the CPU EP fails the test, named (shape subgraphs belong there). A run error fails
the test; only a package that cannot exist on this build (no kernel, per the manifest) skips.

Profiles: ``h200`` (>= 100 GiB), ``80gb`` (>= 70 GiB: H100 / A100 80 GB), ``consumer`` (>= 20 GiB),
``tiny`` (``--dry-run-cpu``: short tiers named like the real ones). ``Q38_GPU_PROFILE=NAME``
overrides the choice by memory; the decoded-token count per request is the profile's
``decode_tokens`` and is recorded with every figure. :func:`estimate_s` states a profile's run time
from its step counts (docs/gpu.md).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import q38gpu_env as genv
import q38gpu_figures as gfig
import q38gpu_graph as ggraph
import q38gpu_memory as gmem
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
    "h200": Profile("h200", 100, "large", 4.0, 128, (2048, 8192, 16384, 32768), slice_preset="slice"),
    "80gb": Profile("80gb", 70, "large", 4.0, 128, (2048, 8192, 16384, 32768), slice_preset="slice"),
    "consumer": Profile("consumer", 20, "large", 2.0, 64, (2048, 8192, 16384, 32768)),
    "tiny": Profile("tiny", 0, "tiny", None, 4, (32, 64, 96, 128), rounds=1, slice_preset="tiny"),
}
WARMUP_STEPS = 8  # decode steps run before the timed rounds, outside the samples (tiny: decode_tokens)

# What estimate_s assumes of an H100 (labelled assumptions, not measurements; docs/gpu.md): a
# launch-bound decode step of the large preset, its prefill rate, and creating one 4-8 GB session.
ASSUMED_STEP_S = 0.030
ASSUMED_PREFILL_TOKENS_PER_S = 20_000.0
ASSUMED_SESSION_S = 10.0


def estimate_s(profile: Profile) -> dict[str, float]:
    """The suite's device time for ``profile``, from its step counts and the ASSUMED_* costs: decode
    steps (warm-up + rounds x decode_tokens per tier and variant, the slice's 64 x rounds), prefill
    tokens (one cache per tier and variant, a warm-up and rounds + 1 TTFT prefills), sessions (two variants plain,
    two optimized, four profiled, the slice). Parity and probes run on the tiny preset (seconds)."""
    variants = 2
    steps = variants * len(profile.tiers) * (WARMUP_STEPS + profile.rounds * profile.decode_tokens)
    if profile.slice_preset is not None:
        steps += profile.rounds * SLICE_DECODE_TOKENS
    prefill_tokens = variants * sum(profile.tiers) * (1 + 1 + profile.rounds + 1)
    if profile.slice_preset is not None:
        prefill_tokens += profile.tier("2K")
    sessions = 2 + 2 + 4 + (1 if profile.slice_preset is not None else 0)
    doc = {"decode_steps": float(steps), "decode_s": steps * ASSUMED_STEP_S,
           "prefill_tokens": float(prefill_tokens), "prefill_s": prefill_tokens / ASSUMED_PREFILL_TOKENS_PER_S,
           "sessions": float(sessions), "sessions_s": sessions * ASSUMED_SESSION_S}
    doc["total_s"] = doc["decode_s"] + doc["prefill_s"] + doc["sessions_s"]
    return doc


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


_SESSIONS: dict[Path, Any] = {}


def device_session(ort: Any, model: Path, **kw: Any) -> Any:
    """A device session whose EP assignment goes into the figures; a compute node on the CPU EP
    fails the test, named. Plain sessions are shared by the tiers. A creation error fails the
    test with ORT's own text (no CPU retry: enable_fallback=0); a node no EP has a kernel for skips
    (the manifest judges that skip)."""
    if not kw and model in _SESSIONS:
        return _SESSIONS[model]
    try:
        sess = grun.session(ort, model, providers=grun.CUDA_PROVIDERS, **kw)
    except Exception as exc:
        if grun.no_kernel(exc):
            gfig.RECORDER.fallbacks.append(f"{model}: {grun.error_text(exc)}")
            pytest.skip(f"{model.name}: no {grun.device_ep()} session: {grun.error_text(exc)}")
        pytest.fail(f"{model}: no {grun.device_ep()} session: {grun.error_text(exc)}")
    placed = grun.placement(sess, model)
    gfig.RECORDER.placements[f"{model.parent.name}/{model.name}"] = placed
    if placed["cpu_compute_nodes"]:
        gfig.RECORDER.fallbacks.extend(f"{model}: {n}" for n in placed["cpu_compute_nodes"])
        pytest.fail(f"{model.name}: {len(placed['cpu_compute_nodes'])} compute node(s) on the CPU EP: "
                    + ", ".join(placed["cpu_compute_nodes"][:20]))
    if not kw:
        _SESSIONS[model] = sess
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
    sess = device_session(ort_module, grun.target_graph(pkg))
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    _warm, first = grun.prefill_bound(ort_module, stepper, length=length)  # warm-up, outside the samples
    _token, finite = grun.last_token(first)  # the only host copy: after the timing
    del first
    samples: list[float] = []

    def prefill() -> None:
        seconds, _values = grun.prefill_bound(ort_module, stepper, length=length)
        samples.append(1e3 * seconds)

    benchmark.extra_info.update(env_info, tier=tier, tokens=length, variant=variant, profile=profile.name)
    benchmark.pedantic(prefill, rounds=profile.rounds + 1, warmup_rounds=0, iterations=1)
    gfig.RECORDER.tier(f"{variant}/{tier}", tokens=length, ttft_ms=gfig.spread(samples), ttft_ms_samples=samples,
                       ttft_outputs="bound to the device", ttft_logits_finite=finite, package=pkg.name)
    if not finite:
        gfig.RECORDER.notes.append(f"{variant}/{tier}: the prefill's last logits row is not finite")


@pytest.mark.parametrize("variant", ["faithful", "cpu"])
@pytest.mark.parametrize("tier", TIER_NAMES)
def test_decode_tokens_per_second(benchmark: Any, ort_module: Any, packages: grun.PackageFactory,
                                  gpu: genv.GpuInfo, profile: Profile, env_info: dict[str, Any],
                                  tier: str, variant: str) -> None:
    length = profile.tier(tier)
    pkg = _package(packages, profile, variant)
    _fits(gpu, pkg, length)
    model = grun.target_graph(pkg)
    sess = device_session(ort_module, model)
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    start = length - profile.decode_tokens if length > profile.decode_tokens else length
    tps: list[float] = []
    ids: list[int] = []
    with gmem.meter().peak() as peak:
        state, first = grun.prefill_state(ort_module, stepper, start=start)  # a real prefill, not zeros
        warm = min(WARMUP_STEPS, profile.decode_tokens)
        grun.decode_iobinding(ort_module, stepper, start=start, tokens=warm, state=state, token=first)

        def decode() -> None:
            nonlocal ids
            times, ids = grun.decode_iobinding(ort_module, stepper, start=start, tokens=profile.decode_tokens,
                                               state=state, token=first)
            tps.append(len(times) / sum(times))

        benchmark.extra_info.update(env_info, tier=tier, variant=variant, profile=profile.name,
                                    decode_tokens=profile.decode_tokens, iobinding=True)
        benchmark.pedantic(decode, rounds=profile.rounds, warmup_rounds=0, iterations=1)
    gfig.RECORDER.memory[f"{variant}/{tier}"] = gmem.judge(
        peak.result(), gmem.fit_prediction(pkg, context=start + profile.decode_tokens))
    assert len(ids) == profile.decode_tokens and all(0 <= t < stepper.vocab for t in ids)
    graph_note = cuda_graph_decode(sess, model)
    gfig.RECORDER.tier(f"{variant}/{tier}", tokens=length, decode_tokens=profile.decode_tokens, prefilled=start,
                       prefill="real", warmup_steps=warm, decode_tps=gfig.spread(tps), decode_tps_samples=tps,
                       iobinding=True, cuda_graph=graph_note, package=pkg.name)


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
    sess = device_session(ort_module, grun.target_graph(pkg))
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    layers = grun.layer_count(pkg)
    tokens = min(SLICE_DECODE_TOKENS, profile.decode_tokens)
    steps: list[float] = []
    state, first = grun.prefill_state(ort_module, stepper, start=past)
    grun.decode_iobinding(ort_module, stepper, start=past, tokens=min(WARMUP_STEPS, tokens), state=state, token=first)
    for _ in range(profile.rounds):
        times, ids = grun.decode_iobinding(ort_module, stepper, start=past, tokens=tokens, state=state, token=first)
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


def cuda_graph_decode(sess: Any, model: Path) -> dict[str, Any]:
    """Whether a CUDA Graph decode is attempted for this package, and why (not). These packages'
    caches grow by concatenation, so ggraph.plan refuses them ("not attempted" with the reason)
    and no ``enable_cuda_graph`` session is ever created for them: a replay over moving buffers
    can leave a sticky CUDA error that fails every later test. A fixed-state package would run
    through ggraph.FixedStateDecode."""
    placed = gfig.RECORDER.placements.get(f"{model.parent.name}/{model.name}", {})
    verdict = ggraph.plan(sess, placed.get("cpu_nodes", []) if grun.device_ep() == genv.CUDA_EP else [])
    return verdict.record()


@pytest.mark.parametrize("optimized", [False, True], ids=["unoptimized", "optimized"])
@pytest.mark.parametrize("variant", ["faithful", "cpu"])
def test_kernels_per_verification_cycle(benchmark: Any, ort_module: Any, packages: grun.PackageFactory,
                                        profile: Profile, env_info: dict[str, Any], tmp_path: Path,
                                        variant: str, optimized: bool) -> None:
    pkg = _package(packages, profile, variant, optimized=optimized)
    model = grun.target_graph(pkg)
    past = profile.tier("2K")
    profiled = device_session(ort_module, model, profile_prefix=str(tmp_path / "verify"))
    pstep = grun.Stepper(profiled, grun.vocab_of(profiled))
    feeds = pstep.feeds(seq=VERIFY_TOKENS, past=past)
    pstep.run(feeds)  # warm-up; a run error fails the test
    pstep.run(feeds)
    kernels, counted = grun.kernels_in_profile(profiled.end_profiling(), ep=grun.device_ep())
    assert kernels > 0, f"no {counted} in the profile of a verification step"
    gfig.RECORDER.kernels[f"{variant}/{'optimized' if optimized else 'unoptimized'}"] = {
        "kernels": kernels, "counted": counted, "verify_tokens": VERIFY_TOKENS, "past": past, "package": pkg.name}
    sess = device_session(ort_module, model)
    stepper = grun.Stepper(sess, grun.vocab_of(sess))
    benchmark.extra_info.update(env_info, tier="2K", variant=variant, profile=profile.name, optimized=optimized,
                                kernels_per_cycle=kernels, kernels_counted=counted, verify_tokens=VERIFY_TOKENS)
    benchmark.pedantic(stepper.run, args=(feeds,), rounds=profile.rounds + 2, warmup_rounds=1, iterations=1)
