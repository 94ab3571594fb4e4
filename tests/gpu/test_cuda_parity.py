"""CUDA parity on synthetic packages: prefill + decode steps, logits and every present state.

Invariants guarded (explicit rtol/atol per dtype in q38gpu_run.TOLERANCES; integer outputs exact):
* CUDA and CPU agree on the ``cpu`` variant (the only one with every CPU kernel);
* ``q38 optimize --target-ort <installed>`` output agrees with its input on CUDA, for the ``cpu`` and
  ``faithful`` variants;
* ``q38 offload`` output under ``session.moe.offload.mode=required`` and ``auto`` agrees with the
  resident (unconverted) package on CUDA;
* greedy token IDs agree exactly (optimized vs unoptimized, offload vs resident): GREEDY tokens
  after a seeded prompt, next to the logits tolerances.
Each case skips, with the reason, when the build lacks a kernel or offload support (the gate's
manifest says which skips a run may have). Device sessions record ORT's EP assignment: a compute
node on the CPU EP fails the case, named (q38gpu_assign; shape subgraphs may stay on the CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import q38gpu_env as genv
import q38gpu_figures as gfig
import q38gpu_run as grun

from q38._ops import DYNAMIC_SPARSE_ATTENTION, QMOE

PREFILL = 16
DECODE = 4
GREEDY = 16


def _make(fn: Callable[[], Path]) -> Path:
    try:
        return fn()
    except grun.Unavailable as exc:
        pytest.skip(str(exc))


def _stepper(ort: Any, package: Path, providers: list[Any], config: dict[str, str] | None = None) -> grun.Stepper:
    model = grun.target_graph(package)
    try:
        sess = grun.session(ort, model, providers=providers, config=config)
    except Exception as exc:  # the real error (enable_fallback=0), not a CPU retry's
        if grun.no_kernel(exc):  # the package cannot exist on this build: the manifest judges the skip
            gfig.RECORDER.fallbacks.append(f"{model}: {grun.error_text(exc)}")
            pytest.skip(f"{model.name}: onnxruntime {ort.__version__} cannot create this session: "
                        f"{grun.error_text(exc)}")
        pytest.fail(f"{model.name}: onnxruntime {ort.__version__} cannot create this session: {grun.error_text(exc)}")
    if providers is grun.CUDA_PROVIDERS:
        placed = grun.placement(sess, model)
        gfig.RECORDER.placements[f"{package.name}/{model.name}"] = placed
        if placed["cpu_compute_nodes"]:
            gfig.RECORDER.fallbacks.extend(f"{model}: {n}" for n in placed["cpu_compute_nodes"])
            pytest.fail(f"{model.name}: compute node(s) on the CPU EP: {', '.join(placed['cpu_compute_nodes'][:20])}")
    return grun.Stepper(sess, grun.vocab_of(sess))


def _steps(ort: Any, package: Path, providers: list[Any], config: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return _stepper(ort, package, providers, config).steps(prefill=PREFILL, decode=DECODE)


def _assert_tokens(key: str, ref: grun.Stepper, got: grun.Stepper) -> None:
    a, b = grun.greedy(ref, prompt=PREFILL, tokens=GREEDY), grun.greedy(got, prompt=PREFILL, tokens=GREEDY)
    same = a == b
    first = next((k for k, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
    gfig.RECORDER.parity.setdefault(key, {}).update(tokens=GREEDY, token_ids_equal=same, first_mismatch=first,
                                                    verdict="pass" if same else "FAIL")
    assert same, f"{key}: greedy token ids differ from step {first}: {a} vs {b}"


def _assert_parity(ref: list[dict[str, Any]], got: list[dict[str, Any]], comparison: str) -> None:
    diffs = grun.compare_steps(ref, got, comparison=comparison)
    print("\n".join(d.line() for d in diffs))
    assert {d.name for d in diffs} >= {"logits"}
    assert any(d.name.startswith("present.") for d in diffs), "no present state compared"
    bad = [d.line() for d in diffs if not d.ok]
    assert not bad, f"{comparison}: {len(bad)} output(s) beyond tolerance:\n" + "\n".join(bad)


def test_cuda_matches_cpu_on_the_cpu_variant(ort_module: Any, packages: grun.PackageFactory) -> None:
    pkg = _make(lambda: packages.synth(variant="cpu"))
    _assert_parity(_steps(ort_module, pkg, grun.CPU_PROVIDERS), _steps(ort_module, pkg, grun.CUDA_PROVIDERS),
                   "cuda_vs_cpu")


@pytest.mark.parametrize("variant", ["cpu", "faithful"])
def test_optimized_graph_matches_the_unoptimized_graph_on_cuda(
    ort_module: Any, packages: grun.PackageFactory, require_cuda_op: Callable[[str], None], variant: str
) -> None:
    # q38 optimize --target-ort (the installed release) emits only ops that release has kernels for.
    if variant == "faithful":
        require_cuda_op(DYNAMIC_SPARSE_ATTENTION)
    src = _make(lambda: packages.synth(variant=variant))
    opt = _make(lambda: packages.optimize(src, target="cuda" if grun.device_ep() == genv.CUDA_EP else "cpu"))
    _assert_parity(_steps(ort_module, src, grun.CUDA_PROVIDERS), _steps(ort_module, opt, grun.CUDA_PROVIDERS),
                   "optimized_vs_unoptimized")
    _assert_tokens(f"optimized_vs_unoptimized/{variant}", _stepper(ort_module, src, grun.CUDA_PROVIDERS),
                   _stepper(ort_module, opt, grun.CUDA_PROVIDERS))


@pytest.mark.parametrize("mode", ["required", "auto"])
@pytest.mark.parametrize("variant", ["cpu", "faithful"])
def test_offload_matches_resident_on_cuda(
    ort_module: Any, packages: grun.PackageFactory, require_offload: Callable[[], None],
    require_cuda_op: Callable[[str], None], variant: str, mode: str,
) -> None:
    require_offload()
    require_cuda_op(QMOE)
    if variant == "faithful":
        require_cuda_op(DYNAMIC_SPARSE_ATTENTION)
    src = _make(lambda: packages.synth(variant=variant))
    off = _make(lambda: packages.offload(src, mode=mode))
    entries = grun.offload_entries(off)
    assert entries.get("session.moe.offload.mode") == mode, entries
    resident = _steps(ort_module, src, grun.CUDA_PROVIDERS)
    offloaded = _steps(ort_module, off, grun.CUDA_PROVIDERS, entries)
    _assert_parity(resident, offloaded, "offload_vs_resident")
    _assert_tokens(f"offload_vs_resident/{variant}/{mode}", _stepper(ort_module, src, grun.CUDA_PROVIDERS),
                   _stepper(ort_module, off, grun.CUDA_PROVIDERS, entries))


def test_the_cuda_ep_runs_on_the_detected_gpu(gpu: genv.GpuInfo, ort_features: genv.OrtFeatures,
                                              env_info: dict[str, Any], ort_module: Any) -> None:
    assert grun.device_ep() in ort_features.providers
    assert gpu.name and gpu.driver
    gfig.RECORDER.env.update(env_info, providers=list(ort_features.providers),
                             ort_build=genv.ort_build_info(), gpu_source=gpu.source,
                             served_by=genv.served_by(ort_module))
