"""weights_pool.txt: the shared-weight pool (format 1, see docs/package-format.md).

One entry per pooled tensor: ``pool_id file offset length dtype shape placement provenance``.
Comment lines (``#``) and empty lines are kept as records, so a pool round-trips byte for byte.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from q38.errors import PoolError, UnsafePathError, clip, quote
from q38.package.io.files import POOL_LIMIT, read_text_bounded
from q38.package.io.paths import safe_relpath

__all__ = [
    "DTYPE_SIZES",
    "POOL_FILENAME",
    "POOL_HEADER",
    "Placement",
    "PoolEntry",
    "WeightsPool",
    "format_pool",
    "parse_pool",
    "read_pool",
]

POOL_FILENAME: Final = "weights_pool.txt"
POOL_HEADER: Final = (
    "# q38 weights pool v1",
    "# pool_id file offset length dtype shape placement provenance",
)
# Bytes per element (0 = sub-byte packed types, whose length is not checked against the shape).
DTYPE_SIZES: Final = {
    "float": 4, "float16": 2, "bfloat16": 2, "double": 8, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "float8e4m3fn": 1, "float8e5m2": 1, "float8e8m0": 1, "int4": 0, "uint4": 0, "float4e2m1": 0,
}
_ID_RE: Final = re.compile(r"^[A-Za-z0-9_.:/-]+$")


class Placement(enum.StrEnum):
    """Where the runtime keeps a pooled tensor: on the device, memory-mapped on the CPU, or host-mapped."""

    DEVICE = "device"
    CPU_MMAP = "cpu_mmap"
    HOST_MAPPED = "host_mapped"


@dataclass(frozen=True)
class PoolEntry:
    """One pool line: a tensor's byte range in a package file, its dtype, shape and placement.

    ``length`` None (``-``) reads to the end of the file; ``provenance`` is the rest of the line
    (``ROLE:NAME`` readers, and ``pass:`` / ``from:`` for a derived tensor).
    """

    pool_id: str
    file: str
    offset: int
    length: int | None  # None: to the end of the file
    dtype: str
    shape: tuple[int, ...]
    placement: Placement
    provenance: str = ""

    def format(self) -> str:
        """The entry as its pool line (without newline); :func:`parse_pool` reads it back unchanged."""
        shape = "x".join(str(d) for d in self.shape) if self.shape else "scalar"
        length = "-" if self.length is None else str(self.length)
        fields = [self.pool_id, self.file, str(self.offset), length, self.dtype, shape, str(self.placement)]
        if self.provenance:
            fields.append(self.provenance)
        return " ".join(fields)

    @property
    def nbytes_expected(self) -> int | None:
        """Bytes the dtype and shape need; None for a sub-byte packed or unknown dtype (not checked)."""
        size = DTYPE_SIZES.get(self.dtype, 0)
        if not size:
            return None
        count = 1
        for dim in self.shape:
            count *= dim
        return count * size


@dataclass(frozen=True)
class WeightsPool:
    """The pool as an ordered list of records: entries and verbatim comment / blank lines."""

    records: tuple[PoolEntry | str, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[PoolEntry], *, header: bool = True) -> WeightsPool:
        """A pool of ``entries``, led by the standard two-line header unless ``header`` is False."""
        head: tuple[PoolEntry | str, ...] = POOL_HEADER if header else ()
        return cls(head + tuple(entries))

    @property
    def entries(self) -> tuple[PoolEntry, ...]:
        """The entries in file order, without the comment and empty lines the records keep."""
        return tuple(r for r in self.records if isinstance(r, PoolEntry))

    def by_id(self) -> dict[str, PoolEntry]:
        """Entries by ``pool_id`` (unique: :func:`parse_pool` refuses a duplicate)."""
        return {e.pool_id: e for e in self.entries}

    def replace_entries(self, fn: Callable[[PoolEntry], PoolEntry | None]) -> WeightsPool:
        """A new pool with every entry mapped through ``fn`` (None drops it); comments stay."""
        out: list[PoolEntry | str] = []
        for record in self.records:
            if isinstance(record, PoolEntry):
                new = fn(record)
                if new is not None:
                    out.append(new)
            else:
                out.append(record)
        return WeightsPool(tuple(out))


def _parse_int(text: str, *, what: str, source: str, lineno: int) -> int:
    if not text.isdigit() or not text.isascii():
        raise PoolError(f"{source}:{lineno}: {what} {quote(text)} is not a non-negative decimal integer")
    # The significant digits' count first: int() of more than 4300 digits raises ValueError
    # (CPython's conversion limit); leading zeros are allowed, as anywhere in a decimal integer.
    if len(text.lstrip("0")) > 19 or int(text) >= 2**63:
        raise PoolError(f"{source}:{lineno}: {what} {quote(text)} does not fit in int64")
    return int(text)


def _parse_line(line: str, *, source: str, lineno: int) -> PoolEntry:
    fields = line.split(" ", 7)
    if len(fields) < 7 or any(f == "" for f in fields[:7]):
        raise PoolError(
            f"{source}:{lineno}: expected 'pool_id file offset length dtype shape placement [provenance]', "
            f"got {len(fields)} field(s)"
        )
    pool_id, file, offset_s, length_s, dtype, shape_s, placement_s = fields[:7]
    provenance = fields[7] if len(fields) > 7 else ""
    if not _ID_RE.match(pool_id):
        raise PoolError(f"{source}:{lineno}: invalid pool id {quote(pool_id)}")
    try:
        safe_relpath(file, what=f"{source}:{lineno}: file")  # validated; kept as written (round trip)
    except UnsafePathError as exc:
        raise PoolError(str(exc)) from None
    offset = _parse_int(offset_s, what="offset", source=source, lineno=lineno)
    length = None if length_s == "-" else _parse_int(length_s, what="length", source=source, lineno=lineno)
    if dtype not in DTYPE_SIZES:
        raise PoolError(f"{source}:{lineno}: unknown dtype {quote(dtype)}")
    if shape_s == "scalar":
        shape: tuple[int, ...] = ()
    else:
        parts = shape_s.split("x")
        shape = tuple(_parse_int(p, what="shape dimension", source=source, lineno=lineno) for p in parts)
    try:
        placement = Placement(placement_s)
    except ValueError:
        raise PoolError(
            f"{source}:{lineno}: unknown placement {quote(placement_s)} (expected device, cpu_mmap or host_mapped)"
        ) from None
    entry = PoolEntry(pool_id, file, offset, length, dtype, shape, placement, provenance)
    expected = entry.nbytes_expected
    if length is not None and expected is not None and expected != length:
        raise PoolError(
            f"{source}:{lineno}: length {length} does not match {dtype} shape {clip(shape_s)} ({expected} bytes)"
        )
    return entry


def parse_pool(text: str, *, source: str = POOL_FILENAME) -> WeightsPool:
    """Parse pool text; one PoolError line naming ``source:line`` for any malformed entry."""
    source = clip(source)
    records: list[PoolEntry | str] = []
    seen: dict[str, int] = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the trailing newline of the last line
    for lineno, raw in enumerate(lines, start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if line.strip() == "" or line.lstrip().startswith("#"):
            records.append(raw)
            continue
        entry = _parse_line(line, source=source, lineno=lineno)
        if entry.pool_id in seen:
            raise PoolError(
                f"{source}:{lineno}: duplicate pool id {quote(entry.pool_id)} (first on line {seen[entry.pool_id]})"
            )
        seen[entry.pool_id] = lineno
        records.append(entry)
    return WeightsPool(tuple(records))


def format_pool(pool: WeightsPool) -> str:
    """Pool text; ``parse_pool(format_pool(p)) == p`` and formatting parsed text is identity."""
    if not pool.records:
        return ""
    return "\n".join(r.format() if isinstance(r, PoolEntry) else r for r in pool.records) + "\n"


def read_pool(path: Path) -> WeightsPool:
    """Read ``path`` (UTF-8, at most :data:`POOL_LIMIT` bytes, a regular file) and parse it."""
    text = read_text_bounded(path, what="weights pool", limit=POOL_LIMIT, error=PoolError)
    return parse_pool(text, source=str(path))
