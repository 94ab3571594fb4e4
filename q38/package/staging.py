"""Staged output: build in a fresh directory next to the destination, rename into place.

A failed or interrupted command leaves no destination and, after the next run, no debris:
staging directories carry the writer's pid, and a staging directory whose pid is no longer
alive is removed by the next :class:`StagedDirectory` for the same destination.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from pathlib import Path
from types import TracebackType

from q38.errors import PackageError

__all__ = ["StagedDirectory", "check_destination", "staging_prefix"]

_LOG = logging.getLogger(__name__)


def staging_prefix(dest: Path) -> str:
    return f".{dest.name}.q38-staging-"


def check_destination(dest: Path, *, what: str = "destination") -> None:
    """Refuse an existing destination, including a dangling symlink, before anything is written."""
    if os.path.lexists(dest):
        kind = "a dangling symlink" if dest.is_symlink() and not dest.exists() else "exists"
        raise PackageError(f"{what} {dest} {kind}; refusing to overwrite (remove it or pick another path)")
    parent = dest.parent
    if not parent.is_dir():
        raise PackageError(f"{what} {dest}: parent directory {parent} does not exist")


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
            self.path.mkdir()
        except OSError as exc:
            raise PackageError(f"cannot create staging directory next to {self.dest}: {exc.strerror}") from None
        return self

    def commit(self) -> None:
        # os.rename onto an existing empty directory would succeed silently: check first.
        check_destination(self.dest)
        try:
            os.rename(self.path, self.dest)
        except OSError as exc:
            raise PackageError(f"cannot move the staged output into place at {self.dest}: {exc.strerror}") from None
        self.committed = True
        with contextlib.suppress(OSError):
            fd = os.open(self.dest.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.committed:
            shutil.rmtree(self.path, ignore_errors=True)
