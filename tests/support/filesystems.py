"""Real filesystems for placement tests: private tmpfs mounts and reflink-capable XFS loop images.

Each context manager yields a mounted directory or calls ``pytest.skip`` with the reason it cannot
(not root, no ``mount``, no ``mkfs.xfs``: ``.ci/run`` installs xfsprogs where apt exists).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FICLONE = 0x40049409


def reflink_works(src_dir: Path, dst_dir: Path) -> bool:
    """Whether a clone from ``src_dir`` into ``dst_dir`` succeeds here (probe files removed)."""
    a, b = src_dir / ".reflink-probe-a", dst_dir / ".reflink-probe-b"
    a.write_bytes(b"probe")
    try:
        with open(a, "rb") as s, open(b, "wb") as d:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
        return True
    except OSError:
        return False
    finally:
        a.unlink()
        with contextlib.suppress(FileNotFoundError):
            b.unlink()


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a filesystem needs root")
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine")


def _or_skip(what: str, *argv: str) -> None:
    r = _run(*argv)
    if r.returncode != 0:
        pytest.skip(f"{what} failed: {r.stderr.strip()}")


@contextlib.contextmanager
def _mounted(what: str, where: Path, *mount_args: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    _or_skip(what, "mount", *mount_args, os.fspath(where))
    try:
        yield where
    finally:
        _run("umount", os.fspath(where))


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "16m") -> Iterator[Path]:
    """A private tmpfs of ``size`` mounted at ``where`` (created) for the block."""
    _need_root()
    with _mounted("mount -t tmpfs", where, "-t", "tmpfs", "-o", f"size={size}", "tmpfs") as path:
        yield path


@contextlib.contextmanager
def xfs_reflink(image: Path, where: Path) -> Iterator[Path]:
    """A 300 MB sparse XFS loop image with reflink=1, mounted at ``where`` for the block."""
    _need_root()
    mkfs = shutil.which("mkfs.xfs")
    if mkfs is None:
        pytest.skip("mkfs.xfs not installed (apt-get install xfsprogs; .ci/run does it where apt exists)")
    with open(image, "wb") as fh:
        fh.truncate(300 << 20)  # XFS's minimum size; sparse, so it costs little disk
    try:
        _or_skip("mkfs.xfs", mkfs, "-q", "-m", "reflink=1", os.fspath(image))
        with _mounted("mounting an XFS loop image", where, "-o", "loop", os.fspath(image)) as path:
            yield path
    finally:
        image.unlink()
