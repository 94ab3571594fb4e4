"""Deterministic synthetic weights, written once into an external data file and shared by name."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from q38.synth.graph import EXTERNAL_THRESHOLD, DataFile, ExtRef, GraphBuilder, rng_for

__all__ = ["Weights"]


class Weights:
    """Hands out initializers for a graph; large ones live in ``data`` at fixed offsets.

    A second graph built with the same ``Weights`` points at the same bytes (same offsets).
    ``refs`` maps initializer name -> ExtRef for the external ones."""

    def __init__(self, seed: int, data: DataFile) -> None:
        self.seed = seed
        self.data = data
        self.refs: dict[str, ExtRef] = {}
        self._small: dict[str, np.ndarray] = {}
        self._meta: dict[str, tuple[tuple[int, ...], np.dtype]] = {}

    def add(
        self, g: GraphBuilder, name: str, make: Callable[[], np.ndarray], *, misalign: int = 0
    ) -> str:
        if g.has_init(name):
            return name
        if name in self.refs:
            shape, dtype = self._meta[name]
            return g.external(name, self.refs[name], np.empty(shape, dtype))
        if name in self._small:
            return g.inline(name, self._small[name])
        arr = make()
        if arr.nbytes >= EXTERNAL_THRESHOLD:
            ref = self.data.add(name, arr, misalign=misalign)
            self.refs[name] = ref
            self._meta[name] = (tuple(arr.shape), arr.dtype)
            return g.external(name, ref, arr)
        self._small[name] = arr
        return g.inline(name, arr)

    def normal(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        scale: float = 0.05,
        dtype: type = np.float16,
    ) -> str:
        def make() -> np.ndarray:
            return (rng_for(self.seed, name).standard_normal(shape) * scale).astype(dtype)

        return self.add(g, name, make)

    def norm(self, g: GraphBuilder, name: str, shape: tuple[int, ...]) -> str:
        def make() -> np.ndarray:
            r = rng_for(self.seed, name).standard_normal(shape)
            return (1.0 + 0.02 * r).astype(np.float16)

        return self.add(g, name, make)

    def uniform(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        lo: float,
        hi: float,
        dtype: type = np.float16,
        misalign: int = 0,
    ) -> str:
        def make() -> np.ndarray:
            return rng_for(self.seed, name).uniform(lo, hi, shape).astype(dtype)

        return self.add(g, name, make, misalign=misalign)

    def codes(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        *,
        misalign: int = 0,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> str:
        """Random uint8 bytes (two int4/fp4 codes each), optionally transformed (e.g. SM80 packing)."""

        def make() -> np.ndarray:
            raw = rng_for(self.seed, name).integers(0, 256, shape, dtype=np.uint8)
            return raw if transform is None else transform(raw)

        return self.add(g, name, make, misalign=misalign)

    def raw_codes(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """The raw codes behind ``codes(name, shape)`` (for numerical references)."""
        return rng_for(self.seed, name).integers(0, 256, shape, dtype=np.uint8)
