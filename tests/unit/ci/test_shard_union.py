"""The sharded CPU suite (pytest-split groups over the stored .test_durations) and its union check
(tools/shard_union.py): every collected test runs in exactly one shard, or the union job fails."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
SPLITS = 4


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("shard_union", ROOT / "tools" / "shard_union.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shard_union = _tool()

SUITE = {
    "tests/unit/alpha/test_one.py": '''
import pytest

@pytest.mark.parametrize("x", ["a/b", "c::d", "e.f", "[g]"])
def test_odd_ids(x):
    assert x

class TestGroup:
    @pytest.mark.parametrize("n", range(5))
    def test_n(self, n):
        assert n >= 0

    def test_skipped(self):
        pytest.skip("a skip runs in a shard too")
''',
    "tests/unit/beta/test_two.py": '''
import pytest

@pytest.mark.parametrize("n", range(12))
def test_many(n):
    assert n < 12

def test_fails():
    assert False, "a failure ran in its shard"
''',
    "tests/bench/test_three.py": '''
def test_bench_smoke():
    pass
''',
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small suite with a stored durations file that knows some of its tests (and one removed one)."""
    root = tmp_path_factory.mktemp("suite")
    for rel, body in SUITE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body, "utf-8")
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests/unit tests/bench\n", "utf-8")
    known = {f"tests/unit/beta/test_two.py::test_many[{n}]": 0.5 + n for n in range(6)}
    known["tests/unit/alpha/test_gone.py::test_removed"] = 30.0  # a stale entry: pytest-split ignores it
    (root / ".test_durations").write_text(json.dumps(known), "utf-8")
    return root


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest with pytest-split alone (no other plugin: seconds of imports each, none needed here)."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_split.plugin", "-p", "no:cacheprovider", *args],
                          cwd=root, env=env, capture_output=True, text=True, check=False, timeout=300)


def _collected(root: Path, *args: str) -> list[str]:
    """The node ids ``pytest --collect-only -q ARGS`` lists (a collection error fails the test)."""
    proc = _pytest(root, "--collect-only", "-q", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [ln.strip() for ln in proc.stdout.splitlines() if "::" in ln and not ln.startswith(" ")]


@pytest.fixture(scope="module")
def shards(suite: Path) -> Path:
    """The suite run as SPLITS shards, as ci.yml runs `nox -s cpu -- --splits N --group k --junitxml=...`."""
    reports = suite / "junit"
    reports.mkdir()
    for k in range(1, SPLITS + 1):
        _pytest(suite, "--splits", str(SPLITS), "--group", str(k), f"--junitxml={reports / f'junit-{k}.xml'}")
    return reports


@pytest.mark.slow  # nine pytest processes
@pytest.mark.parametrize("algorithm", ["least_duration", "duration_based_chunks"])
def test_the_union_of_the_shards_collections_is_the_unsharded_collection(suite: Path, algorithm: str) -> None:
    whole = _collected(suite)
    groups = [_collected(suite, "--splits", str(SPLITS), "--group", str(k), "--splitting-algorithm", algorithm)
              for k in range(1, SPLITS + 1)]
    assert len(whole) == 24 and all(groups)
    assert sorted(n for g in groups for n in g) == sorted(whole)  # each test in exactly one group


@pytest.mark.slow  # the four shards' runs and eight collections
def test_every_collected_test_ran_in_exactly_one_shard(suite: Path, shards: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(suite)  # the tool collects the suite where it runs, as the union job does
    durations = suite / "fresh-durations.json"
    assert shard_union.main([str(shards), "--durations-out", str(durations)]) == 0
    out = capsys.readouterr().out
    assert "24 collected test(s), 24 run in 4 report(s)" in out and "exactly one shard" in out
    table = json.loads(durations.read_text("utf-8"))
    whole = _collected(suite)
    assert sorted(table) == sorted(whole) and all(t >= shard_union.MIN_SECONDS for t in table.values())
    # the refreshed file drives the next split: the groups still partition the suite
    shutil.copy(durations, suite / ".test_durations")
    groups = [_collected(suite, "--splits", "3", "--group", str(k)) for k in (1, 2, 3)]
    assert sorted(n for g in groups for n in g) == sorted(whole)


def test_a_shard_that_did_not_report_fails_the_union(suite: Path, shards: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    collected = tmp_path / "collected.txt"
    collected.write_text("\n".join(_collected(suite)), "utf-8")
    partial = tmp_path / "partial"
    partial.mkdir()
    for k in (1, 2, 4):
        shutil.copy(shards / f"junit-{k}.xml", partial)
    lost = {f"{c.get('classname')}::{c.get('name')}" for c in _testcases(shards / "junit-3.xml")}
    assert lost
    assert shard_union.main([str(partial), "--collected", str(collected)]) == 1
    err = capsys.readouterr().err
    assert f"{len(lost)} test(s) ran in no shard" in err
    # a shard run twice (a retried job uploading both reports) is reported too
    shutil.copy(shards / "junit-3.xml", partial)
    shutil.copy(shards / "junit-2.xml", partial / "junit-2-retry.xml")
    assert shard_union.main([str(partial), "--collected", str(collected)]) == 1
    assert "ran in more than one shard" in capsys.readouterr().err


def _testcases(report: Path) -> list[object]:
    import xml.etree.ElementTree as ET

    return list(ET.parse(report).getroot().iter("testcase"))


def test_junit_names_a_node_id_as_pytest_does() -> None:
    assert shard_union.junit_key("tests/unit/x/test_m.py::TestC::test_f[a/b-c::d]") == (
        "tests.unit.x.test_m.TestC", "test_f[a/b-c::d]")
    assert shard_union.junit_key("tests/bench/test_b.py::test_g") == ("tests.bench.test_b", "test_g")


def test_unreadable_reports_are_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "junit-1.xml"
    bad.write_text("<testsuites><testcase", "utf-8")
    assert shard_union.main([str(bad), "--collected", str(bad)]) == 2
    assert "not a JUnit XML report" in capsys.readouterr().err
    assert shard_union.main([str(tmp_path / "absent")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_the_stored_durations_name_tests_of_the_suite() -> None:
    """The committed .test_durations is pytest-split's format: node ids of tests/unit or tests/bench -> seconds."""
    table = json.loads((ROOT / ".test_durations").read_text("utf-8"))
    assert len(table) > 1000
    assert all(k.startswith(("tests/unit/", "tests/bench/")) and "::" in k for k in table)
    assert all(isinstance(v, float | int) and v >= 0 for v in table.values())
