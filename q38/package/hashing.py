"""Content hashes of package files, streamed (memory does not grow with file size)."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["sha256_file"]

_CHUNK = 8 << 20


def sha256_file(path: Path | str) -> str:
    """The hex sha256 of ``path``'s bytes, read in 8 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
