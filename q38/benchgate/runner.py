"""Running the gate: the base commit and the head, interleaved round by round, in one job.

The base ref is exported with ``git archive`` into a temporary directory (the repository is
only read: no worktree bookkeeping is left behind if the job is killed). Each round runs both
sides, in alternating order (base first in even rounds, head first in odd ones, so a drift of
the machine over the job does not favour one side): the pytest benchmarks in one process per
side (``--benchmark-json``: each benchmark's fastest repetition is that round's sample), then
each whole-process benchmark (``--process NAME=COMMAND``: the fastest wall time of
``--process-repeat`` runs of COMMAND in that side's tree, ``{tmp}`` a fresh scratch
directory, ``{python}`` the interpreter).

The clock (``--clock``) is CPU time by default: the work the code does, which a neighbour's
load barely changes (on this 2-core machine at load 16, 12 calls of the gate's bootstrap took
0.36-0.52 s of wall time but 0.043-0.051 s of CPU time). ``wall`` measures elapsed time, for
benchmarks whose cost is waiting (I/O, sleeps, other processes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import resource
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from q38.benchgate.samples import (
    Clock,
    GateError,
    Report,
    SampleSet,
    identity_mismatches,
    load_report,
)

__all__ = [
    "DEFAULT_BASE_REFS", "ENV_PROBE", "Plan", "export_tree", "head_sha", "local_machine", "probe_env", "resolve_base",
    "run_rounds", "time_process",
]

_LOG = logging.getLogger("q38.benchgate")

DEFAULT_BASE_REFS: Final = ("origin/main", "HEAD~1")
ENV_PROBE: Final = r"""
import json, shutil, subprocess
env = {"ort_version": None, "providers": None, "gpu_model": None, "gpu_driver": None}
try:
    import onnxruntime as o
    env["ort_version"] = o.__version__
    env["providers"] = list(o.get_available_providers())
except Exception as exc:
    env["ort_version"] = f"unavailable: {type(exc).__name__}"
if shutil.which("nvidia-smi"):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        if out:
            name, driver = (s.strip() for s in out[0].split(",", 1))
            env["gpu_model"], env["gpu_driver"] = name, driver
    except Exception:
        pass
print(json.dumps(env))
"""
_INHERITED_PYTEST_VARS: Final = frozenset(
    # Set when the gate itself runs under pytest-xdist; the child would think it is a worker
    # (pytest-benchmark then forces --benchmark-disable).
    {"PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST"}
)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def head_sha(repo: Path) -> str | None:
    """The commit ``HEAD`` of ``repo`` resolves to, or None (no commit yet, or not a repository)."""
    sha = _git(repo, "rev-parse", "--verify", "HEAD^{commit}").stdout.strip()
    return sha or None


def resolve_base(repo: Path, candidates: Sequence[str], *, allow_head: bool = False) -> tuple[str | None, str]:
    """The first candidate ref that resolves to a commit (other than HEAD unless ``allow_head``)."""
    head = head_sha(repo)
    tried = []
    for ref in candidates:
        proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        sha = proc.stdout.strip()
        if proc.returncode != 0 or not sha:
            tried.append(f"{ref} (not found)")
            continue
        if sha == head and not allow_head:
            tried.append(f"{ref} (is HEAD)")
            continue
        return sha, ref
    return None, "no usable base ref: " + ", ".join(tried)


def export_tree(repo: Path, sha: str, dest: Path) -> None:
    """Writes the tree of ``sha`` into ``dest`` with ``git archive`` (the repository is only read)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as tar_file:
        proc = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha], stdout=tar_file,
                              stderr=subprocess.PIPE, check=False)
        if proc.returncode != 0:
            raise GateError(f"git archive {sha}: {proc.stderr.decode(errors='replace').strip()}")
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file) as tar:
            tar.extractall(dest, filter="data")


def probe_env(python: str, cwd: Path) -> dict[str, Any]:
    """ORT version and providers, GPU model and driver, as the benchmarks' interpreter sees them."""
    proc = subprocess.run([python, "-c", ENV_PROBE], capture_output=True, text=True, cwd=cwd, check=False)
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"ort_version": None, "providers": None, "gpu_model": None, "gpu_driver": None}


def local_machine() -> dict[str, Any]:
    """The machine_info keys the gate compares, for runs without pytest-benchmark's."""
    brand = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                brand = line.split(":", 1)[1].strip()
                break
    return {"cpu": {"brand_raw": brand, "arch": platform.machine(), "count": os.cpu_count()},
            "machine": platform.machine(), "system": platform.system(),
            "python_implementation": platform.python_implementation()}


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_PYTEST_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@dataclass(frozen=True)
class Plan:
    """What one gate run measures."""

    repo: Path
    out: Path
    python: str
    rounds: int
    pytest_args: tuple[str, ...]
    processes: Mapping[str, str]
    process_repeat: int = 5
    clock: Clock = "cpu"


def _check_imports_from(tree: Path, side: str, python: str) -> None:
    where = subprocess.run([python, "-c", "import q38, os; print(os.path.realpath(q38.__file__))"],
                           capture_output=True, text=True, cwd=tree, env=_env(tree), check=False).stdout.strip()
    if where and not where.startswith(os.path.realpath(tree) + os.sep):
        raise GateError(f"{side}: q38 imports from {where}, not from {tree}; refusing to benchmark the wrong code")


def _pytest_round(plan: Plan, tree: Path, side: str, round_no: int, env_info: Mapping[str, Any]) -> Report | None:
    report = plan.out / f"{side}.{round_no}.json"
    report.unlink(missing_ok=True)  # a report left by an earlier gate run must not pass for this one
    timer = ["--benchmark-timer=time.process_time"] if plan.clock == "cpu" else []
    cmd = [plan.python, "-m", "pytest", *plan.pytest_args, "-p", "no:cacheprovider", "-p", "no:xdist",
           "--benchmark-enable", "--benchmark-only", *timer, f"--benchmark-json={report}", "-q"]
    _LOG.info("%s round %d: %s (in %s)", side, round_no, " ".join(cmd), tree)
    proc = subprocess.run(cmd, cwd=tree, env=_env(tree), check=False, stdout=subprocess.DEVNULL)
    if proc.returncode == 5:  # pytest: no tests collected
        return None
    if proc.returncode != 0 or not report.exists():
        if side == "base":  # a broken base cannot serve as a baseline; the head is still measured
            _LOG.warning("base: the benchmark run failed with exit %d; no baseline from it", proc.returncode)
            return None
        raise GateError(f"head: the benchmark run failed with exit {proc.returncode} (rerun it with pytest to see why)")
    data = json.loads(report.read_text(encoding="utf-8"))
    data.setdefault("machine_info", {})["q38_env"] = dict(env_info)
    report.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return load_report(report)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_process(command: str, *, tree: Path, python: str, clock: Clock = "cpu") -> float:
    """Seconds of one run of ``command`` in ``tree`` (``{tmp}``: a fresh scratch directory).

    ``cpu``: the CPU time (user + system) of the command and every process it waited for;
    ``wall``: elapsed time.
    """
    scratch = Path(tempfile.mkdtemp(prefix="q38-bench-proc-"))
    try:
        argv = [a.replace("{tmp}", str(scratch)).replace("{python}", python) for a in shlex.split(command)]
        start, cpu_start = time.perf_counter(), _children_cpu()
        proc = subprocess.run(argv, cwd=tree, env=_env(tree), capture_output=True, text=True, check=False)
        seconds = _children_cpu() - cpu_start if clock == "cpu" else time.perf_counter() - start
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.split())[-300:]
        raise GateError(f"process benchmark {command!r} exited {proc.returncode} in {tree}: {tail}")
    return seconds


def run_rounds(plan: Plan, base_tree: Path | None) -> tuple[SampleSet, list[str]]:
    """Measure ``plan.rounds`` interleaved rounds; returns the samples and notes on dropped benchmarks."""
    sides = {"head": plan.repo, **({"base": base_tree} if base_tree is not None else {})}
    for side, tree in sides.items():
        _check_imports_from(tree, side, plan.python)
    env_info = {side: probe_env(plan.python, tree) for side, tree in sides.items()}
    reports: dict[str, list[Report]] = {side: [] for side in sides}
    times: dict[str, dict[str, list[float]]] = {side: {name: [] for name in plan.processes} for side in sides}
    base_alive = "base" in sides
    for r in range(plan.rounds):
        order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
        for side in order:
            if side == "base" and not base_alive:
                continue
            tree = sides[side]
            if plan.pytest_args:
                got = _pytest_round(plan, tree, side, r, env_info[side])
                if got is None and side == "head":
                    raise GateError("head: pytest collected no benchmark; check the pytest arguments")
                if got is None:
                    base_alive = False
                    continue
                reports[side].append(got)
            for name, command in plan.processes.items():
                try:
                    runs = [time_process(command, tree=tree, python=plan.python, clock=plan.clock)
                            for _ in range(plan.process_repeat)]
                    times[side][name].append(min(runs))
                except GateError:
                    if side == "head":
                        raise
                    base_alive = False
    notes: list[str] = []
    if not base_alive or "base" not in sides:
        return SampleSet(machine=dict(reports["head"][0].machine) if reports["head"] else {}, clock=plan.clock), notes
    base, head = reports["base"], reports["head"]
    for report in base[1:] + head:
        mismatch = identity_mismatches(base[0], report) if base else []
        if mismatch:
            raise GateError("the machine or software changed during the run: " + "; ".join(mismatch))
    processes = {name: (times["base"][name], times["head"][name]) for name in plan.processes}
    samples = SampleSet.from_reports(base, head, processes, clock=plan.clock)
    if not base and not head:  # process benchmarks only: no pytest-benchmark machine_info
        samples.machine = {**local_machine(), "q38_env": env_info["head"]}
        samples.base_machine = {**local_machine(), "q38_env": env_info["base"]}
    notes += [f"NOTE: new benchmark (no base, not gated): {n}" for n in samples.only_in(head, base)]
    notes += [f"NOTE: benchmark gone or renamed in head (not gated): {n}" for n in samples.only_in(base, head)]
    return samples, notes
