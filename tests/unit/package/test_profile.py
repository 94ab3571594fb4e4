"""expert-profile.bin (STRP v1): exact encoding and strict validation.

Invariants: parse(encode(p)) == p; every malformed file is refused with the file and the reason.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import ProfileError
from q38.package import ExpertProfile, encode_profile, parse_profile, read_profile


def _profile() -> ExpertProfile:
    return ExpertProfile(np.arange(12, dtype=np.uint64).reshape(3, 4) * np.uint64(1000))


def test_encoding_is_the_documented_layout() -> None:
    data = encode_profile(_profile())
    assert data[:16] == b"STRP" + struct.pack("<HHII", 1, 0, 3, 4)
    assert len(data) == 16 + 8 * 12
    assert struct.unpack_from("<Q", data, 16 + 8 * 5)[0] == 5000
    assert parse_profile(data) == _profile()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: b"STRQ" + d[4:], "bad magic b'STRQ' (expected b'STRP', STRP v1)"),
        (lambda d: d[:4] + struct.pack("<H", 2) + d[6:], "unsupported STRP version 2 (expected 1)"),
        (lambda d: d[:6] + struct.pack("<H", 7) + d[8:], "reserved header field is 7, expected 0"),
        (lambda d: d[:8] + struct.pack("<I", 0) + d[12:], "num_layers=0 num_experts=4; both must be positive"),
        (lambda d: d[:-8], "truncated counts: size 104, expected 112 for 3 x 4"),
        (lambda d: d + b"\0", "trailing bytes after the counts: size 113, expected 112"),
        (lambda d: d[:10], "truncated header (10 of 16 bytes)"),
        (lambda d: d[:8] + struct.pack("<II", 1 << 20, 1 << 20), "exceed the limit"),
    ],
)
def test_malformed_profiles_are_refused_with_the_reason(mutate, message: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(mutate(encode_profile(_profile())), source="pkg/expert-profile.bin")
    assert str(info.value).startswith("pkg/expert-profile.bin: ")
    assert message in str(info.value)


def test_read_profile_refuses_a_directory_and_a_missing_file(tmp_path) -> None:
    with pytest.raises(ProfileError, match="is a directory"):
        read_profile(tmp_path)
    with pytest.raises(ProfileError, match="does not exist"):
        read_profile(tmp_path / "nope.bin")
    (tmp_path / "p.bin").write_bytes(encode_profile(_profile()))
    assert read_profile(tmp_path / "p.bin") == _profile()


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_a_profile_without_layers_or_experts_is_refused(shape: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="counts must have at least one layer and one expert"):
        ExpertProfile(np.zeros(shape, dtype=np.uint64))


@pytest.mark.parametrize("counts", [
    np.zeros(4, dtype=np.uint64), np.zeros((2, 3, 4), dtype=np.uint64), np.zeros((3, 4), dtype=np.int64),
    np.zeros((3, 4), dtype=np.float64),
])  # fmt: skip
def test_counts_that_are_not_a_2d_uint64_array_are_refused(counts: np.ndarray, messages_snapshot: SnapshotAssertion) -> None:
    """A profile is [layers, experts] uint64 counts: another rank or dtype is refused by name."""
    with pytest.raises(ValueError) as info:
        ExpertProfile(counts)
    assert messages_snapshot == str(info.value)
