"""Staged output: build in a fresh directory next to the destination, rename into place.

A failed or interrupted command leaves no destination and, after the next run, no debris.
A staging directory is ``.<dest name>.q38-staging-<pid>-<8 hex>/``; the first thing written in
it is the marker file :data:`MARKER_NAME` that repeats the destination name, pid and token, and
the output tree is built in its subdirectory ``tree/`` (so the marker never ends up in the
output). :meth:`StagedDirectory.commit` renames ``tree/`` to the destination, then removes the
(now empty but for the marker) staging directory.

A process killed with SIGKILL (or a power cut) leaves its staging directory; the next
:class:`StagedDirectory` in the same parent directory removes it - but only a directory it can
prove q38 wrote: the name parses under a strict grammar (ASCII digits, bounded lengths, no
leading zero), the directory and its marker are owned by the current user and are not symlinks,
the marker's bytes are exactly what q38 writes for that name, and the writer's pid is dead. A
name that merely looks similar is left alone and never crashes the command.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final

from q38.errors import InternalError, PackageError

__all__ = [
    "COMMIT_CHECKS",
    "MARKER_NAME",
    "STAGING_MARK",
    "StagedDirectory",
    "check_destination",
    "check_output_outside",
    "rename_noreplace",
    "staging_prefix",
    "write_file_atomic",
]

STAGING_MARK: Final = ".q38-staging-"
MARKER_NAME: Final = ".q38-staging"
"""The marker file written first inside every staging directory (never part of the output)."""
TREE_NAME: Final = "tree"
"""The subdirectory of a staging directory that becomes the destination on commit."""
PID_MAX: Final = 4_194_304
"""Linux's PID_MAX_LIMIT: a larger pid in a name cannot be a process q38 ran as."""
_MARKER_MAX: Final = 4096
COMMIT_CHECKS: list[Callable[[Path, Path], None]] = []
"""Checks run on every staged tree just before it is renamed into place: ``check(tree, dest)``.

A check raises (a :class:`PackageError`) to refuse the output; the staging directory is then
removed and nothing reaches the destination. The layers above the package layer register one
for a run (the writing commands' output check: no contract violation the source did not have).
"""
_NAME = re.compile(r"\.(?P<dest>.+)\.q38-staging-(?P<pid>[1-9][0-9]{0,6})-(?P<token>[0-9a-f]{8})", re.ASCII | re.DOTALL)
_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1


def _libc_renameat2() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).renameat2
    except (OSError, AttributeError):
        return None


_RENAMEAT2 = _libc_renameat2()


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``; FileExistsError if ``dst`` exists, even as an empty directory.

    ``renameat2(RENAME_NOREPLACE)`` closes the window between checking and renaming; plain
    ``rename`` would silently replace an empty directory that appeared meanwhile.
    """
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), os.fspath(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "destination exists", os.fspath(dst))
    os.rename(src, dst)

def write_file_atomic(path: Path, data: bytes, *, replace: bool) -> None:
    """Write ``data`` at ``path`` whole or not at all: the one atomic writer of single files.

    The bytes go to a hidden temporary file beside ``path`` (``.NAME.XXXX.partial``), are synced,
    and the file is renamed into place, so a reader never sees half a file and an interrupted
    or failed write leaves no file behind. ``replace=False``: FileExistsError if ``path`` exists,
    also one that appeared while the bytes were written (:func:`rename_noreplace`). Any other
    OSError propagates; the caller words it.
    """
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            rename_noreplace(Path(tmp), path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)

_LOG = logging.getLogger(__name__)


def staging_prefix(dest: Path) -> str:
    """The hidden name prefix of ``dest``'s staging directories, next to it in the same parent.

    Same parent, so the commit is a rename on one filesystem; the mark lets a later run find
    and sweep a killed run's leftovers.
    """
    return f".{dest.name}{STAGING_MARK}"


def check_destination(dest: Path, *, what: str = "destination") -> None:
    """Refuse an existing destination, including a dangling symlink, before anything is written."""
    if os.path.lexists(dest):
        kind = "is a dangling symlink" if dest.is_symlink() and not dest.exists() else "exists"
        raise PackageError(f"{what} {dest} {kind}; refusing to overwrite (remove it or pick another path)")
    parent = dest.parent
    if not parent.is_dir():
        raise PackageError(f"{what} {dest}: parent directory {parent} does not exist")


def check_output_outside(out: Path, sources: list[Path]) -> None:
    """Refuse an output inside (or equal to) any source, after resolving symlinks.

    Writing there would modify the source package, and a later read of the source would see the
    output as part of it.
    """
    real_out = Path(os.path.realpath(out.parent)) / out.name
    for src in sources:
        real_src = Path(os.path.realpath(src))
        if real_out == real_src or real_src in real_out.parents:
            raise PackageError(f"{out}: the output must not be inside the source package {src}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or not a pid this platform can hold: never ours to sweep
    return True


def marker_text(dest_name: str, pid: int, token: str) -> bytes:
    """The marker's exact bytes for one staging directory (the destination name in hex: any bytes)."""
    return f"q38-staging 1 {os.fsencode(dest_name).hex()} {pid} {token}\n".encode("ascii")


def parse_staging_name(name: str) -> tuple[str, int, str] | None:
    """``(dest name, pid, token)`` of a q38 staging directory name, or None for any other name.

    Strict: ASCII digits only (``str.isdigit`` accepts '\u00b2', which ``int`` refuses), no
    leading zero, a pid no larger than :data:`PID_MAX`, exactly 8 lowercase hex digits.
    """
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    pid = int(m["pid"])
    if pid > PID_MAX:
        return None
    return m["dest"], pid, m["token"]


def _proven_stale(entry: Path) -> bool:
    """Whether ``entry`` is a staging directory q38 wrote whose writer is gone (see the module doc)."""
    parsed = parse_staging_name(entry.name)
    if parsed is None:
        return False
    dest_name, pid, token = parsed
    uid = os.geteuid()
    st = os.lstat(entry)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        return False
    marker = entry / MARKER_NAME
    mst = os.lstat(marker)
    if not stat.S_ISREG(mst.st_mode) or mst.st_uid != uid or mst.st_size > _MARKER_MAX:
        return False
    fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        data = os.read(fd, _MARKER_MAX + 1)
    finally:
        os.close(fd)
    if data != marker_text(dest_name, pid, token):
        return False
    return pid != os.getpid() and not _pid_alive(pid)


def _sweep_stale(dest: Path) -> None:
    """Remove the stale staging directories next to ``dest`` that q38 provably wrote.

    Every staging directory in the parent is considered (a killed run into a sibling destination
    is swept too); any name or entry that does not pass every check is left untouched, and no
    name, however hostile, raises.
    """
    try:
        entries = list(dest.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        if STAGING_MARK not in entry.name:
            continue
        try:
            stale = _proven_stale(entry)
        except (OSError, ValueError, UnicodeError):
            continue
        if stale:
            _LOG.info("removing stale staging directory %s", entry)
            shutil.rmtree(entry, ignore_errors=True)


class StagedDirectory:
    """Context manager owning a fresh staging directory for ``dest``.

    ``commit()`` renames the staging directory to ``dest`` (refusing if ``dest`` appeared in the
    meantime); leaving the block without committing, or with an exception, removes it.
    """

    def __init__(self, dest: Path) -> None:
        self.dest = Path(os.path.abspath(dest))
        self.path: Path = self.dest  # replaced in __enter__: the tree that becomes dest
        self.staging: Path | None = None
        """The staging directory itself (holding the marker and ``tree/``), once entered."""
        self.committed = False

    def __enter__(self) -> StagedDirectory:
        check_destination(self.dest)
        _sweep_stale(self.dest)
        pid, token = os.getpid(), uuid.uuid4().hex[:8]
        staging = self.dest.parent / f"{staging_prefix(self.dest)}{pid}-{token}"
        try:
            staging.mkdir(mode=0o755)
        except OSError as exc:
            raise PackageError(f"cannot create staging directory next to {self.dest}: {exc.strerror}") from None
        self.staging = staging
        try:
            fd = os.open(staging / MARKER_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, marker_text(self.dest.name, pid, token))
            finally:
                os.close(fd)
            (staging / TREE_NAME).mkdir(mode=0o755)
        except BaseException as exc:
            shutil.rmtree(staging, ignore_errors=True)
            self.staging = None
            if isinstance(exc, OSError):
                raise PackageError(f"cannot create staging directory next to {self.dest}: {exc.strerror}") from None
            raise
        self.path = staging / TREE_NAME
        return self

    def commit(self) -> None:
        """Rename the staged tree to ``dest`` (refusing an existing one), then remove the staging directory."""
        if self.staging is None or not self.path.is_dir() or self.path == self.dest:
            raise InternalError("commit() outside the with block")
        for check in tuple(COMMIT_CHECKS):
            check(self.path, self.dest)
        try:
            rename_noreplace(self.path, self.dest)
        except FileExistsError:
            raise PackageError(f"{self.dest}: destination appeared meanwhile; refusing to overwrite") from None
        except OSError as exc:
            raise PackageError(f"cannot move the staged output into place at {self.dest}: {exc.strerror}") from None
        self.committed = True
        shutil.rmtree(self.staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            fd = os.open(self.dest.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def discard(self) -> None:
        """Remove the staging directory (and the tree in it, unless it was committed)."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()
        if isinstance(exc, OSError):
            # A filesystem failure while producing the output (ENOSPC, EIO, EPERM...) is not a q38
            # bug: report it as one line naming the file, after the staging directory is gone.
            where = f" ({exc.filename})" if exc.filename else ""
            raise PackageError(
                f"{self.dest}: I/O error while writing the output: {exc.strerror or exc}{where}; nothing was written"
            ) from None
