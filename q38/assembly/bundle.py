"""Reading one source bundle: its graph, external-data files and directory tree.

A bundle directory holds one graph (``model.onnx`` / ``head_r2.onnx`` / ``prefill.onnx`` by role,
or the only ``*.onnx`` at its top level), its external data, and any other files. The tree is
listed without following directory symlinks; symlinks are kept as symlinks.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import onnx

from q38.assembly.proto_io import ExtRef, external_refs, load_proto
from q38.errors import BuildError, GraphError
from q38.package.graphs import load_graph
from q38.package.io.paths import resolve_inside

__all__ = ["DEFAULT_GRAPH", "REGENERATED", "DataFile", "Entry", "Source", "read_source", "walk_bundle"]

DEFAULT_GRAPH: Final = {"target": "model.onnx", "head": "head_r2.onnx", "prefill": "prefill.onnx"}
# Files every package gets fresh from the builder; a bundle's copies are not carried over.
REGENERATED: Final = frozenset({"genai_config.json", "weights_pool.txt", "package_manifest.json"})


@dataclass(frozen=True)
class DataFile:
    """An external-data file as resolved on disk; ``ident`` = (device, inode)."""

    real: Path
    ident: tuple[int, int]
    size: int


@dataclass
class Source:
    """One source bundle read for a build: its role, graph proto, external refs and data files.

    ``files`` maps each normalized external-data location to the file it resolves to.
    """

    role: str
    bundle: Path
    graph_rel: str
    model: onnx.ModelProto
    refs: list[ExtRef]
    files: dict[str, DataFile]  # normalized location -> file

    def eff_length(self, ref: ExtRef) -> int:
        """The bytes ``ref`` covers: its length, or to the end of its data file when it has none."""
        return ref.length if ref.length is not None else self.files[ref.location].size - ref.offset


@dataclass
class Entry:
    """One path of a package being planned."""

    kind: Literal["file", "symlink", "dir", "graph"]
    origin: str
    src: Path | None = None
    ident: tuple[int, int] | None = None
    size: int = 0
    link: str | None = None
    model: onnx.ModelProto | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _find_graph(role: str, bundle: Path) -> str:
    preferred = DEFAULT_GRAPH[role]
    if (bundle / preferred).is_file():
        return preferred
    found = sorted(p.name for p in bundle.iterdir() if p.suffix == ".onnx" and p.is_file())
    if len(found) != 1:
        raise BuildError(
            f"--{role} {bundle}: expected {preferred} or exactly one .onnx graph, found {found or 'none'}"
        )
    return found[0]


def read_source(role: str, bundle: Path) -> Source:
    """Load ``bundle``'s graph (no weight bytes) and validate every external-data reference."""
    if not bundle.is_dir():
        raise BuildError(f"--{role} {bundle}: not a directory")
    rel = _find_graph(role, bundle)
    what = f"--{role} {bundle / rel}"
    try:  # the package model's validation: structure (cycles, missing inputs), every reference
        load_graph(bundle / rel, root=bundle)
    except GraphError as exc:
        raise GraphError(f"--{role}: {exc}") from None
    model = load_proto(bundle / rel, what=what)
    refs = external_refs(model, what=what)
    files: dict[str, DataFile] = {}
    for ref in refs:
        if ref.location not in files:
            path = resolve_inside(bundle, ref.location, what=f"{what}: tensor {ref.name!r}")
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise GraphError(f"{what}: tensor {ref.name!r}: {ref.location} is not a regular file")
            files[ref.location] = DataFile(Path(os.path.realpath(path)), (st.st_dev, st.st_ino), st.st_size)
        size = files[ref.location].size
        end = ref.offset + (ref.length or 0)
        if end > size or ref.offset > size:
            raise GraphError(
                f"{what}: tensor {ref.name!r}: bytes {ref.offset}..{end} lie beyond the end of "
                f"{ref.location} ({size} bytes)"
            )
    return Source(role, bundle, rel, model, refs, files)


def walk_bundle(bundle: Path, origin: str) -> dict[str, Entry]:
    """Every path under ``bundle`` (relative, '/'-separated), directory symlinks not traversed."""
    entries: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(bundle, followlinks=False):
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = base / name
            rel = path.relative_to(bundle).as_posix()
            if rel in REGENERATED:
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = Entry("symlink", origin, src=path, link=os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = Entry("dir", origin, src=path)
            elif stat.S_ISREG(st.st_mode):
                entries[rel] = Entry("file", origin, src=path, ident=(st.st_dev, st.st_ino), size=st.st_size)
            else:
                raise BuildError(f"{path}: not a regular file, directory or symlink")
        dirnames[:] = [d for d in dirnames if not os.path.islink(base / d)]
    return entries
