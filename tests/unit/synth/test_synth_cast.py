"""Synthetic weights have the same bytes under every ml_dtypes version (goldens are byte exact)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from q38.synth.weights import cast_generated


def test_bfloat16_rounds_through_float32_like_ml_dtypes_0_6() -> None:
    # Just below a bfloat16 tie: float32 rounds it onto the tie (0x1.5b p-6), which then rounds to
    # even (0xbcae); a direct float64 -> bfloat16 cast (ml_dtypes 0.7) gives the lower neighbour 0xbcad.
    value = np.array([float.fromhex("-0x1.5affff36664e1p-6")], np.float64)
    assert cast_generated(value, ml_dtypes.bfloat16).view(np.uint16).tolist() == [0xBCAE]


def test_float16_keeps_numpys_direct_rounding() -> None:
    # numpy's float16 cast rounds float64 once; taking a float32 step would change these bytes.
    rng = np.random.default_rng(0)
    x = rng.standard_normal(100_000) * 0.5
    direct = x.astype(np.float16)
    assert (x.astype(np.float32).astype(np.float16) != direct).any()
    assert np.array_equal(cast_generated(x, np.float16).view(np.uint16), direct.view(np.uint16))


def test_float8_and_float32_pass_through_unchanged() -> None:
    x = np.array([0.1, -3.75, 448.0, 1e-3])
    assert cast_generated(x, np.float32).tolist() == x.astype(np.float32).tolist()
    f8 = cast_generated(x, ml_dtypes.float8_e4m3fn)
    assert f8.dtype == ml_dtypes.float8_e4m3fn
    assert (
        f8.astype(np.float32).tolist()
        == x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32).tolist()
    )
