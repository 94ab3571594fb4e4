"""expert-profile.bin: the expert-popularity profile, binary format "STRP v1".

Layout (little-endian): magic ``b"STRP"``, uint16 version (1), uint16 reserved (0), uint32
num_layers, uint32 num_experts, then num_layers * num_experts uint64 counts, layer-major. The
file size must be exactly ``16 + 8 * L * E``; every deviation is refused with the reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from q38.errors import ProfileError, clip
from q38.package.io.files import PROFILE_LIMIT, read_bounded

__all__ = ["PROFILE_FILENAME", "ExpertProfile", "encode_profile", "parse_profile", "read_profile"]

PROFILE_FILENAME: Final = "expert-profile.bin"
MAGIC: Final = b"STRP"
VERSION: Final = 1
_HEADER: Final = struct.Struct("<4sHHII")
# The most counts a profile file within PROFILE_LIMIT can hold (2 M): bounds the allocation.
MAX_CELLS: Final = (PROFILE_LIMIT - _HEADER.size) // 8


@dataclass(frozen=True, eq=False)
class ExpertProfile:
    """Per-layer expert popularity counts, shape [num_layers, num_experts], uint64."""

    counts: np.ndarray

    def __post_init__(self) -> None:
        if self.counts.ndim != 2 or self.counts.dtype != np.uint64:
            raise ValueError("counts must be a 2-D uint64 array")
        if self.counts.shape[0] == 0 or self.counts.shape[1] == 0:
            raise ValueError("counts must have at least one layer and one expert")

    @property
    def num_layers(self) -> int:
        """Rows of ``counts``: the MoE layers profiled (at least one)."""
        return int(self.counts.shape[0])

    @property
    def num_experts(self) -> int:
        """Columns of ``counts``: the routed experts per layer (at least one)."""
        return int(self.counts.shape[1])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExpertProfile) and np.array_equal(self.counts, other.counts)

    __hash__ = None  # type: ignore[assignment]


def encode_profile(profile: ExpertProfile) -> bytes:
    """The STRP v1 bytes of ``profile``: the 16-byte header, then the counts little-endian, layer-major."""
    header = _HEADER.pack(MAGIC, VERSION, 0, profile.num_layers, profile.num_experts)
    return header + profile.counts.astype("<u8").tobytes(order="C")


def parse_profile(data: bytes, *, source: str = PROFILE_FILENAME) -> ExpertProfile:
    """Decode STRP v1 ``data``; any deviation (magic, version, reserved, size) is one ProfileError line.

    The cell count is bounded by :data:`MAX_CELLS` before anything is allocated.
    """
    source = clip(source)
    if len(data) < _HEADER.size:
        raise ProfileError(f"{source}: truncated header ({len(data)} of {_HEADER.size} bytes)")
    magic, version, reserved, layers, experts = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProfileError(f"{source}: bad magic {magic!r} (expected {MAGIC!r}, STRP v1)")
    if version != VERSION:
        raise ProfileError(f"{source}: unsupported STRP version {version} (expected {VERSION})")
    if reserved != 0:
        raise ProfileError(f"{source}: reserved header field is {reserved}, expected 0")
    if layers == 0 or experts == 0:
        raise ProfileError(f"{source}: num_layers={layers} num_experts={experts}; both must be positive")
    cells = layers * experts
    if cells > MAX_CELLS:
        raise ProfileError(
            f"{source}: {layers} x {experts} counts exceed the limit of {MAX_CELLS} (a {PROFILE_LIMIT >> 20} MiB file)"
        )
    expected = _HEADER.size + 8 * cells
    if len(data) != expected:
        what = "truncated counts" if len(data) < expected else "trailing bytes after the counts"
        raise ProfileError(f"{source}: {what}: size {len(data)}, expected {expected} for {layers} x {experts}")
    counts = np.frombuffer(data, dtype="<u8", offset=_HEADER.size, count=cells).astype(np.uint64)
    return ExpertProfile(counts.reshape(layers, experts))


def read_profile(path: Path, *, what: str = "expert profile") -> ExpertProfile:
    """Read ``path`` (a regular file of at most :data:`PROFILE_LIMIT` bytes) as STRP v1.

    ``what`` names the file for the user: ``"--expert-profile"`` for a path given on the command
    line. A FIFO or a device (``/dev/zero``) is refused before anything is read.
    """
    data = read_bounded(path, what=what, limit=PROFILE_LIMIT, error=ProfileError)
    return parse_profile(data, source=str(path))
