"""Path safety: every relative path a package names must stay inside the package.

ORT refuses external data whose canonical path escapes the model directory (PR #26776), and
onnx refuses symlinked data (CVE-2026-34446 hardening); q38 refuses both before anything reads
bytes, so a hostile package cannot make q38 read or write outside it.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from q38.errors import UnsafePathError

__all__ = ["is_inside", "resolve_inside", "safe_relpath"]


def safe_relpath(rel: str, *, what: str) -> str:
    """Return ``rel`` normalized, refusing absolute paths, ``..`` and empty names.

    Args:
        rel: the path as written in a package file.
        what: what names the path (file and field), for the error message.
    """
    if not isinstance(rel, str) or not rel or rel.strip() != rel:
        raise UnsafePathError(f"{what}: invalid path {rel!r}")
    if "\x00" in rel or "\\" in rel:
        raise UnsafePathError(f"{what}: invalid character in path {rel!r}")
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise UnsafePathError(f"{what}: absolute path {rel!r} is not allowed (must be inside the package)")
    if any(part == ".." for part in pure.parts):
        raise UnsafePathError(f"{what}: path {rel!r} escapes the package directory")
    norm = str(pure)
    if norm in ("", "."):
        raise UnsafePathError(f"{what}: invalid path {rel!r}")
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
    real_root = root.resolve()
    try:
        real = named.resolve(strict=must_exist)
    except FileNotFoundError:
        raise UnsafePathError(f"{what}: {norm!r} does not exist in {root}") from None
    except RuntimeError:  # symlink loop (Python < 3.13 raises RuntimeError)
        raise UnsafePathError(f"{what}: {norm!r} is a symlink loop") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            raise UnsafePathError(f"{what}: {norm!r} is a symlink loop") from None
        raise UnsafePathError(f"{what}: cannot resolve {norm!r}: {exc.strerror}") from None
    if not is_inside(real_root, real):
        raise UnsafePathError(
            f"{what}: {norm!r} resolves to {os.fspath(real)!r}, outside the package directory"
        )
    return named
