"""Scalar values of the canonical forms: floats as the shortest text of their dtype.

A float32 attribute of 1e-5 holds the float32 nearest to 1e-5; widened to a Python float it
prints as ``9.999999747378752e-06``, which no reviewer wrote and which hides a change in the
last digits. The canonical value is the shortest decimal that converts back to the *same*
value of the stored dtype (``1e-05``): two values are equal exactly when their canonical texts
are, so nothing is lost, and a golden shows what the exporter wrote.

Non-finite values have no JSON number; they are the strings ``"nan"``, ``"inf"``, ``"-inf"``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any, SupportsFloat

import numpy as np
import numpy.typing as npt

__all__ = ["shortest_float", "shortest_floats"]


def shortest_float(value: SupportsFloat, dtype: npt.DTypeLike = np.float32) -> float | str:
    """The shortest decimal (as a Python float) that reads back as ``value`` in ``dtype``.

    Args:
        value: a number held in ``dtype`` (a numpy or ml_dtypes scalar, or a Python float).
        dtype: the storage type: ``np.float32`` for ONNX FLOAT attributes, a tensor's dtype
            for tensor values (float16, bfloat16, float8 ... via ml_dtypes).

    """
    return _shortest(float(value), np.dtype(dtype))


@functools.lru_cache(maxsize=65536)
def _shortest(x: float, dtype: np.dtype[Any]) -> float | str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    target = np.asarray(x, dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # a short text may overflow the dtype
        for digits in range(1, 18):
            text = f"{x:.{digits}g}"
            if np.asarray(float(text), dtype=dtype) == target:
                return float(text)
    return x


def shortest_floats(values: Iterable[SupportsFloat], dtype: npt.DTypeLike) -> list[float | str]:
    """:func:`shortest_float` of each value."""
    return [shortest_float(v, dtype) for v in values]
