"""Hostile inputs, round two (issue 13): every (case, command) as a real child process.

The cases are ``hostile_cases.py``'s (special files, size limits, strict JSON, bounded
messages, path fields, OSErrors, flag values, check's contracts), on q38's own packages and on a
real builder export. Each runs as a child of a fork server that has q38 imported
(``tests/support/forkrun.py``: a real process, its own stdio, exit status and timeout), and must
meet issue 13's acceptance:

* exit 2 with exactly one stderr line of at most 400 characters that matches the case's regex
  (``q38 check`` may instead exit 1 with error rows that match it, each a bounded line);
* no traceback, no ``internal error``, no hang (the child is killed at the timeout);
* nothing written: the work directory holds nothing afterwards (no output, no staging debris);
* the inputs are unchanged: bytes, modes, symlink targets, and every entry's inode and link count;
* nothing read outside the inputs: every file the child opened lies in the package, a file the
  command line named, the work directory, or Python's and q38's own installation.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support.forkrun import ForkServer
from support.fsnap import tree_identity

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parents[2]
TIMEOUT_S = 60.0
LINE_LIMIT = 400


def _load_cases() -> ModuleType:
    spec = importlib.util.spec_from_file_location("q38_hostile_cases", _HERE / "hostile_cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


H = _load_cases()
BY_NAME = {c.name: c for c in H.CASES}


def _registered_rules() -> set[str]:
    from contracts.runner import ALL_RULES

    return {rule.rule_id for rule in ALL_RULES}


REGISTERED = _registered_rules()


def _run(name: str, command: str) -> object:
    """One (case, command). A case that needs a ``q38 check`` rule not registered yet (13.8 is
    the contracts helper's) is a strict expected failure: it fails if check already refuses it
    some other way; once the rule is registered the case runs as a normal one."""
    rule = BY_NAME[name].rule
    marks = []
    if rule is not None and rule not in REGISTERED:
        marks.append(pytest.mark.xfail(reason=f"q38 check has no rule {rule} yet (issue 13.8)", strict=True))
    return pytest.param(name, command, marks=marks, id=f"{command}-{name}")


RUNS = [(c.name, cmd) for c in H.CASES for cmd in c.commands]


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return H.make_cases(tmp_path_factory.mktemp("hostile") / "cases")  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def server() -> Iterator[ForkServer]:
    srv = ForkServer()
    yield srv
    srv.close()


def test_every_class_has_several_cases() -> None:
    names = [c.name for c in H.CASES]
    assert len(names) == len(set(names))
    for klass in H.CLASSES:
        assert sum(c.klass == klass for c in H.CASES) >= 5, klass
    assert len(RUNS) >= 150


def _argv(case: object, command: str, cdir: Path, out: Path) -> list[str]:
    pkg = cdir / case.pkg  # type: ignore[attr-defined]
    extra = [a.replace("{case}", str(cdir)) for a in case.extra]  # type: ignore[attr-defined]
    if command == "check":
        return ["check", str(pkg), *extra]
    if command == "offload":
        return ["offload", str(out), "--from-package", str(pkg), "--offload-mode", "auto", *extra]
    if command == "build":
        return ["build", str(out), "--target", str(pkg / "target"), "--head", str(pkg / "head"),
                "--prefill", str(pkg / "prefill"), *extra]  # fmt: skip
    return [command, str(pkg), str(out), *extra]


def _system_roots() -> list[str]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(_REPO), "/proc", "/sys", "/dev/null", "/dev/urandom",
             "/etc/os-release", "/usr/lib/os-release"}  # onnxruntime's import reads the distribution name
    roots.update(p for p in sys.path if p and os.path.isdir(p))
    roots.add(os.path.expanduser("~/.cache"))
    roots.update(CACHE_ROOTS)
    return sorted(os.path.realpath(r) for r in roots)


# q38's own cache (the probed CPU-kernel table, q38.ort_kernels): read and written by any command.
CACHE_ROOTS = [os.path.realpath(os.environ["Q38_CACHE_DIR"])] if os.environ.get("Q38_CACHE_DIR") else []
SYSTEM_ROOTS = _system_roots()


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@pytest.mark.parametrize(("name", "command"), [_run(n, c) for n, c in RUNS])
def test_command_refuses_hostile_case(
    name: str, command: str, hostile: dict[str, Path], server: ForkServer, tmp_path: Path
) -> None:
    case = BY_NAME[name]
    cdir = hostile[name]
    work = tmp_path / "w"
    work.mkdir()
    if case.out.startswith("ro/"):
        (work / "ro").mkdir()
        os.chmod(work / "ro", 0o555)
    out = work / case.out
    argv = _argv(case, command, cdir, out)
    before = tree_identity(cdir)
    result = server.run(argv, cwd=work, scratch=tmp_path / "s", timeout=TIMEOUT_S, drop_dac=case.drop_dac, audit=True)
    assert not result.timed_out, f"hung: q38 {' '.join(argv)[:300]}"
    both = result.stdout + result.stderr
    assert "Traceback" not in both and "internal error" not in both, both[-2000:]
    expect = re.compile(case.expect, re.IGNORECASE)
    if command == "check" and result.rc == 1:
        assert result.stderr == "", result.stderr[:500]
        rows = [line for line in result.stdout.splitlines() if "  error  " in line]
        assert rows, result.stdout[:2000]
        assert all(len(line) <= LINE_LIMIT + 80 for line in rows), max(len(r) for r in rows)
        assert any(expect.search(line) for line in rows), f"{case.expect!r} not in {rows!r}"
    else:
        assert result.rc == 2, f"exit {result.rc}: {result.stderr[:1000]!r}"
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and result.stderr.endswith("\n"), result.stderr[:2000]
        assert len(lines[0]) <= LINE_LIMIT, f"{len(lines[0])} chars: {lines[0][:200]}..."
        assert expect.search(lines[0]), f"{case.expect!r} not in {lines[0]!r}"
    left = sorted(p.name for p in work.iterdir() if not (p.name == "ro" and not any(p.iterdir())))
    assert left == [], f"wrote {left}"
    assert tree_identity(cdir) == before, "an input was modified (bytes, mode, link or inode)"
    given = [a.replace("{case}", str(cdir)) for a in case.extra if "/" in a]  # files the command line names
    inputs = [os.path.realpath(cdir / case.pkg), *(os.path.realpath(a) for a in given)]
    allowed_reads = [*inputs, os.path.realpath(work), *SYSTEM_ROOTS]
    for path, writing in result.opens:
        real = os.path.realpath(path)
        if writing:
            assert _under(real, [os.path.realpath(work), *CACHE_ROOTS]), f"opened {real} for writing"
        else:
            assert _under(real, allowed_reads), f"read {real}, outside the inputs"
