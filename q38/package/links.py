"""Placing files into a package: reflink, hard link or copy; the source is never modified.

``auto`` tries a copy-on-write clone (FICLONE), then a hard link, then a copy when linking
fails across filesystems (EXDEV) or is refused (EPERM, EOPNOTSUPP, EMLINK...). Copies use
``os.copy_file_range`` (the fastest copy on the reference machine, see perf-floor.md).
"""

from __future__ import annotations

import enum
import errno
import fcntl
import os
import shutil
from pathlib import Path

from q38.errors import PackageError

__all__ = ["LinkMode", "LinkPolicy", "copy_file", "place_file"]

_FICLONE = 0x40049409  # _IOW(0x94, 9, int), Linux
_FALLBACK_ERRNOS = frozenset(
    {errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EINVAL, errno.ENOSYS, errno.EACCES, errno.ETXTBSY}
)


class LinkPolicy(enum.StrEnum):
    AUTO = "auto"
    REFLINK = "reflink"
    HARDLINK = "hardlink"
    COPY = "copy"


class LinkMode(enum.StrEnum):
    REFLINK = "reflink"
    HARDLINK = "hardlink"
    COPY = "copy"


def copy_file(src: Path, dst: Path) -> None:
    """Copy bytes with copy_file_range (falls back to shutil); ``dst`` must not exist."""
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        size = os.fstat(fin.fileno()).st_size
        sent = 0
        try:
            while sent < size:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), size - sent)
                if n == 0:
                    break
                sent += n
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL) or sent:
                raise
            shutil.copyfileobj(fin, fout, 8 << 20)
            sent = size
        if sent < size:
            fin.seek(sent)
            fout.seek(sent)
            shutil.copyfileobj(fin, fout, 8 << 20)
    shutil.copymode(src, dst)


def _reflink(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
        except OSError:
            os.unlink(dst)
            raise
    shutil.copymode(src, dst)


def place_file(src: Path, dst: Path, policy: LinkPolicy = LinkPolicy.AUTO) -> LinkMode:
    """Put ``src``'s bytes at ``dst`` (which must not exist) by ``policy``; returns the mode used.

    Symlinks in ``src`` are resolved first, so a relative library link never lands dangling.
    """
    real = Path(os.path.realpath(src))
    if not real.is_file():
        raise PackageError(f"{src}: not a regular file")
    if policy in (LinkPolicy.AUTO, LinkPolicy.REFLINK):
        try:
            _reflink(real, dst)
            return LinkMode.REFLINK
        except OSError as exc:
            if policy is LinkPolicy.REFLINK:
                raise PackageError(f"{src}: reflink to {dst} failed: {exc.strerror} (--link reflink)") from None
            if exc.errno not in _FALLBACK_ERRNOS and exc.errno != errno.ENOTTY:
                raise PackageError(f"{src}: cannot place at {dst}: {exc.strerror}") from None
    if policy in (LinkPolicy.AUTO, LinkPolicy.HARDLINK):
        try:
            os.link(real, dst)
            return LinkMode.HARDLINK
        except OSError as exc:
            if policy is LinkPolicy.HARDLINK:
                raise PackageError(f"{src}: hard link to {dst} failed: {exc.strerror} (--link hardlink)") from None
            if exc.errno not in _FALLBACK_ERRNOS:
                raise PackageError(f"{src}: cannot place at {dst}: {exc.strerror}") from None
    try:
        copy_file(real, dst)
    except OSError as exc:
        raise PackageError(f"{src}: copy to {dst} failed: {exc.strerror}") from None
    return LinkMode.COPY
