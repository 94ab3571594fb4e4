"""Placement benchmarks (``nox -s bench``): build link / copy, offload's copy and check, each next
to its floor measured in the same run, reported as ratios in ``extra_info``.

Sizes (``Q38_BENCH_SIZES``, default ``tiny,full,large0,large1,large8``): the tiny and full presets,
and the large preset with 0 (0.01), 1 and 8 GB of weights (``largeN``: ``--weight-gb N``). Each
timed round is interleaved with its floor, on the same bytes, warm cache:

- build ``--link hardlink`` next to ``cp -rl`` of the three bundles;
- build ``--link auto`` next to ``cp -r --reflink=auto`` (only where this filesystem clones;
  on ext4 ``auto`` is a copy and is the ``--copy`` row);
- build ``--copy`` next to ``cp -r --preserve=links`` of the three bundles (their shared data
  file copied once, as q38 does; ``cp`` here copies with copy_file_range); offload (default
  ``auto``: a copy on ext4) next to ``cp -r`` of its source. The time spent inside the shared
  placement (``place``) is reported too, and its ratio to the floor (graph work excluded);
- check next to ``cp -rl`` of the package (a walk of the same files).

Peak anonymous memory of build ``--copy`` / offload / check in a child process
(``tests/support/rss_child.py``) is recorded per size and must not grow with weight bytes: the
largest large size (>= 1 GB) within 10 % (+ 8 MiB) of the smallest. No timing is asserted; what each run
produced is (file count, link modes, pool entries, shared inodes).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.filesystems import reflink_works

from q38.assembly import BuildRequest, LinkPolicy, build_package

SIZES = tuple(s for s in os.environ.get("Q38_BENCH_SIZES", "tiny,full,large0,large1,large8").split(",") if s)
ROUNDS = int(os.environ.get("Q38_BENCH_ROUNDS", "3"))
REPO = Path(__file__).resolve().parents[2]
CHILD = REPO / "tests" / "support" / "rss_child.py"
_MIB = 1024


def _synth_args(size: str) -> dict[str, Any]:
    if size.startswith("large"):
        gb = float(size[len("large"):] or "2")
        return {"preset": "large", "weight_gb": gb if gb > 0 else 0.01}
    return {"preset": size}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("placement_bench")


@pytest.fixture(scope="module", params=SIZES)
def size(request: pytest.FixtureRequest) -> str:
    """A module-scoped parameter: pytest runs every test of one size before the next size's."""
    name: str = request.param
    if name != "tiny" and not request.config.getoption("benchmark_enable", False):
        pytest.skip("placement benchmark: sizes beyond tiny run only with --benchmark-enable (nox -s bench)")
    return name


@pytest.fixture(scope="module")
def bench_bundles(size: str, workdir: Path) -> Iterator[Path]:
    """Source bundles of ``size``, synthesized once, removed before the next size (8 GB each)."""
    from q38.synth import synthesize

    root = workdir / f"src_{size}"
    root.mkdir()
    yield synthesize(root / "bundles", variant="cpu", bundles=True, **_synth_args(size))
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def built(bench_bundles: Path, size: str, workdir: Path) -> Iterator[Path]:
    """A flat package of ``size`` (build --copy of the bundles), for offload and check."""
    out = workdir / f"pkg_{size}"
    b = bench_bundles
    build_package(BuildRequest(out=out, target=b / "target", head=b / "head", prefill=b / "prefill", link=LinkPolicy.COPY))
    yield out
    shutil.rmtree(out, ignore_errors=True)


def _bundle_dirs(b: Path) -> list[Path]:
    return [b / "target", b / "head", b / "prefill"]


def _regular_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _bytes(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


def _cp(args: list[str], srcs: list[Path], dst: Path) -> float:
    dst.mkdir()
    t = time.perf_counter()
    subprocess.run(["cp", *args, *map(os.fspath, srcs), os.fspath(dst)], check=True)
    seconds = time.perf_counter() - t
    shutil.rmtree(dst)
    return seconds


def _interleaved(
    benchmark: Any, run: Callable[[Path], Any], floor: Callable[[Path], float], work: Path,
    before_round: Callable[[], None] = lambda: None,
) -> tuple[Any, list[float]]:
    """pytest-benchmark rounds of ``run(out)``, each preceded (untimed) by one floor run.

    Every round writes into ``work/round`` (removed before the next round; the last one is left
    for the caller's structure checks and removed by the next call).
    """
    floors: list[float] = []
    out = work / "round" / "out"

    def setup() -> tuple[tuple[Path], dict[str, Any]]:
        shutil.rmtree(out.parent, ignore_errors=True)
        out.parent.mkdir()
        before_round()
        subprocess.run(["sync"], check=True)  # the previous round's dirty pages do not bill this one
        floors.append(floor(work / "floor"))
        return (out,), {}

    result = benchmark.pedantic(run, setup=setup, rounds=ROUNDS, iterations=1)
    return result, floors


def _ratios(benchmark: Any, floors: list[float], name: str, nbytes: int, placing: list[float] | None = None) -> None:
    info = benchmark.extra_info
    floor = statistics.median(floors)
    if placing:  # the placement part alone (graph work excluded), per round
        info["placement_seconds_median"] = round(statistics.median(placing), 4)
        info[f"placement_ratio_to_{name}"] = round(statistics.median(placing) / floor, 3) if floor > 0 else None
    info[f"{name}_seconds_median"] = round(floor, 4)
    info["bytes"] = nbytes
    if benchmark.stats is not None:
        median = benchmark.stats.stats.median
        info["q38_seconds_median"] = round(median, 4)
        info[f"ratio_to_{name}"] = round(median / floor, 3) if floor > 0 else None
        info["q38_gb_per_s"] = round(nbytes / median / 1e9, 3) if median > 0 else None
    print(f"\n{benchmark.name}: {json.dumps(info, sort_keys=True)}")


# --preserve=links: the bundles' shared data file (one inode, three names) is copied once, as q38
# copies it once: the floor moves the same bytes.
POLICIES = {
    "hardlink": (LinkPolicy.HARDLINK, ["-rl"], "cp_rl"),
    "auto": (LinkPolicy.AUTO, ["-r", "--preserve=links", "--reflink=auto"], "cp_r_reflink_auto"),
    "copy": (LinkPolicy.COPY, ["-r", "--preserve=links", "--reflink=never"], "cp_r"),
}


class _PlacementClock:
    """Seconds spent inside the shared placement (``q38.package.io.links.place``) during a run."""

    def __init__(self, monkeypatch: Any) -> None:
        import q38.package.io.links as links

        self.seconds = 0.0
        real = links.place

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t

        monkeypatch.setattr(links, "place", timed)

    def reset(self) -> None:
        self.seconds = 0.0


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_bench_build(benchmark: Any, bench_bundles: Path, workdir: Path, size: str, policy: str, monkeypatch: Any) -> None:
    b = bench_bundles
    clock, placing = _PlacementClock(monkeypatch), []
    link, cp_args, floor_name = POLICIES[policy]
    if policy == "auto" and not reflink_works(b / "target", workdir):
        pytest.skip("auto = copy on this filesystem (no reflink): measured as the copy row")
    bundles = _bundle_dirs(b)

    def run(out: Path) -> Any:
        clock.reset()
        res = build_package(BuildRequest(out=out, target=b / "target", head=b / "head", prefill=b / "prefill", link=link))
        placing.append(clock.seconds)
        return res

    result, floors = _interleaved(benchmark, run, lambda d: _cp(cp_args, bundles, d), workdir)
    pkg = result.packages[0]
    manifest = json.loads((pkg / "package_manifest.json").read_text())
    modes = Counter(rec["link_mode"] for rec in manifest["files"].values())
    placed = {rel for rel, rec in manifest["files"].items() if rec["link_mode"] not in ("write", "symlink")}
    mode = {"hardlink": "hardlink", "copy": "copy", "auto": "reflink"}[policy]
    # Structure: every file the bundles provide is placed in the asked mode, and nothing else is.
    assert modes == result.link_modes and set(modes) <= {mode, "write", "symlink"}
    data = [p.relative_to(pkg).as_posix() for p in _regular_files(pkg) if p.name.endswith(".data")]
    assert set(data) <= placed and modes[mode] == len(placed) >= 3
    pool_rows = len((pkg / "weights_pool.txt").read_text().splitlines()) - 2
    assert result.pool_entries == {"package": pool_rows} and pool_rows > 0
    for rel in placed:
        shares = os.stat(pkg / rel).st_ino == os.stat(_source_of(b, rel)).st_ino
        assert shares == (policy == "hardlink"), rel
        assert "sha256" not in manifest["files"][rel], rel  # no --digest: identity only, no byte hashed
    benchmark.extra_info.update({"size": size, "policy": policy, "files_placed": len(placed), "pool_entries": pool_rows,
                                 "modes": dict(modes)})
    _ratios(benchmark, floors, floor_name, _bytes(_regular_files(pkg)), placing)


def _source_of(b: Path, rel: str) -> Path:
    for d in _bundle_dirs(b):
        if os.path.lexists(d / rel):
            return d / rel
    raise AssertionError(f"{rel}: in no bundle")


def test_bench_offload_copy(benchmark: Any, built: Path, workdir: Path, size: str, monkeypatch: Any) -> None:
    from q38.offload.convert import convert_package
    from q38.offload.options import OffloadOptions

    src = built
    files = _regular_files(src)
    clock, placing = _PlacementClock(monkeypatch), []

    def run(out: Path) -> Any:
        clock.reset()
        report = convert_package(src, out, OffloadOptions(mode="auto"))
        placing.append(clock.seconds)
        return report

    report, floors = _interleaved(benchmark, run, lambda d: _cp(["-r", "--reflink=never"], [src], d), workdir)
    out = Path(report.out)
    manifest = json.loads((out / "package_manifest.json").read_text())["files"]
    copied = {rel for rel, rec in manifest.items() if rec["link_mode"] in ("copy", "reflink")}
    src_data = {p.relative_to(src).as_posix() for p in files if p.name.endswith(".data")}
    assert src_data <= copied  # every data file placed, by copy or clone, never linked
    for rel in copied:
        assert os.stat(out / rel).st_nlink == 1 and os.stat(out / rel).st_ino != os.stat(src / rel).st_ino
        # the source manifest's digest is reused (same identity): the kernel copy, no rehash
        assert manifest[rel].get("sha256") == json.loads((src / "package_manifest.json").read_text())["files"][rel].get("sha256")
    assert report.router_weights_cleared > 0 and sorted(report.graphs) == ["s2", "s3", "s4"]
    benchmark.extra_info.update({"size": size, "files_placed": len(copied),
                                 "router_weights_cleared": report.router_weights_cleared})
    _ratios(benchmark, floors, "cp_r", _bytes(files), placing)


def test_bench_check(benchmark: Any, built: Path, workdir: Path, size: str, capsys: Any) -> None:
    from q38.cli import main

    pkg = built

    def run(out: Path) -> int:
        return main(["check", os.fspath(pkg), "--json"])

    rc, floors = _interleaved(benchmark, run, lambda d: _cp(["-rl"], [pkg], d), workdir, before_round=capsys.readouterr)
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["graphs"] == ["target", "head", "prefill"]
    benchmark.extra_info.update({"size": size, "violations": len(report["violations"])})
    _ratios(benchmark, floors, "cp_rl", _bytes(_regular_files(pkg)))


def _rss(work: Path, name: str, args: list[str]) -> dict[str, Any]:
    report = work / f"{name}.json"
    env = dict(os.environ, PYTHONPATH=os.fspath(REPO))
    proc = subprocess.run([sys.executable, os.fspath(CHILD), os.fspath(report), *args], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"
    data: dict[str, Any] = json.loads(report.read_text())
    return data


_MEMORY: dict[str, dict[str, int]] = {}


@pytest.mark.slow
def test_bench_memory(benchmark: Any, bench_bundles: Path, workdir: Path, size: str) -> None:
    """Peak anonymous memory of build --copy, offload and check of this size (child processes)."""
    smoke = benchmark.disabled  # the CPU suite: the steps once on the tiny size, each child must succeed
    if smoke and size != "tiny":
        pytest.skip("memory benchmark: runs only with --benchmark-enable")
    if not smoke and not (size.startswith("large") and float(size[5:] or 2) >= 1):
        pytest.skip("memory benchmark: compares the large sizes of >= 1 GB (largeN)")
    work = workdir / f"rss_{size}"
    work.mkdir()
    pkg, off = work / "pkg", work / "off"
    b = bench_bundles
    steps = {
        "build_copy": ["build", os.fspath(pkg), "--copy", "--target", os.fspath(b / "target"),
                       "--head", os.fspath(b / "head"), "--prefill", os.fspath(b / "prefill")],
        "offload": ["offload", os.fspath(off), "--from-package", os.fspath(pkg), "--offload-mode", "auto"],
        "check": ["check", os.fspath(off)],
    }
    figures: dict[str, dict[str, Any]] = {}

    def measure() -> None:
        for step, args in steps.items():
            figures[step] = _rss(work, step, args)

    benchmark.pedantic(measure, rounds=1, iterations=1)
    shutil.rmtree(work)
    if smoke:
        assert list(figures) == list(steps)
        assert all(fig["rss_anon_peak_kib"] > 0 and fig["vm_hwm_kib"] > 0 for fig in figures.values())
        return
    for step, fig in figures.items():
        benchmark.extra_info[f"{step}.rss_anon_peak_mib"] = round(fig["rss_anon_peak_kib"] / _MIB, 1)
        benchmark.extra_info[f"{step}.vm_hwm_mib"] = round(fig["vm_hwm_kib"] / _MIB, 1)
        benchmark.extra_info[f"{step}.seconds"] = round(fig["seconds"], 2)
    benchmark.extra_info["weight_bytes"] = _bytes(_regular_files(b / "target"))
    print(f"\n{benchmark.name}: {json.dumps(benchmark.extra_info, sort_keys=True)}")
    _MEMORY[size] = {step: fig["rss_anon_peak_kib"] for step, fig in figures.items()}
    if len(_MEMORY) >= 2:  # the largest size so far against the smallest (1 GB vs 8 GB by default)
        sizes = sorted(_MEMORY, key=lambda s: float(s[5:] or 2))
        lo, hi = _MEMORY[sizes[0]], _MEMORY[sizes[-1]]
        for step in steps:
            benchmark.extra_info[f"{step}.anon_ratio_{sizes[-1]}_to_{sizes[0]}"] = round(hi[step] / lo[step], 3)
            assert hi[step] <= 1.10 * lo[step] + 8 * _MIB, f"{step}: anonymous memory grows with weights ({lo[step]} -> {hi[step]} KiB)"
