"""The GPU suite's environment: every test here is marked ``gpu`` and skips with the exact reason.

Session facts (printed in the header, recorded in every benchmark's ``extra_info``): the
onnxruntime version and providers, the GPU (nvidia-smi, else cudart), the compute capability and
the features probed from the installed build (tests/gpu/q38gpu_env.py).

Fixtures: ``gpu`` (GpuInfo; skips without a usable CUDA EP), ``ort_features`` (OrtFeatures),
``require_cuda_op(op)``, ``require_offload()``, ``packages`` (synthetic packages made through the
q38 CLI for the installed onnxruntime, cached per session), ``env_info`` (the extra_info block).

A skip is not a pass (tests/gpu/q38gpu_gate.py): with a GPU visible, or under ``--dry-run-cpu``
(the CPU EP in place of CUDA, the tiny profile), a skip no rule of tests/gpu/manifest.json allows
(``--allow-skip RULE`` adds one) fails the session, and so does a GPU that nvidia-smi lists but
the CUDA EP cannot use (a probe error). ``--figures PATH`` writes the run's figures JSON (and a PNG
next to it; tests/gpu/q38gpu_figures.py).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # the helper modules next to this conftest
    sys.path.insert(0, str(HERE))

import q38gpu_env as genv  # noqa: E402
import q38gpu_figures as gfig  # noqa: E402
import q38gpu_gate as gate  # noqa: E402
import q38gpu_run as grun  # noqa: E402

_DRY_RUN = {"on": False}
_OUTCOMES: dict[str, tuple[str, str]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("q38 gpu")
    group.addoption("--dry-run-cpu", action="store_true",
                    help="run the GPU suite's logic on the CPU EP (where kernels exist), tiny profile")
    group.addoption("--allow-skip", action="append", default=[], metavar="RULE",
                    help="accept the skips of this manifest rule (or test-id glob); repeatable")
    group.addoption("--gate-min-passed", type=int, default=None, metavar="N",
                    help="the fewest passes the gate accepts (default: the manifest's, for a full run)")
    group.addoption("--figures", default=None, metavar="PATH", help="write the run's figures JSON (and PNG) here")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--dry-run-cpu", default=False):
        _DRY_RUN["on"] = True
        grun.use_cpu_in_place_of_cuda()


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
    if _DRY_RUN["on"]:
        try:
            return genv.dry_run_gpu(), genv.probe_ort(ort, ep=genv.CPU_EP), ""
        except RuntimeError as exc:
            return genv.dry_run_gpu(), None, str(exc)
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
    try:
        return gpu, genv.probe_ort(ort), ""
    except RuntimeError as exc:  # a probe that crashed: the gate fails the run on it
        return gpu, None, str(exc)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.gpu)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if HERE not in Path(report.fspath).resolve().parents:
        return
    previous = _OUTCOMES.get(report.nodeid, ("passed", ""))[0]
    if report.skipped:
        _OUTCOMES[report.nodeid] = ("skipped", gate.skip_reason(report))
    elif report.failed:
        _OUTCOMES[report.nodeid] = ("error" if report.when != "call" else "failed", "")
    elif report.when == "call" and previous not in {"failed", "error"}:
        _OUTCOMES[report.nodeid] = ("passed", "")


def _gate_active() -> bool:
    """The gate judges a run with a GPU visible (nvidia-smi / cudart) or a dry run; else all skip."""
    return _DRY_RUN["on"] or genv.detect_gpu()[0] is not None


def _verdict(config: pytest.Config) -> gate.Verdict | None:
    if not _gate_active() or not _OUTCOMES:
        return None
    ort, _why = _ort()
    gpu, _features, reason = _state()
    memory = gpu.memory_mib if gpu is not None else None
    probe_errors = [reason] if reason else []
    return gate.judge(gate.load_manifest(), _OUTCOMES, ort_version=ort.__version__ if ort else "none",
                      klass=gate.gpu_class(memory, dry_run=_DRY_RUN["on"]),
                      allow=config.getoption("--allow-skip", default=[]), probe_errors=probe_errors,
                      floor=config.getoption("--gate-min-passed", default=None))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    verdict = _verdict(session.config)
    session.config.stash[_VERDICT] = verdict
    figures = session.config.getoption("--figures", default=None)
    if figures:
        gfig.write(Path(figures), gfig.RECORDER, verdict=verdict, dry_run=_DRY_RUN["on"])
    if verdict is not None and not verdict.ok and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    verdict = config.stash.get(_VERDICT, None)
    if verdict is not None:
        for line in verdict.lines():
            terminalreporter.write_line(line)


_VERDICT = pytest.StashKey[gate.Verdict | None]()


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
    if _DRY_RUN["on"]:
        lines.append("q38 gpu: DRY RUN on the CPU EP (--dry-run-cpu): the suite's logic, no GPU figures")
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
        if ok:
            return
        if why.startswith(genv.PROBE_ERROR):
            pytest.fail(why)  # a probe that broke is not a missing kernel
        pytest.skip(why)

    return need


@pytest.fixture
def require_offload(ort_features: genv.OrtFeatures, gpu: genv.GpuInfo) -> Callable[[], None]:
    def need() -> None:
        if grun.device_ep() != genv.CUDA_EP:
            pytest.skip("QMoE offload is CUDA-only (dry run on the CPU EP)")
        ok, why = ort_features.offload
        if why.startswith(genv.PROBE_ERROR):
            pytest.fail(why)
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
        "ep": grun.DEVICE_PROVIDERS[0] if isinstance(grun.DEVICE_PROVIDERS[0], str) else grun.DEVICE_PROVIDERS[0][0],
        "gpu_model": gpu.name,
        "gpu_driver": gpu.driver,
        "compute_capability": ".".join(map(str, gpu.compute_capability or ())),
        "gpu_memory_mib": gpu.memory_mib,
    }


@pytest.fixture(scope="session")
def packages(tmp_path_factory: pytest.TempPathFactory, gpu: genv.GpuInfo) -> grun.PackageFactory:
    ort, _ = _ort()
    prepared = os.environ.get("Q38_GPU_PACKAGES")  # run-offline.sh synthesized them there (timed)
    root = Path(prepared) if prepared else tmp_path_factory.mktemp("pkgs")
    return grun.PackageFactory(root, target_ort=grun.target_for(ort.__version__))
