"""Composing one package from a base source and folded sources, with a shared-weight pool.

Sharing is decided by identity first: a folded graph's data file with the base's (device, inode)
is the base's file, so its references are redirected there with unchanged offsets. Otherwise a
data file byte-identical to a base file (same size, same sha256) is redirected the same way, and
then each remaining tensor whose (dtype, shape, length, sha256) equals a base tensor points at
that base tensor's bytes (this is how sharing survives ``--copy`` and the EXDEV fallback of a
source). Tensors that only share a *name* stay where they are (same name, different bytes).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from q38.assembly.bundle import Entry, Source, walk_bundle
from q38.assembly.proto_io import ExtRef, range_sha256, set_external
from q38.errors import BuildError

__all__ = ["Composition", "PoolRow", "compose"]


@dataclass(frozen=True)
class PoolRow:
    """One shared-pool entry: a byte range of a package file, dtype, shape, and every tensor name using it."""

    file: str
    offset: int
    length: int | None
    dtype: str
    shape: tuple[int, ...]
    provenance: tuple[str, ...]


@dataclass
class Composition:
    """A planned package: every path's entry, the pool rows, and how many tensors each role redirected.

    ``redirected`` counts, by role, the folded tensors pointed at the base's bytes.
    """

    entries: dict[str, Entry]
    pool: list[PoolRow]
    redirected: dict[str, int] = field(default_factory=dict)  # role -> tensors pointed at the base


class _Hashes:
    def __init__(self) -> None:
        self._cache: dict[tuple[object, ...], str] = {}

    def of(self, real: Path, ident: tuple[int, int], offset: int, length: int | None) -> str:
        key = (ident, offset, length)
        if key not in self._cache:
            self._cache[key] = range_sha256(real, offset, length)
        return self._cache[key]


def _same_content(a: Entry, b: Entry, hashes: _Hashes) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "dir":
        return True
    if a.kind == "symlink":
        return a.link == b.link
    if a.kind == "file" and a.ident and b.ident and a.src and b.src:
        if a.ident == b.ident:
            return True
        return a.size == b.size and hashes.of(a.src, a.ident, 0, None) == hashes.of(b.src, b.ident, 0, None)
    return False


def _merge(entries: dict[str, Entry], rel: str, entry: Entry, hashes: _Hashes) -> None:
    have = entries.get(rel)
    if have is None:
        entries[rel] = entry
    elif not _same_content(have, entry, hashes):
        raise BuildError(
            f"{rel}: the {have.origin} and {entry.origin} bundles both provide this path with "
            "different contents (a later destination of the same build would overwrite it)"
        )


def _check_symlinks(entries: dict[str, Entry]) -> None:
    for rel, e in entries.items():
        if e.kind != "symlink":
            continue
        assert e.link is not None
        target = os.path.normpath(os.path.join(os.path.dirname(rel), e.link))
        if os.path.isabs(e.link) or target == ".." or target.startswith("../"):
            raise BuildError(
                f"{e.src}: symlink -> {e.link} would escape the package (ORT refuses external data "
                "reached through an escaping link)"
            )


def compose(base: Source, folded: list[Source], *, reference: list[Source] = ()) -> Composition:  # type: ignore[assignment]
    """Plan the package made of ``base``'s bundle with ``folded`` graphs redirected into it.

    ``reference`` graphs are not packaged; they only add provenance to pool entries for
    tensors they share (by file identity) with this package (the target, in a layered head).
    """
    hashes = _Hashes()
    entries = walk_bundle(base.bundle, base.role)
    # Final location key of every tensor -> (role:name, ...), for the pool.
    users: dict[tuple[str, int, int, str, tuple[int, ...]], list[str]] = defaultdict(list)
    lengths: dict[tuple[str, int, int, str, tuple[int, ...]], int | None] = {}
    by_ident: dict[tuple[int, int], str] = {}
    for loc, df in base.files.items():
        by_ident.setdefault(df.ident, loc)

    def add_user(loc: str, offset: int, eff: int, ref: ExtRef, role: str, length: int | None) -> None:
        key = (loc, offset, eff, ref.dtype, ref.shape)
        users[key].append(f"{role}:{ref.name}")
        lengths.setdefault(key, length)

    for ref in base.refs:
        add_user(ref.location, ref.offset, base.eff_length(ref), ref, base.role, ref.length)
    candidates: dict[tuple[str, tuple[int, ...], int], list[ExtRef]] = defaultdict(list)
    for ref in base.refs:
        candidates[(ref.dtype, ref.shape, base.eff_length(ref))].append(ref)

    redirected: dict[str, int] = {}
    for src in folded:
        file_map: dict[str, str] = {}  # src location -> base location (whole file is the same)
        for loc, df in src.files.items():
            if df.ident in by_ident:
                file_map[loc] = by_ident[df.ident]
                continue
            for bloc, bdf in base.files.items():
                if bdf.size == df.size and hashes.of(df.real, df.ident, 0, None) == hashes.of(
                    bdf.real, bdf.ident, 0, None
                ):
                    file_map[loc] = bloc
                    break
        kept_locs: set[str] = set()
        changed = 0
        for ref in src.refs:
            eff = src.eff_length(ref)
            if ref.location in file_map:
                new = (file_map[ref.location], ref.offset, ref.length)
            else:
                new = None
                df = src.files[ref.location]
                for cand in candidates.get((ref.dtype, ref.shape, eff), []):
                    bdf = base.files[cand.location]
                    if hashes.of(df.real, df.ident, ref.offset, eff) == hashes.of(
                        bdf.real, bdf.ident, cand.offset, base.eff_length(cand)
                    ):
                        new = (cand.location, cand.offset, cand.length)
                        break
            if new is None:
                kept_locs.add(ref.location)
                add_user(ref.location, ref.offset, eff, ref, src.role, ref.length)
                continue
            if new != (ref.location, ref.offset, ref.length):
                changed += 1
                set_external(ref.tensor, *new)
            add_user(new[0], new[1], eff, ref, src.role, new[2])
        redirected[src.role] = changed
        dropped_locs = set(src.files) - kept_locs
        dropped_idents = {src.files[loc].ident for loc in dropped_locs} - {
            src.files[loc].ident for loc in kept_locs
        }
        for rel, entry in walk_bundle(src.bundle, src.role).items():
            if rel == src.graph_rel or rel in dropped_locs:
                continue
            if entry.kind == "file" and entry.ident in dropped_idents:
                continue
            _merge(entries, rel, entry, hashes)
        graph = Entry("graph", src.role, src=src.bundle / src.graph_rel, model=src.model if changed else None)
        if changed == 0:
            st = os.stat(src.bundle / src.graph_rel)
            graph = Entry("file", src.role, src=src.bundle / src.graph_rel, ident=(st.st_dev, st.st_ino), size=st.st_size)
        _merge(entries, src.graph_rel, graph, hashes)

    # Layered head: the target is packaged elsewhere; its tensors in files this package also holds
    # (same inode) still count as users of those bytes.
    own: dict[tuple[int, int], str] = {df.ident: loc for loc, df in base.files.items()}
    for ref_src in reference:
        for ref in ref_src.refs:
            ident = ref_src.files[ref.location].ident
            if ident in own:
                key = (own[ident], ref.offset, ref_src.eff_length(ref), ref.dtype, ref.shape)
                if key in users:
                    users[key].append(f"{ref_src.role}:{ref.name}")
    _check_symlinks(entries)
    pool = [
        PoolRow(key[0], key[1], lengths[key], key[3], key[4], tuple(names))
        for key, names in sorted(users.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2]))
        if len({n.split(":", 1)[0] for n in names}) >= 2
    ]
    return Composition(entries, pool, redirected)
