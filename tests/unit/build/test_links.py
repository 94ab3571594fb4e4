"""Link policy (rule 5): reflink -> hard link -> copy, with real cross-filesystem fallbacks.

Invariants:
- ``auto`` falls back on EXDEV / EPERM / ENOTSUP and reports the mode actually used;
- an explicit policy never falls back;
- a copy keeps the mode bits and never follows or replaces an existing destination;
- the EXDEV fallback is exercised on a real second filesystem (/dev/shm, and a private tmpfs
  mounted per test when running as root);
- the source is never modified.
"""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

import q38.package.links as links
from q38.package.links import LinkPolicy, place_file
from q38.errors import PackageError


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "src.bin"
    p.write_bytes(os.urandom(3 << 20) + b"tail")
    p.chmod(0o640)
    return p


def test_auto_on_one_filesystem_shares_blocks_or_links(src, tmp_path):
    mode = place_file(src, tmp_path / "dst", LinkPolicy.AUTO)
    assert mode in ("reflink", "hardlink")
    if mode == "hardlink":
        assert os.path.samefile(src, tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == src.read_bytes()


def test_auto_falls_back_to_copy_when_links_are_refused(src, tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(links, "_reflink", lambda s, d: (_ for _ in ()).throw(OSError(errno.EOPNOTSUPP, "no")))
    monkeypatch.setattr(links.os, "link", refuse)
    assert place_file(src, tmp_path / "dst", LinkPolicy.AUTO) == "copy"
    st = os.stat(tmp_path / "dst")
    assert st.st_nlink == 1 and st.st_mode & 0o777 == 0o640
    assert (tmp_path / "dst").read_bytes() == src.read_bytes()


def test_explicit_reflink_does_not_fall_back(src, tmp_path, monkeypatch):
    monkeypatch.setattr(links.fcntl, "ioctl", lambda *a: (_ for _ in ()).throw(OSError(errno.EOPNOTSUPP, "Operation not supported")))
    with pytest.raises(PackageError, match="--link reflink: cannot reflink"):
        place_file(src, tmp_path / "dst", LinkPolicy.REFLINK)
    assert not (tmp_path / "dst").exists()  # the half-made clone target is removed


def test_copy_never_writes_through_an_existing_destination(src, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    os.symlink(victim, tmp_path / "dst")
    with pytest.raises(PackageError, match="File exists"):
        place_file(src, tmp_path / "dst", LinkPolicy.COPY)
    assert victim.read_bytes() == b"keep"


def _exdev(src: Path, other_fs: Path) -> None:
    before = src.read_bytes()
    assert place_file(src, other_fs / "auto", LinkPolicy.AUTO) == "copy"
    assert (other_fs / "auto").read_bytes() == before
    with pytest.raises(PackageError, match="EXDEV"):
        place_file(src, other_fs / "hard", LinkPolicy.HARDLINK)
    assert not (other_fs / "hard").exists()
    assert src.read_bytes() == before


def test_exdev_fallback_on_dev_shm(src):
    if os.stat("/dev/shm").st_dev == os.stat(src).st_dev:
        pytest.skip("/dev/shm shares the source filesystem here")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        _exdev(src, Path(d))


@pytest.mark.needs_mount
def test_exdev_fallback_on_a_private_tmpfs_mount(src, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", os.fspath(mnt)], capture_output=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"mount failed: {r.stderr.decode().strip()}")
    try:
        _exdev(src, mnt)
    finally:
        subprocess.run(["umount", os.fspath(mnt)], check=True)
