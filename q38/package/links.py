"""Placing one file into a staged package: reflink, hard link or copy, never touching the source.

``auto`` tries a copy-on-write clone (``ioctl(FICLONE)``), then a hard link, then a byte copy
(``os.copy_file_range`` loop) when the filesystem refuses to share blocks or the two paths are
on different filesystems (EXDEV). The mode actually used is returned, so the manifest records it
per file. The source is only ever opened read-only; a placed file is never opened for writing
afterwards (a hard-linked file *is* the source). See ``file-safety-facts.md`` for why hard links
are legal for ORT but refused by onnx / onnx-ir readers.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import os
from typing import Final, Literal

from q38.errors import PackageError

__all__ = ["FALLBACK_ERRNOS", "LinkMode", "LinkPolicy", "copy_bytes", "copy_file", "place_file"]

LinkMode = Literal["reflink", "hardlink", "copy"]

# linux/fs.h: _IOW(0x94, 9, int)
FICLONE: Final = 0x40049409
# Errors that mean "this filesystem pair cannot share blocks / links": fall back, do not fail.
FALLBACK_ERRNOS: Final = frozenset(
    {
        errno.EXDEV,
        errno.EPERM,
        errno.EACCES,
        errno.ENOTSUP,
        errno.EOPNOTSUPP,
        errno.EINVAL,
        errno.ENOTTY,
        errno.ENOSYS,
        errno.EMLINK,
        errno.EBADF,
    }
)
_CHUNK: Final = 1 << 30


class LinkPolicy(enum.Enum):
    """How ``place_file`` puts a source file into the package."""

    AUTO = "auto"
    REFLINK = "reflink"
    HARDLINK = "hardlink"
    COPY = "copy"


def _open_new(dst: str, mode: int) -> int:
    # O_EXCL: never follow or reuse whatever is at dst (a planted symlink, an old file).
    return os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode & 0o7777)


def _reflink(src: str, dst: str) -> None:
    sfd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        mode = os.fstat(sfd).st_mode
        dfd = _open_new(dst, mode)
        try:
            fcntl.ioctl(dfd, FICLONE, sfd)
        except BaseException:
            os.close(dfd)
            os.unlink(dst)
            raise
        os.close(dfd)
    finally:
        os.close(sfd)


def copy_bytes(src_fd: int, dst_fd: int, size: int) -> None:
    """Copy ``size`` bytes between two open files, in kernel where possible."""
    done = 0
    try:
        while done < size:
            n = os.copy_file_range(src_fd, dst_fd, min(_CHUNK, size - done), done, done)
            if n == 0:
                break
            done += n
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    while done < size:  # a kernel without cross-filesystem copy_file_range
        buf = os.pread(src_fd, min(16 << 20, size - done), done)
        if not buf:
            break
        os.pwrite(dst_fd, buf, done)
        done += len(buf)
    if done != size:
        raise OSError(errno.EIO, f"short copy ({done} of {size} bytes)")


def _copy(src: str, dst: str) -> None:
    sfd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(sfd)
        dfd = _open_new(dst, st.st_mode)
        try:
            copy_bytes(sfd, dfd, st.st_size)
            os.fchmod(dfd, st.st_mode & 0o7777)  # umask must not narrow the source's mode
        except BaseException:
            os.close(dfd)
            os.unlink(dst)
            raise
        os.close(dfd)
    finally:
        os.close(sfd)


def place_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], policy: LinkPolicy) -> LinkMode:
    """Place the regular file ``src`` at the new path ``dst``; return the mode used.

    Args:
        src: an existing regular file (symlinks are resolved here).
        dst: a path that must not exist yet (``O_EXCL`` / ``link`` refuse otherwise).
        policy: ``AUTO`` falls back reflink -> hardlink -> copy on :data:`FALLBACK_ERRNOS`;
            an explicit policy fails instead of falling back.

    Raises:
        PackageError: the explicit policy is impossible here, or the file cannot be read/written.
    """
    # Resolve links first: a relative `libx.so -> libx.so.1` must land as a loadable file.
    s, d = os.path.realpath(os.fspath(src)), os.fspath(dst)
    if not os.path.isfile(s):
        raise PackageError(f"{os.fspath(src)}: not a regular file")
    order: tuple[LinkMode, ...]
    if policy is LinkPolicy.AUTO:
        order = ("reflink", "hardlink", "copy")
    else:
        order = (policy.value,)  # type: ignore[assignment]
    last: OSError | None = None
    for mode in order:
        try:
            if mode == "reflink":
                _reflink(s, d)
            elif mode == "hardlink":
                os.link(s, d, follow_symlinks=False)
            else:
                _copy(s, d)
        except OSError as exc:
            last = exc
            if policy is LinkPolicy.AUTO and mode != "copy" and exc.errno in FALLBACK_ERRNOS:
                continue
            raise PackageError(
                f"--link {policy.value}: cannot {mode} {s} -> {d}: "
                f"{exc.strerror or exc} (errno {errno.errorcode.get(exc.errno or 0, exc.errno)})"
            ) from None
        return mode
    raise PackageError(f"--link {policy.value}: cannot place {s}: {last}")  # pragma: no cover


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Copy ``src`` to the new path ``dst`` (never a link)."""
    try:
        _copy(os.fspath(src), os.fspath(dst))
    except OSError as exc:
        raise PackageError(f"cannot copy {os.fspath(src)} -> {os.fspath(dst)}: {exc.strerror or exc}") from None
