"""Byte copies (``q38.package.io.copying``): the destination holds the source's exact bytes.

Invariant guarded here: a short ``pwrite`` (POSIX lets the kernel write fewer bytes than asked,
e.g. on a signal or a nearly full quota) is continued at the right offset, so the copy is still
byte-exact and its digest is the source's.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

import q38.package.io.copying as copying


def test_short_writes_are_resumed_at_the_right_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hashing copy whose every pwrite is short still writes each byte at its own offset (no corruption)."""
    data = os.urandom(2 * copying.HASH_BUFFER + 99)  # three buffers: later writes start past offset 0
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(data)
    real = os.pwrite

    def short_pwrite(fd: int, buf: memoryview, offset: int) -> int:
        return real(fd, buf[: 1 << 20 | 7], offset)  # never more than 1 MiB + 7 bytes per call

    monkeypatch.setattr(copying.os, "pwrite", short_pwrite)
    with src.open("rb") as s, dst.open("wb") as d:
        method, sha = copying.copy_fd(s.fileno(), d.fileno(), len(data), digest=True)
    assert (method, sha) == ("read_hash_write", hashlib.sha256(data).hexdigest())
    assert dst.read_bytes() == data


def test_a_buffer_is_not_refilled_while_the_writer_still_holds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hashing copy whose writer lags behind the hasher still writes each buffer's own bytes: a buffer
    goes back to the reader only after both the hasher and the writer are done with it."""
    data = os.urandom(copying.HASH_BUFFERS * copying.HASH_BUFFER + 99)  # one more read than there are buffers
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(data)
    real_preadv, real_pwrite = os.preadv, os.pwrite
    reads: list[int] = []
    last_read = threading.Event()

    def counting_preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        n = real_preadv(fd, buffers, offset)
        reads.append(offset)
        if len(reads) > copying.HASH_BUFFERS:
            last_read.set()
        return n

    def lagging_pwrite(fd: int, buf: memoryview, offset: int) -> int:
        if offset == 0:
            last_read.wait(1.0)  # a correct copy cannot read past the 4th buffer before this write: times out
        return real_pwrite(fd, buf, offset)

    monkeypatch.setattr(copying.os, "preadv", counting_preadv)
    monkeypatch.setattr(copying.os, "pwrite", lagging_pwrite)
    with src.open("rb") as s, dst.open("wb") as d:
        method, sha = copying.copy_fd(s.fileno(), d.fileno(), len(data), digest=True)
    assert (method, sha) == ("read_hash_write", hashlib.sha256(data).hexdigest())
    assert dst.read_bytes() == data
