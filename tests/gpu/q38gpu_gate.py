"""A skip is not a pass: the GPU suite's verdict from what ran, against tests/gpu/manifest.json.

When a GPU is visible (or under ``--dry-run-cpu``) every test is expected to run. A skip passes the
gate only when a rule of the manifest allows it -- a rule names test-id globs, the onnxruntime
versions and GPU classes it holds for, and why (a kernel that release lacks) -- or when
``--allow-skip RULE`` names it (a manifest rule by name, or a test-id glob). The manifest also
sets the fewest tests that must pass per GPU class. Without a GPU (and no dry run) the gate is off
and every test skips with its reason, as before.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

MANIFEST: Final = Path(__file__).with_name("manifest.json")
FORMAT: Final = "q38.gpu-manifest/1"
DRY_RUN_CLASS: Final = "dry-run-cpu"


@dataclasses.dataclass(frozen=True)
class SkipRule:
    """Skips the manifest expects: ``tests`` globs, for ``ort`` versions and ``classes`` (empty: all)."""

    name: str
    tests: tuple[str, ...]
    reason: str
    ort: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()

    def holds(self, ort_version: str, gpu_class: str) -> bool:
        return (not self.ort or ort_version in self.ort) and (not self.classes or gpu_class in self.classes)

    def covers(self, test_id: str) -> bool:
        return any(fnmatch.fnmatchcase(test_id, pattern) for pattern in self.tests)


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What must run: the fewest passes per GPU class and the rules that allow a skip."""

    min_passed: Mapping[str, int]
    rules: tuple[SkipRule, ...]

    def rule(self, name: str) -> SkipRule | None:
        return next((r for r in self.rules if r.name == name), None)


def load_manifest(path: Path = MANIFEST) -> Manifest:
    """The manifest; ``ValueError`` naming the problem when it is not one this module writes."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format {doc.get('format')!r}, expected {FORMAT!r}")
    rules = tuple(SkipRule(name, tuple(r["tests"]), r["reason"], tuple(r.get("ort", ())), tuple(r.get("classes", ())))
                  for name, r in sorted(doc["allowed_skips"].items()))
    return Manifest({k: int(v) for k, v in doc["min_passed"].items()}, rules)


# GPU classes by memory, largest first: (name, the fewest GiB). 80gb is the H100 / A100 80 GB class
# (nvidia-smi reports 81,559 MiB = 79.6 GiB for an H100 80GB HBM3).
CLASSES: Final = (("h200", 100), ("80gb", 70), ("consumer", 20), ("small", 0))


def gpu_class(memory_mib: int | None, *, dry_run: bool = False) -> str:
    """``h200`` (>= 100 GiB), ``80gb`` (>= 70 GiB: H100, A100 80 GB), ``consumer`` (>= 20 GiB),
    ``small``; ``dry-run-cpu`` for the CPU dry run."""
    if dry_run:
        return DRY_RUN_CLASS
    gib = (memory_mib or 0) / 1024
    return next(name for name, least in CLASSES if gib >= least)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The gate's answer: ok, and one line per reason it is not (or per allowed skip)."""

    ok: bool
    problems: tuple[str, ...]
    allowed: tuple[str, ...]
    passed: int
    skipped: int

    def lines(self) -> list[str]:
        head = (f"q38 gpu gate: {'PASS' if self.ok else 'FAIL'}: {self.passed} passed, {self.skipped} skipped "
                f"({len(self.allowed)} allowed)")
        return [head, *(f"  allowed skip: {a}" for a in self.allowed), *(f"  {p}" for p in self.problems)]


def judge(manifest: Manifest, outcomes: Mapping[str, tuple[str, str]], *, ort_version: str, klass: str,
          allow: Sequence[str] = (), probe_errors: Iterable[str] = (), floor: int | None = None,
          other_problems: Iterable[str] = ()) -> Verdict:
    """``outcomes``: test id -> (``passed``|``failed``|``skipped``|``error``, skip reason).

    ``floor`` replaces the manifest's fewest passes (a run of a selected subset, ``--gate-min-passed``);
    ``other_problems`` fail the verdict as they are (fit under-predicting the measured memory)."""
    problems = [f"probe error: {e}" for e in probe_errors]
    problems += list(other_problems)
    allowed: list[str] = []
    named = [manifest.rule(a) for a in allow]
    for name, rule in zip(allow, named, strict=True):
        if rule is None and not any(fnmatch.fnmatchcase(t, name) for t in outcomes):
            problems.append(f"--allow-skip {name}: neither a manifest rule nor a test id glob that matches")
    passed = sum(1 for status, _ in outcomes.values() if status == "passed")
    skipped = 0
    for test_id, (status, reason) in sorted(outcomes.items()):
        if status != "skipped":
            continue
        skipped += 1
        by = next((r for r in manifest.rules if r.holds(ort_version, klass) and r.covers(test_id)), None)
        by = by or next((r for r in named if r is not None and r.covers(test_id)), None)
        if by is not None:
            allowed.append(f"{test_id} [{by.name}: {by.reason}]")
        elif any(fnmatch.fnmatchcase(test_id, a) for a in allow):
            allowed.append(f"{test_id} [--allow-skip]")
        else:
            problems.append(f"skip is not a pass: {test_id}: {reason}")
    if floor is None:
        floor = manifest.min_passed.get(klass, manifest.min_passed.get("default", 1))
    if passed < floor:
        problems.append(f"{passed} test(s) passed; the manifest expects at least {floor} on a {klass} GPU "
                        f"(onnxruntime {ort_version})")
    return Verdict(not problems, tuple(problems), tuple(allowed), passed, skipped)


def skip_reason(report: Any) -> str:
    """The reason text of a pytest skip report (longrepr is (file, line, 'Skipped: why'))."""
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")
