"""Path safety: every relative path a package names must stay inside the package.

ORT refuses external data whose canonical path escapes the model directory (PR #26776), and
onnx refuses symlinked data (CVE-2026-34446 hardening); q38 refuses both before anything reads
bytes, so a hostile package cannot make q38 read or write outside it.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from q38.errors import UnsafePathError, clip, quote
from q38.package.io.files import os_problem

__all__ = ["is_inside", "resolve_inside", "safe_relpath"]


def safe_relpath(rel: str, *, what: str) -> str:
    """Return ``rel`` normalized, refusing absolute paths, ``..`` and empty names.

    Args:
        rel: the path as written in a package file.
        what: what names the path (file and field), for the error message.

    """
    if not isinstance(rel, str) or not rel or rel.strip() != rel:
        raise UnsafePathError(f"{what}: invalid path {quote(rel)}")
    if "\x00" in rel or "\\" in rel:
        raise UnsafePathError(f"{what}: invalid character in path {quote(rel)}")
    try:
        os.fsencode(rel)
    except UnicodeEncodeError:  # an unpaired surrogate: no file system can hold the name
        raise UnsafePathError(f"{what}: invalid character in path {quote(rel)} (not valid Unicode)") from None
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise UnsafePathError(f"{what}: absolute path {quote(rel)} is not allowed (must be inside the package)")
    if any(part == ".." for part in pure.parts):
        raise UnsafePathError(f"{what}: path {quote(rel)} escapes the package directory")
    norm = str(pure)
    if norm in ("", "."):
        raise UnsafePathError(f"{what}: invalid path {quote(rel)}")
    return norm


def is_inside(root: Path, path: Path) -> bool:
    """Whether ``path`` (already resolved) lies under ``root`` (already resolved)."""
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def resolve_inside(root: Path, rel: str, *, what: str, must_exist: bool = True) -> Path:
    """Resolve ``rel`` under ``root``, following symlinks, and require it to stay inside.

    Returns the path *as named* (``root / rel``), after checking that its resolved target is
    inside ``root.resolve()``. Symlinks that stay inside are allowed (ORT accepts them too).
    """
    norm = safe_relpath(rel, what=what)
    named = root / norm
    try:
        real_root = root.resolve()
        real = named.resolve(strict=must_exist)
    except FileNotFoundError:
        raise UnsafePathError(f"{what}: {quote(norm)} does not exist in {clip(root)}") from None
    except RuntimeError:  # symlink loop (Python < 3.13 raises RuntimeError)
        raise UnsafePathError(f"{what}: {quote(norm)} is a symlink loop") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            raise UnsafePathError(f"{what}: {quote(norm)} is a symlink loop") from None
        raise UnsafePathError(f"{what}: cannot resolve {quote(norm)}: {os_problem(exc)}") from None
    if not is_inside(real_root, real):
        raise UnsafePathError(
            f"{what}: {quote(norm)} resolves to {quote(os.fspath(real))}, outside the package directory"
        )
    return named
