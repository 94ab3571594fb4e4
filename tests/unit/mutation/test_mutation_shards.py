"""Mutation runs across machines (tests/mutation/shards.py, mutate.py --shard / --merge): the shards
partition the seeded sample, and their merged results score exactly as the unsharded run."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "mutation"
sys.path.insert(0, str(HARNESS))  # mutate.py imports its siblings as scripts do

import mutate  # noqa: E402
import shards  # noqa: E402

NAMES = [f"q38.package.m{i % 9}.x_f{i % 13}__mutmut_{i}" for i in range(2500)]


@pytest.mark.parametrize(("sample", "parts"), [(217, 4), (601, 3), (None, 4), (217, 1)])
def test_the_shards_partition_the_unsharded_selection(sample: int | None, parts: int) -> None:
    whole = mutate.select(NAMES, only=None, sample=sample, seed=0)
    pieces = [shards.shard_of(whole, 0, (k, parts)) for k in range(1, parts + 1)]
    assert sorted(n for piece in pieces for n in piece) == sorted(whole)  # union, and no mutant twice
    assert all(piece == [n for n in whole if n in set(piece)] for piece in pieces)  # judged in sample order
    if parts > 1:  # spread, not one machine doing everything
        assert min(map(len, pieces)) > len(whole) / parts / 2


def test_a_mutants_shard_depends_on_its_name_and_seed_only() -> None:
    """An edit that renumbers one function's mutants leaves every other mutant in its part."""
    edited = [n for n in NAMES if ".x_f3__" not in n] + [f"q38.package.m0.x_f3__mutmut_{i}" for i in range(9000, 9100)]
    before = {n: k for k in range(1, 5) for n in shards.shard_of(NAMES, 0, (k, 4))}
    after = {n: k for k in range(1, 5) for n in shards.shard_of(edited, 0, (k, 4))}
    assert all(after[n] == before[n] for n in after if n in before)
    assert shards.shard_of(NAMES, 0, (1, 4)) != shards.shard_of(NAMES, 1, (1, 4))


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/4", "2/0", "-1/4"])
def test_a_shard_outside_1_to_n_is_a_usage_error(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert mutate.main(["--no-run", f"--shard={text}", "q38/package"]) == 2
    assert "--shard" in capsys.readouterr().err


def _workdir(root: Path, package: str, codes: dict[str, int | None]) -> None:
    """A judged run's workdir as mutmut leaves it: .meta files of verdicts per source file."""
    work = root / package.replace("/", "-")
    by_module: dict[str, dict[str, int | None]] = {}
    for name, code in codes.items():
        by_module.setdefault(mutate._module(name), {})[name] = code
    for module, module_codes in by_module.items():
        meta = work / "mutants" / (module.replace(".", "/") + ".py.meta")
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps({"exit_code_by_key": module_codes, "durations_by_key": {}}), "utf-8")
    (work / mutate.RUN_STATE).write_text(json.dumps({"package": package, "inputs": "d" * 64}), "utf-8")


@pytest.fixture
def judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A package's judged mutants: kills, survivors, allow-listed equivalents and unjudged ones.

    The survivors' diffs come from a stand-in for ``mutmut_cli.py q38-diffs`` (mutmut is not needed to
    read verdicts); one allow-listed function's survivors carry its listed line, so the equivalents
    are recognised from the diffs as a real run recognises them.
    """
    entry = next(e for e in mutate.load_allowlist() if e.function.startswith("q38.package."))
    package = "q38/package"
    rng = random.Random(7)
    codes: dict[str, int | None] = {}
    for i in range(700):
        codes[f"q38.package.m{i % 5}.x_g{i % 11}__mutmut_{i}"] = rng.choice([1, 1, 1, 1, 1, 3, 0, 33, None, -11])
    for i in range(60):
        codes[f"{entry.function}__mutmut_{i}"] = 0
    diff_of = {n: f"--- a\n+++ b\n-old {n}\n+{entry.line if n.startswith(entry.function) else 'new ' + n}\n"
               for n in codes}

    def fake_mutmut(workdir: Path, *args: str, **flags: str) -> subprocess.CompletedProcess[str]:
        assert args[0] == mutate.DIFFS_COMMAND, args
        out = mutate.DIFFS_MARKER + json.dumps({n: diff_of[n] for n in args[1:]})
        return subprocess.CompletedProcess(["mutmut"], 0, out + "\n", "")

    monkeypatch.setattr(mutate, "_mutmut", fake_mutmut)
    _workdir(tmp_path / "work", package, codes)
    return tmp_path, package


def _report(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    status = mutate.main(argv)
    return status, capsys.readouterr().out


def test_merging_four_shards_reproduces_the_unsharded_score(judged: tuple[Path, str],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root, package = judged
    work = root / "work"
    status, whole = _report(capsys, ["--no-run", "--workdir", str(work), package, "--fail-under", "50"])
    assert status == 0 and "== mutation score q38/package:" in whole
    assert "excluded as equivalent" in whole and "-- survived:" in whole and "not judged yet" in whole
    sizes = []
    for k in range(1, 5):  # four machines: each judges its part and ships its result file
        status, out = _report(capsys, ["--no-run", "--workdir", str(work), package, "--shard", f"{k}/4"])
        assert status == 0 and f"shard {k}/4 of the uniform sample" in out
        artifact = root / "artifacts" / f"shard-{k}"
        artifact.mkdir(parents=True)
        result = work / "q38-package" / f"q38-result-shard-{k}-of-4.json"
        sizes.append(len(json.loads(result.read_text("utf-8"))["codes"]))
        result.rename(artifact / result.name)
    assert sum(sizes) == mutate.DEFAULT_SAMPLE and min(sizes) > 30
    shutil.rmtree(work)  # the merge reads the artifacts alone: no workdir, no mutmut
    status, merged = _report(capsys, ["--merge", *(str(p) for p in sorted((root / "artifacts").iterdir())),
                                      "--fail-under", "50"])
    assert status == 0
    assert merged == whole  # the same score, interval, modules, equivalents and survivors with diffs


def test_the_merge_refuses_a_missing_or_repeated_shard(judged: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, package = judged
    work = root / "work"
    for k in (1, 2, 4):
        assert mutate.main(["--no-run", "--workdir", str(work), package, "--shard", f"{k}/4"]) == 0
    capsys.readouterr()
    assert mutate.main(["--merge", str(work)]) == 2
    assert "q38/package: shards of 4: missing 3" in capsys.readouterr().err
    extra = root / "extra"
    extra.mkdir()
    (extra / "q38-result-shard-2-of-4.json").write_bytes((work / "q38-package" / "q38-result-shard-2-of-4.json").read_bytes())
    assert mutate.main(["--no-run", "--workdir", str(work), package, "--shard", "3/4"]) == 0
    capsys.readouterr()
    assert mutate.main(["--merge", str(work), str(extra)]) == 2
    assert "given twice 2" in capsys.readouterr().err
    assert mutate.main(["--merge", str(work)]) == 0  # all four parts once: a score


def test_the_merge_refuses_parts_of_different_runs(judged: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, package = judged
    work = root / "work"
    for k in (1, 2):
        assert mutate.main(["--no-run", "--workdir", str(work), package, "--shard", f"{k}/2"]) == 0
    first = work / "q38-package" / "q38-result-shard-1-of-2.json"
    data = json.loads(first.read_text("utf-8"))
    data["inputs"] = "e" * 64  # judged on another commit
    first.write_text(json.dumps(data), "utf-8")
    capsys.readouterr()
    assert mutate.main(["--merge", str(work)]) == 2
    assert "not parts of one run" in capsys.readouterr().err
    data["inputs"] = "d" * 64
    data["codes"][next(n for n in json.loads((work / "q38-package" / "q38-result-shard-2-of-2.json").read_text())["codes"])] = 1
    first.write_text(json.dumps(data), "utf-8")
    assert mutate.main(["--merge", str(work)]) == 2
    assert "a mutant of another part" in capsys.readouterr().err
    assert mutate.main(["--merge", str(root / "nothing-here")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_a_shard_of_a_workdir_without_a_run_stores_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mutate.main(["--no-run", "--workdir", str(tmp_path), "q38/package", "--shard", "2/4"]) == 0
    assert "shard 2/4 of every mutant (0)" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    assert mutate.main(["--merge", str(tmp_path)]) == 2  # and there is nothing to merge
    assert "no q38-result*.json under" in capsys.readouterr().err
