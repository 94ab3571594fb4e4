"""The package directory itself, whatever its surface: its layout, its entries, its required files.

Every reader opens a package through these first: a path that is no directory, an entry that is
no regular file, directory or contained symlink, or a named file that is missing is one
PackageError line before any config or graph is parsed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

from q38.errors import PackageError, clip, quote
from q38.package.detect import CONFIG_FILENAME
from q38.package.io.files import describe_mode, os_problem
from q38.package.io.paths import resolve_inside

__all__ = ["Layout", "check_tree", "package_dirs", "require_file"]

Layout = Literal["flat", "layered"]


def require_file(base: Path, rel: str, *, what: str) -> Path:
    """``rel`` under ``base``: inside it, present, and a regular file (else one PackageError line naming ``what``)."""
    path = resolve_inside(base, rel, what=what)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise PackageError(f"{what}: {quote(rel)}: {os_problem(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise PackageError(f"{what}: {quote(rel)} is a directory, expected a file")
    if not stat.S_ISREG(st.st_mode):
        raise PackageError(f"{what}: {quote(rel)} is {describe_mode(st.st_mode)}, not a regular file")
    return path


def check_tree(root: Path) -> None:
    """Refuse any entry of the package that is not a directory, a regular file or a contained symlink.

    A symlink must resolve inside the package (no loop, no escape, none dangling); FIFOs,
    sockets and devices are refused.

    Nothing is followed while walking, so a hostile link is refused before any command reads
    or copies through it (commands copy unchanged package files verbatim), and no command can
    block on a FIFO or read a device it would have copied.
    """
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise PackageError(f"{clip(directory)}: unreadable directory: {os_problem(exc)}") from None
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                raise PackageError(f"{clip(entry.path)}: {os_problem(exc)}") from None
            if stat.S_ISLNK(mode):
                rel = os.path.relpath(entry.path, root)
                resolve_inside(root, rel, what=f"{clip(root)}: symlink")
            elif stat.S_ISDIR(mode):
                stack.append(Path(entry.path))
            elif not stat.S_ISREG(mode):
                raise PackageError(
                    f"{clip(entry.path)}: is {describe_mode(mode)}; a package holds only regular files, "
                    "directories and symlinks"
                )


def package_dirs(root: Path) -> tuple[Layout, dict[str, Path]]:
    """The layout of the package directory ``root`` and its graph directories by role (``target``, ``head``)."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        raise PackageError(f"{clip(root)}: no such package directory") from None
    except OSError as exc:
        raise PackageError(f"{clip(root)}: {os_problem(exc)}") from None
    except ValueError:
        raise PackageError(f"{clip(root)}: invalid path (contains a NUL byte)") from None
    if not stat.S_ISDIR(st.st_mode):
        raise PackageError(f"{clip(root)}: not a directory")
    if os.path.lexists(root / CONFIG_FILENAME):
        return "flat", {"target": root, "head": root}
    if os.path.lexists(root / "target" / CONFIG_FILENAME):
        dirs = {"target": root / "target", "head": root / "head"}
        if not dirs["head"].is_dir():
            raise PackageError(f"{clip(root)}: layered package without a head/ directory")
        return "layered", dirs
    raise PackageError(f"{clip(root)}: not a q38 package (no {CONFIG_FILENAME}, no target/{CONFIG_FILENAME})")
