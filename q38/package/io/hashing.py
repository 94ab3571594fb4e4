"""Content digests and identities of package files.

A file that was linked or cloned into a package is recorded by its identity (``st_dev``,
``st_ino``, size, ``st_mtime_ns``): taking it costs one ``stat``, whatever the size. A digest
(sha256) is taken only where bytes are read anyway (a copy hashes in the same pass), on request,
or reused from a source manifest whose recorded identity still matches the file on disk.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FileIdentity", "KnownDigests", "sha256_file"]

_CHUNK = 8 << 20


def sha256_file(path: Path | str) -> str:
    """The hex sha256 of ``path``'s bytes, read in 8 MiB chunks (memory does not grow with size)."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(max(1, min(_CHUNK, os.fstat(fh.fileno()).st_size)))  # zero-filled: no bigger than the file
        view = memoryview(buf)
        while n := fh.readinto(buf):
            digest.update(view[:n])
    return digest.hexdigest()


@dataclass(frozen=True)
class FileIdentity:
    """What ``stat`` says a file is; equal identities mean the bytes were not rewritten since.

    (A writer that restores ``mtime`` by hand defeats this, as it defeats ``make`` and rsync.)
    """

    st_dev: int
    st_ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of_stat(cls, st: os.stat_result) -> FileIdentity:
        """The identity in ``st`` (an ``fstat`` of an open descriptor: no second lookup of the path)."""
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    @classmethod
    def of(cls, path: Path | str) -> FileIdentity:
        """The identity of the file ``path`` names (symlinks followed)."""
        return cls.of_stat(os.stat(path))

    def to_dict(self) -> dict[str, int]:
        """The manifest's ``identity`` object (``st_dev``, ``st_ino``, ``size``, ``mtime_ns``)."""
        return {"st_dev": self.st_dev, "st_ino": self.st_ino, "size": self.size, "mtime_ns": self.mtime_ns}

    @classmethod
    def from_dict(cls, data: Mapping[str, int]) -> FileIdentity:
        """The inverse of :meth:`to_dict`; the manifest parser has already checked the four integers."""
        return cls(int(data["st_dev"]), int(data["st_ino"]), int(data["size"]), int(data["mtime_ns"]))


class KnownDigests:
    """Digests a source manifest already holds, keyed by the identity they were recorded for.

    ``add_manifest`` keeps an entry only while the file on disk still has the identity the
    manifest recorded next to its digest: a file rewritten since (new mtime, new inode, other
    size) is not trusted, and its digest is computed again where one is needed.
    """

    def __init__(self) -> None:
        self._by_identity: dict[FileIdentity, str] = {}

    def __len__(self) -> int:
        return len(self._by_identity)

    def add(self, identity: FileIdentity, sha256: str) -> None:
        """Trust ``sha256`` for whichever file has ``identity`` (the caller has checked it matches)."""
        self._by_identity[identity] = sha256

    def add_manifest(self, root: Path, records: Mapping[str, object], *, manifest_mtime_ns: int | None = None) -> None:
        """Trust ``records`` (rel -> FileRecord) of the package at ``root`` where identities match.

        A record without an identity (a file the writer wrote: synth's, build's graphs) is
        trusted when ``manifest_mtime_ns`` (the manifest file's own mtime) is given and the file
        was last modified no later than the manifest was written — the rule ``q38 diff`` applies
        (q38.canonical.digests): a file rewritten after its manifest is hashed again.
        """
        for rel, rec in records.items():
            identity, sha = getattr(rec, "identity", None), getattr(rec, "sha256", None)
            if sha is None or (identity is None and manifest_mtime_ns is None):
                continue
            try:
                st = os.lstat(root / rel)
            except OSError:
                continue
            now = FileIdentity.of_stat(st)
            if identity is None:
                if stat.S_ISREG(st.st_mode) and st.st_mtime_ns <= manifest_mtime_ns:  # type: ignore[operator]
                    self.add(now, sha)
            elif now == identity:
                self.add(identity, sha)

    def get(self, identity: FileIdentity) -> str | None:
        """The trusted digest of a file with ``identity``, or None: it must then be hashed."""
        return self._by_identity.get(identity)
