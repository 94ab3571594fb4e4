"""Mutation testing of one package with mutmut: targeted tests, a score, the survivors, an allowlist.

``python tests/mutation/mutate.py PACKAGE [PACKAGE ...]`` (``nox -s mutation -- PACKAGE``), where
PACKAGE is a key of :data:`TARGETS` (``q38/optimize``, ``contracts``). For each package:

1. the repository's files (tracked and untracked-but-not-ignored, so uncommitted work counts) are
   copied into a scratch directory (``.mutation/<slug>/`` by default) whose ``pyproject.toml``
   gains a ``[tool.mutmut]`` section: the whole of ``q38`` and ``contracts`` is importable, only
   PACKAGE is mutated, and only PACKAGE's tests are run (``-m "not slow"``, no xdist);
2. ``mutmut run`` mutates every function of PACKAGE and, per mutant, runs only the tests that
   executed that function in its stats run (mutmut records test -> function coverage), so the
   work per mutant is the targeted tests of its module, stopped at the first failure;
3. the verdicts are read from mutmut's ``.meta`` files; survivors that the allowlist
   (``tests/mutation/equivalent_mutants.toml``) names as equivalent are excluded; the score is
   ``killed / (killed + survived)`` and every other survivor is printed with its diff.

An allowlist entry names the function (mutmut's mangled name without the ``__mutmut_N`` suffix,
e.g. ``q38.optimize._common.xǁRewritePassǁcall``), the mutated line as mutmut writes it (the
``+`` line of ``mutmut show``, stripped), and a one-line ``reason``. Matching on the line rather
than the mutant number keeps an entry valid when other mutants of the function come and go.

Exit status: 0, or 1 when a score is below ``--fail-under`` (default 0: report only), 2 on a
usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALLOWLIST = Path(__file__).with_name("equivalent_mutants.toml")

# Package -> the tests that exercise it (mutmut narrows these further, per function).
TARGETS: dict[str, tuple[str, ...]] = {
    "q38/optimize": ("tests/unit/optimize", "tests/unit/properties/test_optimizer_properties.py"),
    "contracts": ("tests/unit/contracts",),
}
# Directories the tests read besides the code and themselves.
ALSO_COPY = ("goldens", "docs", "README.md", "noxfile.py")

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
        f"pytest_add_cli_args = {arr(['-p', 'no:cacheprovider', '-p', 'no:xdist', '-m', 'not slow'])}",
        "use_git_change_detection = false",
        "",
    ])


def prepare(package: str, workdir: Path, tests: tuple[str, ...], *, keep: bool) -> None:
    """Copy the repository into ``workdir`` with a mutmut section (keeping mutmut's cache if asked)."""
    if not keep and workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for rel in _repo_files():
        src, dst = REPO / rel, workdir / rel
        if keep and dst.is_file() and dst.read_bytes() == src.read_bytes():
            continue  # unchanged: keep its mtime, so mutmut keeps the verdicts of its mutants
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    pyproject = (REPO / "pyproject.toml").read_text("utf-8")
    (workdir / "pyproject.toml").write_text(pyproject + _mutmut_section(package, tests), "utf-8")


def _mutmut(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("mutmut") or str(Path(sys.executable).with_name("mutmut"))
    # Every mutant runs in a new pytest session: the session's synthetic packages are built once
    # per run (tests/unit/conftest.py) instead of once per mutant.
    cache = workdir / "synth-cache"
    cache.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "Q38_SYNTH_CACHE": str(cache)}
    return subprocess.run([exe, *args], cwd=workdir, env=env, text=True, capture_output=True, check=False)


def collect(workdir: Path, package: str, allow: list[Equivalent]) -> Verdicts:
    """The verdict of every mutant of ``package`` from mutmut's ``.meta`` files."""
    v = Verdicts()
    for meta in sorted((workdir / "mutants" / package).rglob("*.py.meta")):
        codes = json.loads(meta.read_text("utf-8"))["exit_code_by_key"]
        for name, code in sorted(codes.items()):
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


def _diff(workdir: Path, name: str) -> str:
    return _mutmut(workdir, "show", name).stdout


def _mutated_lines(diff: str) -> list[str]:
    return [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]


def _equivalent(workdir: Path, name: str, allow: list[Equivalent]) -> str | None:
    candidates = [e for e in allow if e.function == _function(name)]
    if not candidates:
        return None
    lines = _mutated_lines(_diff(workdir, name))
    return next((e.reason for e in candidates if e.line in lines), None)


def report(package: str, v: Verdicts, workdir: Path, *, diffs: bool) -> None:
    print(f"== mutation score {package}: {v.score:.1f}% "
          f"(killed {len(v.killed)}, survived {len(v.survived)}, equivalent {len(v.equivalent)}, "
          f"unjudged {len(v.other)})")
    for name, code in v.other:
        print(f"   unjudged (exit {code}): {name}")
    for name in v.survived:
        print(f"-- survived: {name}")
        if diffs:
            body = [ln for ln in _diff(workdir, name).splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
            print("\n".join(f"   {ln}" for ln in body))


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
    args = ap.parse_args(argv)
    unknown = [p for p in args.packages if p not in TARGETS]
    if unknown:
        print(f"mutate: unknown package {unknown[0]!r} (known: {', '.join(sorted(TARGETS))})", file=sys.stderr)
        return 2
    allow = load_allowlist()
    status = 0
    for package in args.packages:
        workdir = args.workdir / package.replace("/", "-")
        tests = tuple(args.tests) if args.tests else TARGETS[package]
        if not args.no_run:
            prepare(package, workdir, tests, keep=args.keep)
            proc = _mutmut(workdir, "run", "--max-children", str(args.max_children))
            (workdir / "mutmut-run.log").write_text(proc.stdout + proc.stderr, "utf-8")
            if proc.returncode:
                print(f"mutate: mutmut run failed for {package} (exit {proc.returncode}); "
                      f"see {workdir / 'mutmut-run.log'}", file=sys.stderr)
                print((proc.stdout + proc.stderr)[-3000:], file=sys.stderr)
                return 1
        verdicts = collect(workdir, package, allow)
        report(package, verdicts, workdir, diffs=not args.no_diffs)
        if verdicts.score < args.fail_under:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
