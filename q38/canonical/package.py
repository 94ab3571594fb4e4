"""The canonical form of a package directory: config, pool, manifest and file inventory.

``genai_config.json``, ``weights_pool.txt`` and ``package_manifest.json`` of the directory
(absent ones are ``null``), with package roots, temp paths and volatile fields normalized
(:class:`~q38.canonical.normalize.Normalizer`), plus the inventory of every entry below it:
path, kind (file / dir / symlink with its target) and the size of files other than ``.onnx``
(a graph file's size depends on the protobuf serializer; its content has its own form) and
``package_manifest.json`` (its identity records hold inode and device numbers, whose digit count
differs between machines; its content, masked, is in the form).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from q38.canonical.normalize import Normalizer
from q38.canonical.version import VERSION
from q38.errors import PackageError, PoolError
from q38.package.io.files import (
    CONFIG_LIMIT,
    MANIFEST_LIMIT,
    POOL_LIMIT,
    TEXT_LIMIT,
    read_text_bounded,
)
from q38.package.io.jsonio import read_json
from q38.package.v12b.pool import parse_pool

__all__ = ["CONFIG_FILE", "MANIFEST_FILE", "PACKAGE_FORMAT", "POOL_FILE", "canonical_package", "inventory", "pool_records", "read_json_document", "read_text_document"]

PACKAGE_FORMAT: Final = "q38-package"
CONFIG_FILE: Final = "genai_config.json"
POOL_FILE: Final = "weights_pool.txt"
MANIFEST_FILE: Final = "package_manifest.json"


def read_text_document(path: Path) -> str:
    """A package's text document: a regular file, bounded, UTF-8; one PackageError line."""
    return read_text_bounded(path, what="package document", limit=_limit(path))


def read_json_document(path: Path) -> object:
    """A package's JSON document, strict (no NaN, no duplicate keys ...); one PackageError line."""
    return read_json(path, what="package document", limit=_limit(path))


def _limit(path: Path) -> int:
    return {CONFIG_FILE: CONFIG_LIMIT, MANIFEST_FILE: MANIFEST_LIMIT, POOL_FILE: POOL_LIMIT}.get(path.name, TEXT_LIMIT)


def pool_records(path: Path, norm: Normalizer) -> list[dict[str, Any] | str]:
    """The pool: an entry record per pooled tensor, comment and empty lines as strings.

    An entry is ``pool_id``, ``file``, ``offset``, ``length`` (null: to the end of the file),
    ``dtype``, ``shape``, ``placement`` and ``provenance`` (its comma-separated parts), so a
    changed placement or offset is a changed field, not a changed 200-character line.
    """
    try:
        pool = parse_pool(read_text_document(path), source=str(path))
    except PoolError as exc:
        raise PackageError(str(exc)) from None
    out: list[dict[str, Any] | str] = []
    for record in pool.records:
        if isinstance(record, str):
            out.append(norm.text(record))
            continue
        out.append(
            {
                "pool_id": record.pool_id,
                "file": record.file,
                "offset": record.offset,
                "length": record.length,
                "dtype": record.dtype,
                "shape": list(record.shape),
                "placement": str(record.placement),
                "provenance": [norm.text(p) for p in record.provenance.split(",")] if record.provenance else [],
            }
        )
    return out


def inventory(root: Path, norm: Normalizer) -> list[dict[str, Any]]:
    """Every entry below ``root``, sorted by path; symlinks are listed, never followed."""
    records: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            full = Path(dirpath, name)
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                records.append({"path": rel, "kind": "symlink", "target": norm.text(os.readlink(full))})
            elif full.is_dir():
                records.append({"path": rel, "kind": "dir"})
            elif rel.endswith(".onnx") or name == MANIFEST_FILE:  # sizes vary by serializer / machine
                records.append({"path": rel, "kind": "file"})
            elif full.is_file():
                records.append({"path": rel, "kind": "file", "size": full.lstat().st_size})
            else:
                records.append({"path": rel, "kind": "special"})
    return sorted(records, key=lambda r: str(r["path"]))


def canonical_package(package_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Canonical form of a package directory: config, pool, manifest and the file inventory."""
    root = Path(package_dir)
    if not root.is_dir():
        raise PackageError(f"{root}: not a package directory")
    norm = Normalizer({root: "<package>"})
    out: dict[str, Any] = {"format": PACKAGE_FORMAT, "version": VERSION}
    for key, name in (("config", CONFIG_FILE), ("manifest", MANIFEST_FILE)):
        path = root / name
        out[key] = norm.data(read_json_document(path)) if path.is_file() else None
    pool = root / POOL_FILE
    out["pool"] = pool_records(pool, norm) if pool.is_file() else None
    out["files"] = inventory(root, norm)
    return out
