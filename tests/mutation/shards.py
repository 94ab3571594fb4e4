"""Mutation runs spread over machines: a sample's disjoint shards and the merge of their results.

``mutate.py PACKAGE --shard k/N`` judges the k-th of N parts of the package's selection (the seeded
sample, or every mutant under ``--all``). A mutant's part is its seeded hash -- the same
``sha256(f"{seed}:{name}")`` that orders the sample -- modulo N, so:

* the N parts are disjoint and their union is exactly the unsharded selection (each mutant has one
  hash, hence one part), whatever N is;
* a mutant's part depends on its name and the seed alone, like its place in the sample: an edit that
  adds or removes mutants in one function leaves every other mutant in its part, and a resumed or
  kept shard keeps its verdicts.

Every run (sharded or not) leaves its verdicts in the workdir as a result file (:func:`result_name`:
the selection's exit codes, the diffs of its survivors, the scope and the digest of the inputs it was
prepared from). ``mutate.py --merge DIR ...`` reads the result files under the DIRs (the shards'
artifacts, downloaded from several machines), checks that they are the N parts of one selection of the
same inputs -- every part present once, the same seed, sample, filter, total and inputs -- and scores
their union exactly as the unsharded run scores its selection: the same verdicts, the same allowlist
applied to the same diffs, the same Wilson interval.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

RESULT_PREFIX = "q38-result"


class ShardError(Exception):
    """Shard results that cannot be merged into one score (a part missing or twice, mixed runs)."""


def parse_shard(text: str) -> tuple[int, int]:
    """``(k, N)`` for ``"k/N"`` with 1 <= k <= N; ValueError otherwise."""
    k_text, sep, n_text = text.partition("/")
    if not sep or not k_text.strip().isdigit() or not n_text.strip().isdigit():
        raise ValueError(f"--shard wants k/N (e.g. 2/4), not {text!r}")
    k, n = int(k_text), int(n_text)
    if not 1 <= k <= n:
        raise ValueError(f"--shard {text}: k must be between 1 and N")
    return k, n


def part_of(name: str, seed: int, parts: int) -> int:
    """The part (1..``parts``) a mutant belongs to: its seeded sample hash modulo ``parts``."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest, "big") % parts + 1


def shard_of(names: Iterable[str], seed: int, shard: tuple[int, int] | None) -> list[str]:
    """The members of ``names`` in part ``shard`` = (k, N), in their given order (all when None)."""
    if shard is None:
        return list(names)
    k, n = shard
    return [name for name in names if part_of(name, seed, n) == k]


def result_name(shard: tuple[int, int] | None) -> str:
    """The result file of a run: one per shard, so shards run in one workdir do not overwrite each other."""
    return f"{RESULT_PREFIX}.json" if shard is None else f"{RESULT_PREFIX}-shard-{shard[0]}-of-{shard[1]}.json"


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One run's verdicts over its selection, as :func:`write_result` stores them."""

    package: str
    seed: int
    sample: int | None
    only: tuple[str, ...]
    total: int
    inputs: str | None
    shard: tuple[int, int] | None
    codes: dict[str, int | None]
    diffs: dict[str, str]

    def scope_key(self) -> tuple[object, ...]:
        """What every part of one selection shares (the shard number aside)."""
        parts = self.shard[1] if self.shard else None
        return (self.seed, self.sample, self.only, self.total, self.inputs, parts)


def write_result(path: Path, result: RunResult) -> None:
    """Store ``result`` at ``path`` (written to a sibling, then renamed into place)."""
    data = dataclasses.asdict(result)
    data["only"] = list(result.only)
    data["shard"] = list(result.shard) if result.shard else None
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False), "utf-8")
    os.replace(tmp, path)


def read_result(path: Path) -> RunResult:
    """The result stored at ``path``; ShardError when it is not one."""
    try:
        data = json.loads(path.read_text("utf-8"))
        shard = data["shard"]
        return RunResult(
            package=str(data["package"]), seed=int(data["seed"]),
            sample=None if data["sample"] is None else int(data["sample"]),
            only=tuple(data["only"]), total=int(data["total"]), inputs=data["inputs"],
            shard=None if shard is None else (int(shard[0]), int(shard[1])),
            codes={str(k): v for k, v in data["codes"].items()}, diffs=dict(data["diffs"]),
        )
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        raise ShardError(f"{path}: not a mutation result file ({err})") from err


def find_results(dirs: Iterable[Path]) -> list[Path]:
    """Every result file under ``dirs`` (a DIR may also be a result file itself)."""
    found: list[Path] = []
    for d in dirs:
        if d.is_file():
            found.append(d)
        elif d.is_dir():
            found += sorted(d.rglob(f"{RESULT_PREFIX}*.json"))
        else:
            raise ShardError(f"{d}: no such file or directory")
    return found


def merge(results: list[RunResult]) -> dict[str, RunResult]:
    """Per package, the union of its shards' results as one unsharded result.

    The shards of a package must be the parts 1..N of one selection: each present once, with the
    same seed, sample size, filter, total and inputs digest. A package given unsharded (one result,
    no shard) stands as it is.
    """
    by_package: dict[str, list[RunResult]] = {}
    for r in results:
        by_package.setdefault(r.package, []).append(r)
    merged = {}
    for package, group in sorted(by_package.items()):
        keys = {r.scope_key() for r in group}
        if len(keys) > 1:
            raise ShardError(f"{package}: the results are not parts of one run (seed, sample, filter, "
                             f"total, inputs or N differ: {sorted(map(str, keys))})")
        first = group[0]
        if first.shard is None:
            if len(group) > 1:
                raise ShardError(f"{package}: {len(group)} unsharded results; merge the shards of one run")
            merged[package] = first
            continue
        n = first.shard[1]
        got = sorted(r.shard[0] for r in group if r.shard)
        missing = sorted(set(range(1, n + 1)) - set(got))
        twice = sorted({k for k in got if got.count(k) > 1})
        if missing or twice:
            raise ShardError(f"{package}: shards of {n}: " + "; ".join(
                [f"missing {', '.join(map(str, missing))}"] * bool(missing)
                + [f"given twice {', '.join(map(str, twice))}"] * bool(twice)))
        codes: dict[str, int | None] = {}
        diffs: dict[str, str] = {}
        for r in group:
            assert r.shard is not None
            stray = [name for name in r.codes if part_of(name, r.seed, n) != r.shard[0]]
            if stray:
                raise ShardError(f"{package}: shard {r.shard[0]}/{n} holds {stray[0]}, a mutant of another part")
            overlap = set(codes) & set(r.codes)
            if overlap:
                raise ShardError(f"{package}: mutant {min(overlap)} is in two shards")
            codes.update(r.codes)
            diffs.update(r.diffs)
        merged[package] = dataclasses.replace(first, shard=None, codes=codes, diffs=diffs)
    return merged
