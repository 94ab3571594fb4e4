"""Mutation testing of one package with mutmut: targeted tests, a score, the survivors, an allowlist.

``python tests/mutation/mutate.py [PACKAGE ...]`` (``nox -s mutation -- [PACKAGE ...]``), where
PACKAGE is a key of :data:`TARGETS` (``q38/optimize``, ``q38/offload``, ``q38/assembly``,
``q38/package``, ``contracts``; default all of them). For each:

1. the repository's files (tracked and untracked-but-not-ignored, so uncommitted work counts) are
   copied into a fresh scratch directory (``.mutation/<slug>/`` by default) whose ``pyproject.toml``
   gains a ``[tool.mutmut]`` section: the whole of ``q38`` and ``contracts`` is importable, only
   PACKAGE is mutated, and only PACKAGE's tests are run (``-m "not slow"``, no xdist);
2. phase 1 (``tests/mutation/mutmut_cli.py`` with ``Q38_MUTATE_STATS_ONLY``): mutmut generates
   every mutant of PACKAGE and runs the tests once, recording which test calls which function;
   two pytest plugins fix its attribution: ``import_hits`` (code run at import time is credited to
   every test) and ``fixture_hits`` (what a module/session fixture's setup calls is credited to
   every test that uses the fixture, not only to the first one -- without it a mutant of code a
   shared fixture runs was judged by one test);
3. phase 2: the mutated tree is byte-compiled once (hash-checked ``.pyc``), then the selected
   mutants run, each with only the tests that called its function, most targeted first (tests
   named after the mutated module, then quick tests of few modules before slow end-to-end ones;
   ``mutmut_cli.targeted_order``), stopped at the first failure (``-x``). mutmut's "clean tests" run is skipped when phase 1
   has just run every test clean (a failing test stops phase 1), which saves one whole test pass;
4. the verdicts are read from mutmut's ``.meta`` files; survivors that the allowlist
   (``tests/mutation/equivalent_mutants.toml``) names as equivalent are excluded and listed with
   their reasons; the score is ``killed / (killed + survived)``, printed per package and per module,
   and every other survivor is printed with its diff.

What is judged: by default a **fixed-seed uniform sample** of :data:`DEFAULT_SAMPLE` mutants per
package (``--sample N``, ``--seed S``; default seed 0), reported with its 95 % Wilson interval:
217 mutants make the interval at most +-4 points at any passing score, 90 % or more (601 at any
score; :func:`sample_for`).
q38/optimize has about 5,300 mutants and contracts about 9,100, judged at 15-40 a minute on two
loaded cores: a sample of every package takes a few hours, so it is meant to be spread over
several runs (see "Resumable" below). ``--all`` judges every mutant. ``--mutants GLOB ...`` limits a run to mutants whose names
match fnmatch patterns (one module's ``q38.optimize.fp8_head.*``, or survivors to recheck).
``--keep`` reuses the workdir: killed verdicts of unchanged functions stand, survivors are judged
again against the current tests. ``--reuse`` runs in the existing workdir without copying.
``--no-run`` only reports the last run's verdicts.

Resumable: a crash or a time limit loses nothing. The workdir records a digest of its inputs
(``q38-run.json``: the package, its tests, every copied file); mutmut saves each verdict as the
mutant finishes (``.meta``, written atomically by ``mutmut_cli.py``), and the mutants run in
chunks (``--chunk``, default 40). A rerun of the same command over the same inputs continues: every
saved verdict stands, the stats are loaded, the clean run is skipped, and only the mutants without a
verdict are judged (a larger ``--sample`` of the same seed adds only the new ones: the sample is a
prefix of one seeded order, a hash of each name, so a source edit moves only the edited function's
mutants in or out of it). ``--time-limit SECONDS`` stops between chunks, reports the verdicts
so far and exits 3; ``--fresh`` starts over. Changed inputs start over too, unless ``--keep``.

An allowlist entry names the function (mutmut's mangled name without the ``__mutmut_N`` suffix,
e.g. ``q38.optimize._common.xǁRewritePassǁcall``), the mutated line as mutmut writes it (the
``+`` line of ``mutmut show``, stripped), and a one-line ``reason`` saying why the mutation cannot
change behaviour. Matching on the line rather than the mutant number keeps an entry valid when
other mutants of the function come and go.

Across machines: ``--shard k/N`` judges the k-th of N disjoint parts of the selection (by the
seeded hash that orders the sample; the parts' union is exactly the unsharded selection), and every
run leaves its verdicts in ``<workdir>/<slug>/q38-result*.json``; ``--merge DIR ...`` combines the
result files found under the DIRs (the N shards of one run) into the package's score with its
interval, exactly as the unsharded run scores it (``tests/mutation/shards.py``).

Exit status: 0, or 1 when a score is below ``--fail-under`` (default 0: report only) or mutmut
fails, 2 on a usage error, 3 when ``--time-limit`` stopped the run (rerun to continue).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import shards  # tests/mutation, this script's directory
from ordering import module_of

REPO = Path(__file__).resolve().parents[2]
ALLOWLIST = Path(__file__).with_name("equivalent_mutants.toml")

# Package -> the tests that exercise it (mutmut narrows these further, per function). The one list
# of mutated packages: the command line, the default run, the report, the allowlist check
# (tests/unit/mutation) and `nox -s mutation` all read it -- a renamed package is renamed here.
# Each package's benchmark (tests/bench, its smoke size outside --benchmark-enable) judges it too.
TARGETS: dict[str, tuple[str, ...]] = {
    "q38/optimize": ("tests/unit/optimize", "tests/unit/properties/test_optimizer_properties.py",
                     "tests/bench/test_optimize_bench.py"),
    "q38/offload": ("tests/unit/offload", "tests/bench/test_offload_bench.py"),
    "q38/assembly": ("tests/unit/assembly", "tests/bench/test_build_bench.py"),
    # q38/package is the bottom layer: besides its own tests, the fit estimates (package/memory.py)
    # and the staging and unreadable-file faults (package/io/staging.py, package/io/files.py) judge it.
    "q38/package": ("tests/unit/package", "tests/unit/assembly/test_links.py", "tests/unit/assembly/test_link_policy.py",
                    "tests/unit/fit", "tests/unit/faults/test_staging_names.py", "tests/unit/faults/test_unreadable.py",
                    "tests/bench/test_package_bench.py"),
    "contracts": ("tests/unit/contracts", "tests/bench/test_check_bench.py"),
}
# Directories the tests read besides the code and themselves.
ALSO_COPY = ("goldens", "docs", "tools", ".github", "README.md", "CONTRIBUTING.md", "noxfile.py", ".test_durations")


# The default run judges a seeded uniform sample of this many mutants per package (``--all``: every
# mutant): the smallest n whose 95 % interval is at most +-4 points at every score the acceptance
# can pass (90 % and above: 1.96 * sqrt(0.9 * 0.1 / n) <= 0.04, :func:`sample_for`). Above 90 % the
# interval is narrower still; a score below 90 % fails however narrow its interval, and the report
# prints the interval's real half-width, so a wider one is never hidden. ``--sample 601`` is the
# +-4-points sample at any score (the worst case, 50 %).
HALF_WIDTH = 4.0
PASSING_SCORE = 0.90


def sample_for(half_width: float = HALF_WIDTH, z: float = 1.96, score: float = PASSING_SCORE) -> int:
    """The sample size whose normal-approximation 95 % interval is +-``half_width`` points at ``score``.

    The half-width z * sqrt(p (1 - p) / n) is largest at p = 0.5 (601 mutants for 4 points) and
    shrinks as p moves away; at the passing score of 90 % it is 217.
    """
    return math.ceil((z * 100.0 * math.sqrt(score * (1.0 - score)) / half_width) ** 2)


DEFAULT_SAMPLE = sample_for()  # 217

# A resumable run: the workdir records what it was prepared from (RUN_STATE); a rerun over the same
# inputs keeps every verdict mutmut saved (one ``.meta`` write per judged mutant) and judges only
# the rest, CHUNK mutants per mutmut invocation, stopping between chunks at ``--time-limit``.
RUN_STATE = "q38-run.json"
CHUNK = 40
INCOMPLETE = 3  # exit status: the time limit stopped the run; rerun the same command to continue

# tests/mutation/mutmut_cli.py's batch command: the diffs of many mutants, one JSON line after the marker.
DIFFS_COMMAND = "q38-diffs"
DIFFS_MARKER = "Q38-DIFFS "

KILLED = {1, 3, 36, 37, -24, 24, 152, 255, -11, -9}  # failed, errored, timed out, crashed
SURVIVED = {0, 5, 33}  # passed, or no test ran the mutant


@dataclasses.dataclass(frozen=True)
class Equivalent:
    function: str
    line: str
    reason: str


@dataclasses.dataclass
class Verdicts:
    killed: list[str] = dataclasses.field(default_factory=list)
    survived: list[str] = dataclasses.field(default_factory=list)
    equivalent: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    other: list[tuple[str, int | None]] = dataclasses.field(default_factory=list)

    @property
    def score(self) -> float:
        judged = len(self.killed) + len(self.survived)
        return 100.0 * len(self.killed) / judged if judged else 100.0


def load_allowlist(path: Path = ALLOWLIST) -> list[Equivalent]:
    if not path.is_file():
        return []
    data = tomllib.loads(path.read_text("utf-8"))
    entries = []
    for raw in data.get("equivalent", []):
        if not raw.get("reason", "").strip():
            raise SystemExit(f"{path}: equivalent mutant {raw!r} has no reason")
        entries.append(Equivalent(raw["function"], raw["line"].strip(), raw["reason"]))
    return entries


def _repo_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO, capture_output=True, check=True,
        ).stdout.decode()
        return [f for f in out.split("\0") if f and (REPO / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        roots = ("q38", "contracts", "tests", *ALSO_COPY, "pyproject.toml")
        return [str(p.relative_to(REPO)) for r in roots for p in (REPO / r).rglob("*") if p.is_file()] + [
            r for r in roots if (REPO / r).is_file()
        ]


def _mutmut_section(package: str, tests: tuple[str, ...]) -> str:
    def arr(items: tuple[str, ...] | list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return "\n".join([
        "", "[tool.mutmut]",
        f"source_paths = {arr(['q38', 'contracts'])}",
        f"only_mutate = {arr([f'{package}/*'])}",
        f"also_copy = {arr(list(ALSO_COPY))}",
        f"pytest_add_cli_args_test_selection = {arr(tests)}",
        # --snapshot-disable-unused: a mutant's run selects a subset of the tests, so goldens of
        # the others are "unused" and would fail the run -- a kill the mutant did not earn.
        # -p import_hits: import-time calls (rule factories) are credited to every test, not to
        # the first one (tests/mutation/import_hits.py); -p fixture_hits: what a shared
        # (module/session) fixture's setup calls is credited to every test using the fixture, not
        # to the first one (tests/mutation/fixture_hits.py).
        "pytest_add_cli_args = " + arr(["-p", "no:cacheprovider", "-p", "no:xdist", "-m", "not slow",
                                        "--snapshot-disable-unused", "-p", "import_hits", "-p", "fixture_hits"]),
        "use_git_change_detection = false",
        # A mutant's child is stopped after (estimated + constant) x multiplier seconds of wall time
        # (twice that of CPU), a timeout counting as a kill. mutmut's estimate is the sum of the
        # tests' call phases only (fixture setup not counted), so the constant absorbs setup; the
        # multiplier is 4 rather than mutmut's 15, which let one looping mutant of a function every
        # test covers hold a worker for half an hour.
        "timeout_multiplier = 4.0",
        "timeout_constant = 30.0",
        # Every test run of the parent (stats, clean run, listing, forced fail) happens in a forked
        # child (tests/mutation/mutmut_cli.py), so each mutant's child imports q38 and contracts
        # itself: a mutant of code run at import time (rule factories) or cached (the schema
        # registry) takes effect. mutmut's fork server is not used: it never gets mutmut's
        # sys.path, and every mutant then "times out" (exit 255) without running a test.
        "",
    ])


def prepare(package: str, workdir: Path, tests: tuple[str, ...], *, keep: bool) -> None:
    """Copy the repository into ``workdir`` with a mutmut section (keeping mutmut's cache if asked)."""
    if not keep and workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    files = _repo_files()
    if keep:  # a file the repository no longer has (a moved or deleted test) must not run here
        for stale in _stale_copies(workdir, set(files)):
            stale.unlink()
    for rel in files:
        src, dst = REPO / rel, workdir / rel
        if keep and dst.is_file() and dst.read_bytes() == src.read_bytes():
            continue  # unchanged: keep its mtime, so mutmut keeps the verdicts of its mutants
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    pyproject = (REPO / "pyproject.toml").read_text("utf-8")
    (workdir / "pyproject.toml").write_text(pyproject + _mutmut_section(package, tests), "utf-8")


def _stale_copies(workdir: Path, files: set[str]) -> list[Path]:
    """Files a kept workdir holds under the copied roots that the repository no longer has.

    A kept workdir is updated by copying, so a test moved or deleted since (a module that moved to
    tests/bench, say) would otherwise stay and keep running in every later judgement. mutmut's own
    tree (``mutants/``), its logs and the synth cache are not under these roots.
    """
    roots = ("q38", "contracts", "tests", *ALSO_COPY)
    found = []
    for root in roots:
        base = workdir / root
        paths = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        found += [p for p in paths if "__pycache__" not in p.parts and str(p.relative_to(workdir)) not in files]
    return found


def _package_of(workdir: Path) -> str:
    """The package a workdir (``<root>/<slug>``, see :func:`main`) mutates, or "" when unknown."""
    return {p.replace("/", "-"): p for p in TARGETS}.get(workdir.name, "")


def _mutmut(workdir: Path, *args: str, **flags: str) -> subprocess.CompletedProcess[str]:
    """``mutmut ARGS`` in ``workdir`` through tests/mutation/mutmut_cli.py (``flags``: its env switches)."""
    # Every mutant runs in a new pytest session: the session's synthetic packages are built once
    # per run (tests/support/synth_packages.py) instead of once per mutant.
    cache = workdir / "synth-cache"
    cache.mkdir(exist_ok=True)
    plugin_dir = str(workdir / "tests" / "mutation")  # import_hits, fixture_hits, for pytest's -p
    path = os.pathsep.join(p for p in (plugin_dir, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "Q38_SYNTH_CACHE": str(cache), "PYTHONPATH": path,
           "Q38_MUTATE_PACKAGE": _package_of(workdir), **flags}
    cli = [sys.executable, str(workdir / "tests" / "mutation" / "mutmut_cli.py")]
    return subprocess.run([*cli, *args], cwd=workdir, env=env, text=True, capture_output=True, check=False)


def _precompile(workdir: Path) -> None:
    """Byte-compile the mutated tree once, as hash-checked ``.pyc`` files, for every mutant's child.

    The runs keep ``PYTHONDONTWRITEBYTECODE`` (no timestamp ``.pyc`` that a same-second rewrite by
    mutmut could leave stale), so without this every child compiled q38 and contracts -- sources
    that hold every mutant of the package -- from scratch: about 4.5 s of a mutant whose killing
    test takes 0.02 s. A checked-hash ``.pyc`` is used only while its source's hash matches.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-f", "--invalidation-mode", "checked-hash",
         "q38", "contracts", "tests"],
        cwd=workdir / "mutants", capture_output=True, text=True, check=False,
    )
    if proc.returncode:
        raise RunError(f"byte-compiling {workdir / 'mutants'} failed (exit {proc.returncode})",
                       proc.stdout + proc.stderr)


def _stats_time(workdir: Path) -> float | None:
    """mutmut's record of its last full stats run (None: no stats yet)."""
    try:
        return json.loads((workdir / "mutants" / "mutmut-stats.json").read_text("utf-8")).get("stats_time")
    except (OSError, ValueError):
        return None


def _codes(workdir: Path, package: str) -> dict[str, int | None]:
    """Every mutant of ``package`` mutmut generated -> its exit code (None: not run yet)."""
    codes: dict[str, int | None] = {}
    for meta in sorted((workdir / "mutants" / package).rglob("*.py.meta")):
        codes.update(json.loads(meta.read_text("utf-8"))["exit_code_by_key"])
    return codes


def select(names: list[str], *, only: list[str] | None, sample: int | None, seed: int) -> list[str]:
    """The mutants a run judges: those matching ``only`` (all when None), then a seeded sample.

    The names are ordered by a seeded hash of each name alone (a uniform random order), and the
    sample is a prefix of that order, so a larger sample of the same seed holds every mutant of a
    smaller one: a run can be grown without judging anything twice. Because each name's place
    depends on nothing else, an edit that adds or removes mutants in one function leaves the rest
    of the sample as it was (a shuffle of the whole list redrew every member, so a ``--keep`` rerun
    after a one-line fix was scored on a new sample). The sample is judged in that order, so what a
    time-limited run has judged so far is itself a prefix -- a smaller uniform sample, spread over
    the package's modules, not the first modules in name order.
    """
    chosen = sorted(n for n in names if only is None or any(fnmatch.fnmatchcase(n, p) for p in only))
    if sample is not None and sample < len(chosen):
        chosen = sorted(chosen, key=lambda n: hashlib.sha256(f"{seed}:{n}".encode()).digest())[:sample]
    return chosen


def wilson(killed: int, judged: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a killed fraction, in percent."""
    if judged == 0:
        return 0.0, 100.0
    p = killed / judged
    centre = (p + z * z / (2 * judged)) / (1 + z * z / judged)
    half = z * math.sqrt(p * (1 - p) / judged + z * z / (4 * judged * judged)) / (1 + z * z / judged)
    return 100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half)


def collect(workdir: Path, package: str, allow: list[Equivalent], names: list[str] | None = None) -> Verdicts:
    """The verdict of every mutant of ``package`` (or of ``names``) from mutmut's ``.meta`` files."""
    return classify(_codes(workdir, package), workdir, allow, names)


def classify(codes: dict[str, int | None], workdir: Path, allow: list[Equivalent],
             names: list[str] | None = None) -> Verdicts:
    """The verdicts of ``codes`` (of ``names`` among them): killed, survived, equivalent, unjudged."""
    v = Verdicts()
    wanted = set(names) if names is not None else None
    for name, code in sorted(codes.items()):
        if wanted is not None and name not in wanted:
            continue
        if code in KILLED:
            v.killed.append(name)
        elif code in SURVIVED:
            reason = _equivalent(workdir, name, allow)
            if reason is None:
                v.survived.append(name)
            else:
                v.equivalent.append((name, reason))
        else:
            v.other.append((name, code))
    return v


def _function(name: str) -> str:
    return name.rpartition("__mutmut_")[0]


# Diffs already read, per (workdir, mutant): ``mutmut show`` costs a process and a scan of every
# mutant's metadata (~6 s) per call, so the report reads all it needs in one call (:func:`prefetch_diffs`).
_DIFFS: dict[tuple[Path, str], str] = {}


def prefetch_diffs(workdir: Path, names: list[str]) -> None:
    """Read the diffs of ``names`` in one process (``mutmut_cli.py q38-diffs``, mutmut's own rendering)."""
    todo = [n for n in names if (workdir, n) not in _DIFFS]
    if not todo:
        return
    out = _mutmut(workdir, DIFFS_COMMAND, *todo).stdout
    for line in out.splitlines():
        if line.startswith(DIFFS_MARKER):
            for name, diff in json.loads(line[len(DIFFS_MARKER):]).items():
                _DIFFS[(workdir, name)] = diff


def _diff(workdir: Path, name: str) -> str:
    if (workdir, name) not in _DIFFS:
        _DIFFS[(workdir, name)] = _mutmut(workdir, "show", name).stdout
    return _DIFFS[(workdir, name)]


def _mutated_lines(diff: str) -> list[str]:
    return [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]


def _equivalent(workdir: Path, name: str, allow: list[Equivalent]) -> str | None:
    candidates = [e for e in allow if e.function == _function(name)]
    if not candidates:
        return None
    lines = _mutated_lines(_diff(workdir, name))
    return next((e.reason for e in candidates if e.line in lines), None)


def _module(name: str) -> str:
    """``q38.optimize.fp8_head`` for ``q38.optimize.fp8_head.xǁQuantizeFp8HeadPassǁmatch__mutmut_3``."""
    return module_of(_function(name))


@dataclasses.dataclass(frozen=True)
class Scope:
    """What a score is of: every mutant, or a seeded uniform sample of ``size`` of ``total``."""

    total: int
    size: int | None = None
    seed: int = 0
    only: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None

    def describe(self, v: Verdicts) -> str:
        low, high = wilson(len(v.killed), len(v.killed) + len(v.survived))
        only = f" matching {' '.join(self.only)}" if self.only else ""
        part = "" if self.shard is None else f"shard {self.shard[0]}/{self.shard[1]} of "
        if self.size is None or self.size >= self.total:
            return f"{part}every mutant{only} ({self.total})" + (f", 95% Wilson interval {low:.1f}-{high:.1f}%" if part else "")
        return (f"{part}{'the ' if part else ''}uniform sample of {self.size} of {self.total} mutants{only}, seed {self.seed}, "
                f"95% Wilson interval {low:.1f}-{high:.1f}% (+-{(high - low) / 2:.1f} points)")


def report(package: str, v: Verdicts, workdir: Path, *, diffs: bool, scope: Scope) -> None:
    print(f"== mutation score {package}: {v.score:.1f}% of {scope.describe(v)} "
          f"(killed {len(v.killed)}, survived {len(v.survived)}, equivalent {len(v.equivalent)}, "
          f"unjudged {len(v.other)})")
    modules = sorted({_module(n) for n in (*v.killed, *v.survived)})
    for module in modules:
        k = sum(1 for n in v.killed if _module(n) == module)
        s = sum(1 for n in v.survived if _module(n) == module)
        print(f"   {module}: {100.0 * k / (k + s):.1f}% (killed {k}, survived {s})")
    pending = sum(1 for _, code in v.other if code is None)
    if pending:
        print(f"   not judged yet: {pending} (a resumed run judges them)")
    for name, code in v.other:
        if code is not None:
            print(f"   unjudged (exit {code}): {name}")
    for name, reason in v.equivalent:
        print(f"-- excluded as equivalent ({ALLOWLIST.name}): {name}: {reason}")
    for name in v.survived:
        print(f"-- survived: {name}")
        if diffs:
            body = [ln for ln in _diff(workdir, name).splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
            print("\n".join(f"   {ln}" for ln in body))


def inputs_digest(package: str, tests: tuple[str, ...]) -> str:
    """sha256 over what a run's verdicts depend on: the package, its tests and every copied file.

    The allowlist is left out: it is read when the score is reported, never by a judgement, so
    allow-listing an equivalent found mid-run does not make the run start over.
    """
    h = hashlib.sha256(json.dumps([package, list(tests)]).encode())
    allowlist = ALLOWLIST.relative_to(REPO).as_posix()
    for rel in sorted(r for r in _repo_files() if r != allowlist):
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256((REPO / rel).read_bytes()).digest())
    return h.hexdigest()


def resumable(workdir: Path, digest: str) -> bool:
    """Whether ``workdir`` holds a run prepared from the same inputs (its verdicts all stand)."""
    try:
        state = json.loads((workdir / RUN_STATE).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and state.get("inputs") == digest and (workdir / "mutants").is_dir()


def to_judge(names: list[str], codes: dict[str, int | None], *, resume: bool, rerun_survivors: bool) -> list[str]:
    """The selected mutants a run still judges.

    Resumed over the same inputs, every verdict stands: only mutants without one are judged. In a
    kept workdir whose inputs changed, killed verdicts stand (mutmut resets the mutants of changed
    functions) and survivors are judged again against the current tests; ``rerun_survivors``
    (``--mutants``) judges every named mutant again.
    """
    if resume and not rerun_survivors:
        return [n for n in names if codes.get(n) is None]
    return [n for n in names if codes.get(n) not in KILLED or rerun_survivors]


def forget(workdir: Path, package: str, names: list[str]) -> None:
    """Clear the saved verdicts of ``names``, the mutants this run is about to judge again.

    A survivor of an earlier run, judged again against changed tests, has no verdict until it is:
    a run stopped by ``--time-limit`` (or killed) before reaching it leaves it unjudged, and the
    resumed run -- which judges only mutants without a verdict -- judges it. Left in place, its stale
    survival would be reported, and kept by every resume, as a verdict of the current tests.
    """
    wanted = set(names)
    for meta in sorted((workdir / "mutants" / package).rglob("*.py.meta")):
        data = json.loads(meta.read_text("utf-8"))
        stale = [n for n, code in data["exit_code_by_key"].items() if n in wanted and code is not None]
        if not stale:
            continue
        for name in stale:
            data["exit_code_by_key"][name] = None
        tmp = meta.with_name(meta.name + ".forget.tmp")
        tmp.write_text(json.dumps(data), "utf-8")
        os.replace(tmp, meta)


def _run_package(package: str, workdir: Path, args: argparse.Namespace) -> list[str] | None:
    """Prepare, collect stats, judge the selected mutants; returns the selection, or None when
    ``--time-limit`` stopped the run before every selected mutant was judged."""
    tests = tuple(args.tests) if args.tests else TARGETS[package]
    sample = None if args.all else args.sample
    started = time.monotonic()
    digest = inputs_digest(package, tests)
    resume = not args.fresh and resumable(workdir, digest)
    if not args.reuse:
        prepare(package, workdir, tests, keep=args.keep or resume)
    (workdir / RUN_STATE).write_text(json.dumps({"package": package, "tests": list(tests), "inputs": digest}), "utf-8")
    if resume:
        print(f"   {package}: resuming the run in {workdir} (same inputs: every saved verdict stands)")
    before = _stats_time(workdir)
    # Phase 1: generate the mutants and collect (or load and extend) the stats, then stop.
    proc = _mutmut(workdir, "run", "--max-children", str(args.max_children), Q38_MUTATE_STATS_ONLY="1")
    _log(workdir, "stats", proc)
    if proc.returncode:
        raise RunError(f"mutmut's stats phase failed for {package} (exit {proc.returncode}): a test fails on "
                       f"the unmutated code, or mutmut could not start; see {workdir / 'mutmut-stats.log'}",
                       proc.stdout + proc.stderr)
    full_stats = before is None or _stats_time(workdir) != before
    _precompile(workdir)
    stats_done = time.monotonic()
    codes = _codes(workdir, package)
    names = shards.shard_of(select(list(codes), only=args.mutants, sample=sample, seed=args.seed), args.seed, args.shard)
    (workdir / "mutmut-selection.txt").write_text("\n".join(names) + "\n", "utf-8")
    todo = to_judge(names, codes, resume=resume, rerun_survivors=args.mutants is not None)
    forget(workdir, package, todo)
    # Phase 2: the mutants, in chunks: mutmut saves each verdict as it comes, so a run killed or
    # stopped between chunks loses at most the mutants in flight. The clean-tests run is skipped
    # when phase 1 just ran every test clean, or when a run of these same inputs already did.
    flags = {"Q38_MUTATE_SKIP_CLEAN": "1"} if full_stats or resume else {}
    deadline = args.deadline  # one limit for the whole invocation, every package
    done = 0
    for i in range(0, len(todo), args.chunk):
        if deadline is not None and time.monotonic() >= deadline:
            break
        proc = _mutmut(workdir, "run", "--max-children", str(args.max_children), *todo[i:i + args.chunk], **flags)
        _log(workdir, "run", proc)
        if proc.returncode:
            raise RunError(f"mutmut run failed for {package} (exit {proc.returncode}); see "
                           f"{workdir / 'mutmut-run.log'}", proc.stdout + proc.stderr)
        done = min(len(todo), i + args.chunk)
    print(f"   {package}: stats phase {stats_done - started:.0f} s ({'full' if full_stats else 'loaded'}), "
          f"{done} of the {len(todo)} mutant(s) to judge run in {time.monotonic() - stats_done:.0f} s "
          f"(the other {len(names) - len(todo)} of the {len(names)} selected kept their verdicts)")
    if done < len(todo):
        print(f"   {package}: stopped at --time-limit {args.time_limit:g} s with {len(todo) - done} mutant(s) "
              f"unjudged; rerun the same command to continue")
        return None
    return names


class RunError(Exception):
    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


def _log(workdir: Path, phase: str, proc: subprocess.CompletedProcess[str]) -> None:
    (workdir / f"mutmut-{phase}.log").write_text(proc.stdout + proc.stderr, "utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packages", nargs="*", default=sorted(TARGETS), help=f"of {sorted(TARGETS)}")
    ap.add_argument("--tests", nargs="+", help="override the package's test selection")
    ap.add_argument("--workdir", type=Path, default=REPO / ".mutation")
    ap.add_argument("--max-children", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="reuse the workdir and mutmut's cached verdicts")
    ap.add_argument("--no-run", action="store_true", help="only report the verdicts of the last run")
    ap.add_argument("--no-diffs", action="store_true", help="list survivors without their diffs")
    ap.add_argument("--fail-under", type=float, default=0.0)
    ap.add_argument("--sample", type=int, default=DEFAULT_SAMPLE,
                    help=f"judge a seeded uniform sample of this many mutants per package (default {DEFAULT_SAMPLE})")
    ap.add_argument("--all", action="store_true", help="judge every mutant (no sample)")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    ap.add_argument("--mutants", nargs="+", metavar="GLOB",
                    help="only these mutants (mutmut names, e.g. 'contracts.qmoe.*'): a partial run, scored alone")
    ap.add_argument("--reuse", action="store_true", help="run in the existing workdir without copying")
    ap.add_argument("--fresh", action="store_true",
                    help="start over even when the workdir holds a run of the same inputs (default: resume it)")
    ap.add_argument("--time-limit", type=float, metavar="SECONDS",
                    help="stop between chunks after this long; the verdicts so far are kept, a rerun continues")
    ap.add_argument("--chunk", type=int, default=CHUNK, help=f"mutants per mutmut invocation (default {CHUNK})")
    ap.add_argument("--shard", metavar="k/N", help="judge only the k-th of N disjoint parts of the selection")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="DIR",
                    help="score the shard results (q38-result*.json) under these directories, run nothing")
    args = ap.parse_args(argv)
    try:
        args.shard = None if args.shard is None else shards.parse_shard(args.shard)
    except ValueError as err:
        print(f"mutate: {err}", file=sys.stderr)
        return 2
    if args.merge:
        return merge_results(args.merge, load_allowlist(), diffs=not args.no_diffs, fail_under=args.fail_under)
    if args.chunk < 1 or (args.time_limit is not None and args.time_limit <= 0) or args.sample < 1:
        print("mutate: --chunk, --sample and --time-limit must be positive", file=sys.stderr)
        return 2
    unknown = [p for p in args.packages if p not in TARGETS]
    if unknown:
        print(f"mutate: unknown package {unknown[0]!r} (known: {', '.join(sorted(TARGETS))})", file=sys.stderr)
        return 2
    args.deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    allow = load_allowlist()
    status = 0
    for package in args.packages:
        workdir = args.workdir.resolve() / package.replace("/", "-")  # the runs work in it: not relative to the cwd
        sample = None if args.all else args.sample
        if args.no_run:
            names = _selection(workdir, package, args)
        else:
            try:
                selected = _run_package(package, workdir, args)
            except RunError as err:
                print(f"mutate: {err}", file=sys.stderr)
                print(err.output[-3000:], file=sys.stderr)
                return 1
            if selected is None:  # stopped by --time-limit: report what is judged so far
                status = INCOMPLETE
                names = _selection(workdir, package, args)
            else:
                names = selected
        total = len([n for n in _codes(workdir, package)
                     if args.mutants is None or any(fnmatch.fnmatchcase(n, p) for p in args.mutants)])
        codes = _codes(workdir, package)
        prefetch_diffs(workdir, [n for n in (names if names is not None else codes) if codes.get(n) in SURVIVED])
        verdicts = collect(workdir, package, allow, names)
        scope = Scope(total, sample, args.seed, tuple(args.mutants or ()), args.shard)
        report(package, verdicts, workdir, diffs=not args.no_diffs, scope=scope)
        save_result(workdir, package, scope, names)
        if verdicts.score < args.fail_under:
            status = max(status, 1)
    return status


def _selection(workdir: Path, package: str, args: argparse.Namespace) -> list[str]:
    """The mutants of ``package`` this invocation scores: its sample (or all), filter and shard."""
    sample = None if args.all else args.sample
    chosen = select(list(_codes(workdir, package)), only=args.mutants, sample=sample, seed=args.seed)
    return shards.shard_of(chosen, args.seed, args.shard)


def save_result(workdir: Path, package: str, scope: Scope, names: list[str]) -> Path | None:
    """Store the verdicts of ``names`` (and their survivors' diffs) for ``--merge`` (shards.py).

    Returns the file written, or None where the workdir holds no run (nothing to store).
    """
    if not (workdir / "mutants").is_dir():
        return None
    codes = _codes(workdir, package)
    try:
        inputs = json.loads((workdir / RUN_STATE).read_text("utf-8")).get("inputs")
    except (OSError, ValueError, AttributeError):
        inputs = None
    selected = {n: codes.get(n) for n in names}
    diffs = {n: _DIFFS[(workdir, n)] for n, code in selected.items() if code in SURVIVED and (workdir, n) in _DIFFS}
    path = workdir / shards.result_name(scope.shard)
    shards.write_result(path, shards.RunResult(
        package=package, seed=scope.seed, sample=scope.size, only=scope.only, total=scope.total,
        inputs=inputs, shard=scope.shard, codes=selected, diffs=diffs))
    return path


def merge_results(dirs: list[Path], allow: list[Equivalent], *, diffs: bool, fail_under: float) -> int:
    """``--merge``: the packages' scores from the shard results under ``dirs`` (exit 2 when they do not fit)."""
    try:
        merged = shards.merge([shards.read_result(p) for p in shards.find_results(dirs)])
    except shards.ShardError as err:
        print(f"mutate: --merge: {err}", file=sys.stderr)
        return 2
    if not merged:
        print(f"mutate: --merge: no {shards.RESULT_PREFIX}*.json under {' '.join(map(str, dirs))}", file=sys.stderr)
        return 2
    status = 0
    for package, result in merged.items():
        key = Path("<merged>") / package  # the survivors' diffs come from the results, not from mutmut
        # a survivor whose diff a shard could not read is scored without it (never looked up here)
        _DIFFS.update({(key, name): result.diffs.get(name, "") for name, code in result.codes.items() if code in SURVIVED})
        verdicts = classify(result.codes, key, allow)
        report(package, verdicts, key, diffs=diffs, scope=Scope(result.total, result.sample, result.seed, result.only))
        if verdicts.score < fail_under:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
