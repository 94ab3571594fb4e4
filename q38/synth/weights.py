"""Deterministic synthetic weights, written once into an external data file and shared by name."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from q38.synth.blockgen import BLOCK_MIN_BYTES, BlockStream, base_block
from q38.synth.graph import EXTERNAL_THRESHOLD, DataFile, ExtRef, GraphBuilder, rng_for

__all__ = ["CHUNK_BYTES", "Weights", "cast_generated"]

# Target size of one generated piece of a streamed tensor (large preset: memory stays bounded).
CHUNK_BYTES = 4 << 20
# Pieces of block-generated tensors (q38.synth.blockgen): larger, for long sequential writes.
BLOCK_CHUNK_BYTES = 16 << 20


def cast_generated(values: np.ndarray, dtype: type) -> np.ndarray:
    """``values`` (float64, as numpy's generators draw them) cast to ``dtype``, whatever the ml_dtypes.

    ml_dtypes < 0.7 casts float64 to bfloat16 / float8 through float32 (two roundings); 0.7 rounds
    once, directly, and about 5 in 10^6 values land on the other neighbour. Synthetic packages are
    goldened byte for byte, so their ml_dtypes types take the float32 step explicitly (which both
    versions round alike). numpy's own float16 keeps its direct rounding.
    """
    if np.dtype(dtype).kind == "V":  # ml_dtypes types (numpy sees them as void-kind)
        return values.astype(np.float32).astype(dtype)
    return values.astype(dtype)


def _shape_only(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zero-memory array with ``shape`` and ``dtype`` (for GraphBuilder.external)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


class Weights:
    """Hands out initializers for a graph; large ones live in ``data`` at fixed offsets.

    A second graph built with the same ``Weights`` points at the same bytes (same offsets).
    ``refs`` maps initializer name -> ExtRef for the external ones. With ``block`` (the large and
    slice presets), tensors of at least BLOCK_MIN_BYTES come from q38.synth.blockgen (rotated
    seeded blocks, >= 1 GB/s) instead of numpy's element-by-element draws.
    """

    def __init__(
        self, seed: int, data: DataFile, *, threshold: int = EXTERNAL_THRESHOLD, block: bool = False
    ) -> None:
        self.seed = seed
        self.block = block
        self.data = data
        self.threshold = threshold  # 0: every initializer external (the public builder's rule)
        self.refs: dict[str, ExtRef] = {}
        self._small: dict[str, np.ndarray] = {}
        self._meta: dict[str, tuple[tuple[int, ...], np.dtype]] = {}

    def add(
        self, g: GraphBuilder, name: str, make: Callable[[], np.ndarray], *, misalign: int = 0
    ) -> str:
        """The initializer ``name`` in ``g``, made by ``make()`` the first time any graph asks.

        At least ``threshold`` bytes go to the data file (``misalign`` as in DataFile.add), smaller
        ones inline; a later graph reuses the same bytes and offsets without calling ``make``.
        """
        if g.has_init(name):
            return name
        if name in self.refs:
            shape, dtype = self._meta[name]
            return g.external(name, self.refs[name], _shape_only(shape, dtype))
        if name in self._small:
            return g.inline(name, self._small[name])
        arr = make()
        if arr.nbytes >= self.threshold:
            ref = self.data.add(name, arr, misalign=misalign)
            self.refs[name] = ref
            self._meta[name] = (tuple(arr.shape), arr.dtype)
            return g.external(name, ref, arr)
        self._small[name] = arr
        return g.inline(name, arr)

    def add_streamed(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        make: Callable[[int], np.ndarray],
        *,
        rows_per_chunk: int,
        misalign: int = 0,
    ) -> str:
        """Like ``add`` for a tensor made ``rows_per_chunk`` leading rows at a time.

        ``make(r)`` returns the next ``r`` rows (the generator's state carries over between calls).
        The pieces go straight into the data file; the whole tensor is never held.
        """
        if g.has_init(name) or name in self.refs or name in self._small:
            return self.add(g, name, lambda: np.empty(0))
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if nbytes < self.threshold or not shape:
            return self.add(g, name, lambda: make(shape[0] if shape else 1).reshape(shape))

        def pieces() -> Iterator[np.ndarray]:
            left = shape[0]
            while left:
                r = min(left, rows_per_chunk)
                yield make(r)
                left -= r

        ref = self.data.add_chunks(name, pieces(), np.dtype(dtype), shape, misalign=misalign)
        self.refs[name] = ref
        self._meta[name] = (shape, np.dtype(dtype))
        return g.external(name, ref, _shape_only(shape, np.dtype(dtype)))

    def _use_block(self, shape: tuple[int, ...], dtype: type | np.dtype) -> bool:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self.block and bool(shape) and nbytes >= max(BLOCK_MIN_BYTES, self.threshold)

    def _block(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        dtype: type | np.dtype,
        key: tuple[object, ...],
        draw: Callable[[np.random.Generator, int], np.ndarray],
        *,
        misalign: int = 0,
    ) -> str:
        """A block-generated tensor (q38.synth.blockgen), written in BLOCK_CHUNK_BYTES pieces."""
        dt = np.dtype(dtype)
        if g.has_init(name) or name in self.refs or name in self._small:
            return self.add(g, name, lambda: np.empty(0))
        row = int(np.prod(shape[1:], dtype=np.int64))
        stream = BlockStream(
            self.seed, name, base_block(key, dt, draw), int(np.prod(shape, dtype=np.int64))
        )

        def rows(r: int) -> np.ndarray:
            return stream.take(r * row).reshape((r, *shape[1:]))

        per = max(1, BLOCK_CHUNK_BYTES // max(1, row * dt.itemsize))
        return self.add_streamed(g, name, shape, dt, rows, rows_per_chunk=per, misalign=misalign)

    def normal(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        scale: float = 0.05,
        dtype: type = np.float16,
    ) -> str:
        """A weight drawn from N(0, ``scale``^2), seeded by (seed, name) so build order does not matter.

        Large tensors of the block presets are streamed (:meth:`normal_streamed`).
        """
        if self._use_block(shape, dtype):
            return self.normal_streamed(g, name, shape, scale, dtype)

        def make() -> np.ndarray:
            return cast_generated(rng_for(self.seed, name).standard_normal(shape) * scale, dtype)

        return self.add(g, name, make)

    def normal_streamed(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        scale: float,
        dtype: type,
    ) -> str:
        """``normal`` generated and written a few MiB at a time (the large preset's expert tensors).

        Pieces continue the one generator stream, so the bytes equal a whole-tensor draw.
        """
        if self._use_block(shape, dtype):
            return self._block(
                g, name, shape, dtype, ("normal", float(scale)),
                lambda rng, n: cast_generated(rng.standard_normal(n) * scale, dtype),
            )  # fmt: skip
        rng = rng_for(self.seed, name)

        def rows(r: int) -> np.ndarray:
            return cast_generated(rng.standard_normal((r, *shape[1:])) * scale, dtype)

        return self.add_streamed(
            g, name, shape, np.dtype(dtype), rows, rows_per_chunk=_rows_per_chunk(shape, 8)
        )

    def norm(
        self, g: GraphBuilder, name: str, shape: tuple[int, ...], dtype: type = np.float16
    ) -> str:
        """A norm weight near 1 (1 + 0.02 x N(0, 1)): normalisation stays close to identity."""

        def make() -> np.ndarray:
            r = rng_for(self.seed, name).standard_normal(shape)
            return cast_generated(1.0 + 0.02 * r, dtype)

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
        """A weight drawn uniformly from [``lo``, ``hi``) (quantization scales), streamed in pieces.

        One double per element, so pieces continue the whole-tensor stream; block presets use
        block generation for large tensors.
        """
        if self._use_block(shape, dtype):
            return self._block(
                g, name, shape, dtype, ("uniform", float(lo), float(hi)),
                lambda rng, n: cast_generated(rng.uniform(lo, hi, n), dtype), misalign=misalign,
            )  # fmt: skip
        rng = rng_for(self.seed, name)  # one double per element: pieces continue the stream

        def rows(r: int) -> np.ndarray:
            return cast_generated(rng.uniform(lo, hi, (r, *shape[1:])), dtype)

        return self.add_streamed(
            g,
            name,
            shape,
            np.dtype(dtype),
            rows,
            rows_per_chunk=_rows_per_chunk(shape, 8),
            misalign=misalign,
        )

    def codes(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        *,
        misalign: int = 0,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> str:
        """Random uint8 bytes (two int4/fp4 codes each), optionally transformed (e.g. SM80 packing).

        ``transform`` maps rows [r, ...] of raw codes to rows of stored bytes (row by row).
        Block-generated codes (``block``, large tensors) are drawn in stored order: random bytes
        need no packing to stay random, so ``transform`` only gives the stored shape there.
        """
        if self._use_block(shape, np.uint8):
            stored = shape
            if transform is not None:
                stored = (shape[0], *transform(np.zeros((1, *shape[1:]), np.uint8)).shape[1:])
            return self._block(
                g, name, stored, np.uint8, ("codes",),
                lambda rng, n: rng.integers(0, 256, n, dtype=np.uint8), misalign=misalign,
            )  # fmt: skip
        rng = rng_for(self.seed, name)
        row = int(np.prod(shape[1:], dtype=np.int64))
        # numpy draws uint8 codes 4 per 32-bit word and drops the rest at the end of a call, so
        # pieces continue the one-call stream only when each holds a multiple of 4 bytes.
        per = _rows_per_chunk(shape, 1) if row % 4 == 0 else max(1, shape[0] if shape else 1)

        def rows(r: int) -> np.ndarray:
            raw = rng.integers(0, 256, (r, *shape[1:]), dtype=np.uint8)
            return raw if transform is None else transform(raw)

        stored = shape  # the stored rows' shape (SM80 packing turns [N, K/2] into [K, N/2])
        if transform is not None and shape:
            stored = (shape[0], *transform(np.zeros((1, *shape[1:]), np.uint8)).shape[1:])
        return self.add_streamed(
            g, name, stored, np.dtype(np.uint8), rows, rows_per_chunk=per, misalign=misalign
        )

    def raw_codes(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """The raw codes behind ``codes(name, shape)``, for numerical references.

        Not for block-generated codes, which are drawn in stored order.
        """
        return rng_for(self.seed, name).integers(0, 256, shape, dtype=np.uint8)


def _rows_per_chunk(shape: tuple[int, ...], itemsize: int) -> int:
    """Leading rows per piece so that one piece stays near CHUNK_BYTES.

    ``itemsize`` is the bytes per element while the piece is generated (float64 draws: 8).
    """
    row = int(np.prod(shape[1:], dtype=np.int64)) * itemsize
    return max(1, CHUNK_BYTES // max(1, row))
