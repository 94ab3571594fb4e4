"""The GPU suite's environment: every test here is marked ``gpu`` and skips with the exact reason.

Session facts (printed in the header, recorded in every benchmark's ``extra_info``): the
onnxruntime version and providers, the GPU (nvidia-smi, else cudart), the compute capability and
the features probed from the installed build (tests/gpu/q38gpu_env.py).

Fixtures: ``gpu`` (GpuInfo; skips without a usable CUDA EP), ``ort_features`` (OrtFeatures),
``require_cuda_op(op)``, ``require_offload()``, ``packages`` (synthetic packages made through the
q38 CLI, cached per session), ``env_info`` (the extra_info block).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # the helper modules next to this conftest
    sys.path.insert(0, str(HERE))

import q38gpu_env as genv  # noqa: E402
import q38gpu_run as grun  # noqa: E402


@functools.cache
def _ort() -> tuple[Any | None, str]:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return None, f"onnxruntime is not importable: {exc}"
    return ort, ""


@functools.cache
def _state() -> tuple[genv.GpuInfo | None, genv.OrtFeatures | None, str]:
    """(gpu, features, skip reason); the reason is empty when CUDA sessions can run."""
    ort, why = _ort()
    if ort is None:
        return None, None, why
    gpu, gpu_why = genv.detect_gpu()
    providers = tuple(ort.get_available_providers())
    if genv.CUDA_EP not in providers:
        return gpu, None, (f"onnxruntime {ort.__version__} has no {genv.CUDA_EP} (providers: {', '.join(providers)}); "
                           "install onnxruntime-gpu (nox -s gpu)")
    if gpu is None:
        return None, None, f"{genv.CUDA_EP} is installed but no GPU is visible: {gpu_why}"
    ok, cuda_why = grun.cuda_session_works(ort)
    if not ok:
        return gpu, None, f"{genv.CUDA_EP} cannot create a session on {gpu.name}: {cuda_why}"
    return gpu, genv.probe_ort(ort), ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.gpu)


def pytest_report_header() -> list[str]:
    ort, why = _ort()
    gpu, features, reason = _state()
    lines = [f"q38 gpu: onnxruntime {ort.__version__ if ort else why}"]
    if ort is not None:
        lines.append(f"q38 gpu: providers {', '.join(ort.get_available_providers())}")
    if gpu is not None:
        lines.append(f"q38 gpu: {gpu.name}, driver {gpu.driver}, compute capability {gpu.compute_capability}, "
                     f"{gpu.memory_mib} MiB ({gpu.source})")
    if features is not None:
        lines.append(f"q38 gpu: QMoE offload config: {features.offload[1]}")
        for op in genv.PROBED_OPS:
            ok, how = features.has_cuda_op(op)
            lines.append(f"q38 gpu: CUDA {op}: {'yes' if ok else 'no'} ({how})")
    if reason:
        lines.append(f"q38 gpu: every test skips: {reason}")
    return lines


@pytest.fixture(scope="session")
def gpu() -> genv.GpuInfo:
    info, _features, reason = _state()
    if reason or info is None:
        pytest.skip(reason or "no GPU")
    return info


@pytest.fixture(scope="session")
def ort_features(gpu: genv.GpuInfo) -> genv.OrtFeatures:
    _info, features, reason = _state()
    if features is None:
        pytest.skip(reason)
    return features


@pytest.fixture(scope="session")
def ort_module(gpu: genv.GpuInfo) -> Any:
    ort, _ = _ort()
    return ort


@pytest.fixture
def require_cuda_op(ort_features: genv.OrtFeatures) -> Callable[[str], None]:
    def need(op: str) -> None:
        ok, why = ort_features.has_cuda_op(op)
        if not ok:
            pytest.skip(why)

    return need


@pytest.fixture
def require_offload(ort_features: genv.OrtFeatures, gpu: genv.GpuInfo) -> Callable[[], None]:
    def need() -> None:
        ok, why = ort_features.offload
        if not ok:
            pytest.skip(why)
        if gpu.sm is not None and gpu.sm < 80:
            pytest.skip(f"QMoE offload needs SM80 or later; {gpu.name} is SM{gpu.sm}")

    return need


@pytest.fixture(scope="session")
def env_info(gpu: genv.GpuInfo, ort_features: genv.OrtFeatures) -> dict[str, Any]:
    """The identity block every benchmark records (the release gate compares these keys)."""
    return {
        "ort_version": ort_features.version,
        "ep": genv.CUDA_EP,
        "gpu_model": gpu.name,
        "gpu_driver": gpu.driver,
        "compute_capability": ".".join(map(str, gpu.compute_capability or ())),
        "gpu_memory_mib": gpu.memory_mib,
    }


@pytest.fixture(scope="session")
def packages(tmp_path_factory: pytest.TempPathFactory, gpu: genv.GpuInfo) -> grun.PackageFactory:
    return grun.PackageFactory(tmp_path_factory.mktemp("pkgs"))
