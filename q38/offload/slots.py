"""Resident-slot planning: how many experts of each offloaded QMoE node stay on the device.

Two ways to ask, both refused *before anything is written* when they cannot be met exactly:

- :func:`uniform_caps` — ``--target-resident-slots N``: the same cap ``N`` for every node.
- :func:`plan_from_profile` — ``--expert-profile`` + ``--total-resident-slots N``: ``N`` slots in
  all, spread over the layers so that the most popular experts (by the profile's counts) are
  resident; ``uniform=True`` gives every layer the same share; ``min_per_layer`` is a floor.

The result is always a list of per-layer caps whose sum is exactly the requested total.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from q38.errors import FlagError

__all__ = ["plan_from_profile", "uniform_caps"]


def uniform_caps(target: int, experts: Sequence[int]) -> list[int]:
    """``--target-resident-slots``: cap ``target`` for every node; refused above a node's E."""
    if target < 0:
        raise FlagError(f"--target-resident-slots {target}: must be a non-negative integer")
    for index, count in enumerate(experts):
        if target > count:
            raise FlagError(
                f"--target-resident-slots {target}: offloaded QMoE node #{index} has only "
                f"{count} experts"
            )
    return [target] * len(experts)


def plan_from_profile(
    counts: np.ndarray,
    total: int,
    *,
    uniform: bool = False,
    min_per_layer: int = 0,
) -> list[int]:
    """Per-layer resident-slot caps summing to exactly ``total``.

    ``counts`` is the profile's ``[L, E]`` popularity matrix (one row per offloaded node). The
    non-uniform plan keeps the ``total`` most popular (layer, expert) pairs subject to the
    per-layer floor: every layer first gets ``min_per_layer`` slots, then the remaining slots go
    to the highest counts left (ties: lower layer first, then the layer's next-ranked expert),
    which is the greedy optimum of expected resident hits. Raises :class:`FlagError` naming the
    flag when the total cannot be met exactly.
    """
    matrix = np.asarray(counts)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise FlagError(f"--expert-profile: counts must be a non-empty [L, E] matrix, got {matrix.shape}")
    layers, experts = (int(d) for d in matrix.shape)
    if total < 0:
        raise FlagError(f"--total-resident-slots {total}: must be a non-negative integer")
    if min_per_layer < 0 or min_per_layer > experts:
        raise FlagError(
            f"--min-slots-per-layer {min_per_layer}: must be between 0 and the expert count {experts}"
        )
    floor_total = layers * min_per_layer
    if total < floor_total:
        raise FlagError(
            f"--total-resident-slots {total}: below --min-slots-per-layer {min_per_layer} x "
            f"{layers} layers = {floor_total}"
        )
    if total > layers * experts:
        raise FlagError(
            f"--total-resident-slots {total}: more than the {layers} x {experts} = "
            f"{layers * experts} experts of the offloaded nodes"
        )
    if uniform:
        if total % layers:
            raise FlagError(
                f"--total-resident-slots {total} with --uniform-profile-slots: not a multiple of "
                f"the {layers} offloaded layers"
            )
        return [total // layers] * layers
    caps = [min_per_layer] * layers
    remaining = total - floor_total
    if remaining:
        # Each layer's counts in descending order; rank r >= floor is the gain of its (r+1)-th slot.
        ranked = -np.sort(-matrix.astype(np.float64), axis=1, kind="stable")[:, min_per_layer:]
        gains = ranked.reshape(-1)
        # Stable sort on -gain keeps (layer, rank) order among ties; within a layer gains are
        # non-increasing, so the chosen set is always a prefix of each layer's ranking.
        order = np.argsort(-gains, kind="stable")[:remaining]
        per_layer = np.bincount(order // ranked.shape[1], minlength=layers)
        caps = [c + int(n) for c, n in zip(caps, per_layer)]
    return caps
