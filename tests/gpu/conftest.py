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
the CUDA EP cannot use (a probe error). A broken kernel-registry child fails only the dump test.
``--figures PATH`` writes the run's figures JSON (and a PNG next to it; tests/gpu/q38gpu_figures.py)
after every test, so a run stopped by SIGINT / SIGTERM or by ``--budget-s N`` leaves a figures.json
naming what finished and what did not. Tests run in order of value (:data:`ORDER`): preflight,
kernel dump, parity, 2K and 32K decode, TTFT, the rest, onnxruntime-genai last. Warnings are shown,
not raised, in the GPU run.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import signal
import sys
import time
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
import q38gpu_memory as gmem  # noqa: E402
import q38gpu_run as grun  # noqa: E402

_DRY_RUN = {"on": False}
_OUTCOMES: dict[str, tuple[str, str]] = {}
# The run's clock, budget and memory meter (set in pytest_configure), and the pytest session.
_RUN: dict[str, Any] = {"start": time.monotonic(), "budget": None, "longest": 0.0, "session": None, "done": 0}
_DURATIONS: dict[str, float] = {}  # setup + call seconds of the test now running
# Test-id globs in order of value (a budget stops at the end of the list): unlisted tests come
# between the last ranked group and onnxruntime-genai, which runs last, after every measurement.
ORDER = (
    "*test_the_cuda_ep_runs_on_the_detected_gpu*",
    "*test_dump_the_ep_kernel_registry*",
    "*test_cuda_parity.py::*",
    "*test_decode_tokens_per_second[[]2K-*",
    "*test_decode_tokens_per_second[[]32K-*",
    "*test_time_to_first_token*",
)
LAST = ("*test_genai_cuda_generation*",)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("q38 gpu")
    group.addoption("--dry-run-cpu", action="store_true",
                    help="run the GPU suite's logic on the CPU EP (where kernels exist), tiny profile")
    group.addoption("--allow-skip", action="append", default=[], metavar="RULE",
                    help="accept the skips of this manifest rule (or test-id glob); repeatable")
    group.addoption("--gate-min-passed", type=int, default=None, metavar="N",
                    help="the fewest passes the gate accepts (default: the manifest's, for a full run)")
    group.addoption("--figures", default=None, metavar="PATH", help="write the run's figures JSON (and PNG) here")
    group.addoption("--budget-s", type=float, default=None, metavar="N",
                    help="stop cleanly within N seconds of the start, in order of value, writing the figures")


FINISH_RESERVE_S = 8.0  # of a budget: the verdict, figures.json and the PNG (matplotlib) after the last test


def process_age_s() -> float:
    """Seconds since this process started (/proc/self/stat's start time; 0 where unreadable): a
    budget counts the interpreter's and pytest's start-up too."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def pytest_configure(config: pytest.Config) -> None:
    _RUN["start"] = time.monotonic() - process_age_s()
    if config.getoption("--dry-run-cpu", default=False):
        _DRY_RUN["on"] = True
        grun.use_cpu_in_place_of_cuda()
    gmem.configure(device=not _DRY_RUN["on"])
    budget = config.getoption("--budget-s", default=None)
    if budget is not None:
        if budget <= 0:
            raise pytest.UsageError(f"--budget-s {budget}: must be positive")
        _RUN["budget"] = float(budget)
        signal.signal(signal.SIGALRM, _stop_by_signal)
        left = float(budget) - FINISH_RESERVE_S - (time.monotonic() - _RUN["start"])
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.01))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop_by_signal)


def _stop_by_signal(signum: int, _frame: Any) -> None:
    """SIGINT / SIGTERM / the budget's alarm: record why and end the run as pytest ends an interrupt
    (pytest_sessionfinish then writes the figures with what finished)."""
    why = (f"budget of {_RUN['budget']:.0f} s reached during a test" if signum == signal.SIGALRM
           else f"{signal.Signals(signum).name} after {time.monotonic() - _RUN['start']:.0f} s")
    gfig.RECORDER.stopped = gfig.RECORDER.stopped or why
    signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process the ordinary way
    raise KeyboardInterrupt(why)


def rank(nodeid: str) -> int:
    """The position of a test in the run's order of value (:data:`ORDER`, :data:`LAST`)."""
    for k, pattern in enumerate(ORDER):
        if fnmatch.fnmatchcase(nodeid, pattern):
            return k
    return len(ORDER) + 1 if any(fnmatch.fnmatchcase(nodeid, p) for p in LAST) else len(ORDER)


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
        except RuntimeError as exc:  # pragma: no cover - probe_ort keeps registry errors to itself
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if HERE in item.path.parents]
    for item in ours:
        item.add_marker(pytest.mark.gpu)
        item.add_marker(pytest.mark.filterwarnings("default"))  # shown, not raised, in the GPU run
    if ours:
        mine = {id(item) for item in ours}
        items.sort(key=lambda item: rank(item.nodeid) if id(item) in mine else -1)  # stable: the order of value
        gfig.RECORDER.collected[:] = [item.nodeid for item in items if id(item) in mine]
        _write_figures(config)


def pytest_sessionstart(session: pytest.Session) -> None:
    _RUN["session"] = session


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
    if report.when == "teardown":
        gfig.RECORDER.outcomes[report.nodeid] = _OUTCOMES.get(report.nodeid, ("passed", ""))[0]
        _RUN["longest"] = max(_RUN["longest"], _DURATIONS.pop(report.nodeid, 0.0) + report.duration)
        _RUN["done"] += 1
        _budget_check()
        session = _RUN["session"]
        if session is not None:
            _write_figures(session.config)
    else:
        _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def _budget_check() -> None:
    """Stop before a test that would not finish in the budget (the longest test so far as its guess)."""
    budget, session = _RUN["budget"], _RUN["session"]
    if budget is None or session is None or session.shouldstop:
        return
    if _RUN["done"] >= len(session.items):
        return  # no test is left: a run that finished is not stopped by its budget
    elapsed = time.monotonic() - _RUN["start"]
    if elapsed + _RUN["longest"] > budget - FINISH_RESERVE_S:
        why = (f"budget of {budget:.0f} s: {elapsed:.0f} s used, the next test may take {_RUN['longest']:.0f} s "
               "(the longest so far)")
        gfig.RECORDER.stopped = gfig.RECORDER.stopped or why
        session.shouldstop = why


def _write_figures(config: pytest.Config, verdict: gate.Verdict | None = None, *, png: bool = False) -> None:
    figures = config.getoption("--figures", default=None)
    if figures:
        gfig.RECORDER.timings["run_s"] = time.monotonic() - _RUN["start"]
        gfig.write(Path(figures), gfig.RECORDER, verdict=verdict, dry_run=_DRY_RUN["on"], png=png)


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
    floor = config.getoption("--gate-min-passed", default=None)
    if floor is None and gfig.RECORDER.stopped and _RUN["budget"] is not None:
        floor = 1  # a budgeted run judges what it ran; the tests it did not reach are listed as not run
    return gate.judge(gate.load_manifest(), _OUTCOMES, ort_version=ort.__version__ if ort else "none",
                      klass=gate.gpu_class(memory, dry_run=_DRY_RUN["on"]),
                      allow=config.getoption("--allow-skip", default=[]), probe_errors=probe_errors,
                      floor=floor, other_problems=gmem.problems(gfig.RECORDER.memory))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _RUN["budget"] is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
    verdict = _verdict(session.config)
    session.config.stash[_VERDICT] = verdict
    _write_figures(session.config, verdict, png=True)
    if (verdict is not None and verdict.ok and session.exitstatus == pytest.ExitCode.INTERRUPTED
            and gfig.RECORDER.stopped.startswith("budget of")):
        session.exitstatus = pytest.ExitCode.OK  # a budget is a deliberate, clean stop: the gate judges
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
        served = genv.served_by(ort)
        gfig.RECORDER.env.setdefault("served_by", served)
        lines.append(f"q38 gpu: {served['build_info']}")
        lines.append(f"q38 gpu: providers {', '.join(served['providers'])}")
        lines.append(f"q38 gpu: EP devices {'; '.join(served['ep_devices']) or 'none'}")
        lines.append(f"q38 gpu: CUDA EP {served['cuda_ep']}")
        if "error" in served:
            lines.append(f"q38 gpu: EP listing failed: {served['error']}")
    if gpu is not None:
        lines.append(f"q38 gpu: {gpu.name}, driver {gpu.driver}, compute capability {gpu.compute_capability}, "
                     f"{gpu.memory_mib} MiB ({gpu.source})")
    if features is not None:
        lines.append(f"q38 gpu: QMoE offload config: {features.offload[1]}")
        if features.registry_error:
            lines.append(f"q38 gpu: kernel registry: {features.registry_error} (fails the dump test only)")
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
