"""The mutation harness's own logic (tests/mutation): test order, sample, score interval, allowlist,
byte-compiling. mutmut itself is not needed: these parts are plain functions."""

from __future__ import annotations

import importlib.util
import json
import math
import struct
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "mutation"
sys.path.insert(0, str(HARNESS))  # mutmut_cli imports ordering the same way, as a sibling script

import mutate  # noqa: E402
from ordering import modules_hit, targeted_order  # noqa: E402

CLI = "tests/unit/contracts/test_contracts_check_cli.py"
GRAPHS = "tests/unit/contracts/test_contracts_config_graphs.py"
KERNEL = "tests/unit/contracts/test_contracts_kernel_differential.py"


def test_tests_named_after_the_mutated_module_run_first_quickest_first() -> None:
    tests = [f"{CLI}::quick", f"{GRAPHS}::slow", f"{GRAPHS}::quick", f"{KERNEL}::quick"]
    durations = {f"{CLI}::quick": 0.01, f"{GRAPHS}::slow": 5.6, f"{GRAPHS}::quick": 0.5, f"{KERNEL}::quick": 0.02}
    order = targeted_order("contracts.config_graphs.x__check_multidraft__mutmut_73", tests, durations, {})
    assert order == [f"{GRAPHS}::quick", f"{GRAPHS}::slow", f"{CLI}::quick", f"{KERNEL}::quick"]


def test_other_tests_run_by_duration_times_the_modules_they_reach() -> None:
    tests = ["t/test_a.py::broad", "t/test_b.py::narrow", "t/test_c.py::unknown"]
    durations = {"t/test_a.py::broad": 0.1, "t/test_b.py::narrow": 0.3}
    hit = {"t/test_a.py::broad": 20, "t/test_b.py::narrow": 1}
    # 0.1 s x 20 modules after 0.3 s x 1; a test without a recorded duration costs nothing
    assert targeted_order("contracts.qmoe.x__shared__mutmut_3", tests, durations, hit) == [
        "t/test_c.py::unknown", "t/test_b.py::narrow", "t/test_a.py::broad"]


def test_a_class_method_and_a_private_module_are_matched_by_the_module_name() -> None:
    tests = ["t/test_x.py::a", "t/test_facts.py::b", "t/test_offload_nodes.py::c"]
    durations = {"t/test_x.py::a": 0.0, "t/test_facts.py::b": 9.0, "t/test_offload_nodes.py::c": 9.0}
    assert targeted_order("contracts._facts.x_model_facts__mutmut_5", tests, durations, {})[0] == "t/test_facts.py::b"
    assert targeted_order("contracts.offload_nodes.xǁ_QMoEǁof__mutmut_10", tests, durations, {})[0] == (
        "t/test_offload_nodes.py::c")


def test_modules_hit_counts_distinct_modules_per_test() -> None:
    stats = {"contracts.qmoe.x_a": {"t1", "t2"}, "contracts.qmoe.x_b": {"t1"}, "contracts.qsa.xǁCǁm": {"t1"}}
    assert modules_hit(stats) == {"t1": 2, "t2": 1}


def test_the_sample_is_seeded_and_uniform_over_the_matching_mutants() -> None:
    names = [f"contracts.m{i % 3}.x_f__mutmut_{i}" for i in range(100)]
    first = mutate.select(names, only=None, sample=10, seed=0)
    assert first == mutate.select(list(reversed(names)), only=None, sample=10, seed=0)
    assert len(set(first)) == 10 and len(first) == 10
    assert first != mutate.select(names, only=None, sample=10, seed=1)
    only = mutate.select(names, only=["contracts.m1.*"], sample=None, seed=0)
    assert len(only) == 33 and all(".m1." in n for n in only)
    assert mutate.select(names, only=None, sample=500, seed=0) == sorted(names)


def test_an_edit_that_adds_or_removes_mutants_leaves_the_rest_of_the_sample_in_place() -> None:
    """A one-line fix renumbers the mutants of one function: the other members keep their places
    (the sample's untouched mutants before and after are one the prefix of the other, differing
    only at the tail by as many as the edited function gave or took), not a new sample."""
    names = [f"q38.package.m{i % 7}.x_f{i % 11}__mutmut_{i}" for i in range(3000)]
    edited = [n for n in names if ".x_f3__" not in n] + [f"q38.package.m0.x_f3__mutmut_{i}" for i in range(5000, 5300)]

    def untouched(sample: list[str]) -> list[str]:
        return [n for n in sample if ".x_f3__" not in n]

    before = mutate.select(names, only=None, sample=217, seed=2)
    after = mutate.select(edited, only=None, sample=217, seed=2)
    short, long = sorted((untouched(before), untouched(after)), key=len)
    assert long[: len(short)] == short
    moved = len(before) - len(untouched(before)) + len(after) - len(untouched(after))
    assert len(long) - len(short) <= moved and len(short) > 150


def test_the_score_interval_is_wilsons() -> None:
    low, high = mutate.wilson(270, 292)
    assert (round(low, 1), round(high, 1)) == (88.9, 95.0)
    assert mutate.wilson(0, 0) == (0.0, 100.0)
    assert mutate.wilson(5, 5)[1] == 100.0


def test_every_committed_equivalent_has_a_reason_and_names_a_mutated_module() -> None:
    entries = mutate.load_allowlist()
    assert entries, "the committed allowlist is empty"
    keys = [(e.function, e.line) for e in entries]
    assert len(keys) == len(set(keys)), "an equivalent mutant is listed twice"
    for e in entries:
        packages = tuple(p.replace("/", ".") + "." for p in mutate.TARGETS)
        assert e.function.startswith(packages) and e.line and e.reason.strip()


def _defined_functions(module: Path) -> set[str]:
    """Every function of ``module`` as mutmut names it: ``x_f`` at top level, ``xǁCǁm`` in class C."""
    import ast

    tree = ast.parse(module.read_text("utf-8"))
    names = {f"x_{n.name}" for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names |= {f"x\u01c1{cls.name}\u01c1{m.name}" for m in cls.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)}
    return names


def test_every_committed_equivalent_names_a_function_the_code_still_has() -> None:
    """An entry whose function was renamed or moved would hide nothing and mislead: it must follow the code."""
    root = HARNESS.parents[1]
    missing = []
    for e in mutate.load_allowlist():
        module_name, _, function = e.function.rpartition(".")
        path = root / (module_name.replace(".", "/") + ".py")
        if not path.is_file():
            path = root / module_name.replace(".", "/") / "__init__.py"
        if not path.is_file() or function not in _defined_functions(path):
            missing.append(e.function)
    assert missing == []


def test_an_equivalent_without_a_reason_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "allow.toml"
    path.write_text('[[equivalent]]\nfunction = "contracts.qmoe.x_f"\nline = "x = 1"\nreason = " "\n', "utf-8")
    with pytest.raises(SystemExit, match="has no reason"):
        mutate.load_allowlist(path)


def test_the_mutated_tree_is_compiled_once_into_hash_checked_pycs(tmp_path: Path) -> None:
    source = tmp_path / "mutants" / "contracts" / "m.py"
    source.parent.mkdir(parents=True)
    source.write_text("X = 1\n", "utf-8")
    mutate._precompile(tmp_path)
    pyc = Path(importlib.util.cache_from_source(str(source)))
    flags = struct.unpack("<I", pyc.read_bytes()[4:8])[0]
    assert flags == 0b11  # hash-based, checked: a rewritten source is never run from a stale pyc


def test_every_package_that_guards_data_is_a_target_with_existing_tests() -> None:
    root = HARNESS.parents[1]
    assert {"q38/optimize", "q38/offload", "q38/assembly", "q38/package", "contracts"} <= set(mutate.TARGETS)
    for package, tests in mutate.TARGETS.items():
        assert (root / package).is_dir(), package
        assert tests and all((root / t).exists() for t in tests), (package, tests)


def test_the_default_sample_gives_a_95_interval_of_at_most_4_points_at_any_passing_score() -> None:
    n = mutate.DEFAULT_SAMPLE
    assert n == mutate.sample_for(4.0) == 217 and mutate.sample_for(4.0, score=0.5) == 601
    for killed in range(math.ceil(0.9 * n), n + 1):  # every score the acceptance can pass
        low, high = mutate.wilson(killed, n)
        assert high - low <= 8.0, (killed, low, high)
    low, high = mutate.wilson(n // 2, n)  # at 50 % the same sample is wider: the worst case needs 601
    assert high - low > 8.0
    low, high = mutate.wilson(300, 601)
    assert high - low <= 8.0


def test_a_larger_sample_of_the_same_seed_holds_every_mutant_of_a_smaller_one() -> None:
    names = [f"q38.assembly.m{i % 7}.x_f__mutmut_{i}" for i in range(5000)]
    small = set(mutate.select(names, only=None, sample=300, seed=0))
    large = set(mutate.select(names, only=None, sample=601, seed=0))
    assert len(small) == 300 and len(large) == 601 and small <= large


def test_the_sample_is_judged_in_shuffle_order_so_a_partial_run_is_a_smaller_uniform_sample() -> None:
    names = [f"q38.assembly.m{i % 7}.x_f__mutmut_{i}" for i in range(5000)]
    large = mutate.select(names, only=None, sample=601, seed=0)
    assert mutate.select(names, only=None, sample=300, seed=0) == large[:300]
    assert large != sorted(large)  # not name order: the first modules would be judged first
    # A partly judged run keeps that order: what is judged first is spread over every module.
    todo = mutate.to_judge(large, {}, resume=True, rerun_survivors=False)
    assert todo == large and len({n.split(".")[2] for n in todo[:40]}) == 7


def test_a_resumed_run_judges_only_the_mutants_without_a_verdict() -> None:
    codes = {"a": 1, "b": 0, "c": None, "d": 3, "e": None}
    names = sorted(codes)
    assert mutate.to_judge(names, codes, resume=True, rerun_survivors=False) == ["c", "e"]
    # changed inputs in a kept workdir: killed verdicts stand, survivors are judged again
    assert mutate.to_judge(names, codes, resume=False, rerun_survivors=False) == ["b", "c", "e"]
    assert mutate.to_judge(names, codes, resume=True, rerun_survivors=True) == names


def test_a_survivor_judged_again_has_no_verdict_until_it_is(tmp_path: Path) -> None:
    """A kept workdir's survivors are judged again; a run stopped before reaching one must leave it
    unjudged (so the resumed run judges it), not report its stale survival as a verdict."""
    meta = tmp_path / "mutants" / "q38" / "x.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {"q38.x.x_f__mutmut_1": 1, "q38.x.x_f__mutmut_2": 0, "q38.x.x_f__mutmut_3": None}
    meta.write_text(json.dumps({"exit_code_by_key": codes, "durations_by_key": {}}), "utf-8")
    todo = mutate.to_judge(sorted(codes), codes, resume=False, rerun_survivors=False)
    mutate.forget(tmp_path, "q38", todo)
    after = mutate._codes(tmp_path, "q38")
    assert after == {"q38.x.x_f__mutmut_1": 1, "q38.x.x_f__mutmut_2": None, "q38.x.x_f__mutmut_3": None}
    assert mutate.to_judge(sorted(after), after, resume=True, rerun_survivors=False) == [
        "q38.x.x_f__mutmut_2", "q38.x.x_f__mutmut_3"]
    assert list(meta.parent.iterdir()) == [meta]  # replaced whole, no temporary left


def test_allow_listing_an_equivalent_does_not_restart_a_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The allowlist is read when the score is reported, never by a judgement: it is not an input."""
    digest = mutate.inputs_digest("q38/assembly", ("tests/unit/assembly",))
    allowlist = tmp_path / "equivalent_mutants.toml"
    allowlist.write_bytes(mutate.ALLOWLIST.read_bytes() + b"\n# another entry\n")
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes",
                        lambda self: real_read(allowlist) if self == mutate.ALLOWLIST else real_read(self))
    assert mutate.inputs_digest("q38/assembly", ("tests/unit/assembly",)) == digest


def test_a_workdir_resumes_only_over_the_inputs_it_was_prepared_from(tmp_path: Path) -> None:
    digest = mutate.inputs_digest("q38/assembly", ("tests/unit/assembly",))
    assert digest == mutate.inputs_digest("q38/assembly", ("tests/unit/assembly",))
    assert digest != mutate.inputs_digest("q38/assembly", ("tests/unit/package",))
    assert not mutate.resumable(tmp_path, digest)  # nothing prepared
    (tmp_path / "mutants").mkdir()
    (tmp_path / mutate.RUN_STATE).write_text(json.dumps({"inputs": digest}), "utf-8")
    assert mutate.resumable(tmp_path, digest)
    assert not mutate.resumable(tmp_path, "0" * 64)  # other inputs: start over
    (tmp_path / mutate.RUN_STATE).write_text('{"inputs": ', "utf-8")  # a torn state file
    assert not mutate.resumable(tmp_path, digest)


def test_a_verdict_file_is_replaced_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mutmut_cli's atomic .meta save: the old file stands until the new one is complete."""
    monkeypatch.chdir(tmp_path)  # mutmut reads its configuration here when first imported
    (tmp_path / "q38").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["q38"]\n', "utf-8")
    data = pytest.importorskip("mutmut.mutation.data")
    import mutmut_cli
    monkeypatch.setattr(data.SourceFileMutationData, "save", data.SourceFileMutationData.save)
    mutmut_cli._atomic_saves()
    m = data.SourceFileMutationData(path="q38/x.py")
    m.meta_path.parent.mkdir(parents=True)
    m.exit_code_by_key = {"q38.x.x_f__mutmut_1": 1}
    m.save()
    assert json.loads(m.meta_path.read_text())["exit_code_by_key"] == {"q38.x.x_f__mutmut_1": 1}
    monkeypatch.setattr(json, "dump", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    m.exit_code_by_key = {"q38.x.x_f__mutmut_1": 0}
    with pytest.raises(KeyboardInterrupt):
        m.save()
    assert json.loads(m.meta_path.read_text())["exit_code_by_key"] == {"q38.x.x_f__mutmut_1": 1}
    assert m.meta_path == Path("mutants/q38/x.py.meta")


def test_a_kept_workdir_loses_the_files_the_repository_no_longer_has(tmp_path: Path) -> None:
    (tmp_path / "tests" / "unit" / "assembly").mkdir(parents=True)
    (tmp_path / "tests" / "bench").mkdir(parents=True)
    (tmp_path / "mutants" / "tests").mkdir(parents=True)
    moved = tmp_path / "tests" / "unit" / "assembly" / "test_build_bench.py"  # moved to tests/bench since
    kept = tmp_path / "tests" / "bench" / "test_build_bench.py"
    mutmut_copy = tmp_path / "mutants" / "tests" / "test_x.py"  # mutmut's own tree: not ours to prune
    for f in (moved, kept, mutmut_copy):
        f.write_text("x")
    stale = mutate._stale_copies(tmp_path, {"tests/bench/test_build_bench.py"})
    assert stale == [moved]


def test_every_top_level_path_the_tests_read_is_copied_for_the_mutants() -> None:
    # mutmut runs the tests in a copy holding q38/, contracts/, tests/, pyproject.toml and ALSO_COPY:
    # a test that reads another top-level file or folder (tools/external_differential.py did) fails
    # there, and every mutation run of its package dies in mutmut's stats ("runner returned 1").
    repo = mutate.REPO
    ignored = {".git", ".nox", ".mutation", ".benchmarks", ".pytest_cache", ".mypy_cache", ".ruff_cache",
               ".hypothesis", "q38", "contracts", "tests", "pyproject.toml"}
    names = {p.name for p in repo.iterdir()} - ignored
    sources = [p.read_text("utf-8") for sub in ("unit", "bench", "support") for p in (repo / "tests" / sub).rglob("*.py")]
    sources += [p.read_text("utf-8") for p in (repo / "tests").glob("*.py")]
    read = {n for n in names if any(f'"{n}"' in s or f'"{n}/' in s or f"'{n}'" in s for s in sources)}
    assert read, "the scan finds nothing: it no longer reads the tests"
    assert read <= set(mutate.ALSO_COPY), sorted(read - set(mutate.ALSO_COPY))
