"""The GPU suite's slice extrapolation (tests/gpu/q38gpu_figures.py ``extrapolate_layers``).

Invariants: one measured slice scales per layer (fixed part 0, labelled as a bound); two or more fit
``fixed + per_layer * layers`` and recover a known line; the result is always labelled an
extrapolation; nonsense (no points, non-positive times, a slice larger than the model, a step that
does not grow with layers) is refused.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))
import q38gpu_figures as gfig


def test_one_slice_scales_per_layer() -> None:
    fig = gfig.extrapolate_layers({4: 0.002}, 48)
    assert fig["kind"] == "extrapolation" and "upper bound" in fig["method"]
    assert fig["per_layer_s"] == pytest.approx(0.0005) and fig["fixed_s"] == 0.0
    assert fig["step_s"] == pytest.approx(0.024) and fig["tokens_per_s"] == pytest.approx(1 / 0.024)
    assert fig["measured_layers"] == [4] and fig["full_layers"] == 48


def test_two_slices_fit_fixed_and_per_layer() -> None:
    fixed, per = 0.0013, 0.00021
    fig = gfig.extrapolate_layers({8: fixed + 8 * per, 4: fixed + 4 * per}, 48)
    assert fig["per_layer_s"] == pytest.approx(per) and fig["fixed_s"] == pytest.approx(fixed)
    assert fig["step_s"] == pytest.approx(fixed + 48 * per) and fig["measured_layers"] == [4, 8]
    one = gfig.extrapolate_layers({4: fixed + 4 * per}, 48)
    assert one["tokens_per_s"] < fig["tokens_per_s"]  # the one-point figure is the lower bound


@pytest.mark.parametrize("steps", [{}, {4: 0.0}, {0: 0.1}, {4: -1.0}, {64: 0.1}, {4: 0.2, 8: 0.1}])
def test_nonsense_is_refused(steps: dict[int, float]) -> None:
    with pytest.raises(ValueError):
        gfig.extrapolate_layers(steps, 48)
