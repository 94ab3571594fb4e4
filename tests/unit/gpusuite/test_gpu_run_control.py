"""The GPU run survives what ends it early (tests/gpu/conftest.py), proven with the CPU dry run.

Invariants guarded (issue 41 items 4, 8 and 9; the acceptance's dry-run checks, with shorter times:
the logic does not depend on them):
* a kernel-registry child killed by a signal fails only the dump test, naming the signal; the
  other tests run and pass (before: the ``gpu`` fixture skipped every test); a child that does not
  answer is killed at its limit and reported, never a ``TimeoutExpired`` out of the header;
* SIGINT and SIGTERM each end the run with a figures.json naming the tests that finished, those
  that did not, and the signal;
* ``--budget-s N`` stops the run within N + 10 s of its start with figures saying the budget
  stopped it, the tests in order of value (preflight, kernel dump, parity, 2K decode first).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parents[2] / "gpu"
ROOT = GPU_DIR.parents[1]
TESTS = [f"{GPU_DIR}/test_cuda_kernels.py::test_dump_the_ep_kernel_registry",
         f"{GPU_DIR}/test_cuda_parity.py::test_the_cuda_ep_runs_on_the_detected_gpu",
         *(f"{GPU_DIR}/test_throughput_bench.py::test_decode_tokens_per_second[{t}-cpu]" for t in ("2K", "8K", "16K", "32K")),
         *(f"{GPU_DIR}/test_throughput_bench.py::test_time_to_first_token[{t}-cpu]" for t in ("2K", "8K", "16K", "32K")),
         f"{GPU_DIR}/test_throughput_bench.py::test_kernels_per_verification_cycle[cpu-unoptimized]"]
# A sitecustomize that kills the registry child (python -c <script naming get_all_opkernel_def>) with SIGSEGV,
# as onnxruntime-gpu 1.31.1 does when the CUDA libraries cannot be loaded.
KILL_REGISTRY = """import os, signal, sys
if "get_all_opkernel_def" in " ".join(getattr(sys, "orig_argv", [])):
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_a_registry_child_that_hangs_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(GPU_DIR))
    import q38gpu_env as genv

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(KILL_REGISTRY.replace("os.kill(os.getpid(), signal.SIGSEGV)",
                                                                 "import time; time.sleep(60)"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    assert genv.CHILD_TIMEOUT_S <= 90  # the limit for a probe child
    monkeypatch.setattr(genv, "CHILD_TIMEOUT_S", 2)
    genv.opkernel_defs.cache_clear()
    start = time.monotonic()
    try:
        kernels, error = genv.registry_ops(genv.CPU_EP)
    finally:
        genv.opkernel_defs.cache_clear()
    assert time.monotonic() - start < 30
    assert kernels == frozenset()
    assert error == "PROBE ERROR: get_all_opkernel_def for CPUExecutionProvider: no answer in 2 s (child killed)"
    assert genv.child_failure("x", -11, "boom\n").startswith("PROBE ERROR: x: the child was killed by SIGSEGV")
    assert genv.child_failure("x", 1, "E: no lib\n") == "PROBE ERROR: x failed (exit 1): E: no lib"


def _argv(figures: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *extra, "--dry-run-cpu", "--figures", str(figures), "-p", "no:xdist",
            "-p", "no:cacheprovider", "-q", "--benchmark-disable", "-o", "addopts="]


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {**os.environ, "Q38_GPU_OUT": str(tmp_path), **more}


@pytest.mark.slow
def test_a_registry_child_killed_by_a_signal_fails_only_the_dump(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(KILL_REGISTRY)
    figures = tmp_path / "figures.json"
    env = _env(tmp_path, PYTHONPATH=os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(_argv(figures, *TESTS[:3], "--gate-min-passed", "2"), capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600, check=False)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "1 failed, 2 passed" in proc.stdout
    assert "get_all_opkernel_def for CPUExecutionProvider: the child was killed by SIGSEGV" in proc.stdout
    finished = json.loads(figures.read_text())["tests"]["finished"]
    assert finished == {TESTS[0].replace(f"{ROOT}/", ""): "failed", TESTS[1].replace(f"{ROOT}/", ""): "passed",
                        TESTS[2].replace(f"{ROOT}/", ""): "passed"}


def _run_until_one_finished(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path, float]:
    figures = tmp_path / "figures.json"
    start = time.monotonic()
    proc = subprocess.Popen(_argv(figures, *TESTS, *extra), cwd=ROOT, env=_env(tmp_path), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while time.monotonic() - start < 300:
        if figures.is_file() and len(json.loads(figures.read_text())["tests"]["finished"]) >= 3:
            break
        if proc.poll() is not None:
            pytest.fail(f"the run ended before three tests finished: {proc.communicate()[0][-3000:]}")
        time.sleep(0.5)
    return proc, figures, start


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_leaves_figures_naming_what_finished(tmp_path: Path, sig: signal.Signals) -> None:
    proc, figures, _start = _run_until_one_finished(tmp_path)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    doc = json.loads(figures.read_text())
    tests = doc["tests"]
    assert len(tests["finished"]) >= 3 and tests["not_run"], tests
    assert tests["stopped"].startswith(f"{sig.name} after ")
    assert set(tests["finished"]) | set(tests["not_run"]) >= {t.replace(f"{ROOT}/", "") for t in TESTS[2:]}
    assert doc["gate"] is not None and doc["placements"]  # the final write, with the verdict and what ran


@pytest.mark.slow
def test_a_budget_stops_the_run_in_time_with_figures(tmp_path: Path) -> None:
    # 15 s less the 8 s kept for the figures: the whole list (about 12 s on an idle 2-core
    # machine) cannot finish, so the budget stops it however fast the machine is.
    budget = 15
    figures = tmp_path / "figures.json"
    start = time.monotonic()
    proc = subprocess.run(_argv(figures, *TESTS, "--budget-s", str(budget)), capture_output=True, text=True,
                          cwd=ROOT, env=_env(tmp_path), timeout=600, check=False)
    wall = time.monotonic() - start
    assert wall <= budget + 10, (wall, proc.stdout[-3000:])
    doc = json.loads(figures.read_text())
    tests = doc["tests"]
    assert f"budget of {budget} s" in tests["stopped"] and tests["not_run"], tests
    order = [t.split("::")[1] for t in tests["order"]]
    assert tests["not_run"] == tests["order"][len(tests["finished"]):]  # stopped in order, nothing skipped over
    assert order[:3] == ["test_the_cuda_ep_runs_on_the_detected_gpu", "test_dump_the_ep_kernel_registry",
                         "test_decode_tokens_per_second[2K-cpu]"]
    assert order.index("test_decode_tokens_per_second[32K-cpu]") < order.index("test_time_to_first_token[2K-cpu]")
    assert order[-1] == "test_kernels_per_verification_cycle[cpu-unoptimized]"
    assert doc["gate"] is not None
