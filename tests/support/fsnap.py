"""Filesystem snapshots for write-safety tests: byte-identical sources, no staging debris."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def tree_snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """rel path -> (kind, content digest / link target / mode) for everything under ``root``.

    Symlinks are recorded, never followed, so a corpus item with a link into /etc or a loop is
    snapshotted safely. The root itself may be a file or a symlink.
    """
    out: dict[str, tuple[str, str]] = {}

    def visit(path: Path, rel: str) -> None:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", oct(st.st_mode & 0o7777))
            for name in sorted(os.listdir(path)):
                visit(path / name, f"{rel}/{name}" if rel else name)
        elif stat.S_ISREG(st.st_mode):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[rel] = ("file", f"{digest}:{oct(st.st_mode & 0o7777)}")
        else:
            out[rel] = ("other", oct(st.st_mode))

    if os.path.lexists(root):
        visit(root, "")
    return out


def staging_debris(parent: Path) -> list[str]:
    """Names of q38 staging directories left in ``parent``."""
    if not parent.is_dir():
        return []
    return sorted(p.name for p in parent.iterdir() if ".q38-staging-" in p.name or ".q38-tmp" in p.name)


def tree_identity(root: Path) -> dict[str, tuple[object, ...]]:
    """:func:`tree_snapshot` plus every entry's (device, inode, link count).

    Byte-identical is not enough for inputs: a command that hard-links an input into its output
    leaves the input's bytes alone but raises its link count, and a later in-place write to the
    output would change the input. Nothing is followed or read but regular files' bytes.
    """
    out: dict[str, tuple[object, ...]] = {}
    snap = tree_snapshot(root)
    for rel, value in snap.items():
        st = os.lstat(root / rel if rel else root)
        out[rel] = (*value, st.st_dev, st.st_ino, st.st_nlink)
    return out
