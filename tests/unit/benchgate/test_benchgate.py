"""The release gate (q38/benchgate.py) on recorded pytest-benchmark JSON.

Invariants guarded:
* two recorded runs of the same code on the same machine pass (CPU hz_actual drift is ignored);
* a head median more than the threshold above the base median fails with exit 1 and names it;
* runs from a different GPU model, driver, ORT version or EP are refused (exit 2), naming the key;
* no baseline is reported explicitly: exit 0 with a NOTE, or 3 with fail_on_missing_baseline;
* new and renamed benchmarks are listed as not gated;
* one PNG per tier is written next to comparison.json;
* ``run`` benchmarks a base ref exported from git and the head in one job, end to end.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from q38 import benchgate

DATA = Path(__file__).parent / "data"
DECODE_2K = "tests/gpu/test_throughput_bench.py::test_decode[2K]"


def _raw(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _run(data: dict[str, Any], tmp_path: Path, name: str) -> benchgate.Run:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return benchgate.load_run(path)


def test_recorded_runs_of_the_same_code_pass_despite_cpu_clock_drift(tmp_path: Path) -> None:
    base, head = _raw("base.json"), _raw("head.json")
    head["machine_info"]["cpu"]["hz_actual"] = [1, 0]
    verdict = benchgate.compare(_run(base, tmp_path, "b"), _run(head, tmp_path, "h"))
    assert verdict.exit_code == benchgate.EXIT_OK
    assert verdict.lines[-1] == "OK: 3 benchmark(s) within 25% of base (median)."
    assert [r.tier for r in verdict.rows] == ["2K", "8K", "default"]


def test_a_median_regression_beyond_the_threshold_fails_and_is_named(tmp_path: Path) -> None:
    base, head = _raw("base.json"), _raw("head.json")
    for b in head["benchmarks"]:
        b["stats"]["median"] = next(x for x in base["benchmarks"] if x["fullname"] == b["fullname"])["stats"]["median"]
        if b["fullname"] == DECODE_2K:
            b["stats"]["median"] *= 1.30
    verdict = benchgate.compare(_run(base, tmp_path, "b"), _run(head, tmp_path, "h"))
    assert verdict.exit_code == benchgate.EXIT_REGRESSION
    assert [r.fullname for r in verdict.regressions] == [DECODE_2K]
    assert verdict.lines[-1] == "FAIL: 1 benchmark(s) slower than base by more than 25% (median)."
    assert any(line.startswith(DECODE_2K) and line.endswith("+30.0%  REGRESSION") for line in verdict.lines)
    loose = benchgate.compare(_run(base, tmp_path, "b"), _run(head, tmp_path, "h"), threshold=0.35)
    assert loose.exit_code == benchgate.EXIT_OK


@pytest.mark.parametrize(
    ("where", "key", "value", "message"),
    [
        ("env", "gpu_model", "NVIDIA GeForce RTX 4090",
         "q38_env.gpu_model: base 'NVIDIA H200' != head 'NVIDIA GeForce RTX 4090'"),
        ("env", "gpu_driver", "580.1", "q38_env.gpu_driver: base '570.86.15' != head '580.1'"),
        ("env", "ort_version", "1.31.1", "q38_env.ort_version: base '1.32.0' != head '1.31.1'"),
        ("extra", "ep", "CPUExecutionProvider",
         f"{DECODE_2K}: extra_info.ep: base 'CUDAExecutionProvider' != head 'CPUExecutionProvider'"),
        ("cpu", "brand_raw", "AMD EPYC 9654",
         "machine_info.cpu.brand_raw: base 'Intel(R) Xeon(R) Processor' != head 'AMD EPYC 9654'"),
    ],
)
def test_runs_from_another_machine_or_software_are_refused(
    tmp_path: Path, where: str, key: str, value: str, message: str
) -> None:
    base, head = _raw("base.json"), _raw("head.json")
    if where == "env":
        head["machine_info"]["q38_env"][key] = value
    elif where == "cpu":
        head["machine_info"]["cpu"][key] = value
    else:
        next(b for b in head["benchmarks"] if b["fullname"] == DECODE_2K)["extra_info"][key] = value
    verdict = benchgate.compare(_run(base, tmp_path, "b"), _run(head, tmp_path, "h"))
    assert verdict.exit_code == benchgate.EXIT_REFUSED
    assert verdict.lines == ("REFUSED: base and head were not measured on the same machine and software:",
                             "  " + message)


def test_missing_baseline_is_a_note_or_a_failure_on_request(tmp_path: Path) -> None:
    head = _run(_raw("head.json"), tmp_path, "h")
    note = benchgate.compare(None, head, baseline_note="no usable base ref: origin/main (not found)")
    assert note.exit_code == benchgate.EXIT_OK
    assert note.lines == (("NOTE: no baseline: no usable base ref: origin/main (not found); "
                          "3 head benchmark(s) not gated."),)
    strict = benchgate.compare(None, head, fail_on_missing_baseline=True)
    assert strict.exit_code == benchgate.EXIT_NO_BASELINE
    assert strict.lines[0].startswith("FAIL: no baseline: the base run has no benchmarks;")


def test_new_and_renamed_benchmarks_are_listed_as_not_gated(tmp_path: Path) -> None:
    base, head = _raw("base.json"), _raw("head.json")
    renamed = next(b for b in head["benchmarks"] if b["fullname"] == DECODE_2K)
    renamed["fullname"] = DECODE_2K.replace("test_decode", "test_decode_tokens")
    verdict = benchgate.compare(_run(base, tmp_path, "b"), _run(head, tmp_path, "h"))
    assert f"NOTE: new benchmark (no base, not gated): {renamed['fullname']}" in verdict.lines
    assert f"NOTE: benchmark gone or renamed in head (not gated): {DECODE_2K}" in verdict.lines


def test_compare_cli_writes_comparison_and_one_png_per_tier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base.json").write_text(json.dumps(_raw("base.json")))
    (tmp_path / "head.json").write_text(json.dumps(_raw("head.json")))
    code = benchgate.main(["compare", str(tmp_path / "base.json"), str(tmp_path / "head.json"), "--threshold", "25%"])
    assert code == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["bench-2K.png", "bench-8K.png", "bench-default.png"]
    png = (tmp_path / "bench-2K.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
    summary = json.loads((tmp_path / "comparison.json").read_text())
    assert summary["exit_code"] == 0 and len(summary["rows"]) == 3
    assert "OK: 3 benchmark(s)" in capsys.readouterr().out


def test_the_fallback_png_writer_emits_a_decodable_image() -> None:
    rows = [benchgate.Row("a", "2K", 1.0, 2.0), benchgate.Row("b", "2K", 1.0, 1.0)]
    png = benchgate.bar_png(rows, rows[:1])
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    idat_len = int.from_bytes(png[33:37], "big")
    raw = zlib.decompress(png[41 : 41 + idat_len])
    assert len(raw) == height * (1 + 3 * width)
    assert bytes(benchgate.REGRESSION_RGB) in raw and bytes(benchgate.BASE_RGB) in raw


def test_threshold_spellings() -> None:
    assert benchgate._threshold("25%") == benchgate._threshold("25") == benchgate._threshold("0.25") == 0.25
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected e\.g\. 25% or 0\.25"):
        benchgate._threshold("fast")


BENCH_TEST = '''
import time
def test_work(benchmark):
    benchmark.pedantic(time.sleep, args=({delay},), rounds=3, iterations=1)
'''


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                   check=True, capture_output=True)


@pytest.mark.slow
def test_run_benchmarks_the_base_ref_and_the_head_in_one_job(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "q38").mkdir(parents=True)
    (repo / "q38" / "__init__.py").write_text("")
    (repo / "test_b_bench.py").write_text(BENCH_TEST.format(delay=0.001))
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    out = tmp_path / "out"
    args = ["run", "--repo", str(repo), "--out", str(out), "--", "test_b_bench.py", "-q"]
    no_base = subprocess.run([sys.executable, "-m", "q38.benchgate", *args], capture_output=True, text=True)
    assert no_base.returncode == 0, no_base.stderr
    assert "NOTE: no baseline: no usable base ref: origin/main (not found), HEAD~1 (not found);" in no_base.stdout

    (repo / "test_b_bench.py").write_text(BENCH_TEST.format(delay=0.05))
    _git(repo, "commit", "-q", "-am", "slower")
    slow = subprocess.run([sys.executable, "-m", "q38.benchgate", *args], capture_output=True, text=True)
    assert slow.returncode == benchgate.EXIT_REGRESSION, slow.stdout + slow.stderr
    assert "test_b_bench.py::test_work" in slow.stdout and "REGRESSION" in slow.stdout
    assert {p.name for p in out.iterdir()} >= {"base.json", "head.json", "comparison.json", "bench-default.png", "storage"}
    assert copy.deepcopy(json.loads((out / "base.json").read_text())["machine_info"]["q38_env"]) == \
        json.loads((out / "head.json").read_text())["machine_info"]["q38_env"]
