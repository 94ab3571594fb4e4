"""package_manifest.json: provenance of a package (what made it, from what, and how)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from q38 import __version__
from q38.errors import PackageError, clip, quote
from q38.package.io.files import MANIFEST_LIMIT
from q38.package.io.hashing import FileIdentity, sha256_file
from q38.package.io.jsonio import dumps_json, read_json

__all__ = [
    "LINK_MODES",
    "MANIFEST_FILENAME",
    "FileRecord",
    "Manifest",
    "dumps_manifest",
    "escaped_path",
    "parse_manifest",
    "read_manifest",
    "recorded_path",
    "written_record",
]

MANIFEST_FILENAME: Final = "package_manifest.json"
MANIFEST_VERSION: Final = 1
LINK_MODES: Final = ("write", "reflink", "hardlink", "copy", "symlink")


_IDENTITY_KEYS: Final = ("st_dev", "st_ino", "size", "mtime_ns")
_HEX_SUFFIX: Final = "_bytes_hex"


def escaped_path(text: str) -> tuple[str, str | None]:
    r"""``(readable, hex)`` for a path as Python holds it (``os.fsdecode``: surrogate escapes).

    Paths are bytes on Linux and need not be UTF-8; JSON strings must be. A UTF-8 path is
    itself and ``hex`` is None; any other has a readable form with each undecodable byte as
    ``\xNN`` and ``hex``, the exact bytes, that :func:`recorded_path` turns back into the path.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(text)
        return raw.decode("utf-8", "backslashreplace"), raw.hex()
    return text, None


def recorded_path(entry: dict[str, str], key: str = "path") -> str:
    """The path a manifest entry records under ``key``, exactly (round-trips :func:`escaped_path`)."""
    raw = entry.get(f"{key}{_HEX_SUFFIX}")
    if isinstance(raw, str):
        try:
            return os.fsdecode(bytes.fromhex(raw))
        except ValueError:
            pass
    return entry[key]


def _escaped_entry(entry: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in entry.items():
        if isinstance(value, str) and not key.endswith(_HEX_SUFFIX):
            readable, raw = escaped_path(value)
            out[key] = readable
            if raw is not None:
                out[f"{key}{_HEX_SUFFIX}"] = raw
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class FileRecord:
    """One file of a package: how it was placed, what it is, and its digest where one was taken.

    ``identity`` is recorded for every placed file (reflink, hard link, copy); ``sha256`` only
    where bytes were written, requested (``--digest``: a copy hashes in the same pass), or
    reused from the source's manifest.
    """

    link_mode: str
    sha256: str | None = None
    source: str | None = None
    identity: FileIdentity | None = None


def written_record(path: Path | str, sha256: str | None = None) -> FileRecord:
    """The record of a file a command has just written and closed at ``path``: digest and identity.

    The digest is taken now unless the writer already has it (``sha256``).

    The identity lets the next command trust the digest while the file is unchanged
    (:class:`~q38.package.io.hashing.KnownDigests`): a copy of it then moves by the kernel's copy
    path instead of reading every byte again to hash it.
    """
    identity = FileIdentity.of(path)
    return FileRecord("write", sha256 if sha256 is not None else sha256_file(path), identity=identity)


@dataclass(frozen=True)
class Manifest:
    """``package_manifest.json``: which command wrote the package, from what, and every file's record.

    Written last by every writing command; ``extra`` holds the command's own JSON facts.
    """

    command: str
    q38_version: str = __version__
    sources: tuple[dict[str, str], ...] = ()
    files: dict[str, FileRecord] = field(default_factory=dict)
    rewrites: dict[str, int] = field(default_factory=dict)
    router_weights_cleared: int = 0
    resident_slots: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The manifest as a JSON document: files sorted, source paths escaped where not UTF-8."""
        files = {}
        for name, rec in sorted(self.files.items()):
            d: dict[str, Any] = {"link_mode": rec.link_mode}
            if rec.sha256 is not None:
                d["sha256"] = rec.sha256
            if rec.source is not None:
                d["source"] = rec.source
            if rec.identity is not None:
                d["identity"] = rec.identity.to_dict()
            files[name] = d
        return {
            "manifest_version": MANIFEST_VERSION,
            "q38_version": self.q38_version,
            "command": self.command,
            "sources": [_escaped_entry(s) for s in self.sources],
            "files": files,
            "rewrites": dict(self.rewrites),
            "router_weights_cleared": self.router_weights_cleared,
            "resident_slots": dict(self.resident_slots),
            "notes": list(self.notes),
            "extra": dict(self.extra),
        }


def dumps_manifest(manifest: Manifest) -> str:
    """Deterministic JSON text (strict: a non-finite number or a 65-bit integer is refused)."""
    return dumps_json(manifest.to_dict(), what=MANIFEST_FILENAME)


def _fail(source: str, path: str, message: str) -> PackageError:
    return PackageError(f"{clip(source)}: {clip(path, 200)}: {message}")


def _string(value: object, source: str, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(source, path, "expected a string")
    return value


def _identity(value: object, source: str, name: str) -> FileIdentity | None:
    if value is None:
        return None
    where = f"files.{name}.identity"
    if not isinstance(value, dict) or sorted(value) != sorted(_IDENTITY_KEYS):
        raise _fail(source, where, f"expected an object with exactly {', '.join(_IDENTITY_KEYS)}")
    for key in _IDENTITY_KEYS:
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 64:
            raise _fail(source, f"{where}.{key}", "expected an integer in [0, 2**64)")
    return FileIdentity.from_dict(value)


def parse_manifest(data: object, *, source: str = MANIFEST_FILENAME) -> Manifest:
    """Parse a manifest document strictly: an unknown key, wrong type or other version is one PackageError.

    ``source`` names the file in the message.
    """
    allowed = {
        "manifest_version", "q38_version", "command", "sources", "files", "rewrites",
        "router_weights_cleared", "resident_slots", "notes", "extra",
    }
    if not isinstance(data, dict):
        raise _fail(source, "(top)", "expected an object")
    for key in data:
        if key not in allowed:
            raise _fail(source, key, "unknown key")
    if data.get("manifest_version") != MANIFEST_VERSION:
        raise _fail(source, "manifest_version", f"expected {MANIFEST_VERSION}, got {quote(data.get('manifest_version'))}")
    files: dict[str, FileRecord] = {}
    raw_files = data.get("files", {})
    if not isinstance(raw_files, dict):
        raise _fail(source, "files", "expected an object")
    for name, rec in raw_files.items():
        if not isinstance(rec, dict) or rec.get("link_mode") not in LINK_MODES:
            raise _fail(source, f"files.{name}.link_mode", f"expected one of {', '.join(LINK_MODES)}")
        unknown = set(rec) - {"link_mode", "sha256", "source", "identity"}
        if unknown:
            raise _fail(source, f"files.{name}.{sorted(unknown)[0]}", "unknown key")
        for key in ("sha256", "source"):
            if rec.get(key) is not None and not isinstance(rec[key], str):
                raise _fail(source, f"files.{name}.{key}", "expected a string")
        files[name] = FileRecord(
            rec["link_mode"], rec.get("sha256"), rec.get("source"), _identity(rec.get("identity"), source, name)
        )
    for key in ("rewrites", "resident_slots"):
        value = data.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
            raise _fail(source, key, "expected an object of integers")
    cleared = data.get("router_weights_cleared", 0)
    if isinstance(cleared, bool) or not isinstance(cleared, int) or cleared < 0:
        raise _fail(source, "router_weights_cleared", "expected a non-negative integer")
    command = data.get("command")
    if not isinstance(command, str):
        raise _fail(source, "command", "expected a string")
    sources = data.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        raise _fail(source, "sources", "expected an array of objects")
    notes = data.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise _fail(source, "notes", "expected an array of strings")
    extra = data.get("extra", {})
    if not isinstance(extra, dict):
        raise _fail(source, "extra", "expected an object")
    return Manifest(
        command=command,
        q38_version=_string(data.get("q38_version", ""), source, "q38_version"),
        sources=tuple(dict(s) for s in sources),
        files=files,
        rewrites=dict(data.get("rewrites", {})),
        router_weights_cleared=cleared,
        resident_slots=dict(data.get("resident_slots", {})),
        notes=tuple(notes),
        extra=dict(extra),
    )


def read_manifest(path: Path) -> Manifest:
    """Read ``path`` (strict JSON, at most :data:`MANIFEST_LIMIT` bytes, a regular file)."""
    data = read_json(path, what="manifest", limit=MANIFEST_LIMIT)
    return parse_manifest(data, source=str(path))
