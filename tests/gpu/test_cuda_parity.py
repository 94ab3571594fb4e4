"""CUDA parity on synthetic packages: prefill + decode steps, logits and every present state.

Invariants guarded (explicit rtol/atol per dtype in q38gpu_run.TOLERANCES; integer outputs exact):
* CUDA and CPU agree on the ``cpu`` variant (the only one with every CPU kernel);
* ``q38 optimize`` output agrees with its input on CUDA, for the ``cpu`` and ``faithful`` variants;
* ``q38 offload`` output under ``session.moe.offload.mode=required`` and ``auto`` agrees with the
  resident (unconverted) package on CUDA.
Each case skips, with the reason, when the build lacks a kernel or offload support.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import q38gpu_env as genv
import q38gpu_run as grun

from q38._ops import DYNAMIC_SPARSE_ATTENTION, HC_LOW_RANK_MIX, QMOE, RMS_NORM_ROTARY

PREFILL = 16
DECODE = 4


def _make(fn: Callable[[], Path]) -> Path:
    try:
        return fn()
    except grun.Unavailable as exc:
        pytest.skip(str(exc))


def _steps(ort: Any, package: Path, providers: list[Any], config: dict[str, str] | None = None) -> list[dict[str, Any]]:
    model = grun.target_graph(package)
    try:
        sess = grun.session(ort, model, providers=providers, config=config)
    except Exception as exc:
        text = str(exc)
        if "NOT_IMPLEMENTED" in text:
            pytest.skip(f"{model.name}: onnxruntime {ort.__version__} cannot create this session: "
                        f"{text.strip().splitlines()[0][:300]}")
        raise
    return grun.Stepper(sess, grun.vocab_of(sess)).steps(prefill=PREFILL, decode=DECODE)


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
    for op in (RMS_NORM_ROTARY, HC_LOW_RANK_MIX):
        require_cuda_op(op)
    if variant == "faithful":
        require_cuda_op(DYNAMIC_SPARSE_ATTENTION)
    src = _make(lambda: packages.synth(variant=variant))
    opt = _make(lambda: packages.optimize(src))
    _assert_parity(_steps(ort_module, src, grun.CUDA_PROVIDERS), _steps(ort_module, opt, grun.CUDA_PROVIDERS),
                   "optimized_vs_unoptimized")


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


def test_the_cuda_ep_runs_on_the_detected_gpu(gpu: genv.GpuInfo, ort_features: genv.OrtFeatures) -> None:
    assert genv.CUDA_EP in ort_features.providers
    assert gpu.name and gpu.driver
