"""What the gate compares: per benchmark, one sample per round and side, and where they came from.

A round of one side is one pytest-benchmark run plus the timed runs of each whole-process
benchmark. A round's sample is the *fastest* of its repetitions (pytest-benchmark's ``min``,
the fastest of ``--process-repeat`` runs of a command): the machine's noise (a neighbour's
load, page cache, frequency changes) only ever adds time, so the fastest repetition is the
least disturbed measure of the code's cost; the gate then compares the medians of these
samples over rounds. :class:`SampleSet`
holds all rounds of both sides with the identity of the machine and software that measured
them, and is written as ``samples.json`` (``compare`` recomputes a verdict from it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

__all__ = [
    "ENV_KEYS",
    "EXTRA_KEYS",
    "MACHINE_KEYS",
    "SAMPLES_FORMAT",
    "Benchmark",
    "Clock",
    "GateError",
    "Report",
    "SampleSet",
    "identity_mismatches",
    "load_report",
]

SAMPLES_FORMAT: Final = "q38-bench-samples"
MACHINE_KEYS: Final = (("cpu", "brand_raw"), ("cpu", "arch"), ("machine",), ("system",), ("python_implementation",))
"""machine_info paths that must agree; hz_actual and the like are deliberately absent (#255)."""
ENV_KEYS: Final = ("ort_version", "providers", "gpu_model", "gpu_driver")
EXTRA_KEYS: Final = ("ort_version", "ep", "gpu_model", "gpu_driver")

Kind = Literal["call", "process"]
Clock = Literal["cpu", "wall"]


class GateError(Exception):
    """A usage problem of the gate (bad ref, unreadable JSON, a failed head run); one line."""


@dataclass(frozen=True)
class Report:
    """One pytest-benchmark JSON report (one side, one round), reduced to what the gate needs."""

    machine: Mapping[str, Any]
    medians: Mapping[str, float]
    """Per benchmark, this round's sample (the fastest repetition, see the module docstring)."""
    tiers: Mapping[str, str]
    extra: Mapping[str, Mapping[str, Any]]


def _tier_of(bench: Mapping[str, Any]) -> str:
    for source in (bench.get("extra_info") or {}, bench.get("params") or {}):
        if isinstance(source, Mapping) and source.get("tier") is not None:
            return str(source["tier"])
    return str(bench.get("group") or "default")


def load_report(path: Path | str) -> Report:
    """Reads a pytest-benchmark JSON report (``--benchmark-json`` or ``--benchmark-save``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GateError(f"{path}: not a readable pytest-benchmark JSON report ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise GateError(f"{path}: not a pytest-benchmark JSON report (no 'benchmarks' list)")
    medians: dict[str, float] = {}
    tiers: dict[str, str] = {}
    extra: dict[str, Mapping[str, Any]] = {}
    for bench in data["benchmarks"]:
        try:
            name = str(bench["fullname"])
            medians[name] = float(bench["stats"]["min"])
        except (KeyError, TypeError, ValueError) as exc:
            raise GateError(f"{path}: benchmark entry without fullname/stats.min ({exc})") from exc
        tiers[name] = _tier_of(bench)
        extra[name] = dict(bench.get("extra_info") or {})
    return Report(dict(data.get("machine_info") or {}), medians, tiers, extra)


def _dig(data: Mapping[str, Any], path: Sequence[str]) -> object:
    cur: object = data
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def identity_mismatches(base: Report, head: Report) -> list[str]:
    """What differs between two reports' machines or software; empty when comparable."""
    out: list[str] = []
    for path in MACHINE_KEYS:
        b, h = _dig(base.machine, path), _dig(head.machine, path)
        if b != h:
            out.append(f"machine_info.{'.'.join(path)}: base {b!r} != head {h!r}")
    benv, henv = base.machine.get("q38_env") or {}, head.machine.get("q38_env") or {}
    for key in ENV_KEYS:
        if benv.get(key) != henv.get(key):
            out.append(f"q38_env.{key}: base {benv.get(key)!r} != head {henv.get(key)!r}")
    for name in sorted(base.extra.keys() & head.extra.keys()):
        bx, hx = base.extra[name], head.extra[name]
        for key in EXTRA_KEYS:
            if (key in bx or key in hx) and bx.get(key) != hx.get(key):
                out.append(f"{name}: extra_info.{key}: base {bx.get(key)!r} != head {hx.get(key)!r}")
    return out


@dataclass(frozen=True)
class Benchmark:
    """One benchmark's samples: ``base[i]`` and ``head[i]`` were measured in round ``i``."""

    name: str
    kind: Kind
    tier: str
    base: tuple[float, ...]
    head: tuple[float, ...]


@dataclass
class SampleSet:
    """Every benchmark's samples, and the identity of what measured them."""

    base_sha: str | None = None
    base_ref: str = ""
    head_sha: str | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    base_machine: dict[str, Any] = field(default_factory=dict)
    benchmarks: list[Benchmark] = field(default_factory=list)
    base_note: str = ""
    clock: Clock = "cpu"

    @classmethod
    def from_reports(cls, base: Sequence[Report], head: Sequence[Report],
                     processes: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
                     *, base_sha: str | None = None, base_ref: str = "", head_sha: str | None = None,
                     base_note: str = "", clock: Clock = "cpu") -> SampleSet:
        """Pairs the rounds (``base[i]`` with ``head[i]``); benchmarks missing from a round drop out."""
        if len(base) != len(head):
            raise GateError(f"{len(base)} base rounds but {len(head)} head rounds")
        names = sorted(set.intersection(*(set(r.medians) for r in (*base, *head)))) if base else []
        benches = [
            Benchmark(n, "call", head[0].tiers[n], tuple(r.medians[n] for r in base), tuple(r.medians[n] for r in head))
            for n in names
        ]
        for name, (b, h) in sorted((processes or {}).items()):
            if b and h:
                benches.append(Benchmark(f"process:{name}", "process", "process", tuple(b), tuple(h)))
        machine = dict(head[0].machine) if head else {}
        base_machine = dict(base[0].machine) if base else {}
        return cls(base_sha=base_sha, base_ref=base_ref, head_sha=head_sha, machine=machine,
                   base_machine=base_machine, benchmarks=benches, base_note=base_note, clock=clock)

    def only_in(self, side: Iterable[Report], other: Iterable[Report]) -> list[str]:
        """Benchmarks some report of ``side`` has that no report of ``other`` has."""
        mine = set().union(*(set(r.medians) for r in side))
        theirs = set().union(*(set(r.medians) for r in other))
        return sorted(mine - theirs)

    def to_dict(self) -> dict[str, Any]:
        """The samples document (``--samples``): identity of both sides and every paired sample."""
        return {
            "format": SAMPLES_FORMAT,
            "version": 1,
            "clock": self.clock,
            "base": {"sha": self.base_sha, "ref": self.base_ref, "machine": self.base_machine, "note": self.base_note},
            "head": {"sha": self.head_sha, "machine": self.machine},
            "benchmarks": [
                {"name": b.name, "kind": b.kind, "tier": b.tier, "base": list(b.base), "head": list(b.head)}
                for b in self.benchmarks
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "samples") -> SampleSet:
        """Read a samples document back; anything malformed is one GateError naming ``source``.

        A document without ``clock`` reads as ``wall``.
        """
        if not isinstance(data, Mapping) or data.get("format") != SAMPLES_FORMAT:
            raise GateError(f"{source}: not a {SAMPLES_FORMAT} document")
        try:
            benches = [
                Benchmark(str(b["name"]), b["kind"], str(b["tier"]), tuple(float(x) for x in b["base"]),
                          tuple(float(x) for x in b["head"]))
                for b in data["benchmarks"]
            ]
            base, head = data["base"], data["head"]
            clock = data.get("clock", "wall")
            if clock not in ("cpu", "wall"):
                raise ValueError(f"clock {clock!r}")
            return cls(base.get("sha"), str(base.get("ref") or ""), head.get("sha"), dict(head.get("machine") or {}),
                       dict(base.get("machine") or {}), benches, str(base.get("note") or ""), clock)
        except (KeyError, TypeError, ValueError) as exc:
            raise GateError(f"{source}: malformed {SAMPLES_FORMAT} document ({exc})") from None

    @classmethod
    def load(cls, path: Path | str) -> SampleSet:
        """:meth:`from_dict` of the JSON file at ``path``; an unreadable file is one GateError."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise GateError(f"{path}: unreadable ({exc})") from None
        return cls.from_dict(data, source=str(path))
