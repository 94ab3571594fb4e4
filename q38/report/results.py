"""What ``q38 check`` reports: each violation as a leveled, maybe suppressed result; the exit decision.

A result says why it is suppressed, if it is (``--ignore`` / ``--select`` / the baseline).
Baselines are written and read here too.

Every output format (text, json, sarif, github, junit) renders one :class:`CheckResults`, so the
formats can never disagree on which results exist, their level or the exit code. A suppressed
result is kept (SARIF reports it with a ``suppressions`` entry, json under ``suppressed``); only
active results decide the exit code.

Baseline file (``--write-baseline FILE``, read by ``--baseline FILE``): JSON
``{"q38_baseline": 1, "results": [{"rule_id", "graph", "node", "message", "fingerprint"}, ...]}``.
A result is in the baseline when a baseline entry has its fingerprint (rule id, graph, node and
message with the package's own path taken out, so a baseline survives moving the package);
entries are counted, so a second identical violation is new.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from contracts._rule import Severity, Violation
from contracts.catalogue import catalogue, matches
from q38.errors import FlagError, quote
from q38.package.io.staging import write_file_atomic

if TYPE_CHECKING:
    from contracts.runner import CheckReport

__all__ = [
    "BASELINE_VERSION",
    "CheckResults",
    "Result",
    "Selection",
    "baseline_document",
    "check_selectors",
    "classify",
    "fingerprint",
    "read_baseline",
    "write_atomic",
    "write_baseline",
]

BASELINE_VERSION = 1
"""The ``q38_baseline`` format version this q38 writes and reads."""

Suppression = Literal["ignore", "select", "baseline"]


@dataclass(frozen=True)
class Selection:
    """Which results count, and whether warnings fail like errors.

    ``select``: ids / prefixes kept (empty keeps all); ``ignore``: ids / prefixes dropped.
    """

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    warnings_as_errors: bool = False


@dataclass(frozen=True)
class Result:
    """One violation as reported: its level, its stable fingerprint, and why it is suppressed.

    The level is the rule's severity, or ``error`` under ``--warnings-as-errors``;
    ``suppressed`` is ``None`` for an active result.
    """

    violation: Violation
    level: Severity
    fingerprint: str
    suppressed: Suppression | None = None

    @property
    def rule_id(self) -> str:
        """The rule id of the violation."""
        return self.violation.rule_id

    def to_dict(self) -> dict[str, Any]:
        """The violation's json form with the reported level as its severity."""
        doc = self.violation.to_dict()
        doc["severity"] = self.level
        if self.suppressed is not None:
            doc["suppression"] = self.suppressed
        return doc


@dataclass
class CheckResults:
    """A :class:`contracts.runner.CheckReport` with every violation classified.

    ``require_sessions``: a skipped ``--ort`` session fails the check; ``ort_sessions``: sessions
    were asked for; ``ok`` is the exit decision (no active error, no failed session, no skip
    when skips fail).
    """

    report: CheckReport
    results: list[Result] = field(default_factory=list)
    require_sessions: bool = False
    baseline_path: str = ""
    ort_sessions: bool = False

    @property
    def active(self) -> list[Result]:
        """The results that are not suppressed."""
        return [r for r in self.results if r.suppressed is None]

    @property
    def suppressed(self) -> list[Result]:
        """The results suppressed by --ignore / --select / the baseline."""
        return [r for r in self.results if r.suppressed is not None]

    @property
    def errors(self) -> list[Result]:
        """Active results of level error."""
        return [r for r in self.active if r.level == "error"]

    @property
    def ok(self) -> bool:
        """Whether ``q38 check`` exits 0."""
        sessions = self.report.sessions
        if any(s.status == "failed" for s in sessions):
            return False
        if self.require_sessions and any(s.status == "skipped" for s in sessions):
            return False
        return not self.errors


def fingerprint(violation: Violation, package: str = "") -> str:
    """A stable id of ``violation``: rule, graph, node and message, the package path taken out."""
    message = violation.message
    if package:
        spellings = {package.rstrip("/"), os.path.normpath(package), os.path.abspath(package), os.path.realpath(package)}
        for prefix in sorted(spellings - {".", "/", ""}, key=len, reverse=True):  # longest first
            message = message.replace(prefix + "/", "")  # a path inside the package, package-relative
    text = "\0".join((violation.rule_id, violation.graph, violation.node, message))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _printable(text: str) -> str:
    r"""``text`` with control characters and lone surrogates escaped (``\x00``, ``\ud800``)."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _matches(rule_id: str, selectors: Iterable[str]) -> bool:
    return matches(rule_id, selectors)


def classify(report: CheckReport, selection: Selection = Selection(), *, baseline: Sequence[str] = (),
             require_sessions: bool = False, ort_sessions: bool = False,
             baseline_path: str = "") -> CheckResults:  # fmt: skip
    """Every violation of ``report`` as a :class:`Result`, suppressed or not.

    ``--ignore`` is applied first, then ``--select``, then the ``baseline`` fingerprints (a
    multiset: each entry suppresses one result). Unprintable graph / node names are escaped.
    """
    left = Counter(baseline)
    out = CheckResults(report, require_sessions=require_sessions, baseline_path=baseline_path,
                       ort_sessions=ort_sessions)
    for v in report.violations:
        if not (v.graph.isprintable() and v.node.isprintable()):  # a hostile node name: one safe line / XML
            v = dataclasses.replace(v, graph=_printable(v.graph), node=_printable(v.node))
        level: Severity = "error" if selection.warnings_as_errors else v.severity
        fp = fingerprint(v, report.package)
        why: Suppression | None = None
        if selection.ignore and _matches(v.rule_id, selection.ignore):
            why = "ignore"
        elif selection.select and not _matches(v.rule_id, selection.select):
            why = "select"
        elif left[fp] > 0:
            left[fp] -= 1
            why = "baseline"
        out.results.append(Result(v, level, fp, why))
    return out


def check_selectors(flag: str, selectors: Iterable[str], found: Iterable[str] = ()) -> None:
    """Refuse (FlagError) a selector that matches no registered rule and none of the ``found`` ids.

    ``found`` are result ids without a catalogue entry. A typo must not silently disable a gate.
    """
    ids = [e.rule_id for e in catalogue()] + list(found)
    for sel in selectors:
        if not any(matches(rid, [sel]) for rid in ids):
            raise FlagError(f"{flag} {quote(sel)} matches no rule (q38 rules lists them)")


def baseline_document(results: CheckResults) -> dict[str, Any]:
    """The baseline of every result that is not ``--ignore``d / deselected."""
    entries = [
        {"rule_id": r.rule_id, "graph": r.violation.graph, "node": r.violation.node,
         "message": r.violation.message, "fingerprint": r.fingerprint}
        for r in results.results if r.suppressed in (None, "baseline")
    ]  # fmt: skip
    entries.sort(key=lambda e: (e["rule_id"], e["graph"], e["node"], e["fingerprint"]))
    return {"q38_baseline": BASELINE_VERSION, "ort_version": results.report.ort_version, "results": entries}


def write_atomic(path: str | os.PathLike[str], text: str, *, replace: bool = True, flag: str = "") -> None:
    """Write ``text`` to ``path`` through a temporary file in its directory and a rename.

    A reader never sees half a file and a failure leaves no file behind; a directory at ``path``
    is refused (FlagError). ``replace=False``: an existing ``path`` is refused too (FlagError
    naming ``flag``), also one that appeared while the text was written (a no-replace rename).
    """
    target = Path(path)
    if target.is_dir():
        raise FlagError(f"{target}: is a directory")
    try:
        write_file_atomic(target, text.encode("utf-8"), replace=replace)
    except FileExistsError:
        if replace:
            raise
        raise FlagError(f"{flag} {target}: exists (q38 never replaces a file; --force replaces it)".strip()) from None


def write_baseline(path: str | os.PathLike[str], results: CheckResults) -> None:
    """Write the baseline of ``results`` to ``path`` (atomically)."""
    write_atomic(path, json.dumps(baseline_document(results), indent=2, sort_keys=True) + "\n")


_BASELINE_LIMIT = 64 << 20


def read_baseline(path: str | os.PathLike[str]) -> list[str]:
    """The fingerprints of a baseline file (one per entry, repeats kept).

    Raises:
        FlagError: the file is not a q38 baseline (one line naming the file and the fault).

    """
    p = Path(path)
    with open(p, "rb") as fh:  # an OSError is the CLI's one line (path and errno text)
        raw = fh.read(_BASELINE_LIMIT + 1)
    if len(raw) > _BASELINE_LIMIT:
        raise FlagError(f"--baseline {p}: larger than {_BASELINE_LIMIT >> 20} MiB; not a q38 baseline")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FlagError(f"--baseline {p}: not JSON ({exc})") from None
    if not isinstance(doc, Mapping) or doc.get("q38_baseline") != BASELINE_VERSION:
        raise FlagError(f"--baseline {p}: not a q38 baseline (expected \"q38_baseline\": {BASELINE_VERSION}; "
                        "write one with --write-baseline)")  # fmt: skip
    entries = doc.get("results")
    if not isinstance(entries, list):
        raise FlagError(f"--baseline {p}: \"results\" is not a list")
    out = []
    for i, item in enumerate(entries):
        fp = item.get("fingerprint") if isinstance(item, Mapping) else None
        if not isinstance(fp, str) or not fp:
            raise FlagError(f"--baseline {p}: results[{i}] has no \"fingerprint\" string")
        out.append(fp)
    return out
