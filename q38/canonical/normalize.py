"""Normalization of machine-specific text: package roots, temp dirs, home, volatile keys.

The canonical forms must be equal for two runs of the same command in different directories,
on different machines, with different q38 versions. :class:`Normalizer` replaces the absolute
roots it is given by markers (``<package>``), any other temporary path by ``<tmp>/<basename>``,
the home directory by ``<home>``, and masks values whose key says they are volatile.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["HASH_KEYS", "MASK", "VOLATILE_KEYS", "Normalizer"]

MASK: Final = "<masked>"
LIB_HASH: Final = "<sha256:lib>"
GRAPH_HASH: Final = "<sha256:graph>"

VOLATILE_KEYS: Final = frozenset(
    {
        "q38_version", "producer_version", "created", "created_at", "timestamp", "time", "date",
        "hostname", "host", "user", "mtime", "mtime_ns", "ctime", "atime", "inode", "st_ino",
        "st_dev", "pid",
    }
)
"""Keys whose values are masked wherever they appear in a config, manifest or metadata."""

HASH_KEYS: Final = frozenset({"sha256", "hash", "digest", "checksum"})
_LIB_SUFFIX_RE: Final = re.compile(r"(\.so(\.\d+)*|\.dll|\.dylib)$")
_TMP_RE: Final = re.compile(r"/(?:tmp|var/tmp|private/var/folders/[^/]+/[^/]+/T)/[^\s\"',;]*")
_GLOBAL_MARKERS: Final = ("<tmp>", "<home>")


def is_library_path(text: str) -> bool:
    """Whether ``text`` names a custom-op library (``libs/...``, ``*.so*``, ``*.dll``, ``*.dylib``)."""
    return bool(_LIB_SUFFIX_RE.search(text)) or text.startswith("libs/")


class Normalizer:
    """Replaces machine-specific substrings of strings by stable markers.

    ``roots`` maps absolute directories to markers, longest first; any other absolute
    temporary path becomes ``<tmp>/<basename>``.
    """

    def __init__(self, roots: Mapping[str | os.PathLike[str], str] | None = None) -> None:
        pairs: list[tuple[str, str]] = []
        for root, marker in (roots or {}).items():
            for form in {os.fspath(root), os.path.realpath(root)}:
                pairs.append((form.rstrip("/"), marker))
        pairs.append((tempfile.gettempdir().rstrip("/"), "<tmp>"))
        pairs.append((os.path.expanduser("~").rstrip("/"), "<home>"))
        self._pairs = sorted({p for p in pairs if len(p[0]) > 1}, key=lambda p: -len(p[0]))
        self._seen: dict[str, str] = {}

    def text(self, value: str) -> str:
        """``value`` with package roots, temporary paths and the home directory replaced."""
        found = self._seen.get(value)
        if found is None:
            found = self._seen[value] = self._replace(value)
        return found

    def _replace(self, value: str) -> str:
        if "/" not in value and "~" not in value:
            return value
        for prefix, marker in self._pairs:
            if marker not in _GLOBAL_MARKERS:
                value = value.replace(prefix, marker)
        value = _TMP_RE.sub(lambda m: "<tmp>/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], value)
        for prefix, marker in self._pairs:
            if marker in _GLOBAL_MARKERS:
                value = value.replace(prefix, marker)
        return value

    def data(self, value: object, *, key: str | None = None, library: bool = False, graph: bool = False) -> object:
        """Normalizes a JSON-like value; masks volatile keys and the hashes of libraries and graphs.

        A hash is a library's when a sibling value or the enclosing key names a library file;
        a graph's when it names a ``*.onnx`` file: its bytes depend on the protobuf
        serializer, and its content has its own canonical form.
        """
        if key is not None and key.lower() in VOLATILE_KEYS:
            return MASK if value not in (None, "") else value
        if key is not None and key.lower() in HASH_KEYS and library:
            return LIB_HASH
        if key is not None and key.lower() in HASH_KEYS and graph:
            return GRAPH_HASH
        if isinstance(value, Mapping):
            lib_here = library or _names_library(value)
            graph_here = graph or _names_graph(value)
            return {
                str(k): self.data(
                    v,
                    key=str(k),
                    library=lib_here or is_library_path(str(k)),
                    graph=graph_here or str(k).endswith(".onnx"),
                )
                for k, v in sorted(value.items())
            }
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value


def _names_graph(record: Mapping[str, Any]) -> bool:
    return any(isinstance(v, str) and v.endswith(".onnx") for v in record.values())


def _names_library(record: Mapping[str, Any]) -> bool:
    for k, v in record.items():
        if isinstance(v, str) and is_library_path(v):
            return True
        if k in ("kind", "type") and v in ("lib", "library", "custom_op_library"):
            return True
    return False
