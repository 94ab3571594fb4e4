"""Content digests of tensor bytes: streamed, computed once, skipped where provably equal.

A golden hashes every external initializer (tiny packages, a few MB). ``q38 diff`` on a real
package must not read 60 GB to say two packages are the same, nor hold a tensor in memory to
hash it. :class:`TensorDigest` is the sha256 of one byte range of one data file:

* computed on first use, reading the range in 8 MiB chunks with ``os.pread`` (memory stays
  flat in tensor size), and cached;
* compared *without reading* when both ranges are provably the same bytes: the same file
  (``st_dev``/``st_ino``) at the same offset and length, or files whose whole-file sha256 a
  package manifest records and is still valid for (:func:`recorded_digests`), equal on both
  sides, at the same offset and length.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from q38.errors import GraphError, PackageError
from q38.package.io.files import MANIFEST_LIMIT
from q38.package.io.jsonio import read_json

__all__ = ["CHUNK", "FileIdentity", "TensorDigest", "recorded_digests", "sha256_range"]

CHUNK: Final = 8 << 20
MANIFEST_NAME: Final = "package_manifest.json"


@dataclass(frozen=True)
class FileIdentity:
    """Which file a byte range lives in, and the whole-file digest a manifest vouches for."""

    path: Path
    dev: int
    ino: int
    size: int
    recorded_sha256: str | None = None

    @classmethod
    def of(cls, path: Path, recorded: Mapping[str, str] | None = None) -> FileIdentity:
        """The identity of ``path`` now, with the digest ``recorded`` holds for its real path.

        Anything but a regular file is refused (GraphError).
        """
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise GraphError(f"{path}: not a regular file")
        sha = (recorded or {}).get(os.path.realpath(path))
        return cls(path, st.st_dev, st.st_ino, st.st_size, sha)


def sha256_range(path: Path, offset: int, length: int) -> str:
    """The hex sha256 of ``length`` bytes of ``path`` from ``offset``, read in chunks."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        done = 0
        while done < length:
            chunk = os.pread(fd, min(CHUNK, length - done), offset + done)
            if not chunk:
                raise GraphError(f"{path}: short read at byte {offset + done} ({done} of {length} bytes)")
            digest.update(chunk)
            done += len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


@dataclass(eq=False)
class TensorDigest:
    """The sha256 of one tensor's bytes in an external-data file, computed when needed."""

    file: FileIdentity
    offset: int
    length: int
    _hex: str | None = field(default=None, repr=False)

    def hexdigest(self) -> str:
        """The hex sha256 of the range, read from the file on first use and cached."""
        if self._hex is None:
            self._hex = sha256_range(self.file.path, self.offset, self.length)
        return self._hex

    def same_bytes(self, other: TensorDigest) -> bool:
        """Whether both ranges hold the same bytes; reads only when no shortcut decides."""
        if self.length != other.length:
            return False
        same_range = self.offset == other.offset
        if same_range and (self.file.dev, self.file.ino) == (other.file.dev, other.file.ino):
            return True
        a, b = self.file.recorded_sha256, other.file.recorded_sha256
        if same_range and a is not None and a == b and self.file.size == other.file.size:
            return True
        return self.hexdigest() == other.hexdigest()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TensorDigest):
            return self.same_bytes(other)
        if isinstance(other, str):
            return self.hexdigest() == other
        return NotImplemented

    def __hash__(self) -> int:  # pragma: no cover - digests are compared, never hashed
        raise TypeError("TensorDigest is not hashable")

    def __str__(self) -> str:
        return self.hexdigest()


def recorded_digests(package_dir: Path) -> dict[str, str]:
    """Whole-file sha256s that the package's manifests record and that are still valid.

    Maps the real path of each file to its digest. A record is valid when its file has not
    changed since the manifest was written: the size and mtime_ns of its recorded ``identity``
    match, or, with no identity recorded, the file is not newer than the manifest itself.
    Unreadable or malformed manifests vouch for nothing (the bytes are then hashed).
    """
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames.sort()
        if MANIFEST_NAME not in filenames:
            continue
        manifest = Path(dirpath, MANIFEST_NAME)
        try:
            mst = manifest.lstat()
            if not stat.S_ISREG(mst.st_mode):
                continue
            files = read_json(manifest, what="manifest", limit=MANIFEST_LIMIT).get("files") or {}
        except (OSError, PackageError, AttributeError):
            continue
        if not isinstance(files, dict):
            continue
        for rel, rec in files.items():
            if not isinstance(rec, dict) or not isinstance(rec.get("sha256"), str):
                continue
            path = Path(dirpath, str(rel))
            try:
                st = path.stat()
            except OSError:
                continue
            if _still_valid(rec, st, mst):
                out[os.path.realpath(path)] = rec["sha256"]
    return out


def _still_valid(rec: Mapping[str, Any], st: os.stat_result, manifest_st: os.stat_result) -> bool:
    """Whether the recorded digest still describes the file ``st`` describes.

    With an ``identity`` record (what ``stat`` said of the placed file: ``st_dev``, ``st_ino``,
    ``size``, ``mtime_ns``), the file's size and mtime_ns must still be the recorded ones (a
    copy that kept its times, ``cp -a`` or ``copytree``, still matches; a rewrite does not,
    even one older than the manifest). Without one (files q38 wrote), the file must not be
    newer than the manifest, which is written last.
    """
    if not stat.S_ISREG(st.st_mode):
        return False
    identity = rec.get("identity")
    if identity is not None:
        if not isinstance(identity, Mapping):
            return False
        return bool(identity.get("size") == st.st_size and identity.get("mtime_ns") == st.st_mtime_ns)
    return st.st_mtime_ns <= manifest_st.st_mtime_ns
