"""Staged output: build in a fresh directory next to the destination, rename into place.

A failed or interrupted command leaves no destination and, after the next run, no debris:
staging directories carry the writer's pid, and a staging directory whose pid is no longer
alive is removed by the next :class:`StagedDirectory` for the same destination.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import shutil
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from q38.errors import InternalError, PackageError

__all__ = [
    "STAGING_MARK",
    "StagedDirectory",
    "check_destination",
    "check_output_outside",
    "rename_noreplace",
    "staging_prefix",
]

STAGING_MARK: Final = ".q38-staging-"
_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1


def _libc_renameat2() -> Any:
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

_LOG = logging.getLogger(__name__)


def staging_prefix(dest: Path) -> str:
    return f".{dest.name}{STAGING_MARK}"


def check_destination(dest: Path, *, what: str = "destination") -> None:
    """Refuse an existing destination, including a dangling symlink, before anything is written."""
    if os.path.lexists(dest):
        kind = "a dangling symlink" if dest.is_symlink() and not dest.exists() else "exists"
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
    except PermissionError:
        return True
    return True


def _sweep_stale(dest: Path) -> None:
    prefix = staging_prefix(dest)
    with contextlib.suppress(OSError):
        for entry in dest.parent.iterdir():
            if not entry.name.startswith(prefix):
                continue
            pid_text = entry.name[len(prefix):].split("-", 1)[0]
            if pid_text.isdigit() and not _pid_alive(int(pid_text)):
                _LOG.info("removing stale staging directory %s", entry)
                shutil.rmtree(entry, ignore_errors=True)


class StagedDirectory:
    """Context manager owning a fresh staging directory for ``dest``.

    ``commit()`` renames the staging directory to ``dest`` (refusing if ``dest`` appeared in the
    meantime); leaving the block without committing, or with an exception, removes it.
    """

    def __init__(self, dest: Path) -> None:
        self.dest = Path(os.path.abspath(dest))
        self.path: Path = self.dest  # replaced in __enter__
        self.committed = False

    def __enter__(self) -> StagedDirectory:
        check_destination(self.dest)
        _sweep_stale(self.dest)
        name = f"{staging_prefix(self.dest)}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path = self.dest.parent / name
        try:
            self.path.mkdir(mode=0o755)
        except OSError as exc:
            raise PackageError(f"cannot create staging directory next to {self.dest}: {exc.strerror}") from None
        return self

    def commit(self) -> None:
        if not self.path.is_dir() or self.path == self.dest:
            raise InternalError("commit() outside the with block")
        try:
            rename_noreplace(self.path, self.dest)
        except FileExistsError:
            raise PackageError(f"{self.dest}: destination appeared meanwhile; refusing to overwrite") from None
        except OSError as exc:
            raise PackageError(f"cannot move the staged output into place at {self.dest}: {exc.strerror}") from None
        self.committed = True
        with contextlib.suppress(OSError):
            fd = os.open(self.dest.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def discard(self) -> None:
        if not self.committed and self.path != self.dest:
            shutil.rmtree(self.path, ignore_errors=True)

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
