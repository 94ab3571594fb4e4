"""Release gate: benchmark the base commit and the head on the same machine, compare medians.

Used by ``nox -s bench``; also ``python -m q38.benchgate run|compare``. Standard library only
(matplotlib is used for the plots when importable, else a minimal zlib PNG writer).

Flow of ``run``: export the base ref with ``git archive`` into a temporary directory (read-only
for the repository: no worktree bookkeeping left behind if the job is killed), run the pytest
benchmarks there and in the head checkout with the same interpreter (``--benchmark-save`` into
``<out>/storage`` and ``--benchmark-json`` to ``<out>/{base,head}.json``), alternating sides for
``rounds`` rounds, then ``compare``.

``compare`` refuses (exit 2) runs that differ in machine or software identity: CPU model and
architecture (``machine_info``), and the ``q38_env`` block the gate records per side (ORT version,
execution providers, GPU model, driver). Per benchmark, ``extra_info`` keys ``ort_version``,
``ep``, ``gpu_model`` and ``gpu_driver`` must agree too. CPU clock (``hz_actual``) is ignored:
it drifts on the same machine (pytest-benchmark #255). A head median above
``base * (1 + threshold)`` is a regression (exit 1). A missing baseline (no base ref, or the
base has no benchmarks) is reported explicitly and exits 0, or 3 with ``fail_on_missing_baseline``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import statistics
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

_LOG = logging.getLogger(__name__)

DEFAULT_THRESHOLD: Final = 0.25
DEFAULT_BASE_REFS: Final = ("origin/main", "HEAD~1")
EXIT_OK: Final = 0
EXIT_REGRESSION: Final = 1
EXIT_REFUSED: Final = 2
EXIT_NO_BASELINE: Final = 3

MACHINE_KEYS: Final = (("cpu", "brand_raw"), ("cpu", "arch"), ("machine",), ("system",), ("python_implementation",))
"""machine_info paths that must agree; hz_actual and the like are deliberately absent."""
ENV_KEYS: Final = ("ort_version", "providers", "gpu_model", "gpu_driver")
EXTRA_KEYS: Final = ("ort_version", "ep", "gpu_model", "gpu_driver")

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


class GateError(Exception):
    """A usage problem of the gate (bad ref, unreadable JSON); one line."""


@dataclasses.dataclass(frozen=True)
class Stat:
    """One benchmark of one run."""

    fullname: str
    median: float
    tier: str
    extra: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Run:
    """A pytest-benchmark JSON report, reduced to what the gate needs."""

    machine: Mapping[str, Any]
    benchmarks: Mapping[str, Stat]


@dataclasses.dataclass(frozen=True)
class Row:
    fullname: str
    tier: str
    base: float
    head: float

    @property
    def ratio(self) -> float:
        return self.head / self.base if self.base > 0 else math.inf


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of a comparison; ``exit_code`` is what the gate returns."""

    exit_code: int
    lines: tuple[str, ...]
    rows: tuple[Row, ...] = ()
    regressions: tuple[Row, ...] = ()


# --------------------------------------------------------------------------- reading runs


def _tier_of(bench: Mapping[str, Any]) -> str:
    extra = bench.get("extra_info") or {}
    params = bench.get("params") or {}
    for source in (extra, params):
        if isinstance(source, Mapping) and source.get("tier") is not None:
            return str(source["tier"])
    return str(bench.get("group") or "default")


def load_run(path: Path | str) -> Run:
    """Reads a pytest-benchmark JSON report (``--benchmark-json`` or ``--benchmark-save``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GateError(f"{path}: not a readable pytest-benchmark JSON report ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise GateError(f"{path}: not a pytest-benchmark JSON report (no 'benchmarks' list)")
    stats: dict[str, Stat] = {}
    for bench in data["benchmarks"]:
        try:
            name = str(bench["fullname"])
            median = float(bench["stats"]["median"])
        except (KeyError, TypeError, ValueError) as exc:
            raise GateError(f"{path}: benchmark entry without fullname/stats.median ({exc})") from exc
        stats[name] = Stat(name, median, _tier_of(bench), dict(bench.get("extra_info") or {}))
    return Run(machine=dict(data.get("machine_info") or {}), benchmarks=stats)


def _dig(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    cur: Any = data
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


# --------------------------------------------------------------------------- comparison


def identity_mismatches(base: Run, head: Run) -> list[str]:
    """What differs between the two runs' machines or software; empty when comparable."""
    out: list[str] = []
    for path in MACHINE_KEYS:
        b, h = _dig(base.machine, path), _dig(head.machine, path)
        if b != h:
            out.append(f"machine_info.{'.'.join(path)}: base {b!r} != head {h!r}")
    benv, henv = base.machine.get("q38_env") or {}, head.machine.get("q38_env") or {}
    for key in ENV_KEYS:
        if benv.get(key) != henv.get(key):
            out.append(f"q38_env.{key}: base {benv.get(key)!r} != head {henv.get(key)!r}")
    for name in sorted(base.benchmarks.keys() & head.benchmarks.keys()):
        bx, hx = base.benchmarks[name].extra, head.benchmarks[name].extra
        for key in EXTRA_KEYS:
            if (key in bx or key in hx) and bx.get(key) != hx.get(key):
                out.append(f"{name}: extra_info.{key}: base {bx.get(key)!r} != head {hx.get(key)!r}")
    return out


def compare(
    base: Run | None,
    head: Run,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    fail_on_missing_baseline: bool = False,
    baseline_note: str = "",
) -> Verdict:
    """Compares head medians with base medians; see the module docstring for the exit codes."""
    if base is None or not base.benchmarks:
        why = baseline_note or "the base run has no benchmarks"
        code = EXIT_NO_BASELINE if fail_on_missing_baseline else EXIT_OK
        verdict = "FAIL" if code else "NOTE"
        return Verdict(code, (f"{verdict}: no baseline: {why}; {len(head.benchmarks)} head benchmark(s) not gated.",))
    mismatches = identity_mismatches(base, head)
    if mismatches:
        return Verdict(
            EXIT_REFUSED,
            ("REFUSED: base and head were not measured on the same machine and software:", *("  " + m for m in mismatches)),
        )
    rows = tuple(
        Row(n, head.benchmarks[n].tier, base.benchmarks[n].median, head.benchmarks[n].median)
        for n in sorted(base.benchmarks.keys() & head.benchmarks.keys())
    )
    regressions = tuple(r for r in rows if r.ratio > 1.0 + threshold)
    lines = [f"{'benchmark':<70} {'tier':>8} {'base median':>12} {'head median':>12} {'change':>8}"]
    for r in rows:
        flag = "  REGRESSION" if r in regressions else ""
        lines.append(f"{r.fullname:<70} {r.tier:>8} {r.base:>12.6g} {r.head:>12.6g} {100 * (r.ratio - 1):>+7.1f}%{flag}")
    for n in sorted(head.benchmarks.keys() - base.benchmarks.keys()):
        lines.append(f"NOTE: new benchmark (no base, not gated): {n}")
    for n in sorted(base.benchmarks.keys() - head.benchmarks.keys()):
        lines.append(f"NOTE: benchmark gone or renamed in head (not gated): {n}")
    if regressions:
        lines.append(f"FAIL: {len(regressions)} benchmark(s) slower than base by more than {threshold:.0%} (median).")
        return Verdict(EXIT_REGRESSION, tuple(lines), rows, regressions)
    lines.append(f"OK: {len(rows)} benchmark(s) within {threshold:.0%} of base (median).")
    return Verdict(EXIT_OK, tuple(lines), rows, ())


# --------------------------------------------------------------------------- plots


def _png(width: int, height: int, pixels: bytearray) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    raw = b"".join(b"\0" + bytes(pixels[y * width * 3 : (y + 1) * width * 3]) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


BASE_RGB: Final = (0x4C, 0x72, 0xB0)
HEAD_RGB: Final = (0xDD, 0x84, 0x52)
REGRESSION_RGB: Final = (0xC4, 0x4E, 0x52)


def bar_png(rows: Sequence[Row], regressions: Iterable[Row] = ()) -> bytes:
    """A label-free bar chart: per benchmark, base (blue) then head (orange, red if regressed)."""
    bad = set(regressions)
    bar, gap, height, margin = 14, 10, 160, 8
    width = max(1, margin * 2 + len(rows) * (2 * bar + gap))
    pixels = bytearray(b"\xff" * (width * height * 3))
    top = max((max(r.base, r.head) for r in rows), default=1.0) or 1.0

    def fill(x0: int, h: int, rgb: tuple[int, int, int]) -> None:
        for y in range(height - margin - h, height - margin):
            for x in range(x0, x0 + bar):
                i = (y * width + x) * 3
                pixels[i : i + 3] = bytes(rgb)

    for k, r in enumerate(rows):
        x = margin + k * (2 * bar + gap)
        span = height - 2 * margin
        fill(x, max(1, round(span * r.base / top)), BASE_RGB)
        fill(x + bar, max(1, round(span * r.head / top)), REGRESSION_RGB if r in bad else HEAD_RGB)
    return _png(width, height, pixels)


def write_plots(verdict: Verdict, out_dir: Path) -> list[Path]:
    """One PNG per tier (``bench-<tier>.png``) next to the JSON; matplotlib when importable."""
    tiers: dict[str, list[Row]] = {}
    for r in verdict.rows:
        tiers.setdefault(r.tier, []).append(r)
    written: list[Path] = []
    for tier, rows in sorted(tiers.items()):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in tier)
        path = out_dir / f"bench-{safe}.png"
        if not _matplotlib_plot(rows, set(verdict.regressions), tier, path):
            path.write_bytes(bar_png(rows, verdict.regressions))
        written.append(path)
    return written


def _matplotlib_plot(rows: Sequence[Row], bad: set[Row], tier: str, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(rows)), 3.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r.base for r in rows], 0.4, label="base", color="#4c72b0")
    ax.bar([x + 0.2 for x in xs], [r.head for r in rows], 0.4, label="head",
           color=["#c44e52" if r in bad else "#dd8452" for r in rows])
    ax.set_xticks(list(xs), [r.fullname.rsplit("::", 1)[-1] for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("median (s)")
    ax.set_title(f"tier {tier}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- running


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def resolve_base(repo: Path, candidates: Sequence[str]) -> tuple[str | None, str]:
    """The first candidate ref that resolves to a commit other than HEAD; (None, why) if none."""
    head = _git(repo, "rev-parse", "--verify", "HEAD^{commit}").stdout.strip()
    tried = []
    for ref in candidates:
        proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        sha = proc.stdout.strip()
        if proc.returncode != 0 or not sha:
            tried.append(f"{ref} (not found)")
            continue
        if sha == head:
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
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # Python < 3.11.4
                tar.extractall(dest)


def probe_env(python: str, cwd: Path) -> dict[str, Any]:
    proc = subprocess.run([python, "-c", ENV_PROBE], capture_output=True, text=True, cwd=cwd, check=False)
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"ort_version": None, "providers": None, "gpu_model": None, "gpu_driver": None}


_INHERITED_PYTEST_VARS: Final = frozenset(
    # Set when the gate itself runs under pytest-xdist; the child would think it is a worker
    # (pytest-benchmark then forces --benchmark-disable).
    {"PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST"}
)


def run_side(
    *, tree: Path, side: str, out: Path, python: str, pytest_args: Sequence[str], round_no: int
) -> Path | None:
    """Runs the benchmarks of one checkout; returns the JSON report, or None when none ran."""
    report = out / f"{side}.{round_no}.json"
    report.unlink(missing_ok=True)  # a report left by an earlier gate run must not pass for this one
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_PYTEST_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    where = subprocess.run([python, "-c", "import q38, os; print(os.path.realpath(q38.__file__))"],
                           capture_output=True, text=True, cwd=tree, env=env, check=False).stdout.strip()
    if where and not where.startswith(os.path.realpath(tree) + os.sep):
        raise GateError(f"{side}: q38 imports from {where}, not from {tree}; refusing to benchmark the wrong code")
    cmd = [
        python, "-m", "pytest", *pytest_args, "-p", "no:cacheprovider", "--benchmark-enable", "--benchmark-only",
        f"--benchmark-storage=file://{out / 'storage'}", f"--benchmark-save={side}", f"--benchmark-json={report}",
    ]
    _LOG.info("%s round %d: %s (in %s)", side, round_no, " ".join(cmd), tree)
    proc = subprocess.run(cmd, cwd=tree, env=env, check=False)
    if proc.returncode == 5:  # pytest: no tests collected
        return None
    if not report.exists() and side == "head":
        raise GateError(f"head: the benchmark run wrote no report (pytest exit {proc.returncode}; see the log above)")
    if proc.returncode != 0 or not report.exists():
        if side == "base":  # a broken base cannot serve as a baseline; the head is still measured
            _LOG.warning("base: the benchmark run failed with exit %d; no baseline from it", proc.returncode)
            return None
        raise GateError(f"{side}: the benchmark run failed with exit {proc.returncode} (see the log above)")
    data = json.loads(report.read_text(encoding="utf-8"))
    data.setdefault("machine_info", {})["q38_env"] = probe_env(python, tree)
    report.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return report


def merge_rounds(reports: Sequence[Path], dest: Path) -> Path:
    """One report whose medians are the median over rounds of each benchmark's median."""
    datas = [json.loads(p.read_text(encoding="utf-8")) for p in reports]
    merged = datas[0]
    medians: dict[str, list[float]] = {}
    for data in datas:
        for bench in data["benchmarks"]:
            medians.setdefault(bench["fullname"], []).append(float(bench["stats"]["median"]))
    for bench in merged["benchmarks"]:
        bench["stats"]["median"] = statistics.median(medians[bench["fullname"]])
        bench["stats"]["rounds_merged"] = len(medians[bench["fullname"]])
    dest.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return dest


def _emit(*lines: str) -> None:
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


def finish(verdict: Verdict, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    _emit(*verdict.lines)
    summary = {
        "exit_code": verdict.exit_code,
        "lines": list(verdict.lines),
        "rows": [dict(dataclasses.asdict(r), ratio=r.ratio) for r in verdict.rows],
        "regressions": [r.fullname for r in verdict.regressions],
    }
    (out / "comparison.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for path in write_plots(verdict, out):
        _emit(f"plot: {path}")
    return verdict.exit_code


def cmd_run(args: argparse.Namespace) -> int:
    repo, out = Path(args.repo).resolve(), Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    refs = [args.base] if args.base else list(DEFAULT_BASE_REFS)
    sha, why = resolve_base(repo, refs)
    pytest_args = args.pytest_args or ["tests/unit"]
    heads: list[Path] = []
    bases: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="q38-bench-base-") as tmp:
        base_tree = Path(tmp) / "tree"
        if sha is not None:
            export_tree(repo, sha, base_tree)
            why = f"{why} = {sha[:12]}"
        for k in range(args.rounds):
            if sha is not None:
                got = run_side(tree=base_tree, side="base", out=out, python=args.python, pytest_args=pytest_args, round_no=k)
                if got is not None:
                    bases.append(got)
            got = run_side(tree=repo, side="head", out=out, python=args.python, pytest_args=pytest_args, round_no=k)
            if got is None:
                raise GateError("head: pytest collected no tests; check the pytest arguments")
            heads.append(got)
    head_json = merge_rounds(heads, out / "head.json")
    base_run: Run | None = None
    if bases:
        base_run = load_run(merge_rounds(bases, out / "base.json"))
        note = ""
    else:
        note = why if sha is None else f"base {why} has no benchmarks, or its benchmark run failed"
    _emit(f"base: {why}")
    verdict = compare(base_run, load_run(head_json), threshold=args.threshold,
                      fail_on_missing_baseline=args.fail_on_missing_baseline, baseline_note=note)
    return finish(verdict, out)


def cmd_compare(args: argparse.Namespace) -> int:
    base = load_run(args.base_json) if Path(args.base_json).exists() else None
    note = "" if base is not None else f"{args.base_json} does not exist"
    verdict = compare(base, load_run(args.head_json), threshold=args.threshold,
                      fail_on_missing_baseline=args.fail_on_missing_baseline, baseline_note=note)
    return finish(verdict, Path(args.out) if args.out else Path(args.head_json).parent)


def _threshold(text: str) -> float:
    """``25%`` and ``25`` mean 25 %; ``0.25`` too (a fraction below 1)."""
    try:
        number = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"threshold {text!r}: expected e.g. 25% or 0.25") from None
    value = number / 100 if text.endswith("%") or number >= 1 else number
    if not 0 < value < 10:
        raise argparse.ArgumentTypeError(f"threshold {text!r}: expected e.g. 25% or 0.25")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m q38.benchgate", description=__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--threshold", type=_threshold, default=DEFAULT_THRESHOLD,
                        help="regression threshold on the median (default 25%%)")
    common.add_argument("--fail-on-missing-baseline", action="store_true",
                        help="exit 3 instead of 0 when there is no baseline")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", parents=[common], help="benchmark base and head, then compare")
    r.add_argument("--base", default=os.environ.get("Q38_BENCH_BASE") or None,
                   help="base ref (default: origin/main, else HEAD~1; env Q38_BENCH_BASE)")
    r.add_argument("--repo", default=".", help="the head checkout (default: .)")
    r.add_argument("--out", default=".benchmarks/gate", help="where JSON, comparison and plots go")
    r.add_argument("--python", default=sys.executable, help="interpreter with the test dependencies")
    r.add_argument("--rounds", type=int, default=1, help="alternate base/head this many times (median of medians)")
    r.add_argument("pytest_args", nargs="*", help="pytest arguments after --, default tests/unit")
    r.set_defaults(func=cmd_run)
    c = sub.add_parser("compare", parents=[common], help="compare two pytest-benchmark JSON reports")
    c.add_argument("base_json")
    c.add_argument("head_json")
    c.add_argument("--out", default=None, help="where comparison.json and plots go (default: next to head)")
    c.set_defaults(func=cmd_compare)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="benchgate: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except GateError as exc:
        sys.stderr.write(f"benchgate: {exc}\n")
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
