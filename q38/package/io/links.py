"""The link policy: how every command puts an existing file into its staged output.

One place decides, for ``build``, ``optimize``, ``offload`` and ``export-genai`` (the commands only
pass ``--link`` and ``--digest`` through):

* ``auto`` (the default): a copy-on-write clone (``ioctl(FICLONE)``) where the filesystem shares
  blocks, else a byte copy (also across filesystems: EXDEV). Never a hard link: onnx and onnx-ir
  refuse hard-linked external data (``file-safety-facts.md``), so a hard link would break the
  user's *source* for them as well as the output.
* ``reflink`` / ``copy``: only that; an impossible reflink fails instead of falling back.
* ``hardlink``: only a hard link, with one warning per command naming the consequence.

A placed file is recorded by identity (``st_dev``, ``st_ino``, size, ``mtime_ns``), however it was
placed: no byte of a linked or cloned file is read, and a copy moves its bytes by the kernel's
``copy_file_range`` (``cp``'s own path) without entering user space. A placed file carries a
sha256 only where one is already held or asked for: a source manifest's digest for the same
identity is reused (never recomputed), and ``--digest`` takes it -- for a copy in the same pass
as the copy (read once, hash and write), for a link or clone by reading the file once. Hashing
every copy by default would bound every copy by sha256 (~1.2 GB/s on one core here) instead of
the disk: 1.4-3.4x ``cp`` from the page cache on this 2-core machine (issue 14).
The source is only ever opened read-only; a placed file is never opened for writing afterwards
(a hard-linked file *is* the source).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import logging
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from q38.errors import PackageError
from q38.package.io.copying import CopyMethod, copy_fd
from q38.package.io.hashing import FileIdentity, KnownDigests, sha256_file

__all__ = [
    "FALLBACK_ERRNOS",
    "HARDLINK_WARNING",
    "LinkMode",
    "LinkPolicy",
    "Placed",
    "Placer",
    "copy_file",
    "place",
    "place_file",
]

LinkMode = Literal["reflink", "hardlink", "copy"]

# linux/fs.h: _IOW(0x94, 9, int)
FICLONE: Final = 0x40049409
# Errors that mean "this filesystem pair cannot share blocks": ``auto`` copies instead.
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
        errno.EBADF,
    }
)
HARDLINK_WARNING: Final = (
    "--link hardlink: the output's data files are the source's files (one inode, several names); "
    "onnx and onnx-ir refuse hard-linked external data, so neither the source nor the output loads "
    "in them while both exist (onnxruntime accepts it); in-place edits of either change both"
)
_LOG = logging.getLogger(__name__)


class LinkPolicy(enum.Enum):
    """How a source file is put into the package (``--link``)."""

    AUTO = "auto"
    REFLINK = "reflink"
    HARDLINK = "hardlink"
    COPY = "copy"


@dataclass(frozen=True)
class Placed:
    """What :func:`place` did: the mode, the placed file's identity, and a digest if one exists."""

    mode: LinkMode
    identity: FileIdentity
    sha256: str | None = None
    method: CopyMethod | None = None  # how a copy moved its bytes
    digest_reused: bool = False


def _open_new(dst: str, mode: int) -> int:
    # O_EXCL: never follow or reuse whatever is at dst (a planted symlink, an old file).
    return os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode & 0o7777)


def _into_new(dst: str, src_fd: int, st: os.stat_result, fill: Callable[[int], None]) -> os.stat_result:
    """Create ``dst``, run ``fill(dst_fd)``; on any failure nothing is left at ``dst``."""
    dfd = _open_new(dst, st.st_mode)
    ok = False
    try:
        fill(dfd)
        os.fchmod(dfd, st.st_mode & 0o7777)  # the umask must not narrow the source's mode
        out = os.fstat(dfd)
        ok = True
        return out
    finally:
        os.close(dfd)
        if not ok:
            os.unlink(dst)


def place(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    policy: LinkPolicy,
    *,
    digest: bool = False,
    known: KnownDigests | None = None,
    on_bytes: Callable[[int], None] = lambda n: None,
) -> Placed:
    """Place the regular file ``src`` at the new path ``dst`` under ``policy``.

    Args:
        src: an existing regular file (symlinks are resolved: a relative ``libx.so -> libx.so.1``
            lands as a loadable file).
        dst: a path that must not exist yet (``O_EXCL`` / ``link`` refuse otherwise).
        policy: how to place it; ``AUTO`` tries a reflink, then a copy; any other names the one
            mode it allows.
        digest: take the sha256 of the placed file (``--digest``): a copy hashes in the same
            pass as the copy, a link or clone reads its bytes once. A known digest is reused.
        known: digests a source manifest holds, reused where the source's identity matches.
        on_bytes: progress callback, in bytes (a link reports the file's size at once).

    Raises:
        PackageError: the policy is impossible here, or the file cannot be read or written.

    """
    s, d = os.path.realpath(os.fspath(src)), os.fspath(dst)
    order: tuple[LinkMode, ...] = ("reflink", "copy") if policy is LinkPolicy.AUTO else (policy.value,)
    try:
        sfd = os.open(s, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise PackageError(f"{os.fspath(src)}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(sfd)
        if not stat.S_ISREG(st.st_mode):
            raise PackageError(f"{os.fspath(src)}: not a regular file")
        reuse = known.get(FileIdentity.of_stat(st)) if known is not None else None
        for i, mode in enumerate(order):
            try:
                return _place_one(mode, s, d, sfd, st, digest=digest, reuse=reuse, on_bytes=on_bytes)
            except OSError as exc:
                if i + 1 < len(order) and exc.errno in FALLBACK_ERRNOS:
                    continue
                raise PackageError(
                    f"--link {policy.value}: cannot {mode} {s} -> {d}: "
                    f"{exc.strerror or exc} (errno {errno.errorcode.get(exc.errno or 0, exc.errno)})"
                ) from None
        raise AssertionError("unreachable: the last mode raises or returns")  # pragma: no cover
    finally:
        os.close(sfd)


def _place_one(
    mode: LinkMode,
    s: str,
    d: str,
    sfd: int,
    st: os.stat_result,
    *,
    digest: bool,
    reuse: str | None,
    on_bytes: Callable[[int], None],
) -> Placed:
    if mode == "copy":
        method: list[CopyMethod] = []
        sha: list[str | None] = []

        def fill(dfd: int) -> None:
            m, h = copy_fd(sfd, dfd, st.st_size, digest=digest and reuse is None, on_bytes=on_bytes)
            method.append(m)
            sha.append(h)

        out = _into_new(d, sfd, st, fill)
        return Placed("copy", FileIdentity.of_stat(out), reuse or sha[0], method[0], reuse is not None)
    if mode == "reflink":
        def clone(dfd: int) -> None:
            fcntl.ioctl(dfd, FICLONE, sfd)

        out = _into_new(d, sfd, st, clone)
    else:
        os.link(s, d, follow_symlinks=False)
        out = os.lstat(d)
    on_bytes(st.st_size)
    sha256 = reuse if reuse is not None else sha256_file(d) if digest else None
    return Placed(mode, FileIdentity.of_stat(out), sha256, None, reuse is not None)


def place_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], policy: LinkPolicy) -> LinkMode:
    """:func:`place` without digests or progress; returns only the mode used."""
    return place(src, dst, policy).mode


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Copy ``src`` to the new path ``dst`` (never a link)."""
    place(src, dst, LinkPolicy.COPY)


class Placer:
    """The placement of one command run: its policy, its digests, one warning, one byte counter.

    ``Placer(policy)`` logs :data:`HARDLINK_WARNING` once when the policy is ``hardlink``; every
    :meth:`place` then uses the same policy. ``outside`` files (not inside any source the command
    was given, e.g. a resolved ``--lib`` path) are always copied: nothing outside the inputs is
    ever linked into an output.
    """

    def __init__(
        self,
        policy: LinkPolicy = LinkPolicy.AUTO,
        *,
        digest: bool = False,
        known: KnownDigests | None = None,
        on_bytes: Callable[[int], None] = lambda n: None,
    ) -> None:
        self.policy = policy
        self.digest = digest
        self.known = known if known is not None else KnownDigests()
        self.on_bytes = on_bytes
        self.bytes_copied = 0
        if policy is LinkPolicy.HARDLINK:
            _LOG.warning(HARDLINK_WARNING)

    def _count(self, n: int) -> None:
        self.on_bytes(n)

    @contextlib.contextmanager
    def progress(self, files: list[Path], label: str) -> Iterator[None]:
        """A progress bar in bytes over ``files`` (TTY only) while the block places them."""
        # deferred: read at call time, where tests patch q38.progress.Progress (test_progress_labels.py)
        from q38.progress import Progress

        saved = self.on_bytes
        with Progress(total_bytes(files), label, unit="bytes") as bar:
            self.on_bytes = bar.advance
            try:
                yield
            finally:
                self.on_bytes = saved

    def place(self, src: str | os.PathLike[str], dst: str | os.PathLike[str], *, outside: bool = False) -> Placed:
        """Place ``src`` at ``dst`` under the placer's policy, reusing its known digests.

        ``outside``: the file is not inside any source the command was given (a resolved
        ``--lib`` path), so it is copied whatever the policy; copied bytes are counted.
        """
        policy = LinkPolicy.COPY if outside else self.policy
        placed = place(src, dst, policy, digest=self.digest, known=self.known, on_bytes=self._count)
        if placed.mode == "copy":
            self.bytes_copied += placed.identity.size
        return placed


def total_bytes(paths: list[Path]) -> int:
    """The bytes a list of files to place adds up to (for a progress bar in bytes)."""
    return sum(os.stat(p).st_size for p in paths)
