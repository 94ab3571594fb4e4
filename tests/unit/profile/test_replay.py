"""``q38 profile --plan``'s replay of the selection trace (issue 29): static, LRU, LFU, Belady."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from q38.cli import main
from q38.profile.replay import POLICIES, replay_row


def _optimum(seq: list[int], capacity: int) -> int:
    """Most hits of any cache schedule from any preload (load on a miss or bypass; evict anything)."""
    universe = sorted(set(seq))
    best: dict[frozenset[int], int] = {
        frozenset(c): 0 for n in range(min(capacity, len(universe)) + 1) for c in itertools.combinations(universe, n)
    }
    for e in seq:
        nxt: dict[frozenset[int], int] = {}
        for cache, hits in best.items():
            options = []
            if e in cache:
                options.append((cache, hits + 1))
            else:
                options.append((cache, hits))  # bypass
                if len(cache) < capacity:
                    options.append((cache | {e}, hits))
                for victim in cache:
                    options.append(((cache - {victim}) | {e}, hits))
            for state, h in options:
                if nxt.get(state, -1) < h:
                    nxt[state] = h
        best = nxt
    return max(best.values())


@pytest.mark.parametrize("seed", range(40))
def test_belady_is_the_optimum_and_at_least_every_policy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    experts = int(rng.integers(2, 6))
    seq = rng.integers(0, experts, size=int(rng.integers(1, 11))).tolist()
    capacity = int(rng.integers(0, experts + 1))
    counts = np.bincount(seq, minlength=experts)
    results = replay_row(np.array(seq), capacity, counts)
    assert results["belady"].hits == _optimum(seq, capacity)
    for policy in POLICIES:
        assert results["belady"].hits >= results[policy].hits, policy
        assert results[policy].hits + results[policy].transfers == len(seq)


def test_policies_by_hand() -> None:
    seq = np.array([0, 1, 0, 1, 0, 1, 2, 0])
    counts = np.bincount(seq, minlength=3)
    r = replay_row(seq, 1, counts)
    assert r["static"].hits == 4  # expert 0 resident from the start: all 4 of its selections
    assert r["lru"].hits == 1  # alternation thrashes a 1-slot LRU (warm with expert 0: the first hit only)
    assert r["belady"].hits >= r["static"].hits


def _zipf_trace(rng: np.random.Generator, experts: int, tokens: int, k: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, experts + 1) ** s
    weights /= weights.sum()
    perm = rng.permutation(experts)
    return np.stack([perm[rng.choice(experts, size=k, replace=False, p=weights)] for _ in range(tokens)])


def test_static_beats_lru_at_small_budgets_on_a_skewed_router() -> None:
    """A Zipf(1.1) router over 64 experts, k=8, 2000 tokens: figures in the issue-29 note."""
    rng = np.random.default_rng(29)
    trace = _zipf_trace(rng, 64, 2000, 8, 1.1)
    counts = np.bincount(trace.reshape(-1), minlength=64)
    figures = {}
    for capacity in (4, 8, 16):
        r = replay_row(trace, capacity, counts)
        figures[capacity] = {p: round(r[p].hits / trace.size, 3) for p in POLICIES}
        assert r["static"].hits > r["lru"].hits
        assert r["belady"].hits >= max(r[p].hits for p in POLICIES)
    print("zipf figures", figures)


@pytest.fixture(scope="module")
def measured(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("replay")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["profile", str(tiny_cpu_package), "-o", str(out / "p.bin"), "--plan", "--total-resident-slots", "18",
                     "--prompt-count", "3", "--tokens", "6", "--trace-out", str(out / "t.json"),
                     "--coverage", str(out / "cov"), "--json"])  # fmt: skip
    assert code == 0
    return out, json.loads(buf.getvalue()), tiny_cpu_package


def test_static_replay_equals_the_plans_hit_rate_and_belady_bounds_every_layer(measured) -> None:  # type: ignore[no-untyped-def]
    out, doc, _pkg = measured
    plan = doc["plan"]
    replay = plan["replay"]
    tier = plan["hit_rates"][0]
    assert replay["overall"]["static"]["hits"] == tier["hits"]
    assert replay["overall"]["static"]["selections"] == tier["selections"]
    by_row = {h["row"]: h for h in tier["layers"]}
    for layer in replay["layers"]:
        pol = layer["policies"]
        assert pol["static"]["hits"] == by_row[layer["row"]]["hits"]
        assert all(pol["belady"]["hits"] >= pol[p]["hits"] for p in POLICIES)
        assert layer["bytes_per_expert"] > 0
        # misses of the static plan served from the host, per token
        misses = layer["selections"] - pol["static"]["hits"]
        assert pol["static"]["h2d_bytes_per_token"] == pytest.approx(misses * layer["bytes_per_expert"] / layer["tokens"], abs=1e-3)
    cov = json.loads((out / "cov.json").read_text())["coverage"]
    assert cov[0] == {"resident_bytes": 0.0, "selections_served": 0.0} and cov[-1]["selections_served"] == 1.0
    assert all(a["selections_served"] <= b["selections_served"] for a, b in itertools.pairwise(cov))
    assert (out / "cov.png").read_bytes()[:4] == b"\x89PNG"


def test_trace_file_round_trip_replays_the_same(measured, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    out, doc, pkg = measured
    trace = json.loads((out / "t.json").read_text())
    assert trace["format"] == "q38-selection-trace" and trace["version"] == 1
    assert main(["profile", str(pkg), "--plan", "--expert-profile", str(out / "p.bin"), "--trace", str(out / "t.json"),
                 "--total-resident-slots", "18", "--json"]) == 0  # fmt: skip
    again = json.loads(capsys.readouterr().out)["plan"]["replay"]
    assert again == doc["plan"]["replay"]


def test_a_trace_of_another_shape_is_one_line_exit_2(measured, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    out, _doc, pkg = measured
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"format": "q38-selection-trace", "version": 1, "experts": 3, "rows": []}))
    assert main(["profile", str(pkg), "--plan", "--expert-profile", str(out / "p.bin"), "--trace", str(bad),
                 "--total-resident-slots", "18"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith("q38 profile: error: --trace") and err.count("\n") == 1
