"""Fast deterministic weights for the large presets: one seeded block, rotated per block.

numpy's generators draw 0.25-0.5 GiB/s on a loaded runner, so the GPU suite's multi-GB packages
(``--preset large --weight-gb N``, ``--preset slice``) would spend minutes drawing numbers. A
``BlockStream`` draws one base block of ``BLOCK_BYTES`` once per (seed, kind, dtype, parameters),
and lays a tensor out as consecutive blocks, each the base block rotated by a shift drawn from
the tensor's own generator (``rng_for(seed, name)``). Every element is a value the base block
holds, so fp16 / bf16 / fp8 / fp32 tensors stay finite and in the range they were drawn in; two
tensors (and two blocks of one tensor) differ by their shifts. The bytes depend only on (seed,
name, kind, dtype, parameters, element count): never on how the tensor is cut into pieces, so
streamed writes equal a whole draw, and the same arguments give byte-identical files.

The small presets (tiny, full) never use this path: their goldens keep numpy's element-by-element
draws (``q38.synth.weights``).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

from q38.synth.graph import rng_for

__all__ = ["BLOCK_BYTES", "BLOCK_MIN_BYTES", "BlockStream", "base_block"]

# One base block: big enough that rotations of it do not repeat visibly, small enough to draw fast.
BLOCK_BYTES = 4 << 20
# Tensors below this many bytes (per-layer scales of small --weight-gb) keep the element-by-element draw even in the large presets.
BLOCK_MIN_BYTES = 256 << 10

_BASES: dict[tuple[object, ...], np.ndarray] = {}


def base_block(
    key: tuple[object, ...], dtype: np.dtype, draw: Callable[[np.random.Generator, int], np.ndarray]
) -> np.ndarray:
    """The doubled base block for ``key``, drawn once per process and key.

    ``2 * n`` elements, the second half a copy of the first, so that any rotation is a zero-copy
    slice.

    ``draw(rng, n)`` returns ``n`` elements of ``dtype``; ``rng`` is seeded from ``key`` only.
    """
    full = (key, np.dtype(dtype).str)
    got = _BASES.get(full)
    if got is None:
        n = max(1, BLOCK_BYTES // np.dtype(dtype).itemsize)
        rng = np.random.default_rng([0xB10C, zlib.crc32(repr(full).encode())])
        one = np.ascontiguousarray(draw(rng, n)).reshape(-1)
        if one.dtype != np.dtype(dtype) or one.size != n:
            raise ValueError(
                f"block draw for {key}: got {one.dtype}[{one.size}], want {dtype}[{n}]"
            )
        got = np.concatenate([one, one])
        got.setflags(write=False)
        _BASES[full] = got
    return got


class BlockStream:
    """The elements of one tensor, handed out front to back in pieces of any size.

    Block ``k`` of the tensor is the base block rotated by ``shift[k]``; the shifts come from
    ``rng_for(seed, name)`` (one draw of all of them up front), so they depend on the name only.
    """

    def __init__(self, seed: int, name: str, base: np.ndarray, total: int) -> None:
        self.base = base
        self.n = base.size // 2
        self.total = total
        blocks = max(1, -(-total // self.n))
        self.shifts = rng_for(seed, name).integers(0, self.n, blocks)
        self.pos = 0

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` elements (a new contiguous array)."""
        if self.pos + count > self.total:
            raise ValueError(f"block stream: {self.pos} + {count} > {self.total} elements")
        out = np.empty(count, self.base.dtype)
        done = 0
        while done < count:
            k, off = divmod(self.pos, self.n)
            step = min(count - done, self.n - off)
            s = int(self.shifts[k]) + off
            out[done : done + step] = self.base[s : s + step]
            done += step
            self.pos += step
        return out
