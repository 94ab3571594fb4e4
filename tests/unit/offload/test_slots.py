"""Resident-slot planning (q38.offload.slots).

Invariants guarded:
- every accepted request yields per-layer caps whose sum is exactly the requested total, each cap
  within [min_per_layer, E] (property test over random profiles, totals, floors, uniform mode);
- every request that cannot be met exactly is refused with a one-line FlagError naming the flag;
- the non-uniform plan keeps the most popular experts (greedy optimum of resident hits);
- the objective (the plan's expected hits: for each layer, the selections of its ``c`` most
  selected experts, as q38.offload.hitrate counts them) is maximal: no other split of the total
  that meets the floor and the expert counts hits more, by brute force over every split of
  small cases (up to 4 layers x 5 experts, with ties and zero rows);
- ``--target-resident-slots`` gives one cap per node and is refused above a node's expert count.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from q38.errors import FlagError
from q38.offload.hitrate import resident_experts
from q38.offload.slots import plan_from_profile, uniform_caps


@st.composite
def _requests(draw: st.DrawFn) -> tuple[np.ndarray, int, bool, int]:
    layers = draw(st.integers(1, 12))
    experts = draw(st.integers(1, 16))
    counts = np.array(
        draw(st.lists(st.integers(0, 1000), min_size=layers * experts, max_size=layers * experts)),
        dtype=np.uint64,
    ).reshape(layers, experts)
    total = draw(st.integers(0, layers * experts + 5))
    uniform = draw(st.booleans())
    floor = draw(st.integers(0, experts + 1))
    return counts, total, uniform, floor


def _feasible(layers: int, experts: int, total: int, uniform: bool, floor: int) -> bool:
    if floor > experts or total < layers * floor or total > layers * experts:
        return False
    return not uniform or total % layers == 0


@settings(max_examples=300, deadline=None)
@given(_requests())
def test_every_total_met_exactly_or_refused(req: tuple[np.ndarray, int, bool, int]) -> None:
    counts, total, uniform, floor = req
    layers, experts = counts.shape
    if not _feasible(layers, experts, total, uniform, floor):
        with pytest.raises(FlagError) as info:
            plan_from_profile(counts, total, uniform=uniform, min_per_layer=floor)
        assert "\n" not in str(info.value)
        assert "--" in str(info.value)  # names the flag
        return
    caps = plan_from_profile(counts, total, uniform=uniform, min_per_layer=floor)
    assert len(caps) == layers
    assert sum(caps) == total
    assert all(floor <= c <= experts for c in caps)
    if uniform:
        assert len(set(caps)) == 1


@settings(max_examples=200, deadline=None)
@given(_requests())
def test_plan_keeps_the_most_popular_experts(req: tuple[np.ndarray, int, bool, int]) -> None:
    counts, total, _uniform, _floor = req
    layers, experts = counts.shape
    if total > layers * experts:
        return
    caps = plan_from_profile(counts, total)
    ranked = -np.sort(-counts.astype(np.int64), axis=1)
    kept = sum(int(ranked[i, :c].sum()) for i, c in enumerate(caps))
    best = int(np.sort(ranked.reshape(-1))[::-1][:total].sum())
    assert kept == best


def _hits(counts: np.ndarray, caps: list[int] | tuple[int, ...]) -> int:
    """The objective: selections that land on resident experts, as the hit report counts them."""
    return sum(int(row[resident_experts(row, c)].sum()) for row, c in zip(counts, caps))


def _splits(layers: int, experts: int, total: int, floor: int) -> list[tuple[int, ...]]:
    import itertools

    return [c for c in itertools.product(range(floor, experts + 1), repeat=layers) if sum(c) == total]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.data())
def test_plan_is_optimal_by_brute_force(data: st.DataObject) -> None:
    layers = data.draw(st.integers(1, 4), label="layers")
    experts = data.draw(st.integers(1, 5), label="experts")
    values = st.integers(0, 6) if data.draw(st.booleans(), label="ties") else st.integers(0, 10_000)
    counts = np.array(data.draw(st.lists(values, min_size=layers * experts, max_size=layers * experts)),
                      dtype=np.uint64).reshape(layers, experts)
    floor = data.draw(st.integers(0, experts), label="floor")
    total = data.draw(st.integers(layers * floor, layers * experts), label="total")
    caps = plan_from_profile(counts, total, min_per_layer=floor)
    best = max(_splits(layers, experts, total, floor), key=lambda c: _hits(counts, c))
    assert sum(caps) == total and all(floor <= c <= experts for c in caps)
    assert _hits(counts, caps) == _hits(counts, best)


def test_brute_force_would_catch_a_worse_plan() -> None:
    """The oracle itself, on a hand-checked case: it scores what the hit report counts, and a worse split lower."""
    counts = np.array([[50, 40, 0, 0], [3, 2, 1, 0]], dtype=np.uint64)
    assert _hits(counts, plan_from_profile(counts, 4)) == 95  # [2, 2]: 50 + 40 + 3 + 2
    assert _hits(counts, plan_from_profile(counts, 4, uniform=True)) == 95
    assert _hits(counts, plan_from_profile(counts, 3)) == 93  # [2, 1]
    assert _hits(counts, [1, 2]) == 55
    assert max(_hits(counts, c) for c in _splits(2, 4, 3, 0)) == 93


def test_popular_layer_gets_more_slots() -> None:
    counts = np.array([[100, 90, 1, 1], [5, 4, 3, 2]], dtype=np.uint64)
    assert plan_from_profile(counts, 3) == [2, 1]
    assert plan_from_profile(counts, 4, min_per_layer=2) == [2, 2]
    assert plan_from_profile(counts, 4, uniform=True) == [2, 2]


@pytest.mark.parametrize(
    ("total", "kwargs", "message"),
    [
        (9, {}, "--total-resident-slots 9: more than the 2 x 4 = 8 experts of the offloaded nodes"),
        (3, {"uniform": True}, "--total-resident-slots 3 with --uniform-profile-slots: not a multiple of the 2 offloaded layers"),
        (3, {"min_per_layer": 2}, "--total-resident-slots 3: below --min-slots-per-layer 2 x 2 layers = 4"),
        (4, {"min_per_layer": 5}, "--min-slots-per-layer 5: must be between 0 and the expert count 4"),
        (-1, {}, "--total-resident-slots -1: must be a non-negative integer"),
    ],
)
def test_refusals_name_the_flag(total: int, kwargs: dict[str, object], message: str) -> None:
    counts = np.ones((2, 4), dtype=np.uint64)
    with pytest.raises(FlagError) as info:
        plan_from_profile(counts, total, **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_uniform_caps() -> None:
    assert uniform_caps(3, [8, 8, 4]) == [3, 3, 3]
    assert uniform_caps(0, [8]) == [0]
    with pytest.raises(FlagError, match=r"^--target-resident-slots 5: offloaded QMoE node #1 has only 4 experts$"):
        uniform_caps(5, [8, 4])
