"""Differences between two packages, file by file, on their canonical forms.

Both packages are described the same way whatever their surface (the v12b
``qwen38_flash_graph`` surface, the onnxruntime-genai builder's) and layout (flat, layered):

* every ``genai_config.json`` and ``package_manifest.json`` below the root, by key path, with
  package roots, temp paths and volatile fields (q38 version, times, graph and library hashes)
  masked as in the goldens;
* every ``weights_pool.txt``: entries by pool id and field;
* every ``*.onnx`` graph (:func:`~q38.diff.graph.diff_graph`); initializer bytes are compared
  by digest, lazily (:class:`~q38.canonical.TensorDigest`): the same file or a valid manifest
  digest decides without reading, else the two ranges are hashed, streamed;
* the file inventory: files added or removed, kind, size, symlink target, and the content of
  files no other comparison covers (libraries, tokenizer files), by streamed digest.

Anything unreadable (not a package, malformed JSON / pool / protobuf, external data missing or
outside the package) raises a one-line :class:`~q38.errors.PackageError`: exit 2.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from q38.canonical import (
    Normalizer,
    TensorDigest,
    canonical_graph,
    inventory,
    load_proto,
    read_json_document,
    recorded_digests,
)
from q38.canonical.digests import FileIdentity
from q38.canonical.package import CONFIG_FILE, MANIFEST_FILE, POOL_FILE, pool_records
from q38.diff.graph import diff_graph
from q38.diff.model import Difference
from q38.diff.summary import GraphSummary, graph_lines, summarize
from q38.diff.tree import diff_tree
from q38.errors import PackageError
from q38.package.surface import open_any

__all__ = ["FILES_GROUP", "PackageDiff", "diff_packages"]

_LOG = logging.getLogger(__name__)

FILES_GROUP: Final = "(files)"
"""The group of inventory differences (files added, removed, resized, retargeted, rewritten)."""
_DOCUMENTS: Final = (CONFIG_FILE, MANIFEST_FILE)


@dataclass(frozen=True)
class PackageDiff:
    """The differences between packages ``a`` and ``b``, grouped per file in a fixed order."""

    a: Path
    b: Path
    files_compared: int
    differences: tuple[Difference, ...]
    roles: Mapping[str, str]
    # The graph files (package-relative) both packages have: their groups lead the report.
    graphs: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        """Whether the two packages have no difference (``q38 diff`` exits 0)."""
        return not self.differences

    def groups(self) -> list[tuple[str, list[Difference]]]:
        """The differences by file, files in the order their first difference was found."""
        order: dict[str, list[Difference]] = {}
        for d in self.differences:
            order.setdefault(d.file, []).append(d)
        return list(order.items())

    def summaries(self) -> list[GraphSummary]:
        """A summary per graph file that differs: its differences counted per section and change."""
        return summarize(self.groups(), self.graphs, self.roles)

    def lines(self, *, value_info: bool = False) -> list[str]:
        """The human report: what changed first, then the details.

        A headline, a summary line per graph that differs, then per file its name and one line
        per difference: the graphs first (nodes, initializers, I/O, the rest; their
        ``value_info`` annotations as a count unless ``value_info``), then configs, manifests,
        pools and the file inventory.
        """
        if self.same:
            return [f"q38 diff: {self.a} and {self.b} are the same ({self.files_compared} files compared)"]
        groups = self.groups()
        head = f"q38 diff: {len(self.differences)} difference(s) in {len(groups)} file(s)"
        out = [f"{head} between {self.a} (-) and {self.b} (+)"]
        out.extend(s.line() for s in self.summaries())
        graphs = set(self.graphs)
        for file, diffs in [g for g in groups if g[0] in graphs] + [g for g in groups if g[0] not in graphs]:
            role = self.roles.get(file)
            out.append(f"{file} ({role})" if role else file)
            out.extend(graph_lines(diffs, value_info=value_info) if file in graphs else [d.line() for d in diffs])
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: both paths, whether they are the same, the graph summaries, every difference."""
        return {
            "a": str(self.a),
            "b": str(self.b),
            "same": self.same,
            "files_compared": self.files_compared,
            "summary": [s.to_dict() for s in self.summaries()],
            "differences": [d.to_dict() for d in self.differences],
        }


@dataclass
class _Side:
    """One package, read: its documents, pools and graphs by relative path."""

    root: Path
    documents: dict[str, Any]
    pools: dict[str, dict[str, dict[str, Any] | str]]
    graphs: dict[str, dict[str, Any]]
    data_files: set[str]
    files: dict[str, dict[str, Any]]
    recorded: dict[str, str]


def _is_package(root: Path) -> bool:
    return (root / CONFIG_FILE).is_file() or (root / "target" / CONFIG_FILE).is_file()


def _keyed_pool(records: list[dict[str, Any] | str]) -> dict[str, dict[str, Any] | str]:
    out: dict[str, dict[str, Any] | str] = {}
    comments = 0
    for record in records:
        if isinstance(record, dict):
            out[str(record["pool_id"])] = record
        else:
            out[f"#{comments}"] = record
            comments += 1
    return out


def _read_side(root: Path) -> _Side:
    if not root.exists():
        raise PackageError(f"{root}: no such package directory")
    if not root.is_dir():
        raise PackageError(f"{root}: not a directory")
    if not _is_package(root):
        raise PackageError(f"{root}: not a package (no {CONFIG_FILE}, no target/{CONFIG_FILE})")
    norm = Normalizer({root: "<package>"})
    recorded = recorded_digests(root)
    files = {str(r["path"]): r for r in inventory(root, norm)}
    documents: dict[str, Any] = {}
    pools: dict[str, dict[str, dict[str, Any] | str]] = {}
    graphs: dict[str, dict[str, Any]] = {}
    data_files: set[str] = set()
    for rel, rec in files.items():
        if rec["kind"] != "file":
            continue
        path = root / rel
        name = os.path.basename(rel)
        if name in _DOCUMENTS:
            _LOG.info("reading %s", path)
            documents[rel] = norm.data(read_json_document(path))
        elif name == POOL_FILE:
            _LOG.info("reading %s", path)
            pools[rel] = _keyed_pool(pool_records(path, norm))
        elif name.endswith(".onnx"):
            _LOG.info("reading graph %s", path)
            graphs[rel] = canonical_graph(
                load_proto(path), base_dir=path.parent, root=root, normalizer=norm, lazy_digests=True,
                recorded=recorded, source=str(path), data_files=data_files,
            )
    return _Side(root, documents, pools, graphs, data_files, files, recorded)


def _diff_pools(file: str, a: Mapping[str, dict[str, Any] | str], b: Mapping[str, dict[str, Any] | str]) -> Iterator[Difference]:
    for key in [*a, *(k for k in b if k not in a)]:
        x, y = a.get(key), b.get(key)
        comment = key.startswith("#")
        label = f"line {key}" if comment else f"entry {key}"
        facts = {"section": "pool", "pool_id": None if comment else key}
        if y is None:
            yield Difference(file, "removed", label, a=x, facts=facts)
        elif x is None:
            yield Difference(file, "added", label, b=y, facts=facts)
        elif isinstance(x, dict) and isinstance(y, dict):
            for d in diff_tree(file, x, y):
                yield Difference(file, d.change, f"{label} {d.where}", a=d.a, b=d.b, facts={**facts, "field": d.where})
        elif x != y:
            yield Difference(file, "changed", label, a=x, b=y, facts=facts)


def _content_digest(side: _Side, rel: str) -> TensorDigest:
    path = side.root / rel
    ident = FileIdentity.of(path, side.recorded)
    return TensorDigest(ident, 0, ident.size)


def _diff_files(a: _Side, b: _Side) -> Iterator[Difference]:
    covered = set(a.documents) | set(a.pools) | set(a.graphs) | set(b.documents) | set(b.pools) | set(b.graphs)
    data = a.data_files | b.data_files
    for rel in sorted(a.files.keys() | b.files.keys()):
        x, y = a.files.get(rel), b.files.get(rel)
        if y is None:
            yield Difference(FILES_GROUP, "removed", rel, a=x, facts={"section": "files", "path": rel, "summary": str(x and x["kind"])})
            continue
        if x is None:
            yield Difference(FILES_GROUP, "added", rel, b=y, facts={"section": "files", "path": rel, "summary": str(y["kind"])})
            continue
        for key in ("kind", "size", "target"):
            if key == "size" and rel in covered:
                continue
            if x.get(key) != y.get(key):
                yield Difference(FILES_GROUP, "changed", f"{rel} {key}", a=x.get(key), b=y.get(key),
                                 facts={"section": "files", "path": rel, "field": key})
        if x["kind"] == y["kind"] == "file" and rel not in covered and rel not in data and x.get("size") == y.get("size"):
            da, db = _content_digest(a, rel), _content_digest(b, rel)
            if not da.same_bytes(db):
                yield Difference(FILES_GROUP, "changed", f"{rel} content", a=da, b=db,
                                 facts={"section": "files", "path": rel, "field": "sha256"})


def _roles(root: Path) -> dict[str, str]:
    """Graph file -> role(s) the config gives it, where the package opens (labels only)."""
    try:
        roles: dict[str, list[str]] = {}
        for ref in open_any(root).graphs():
            roles.setdefault(os.path.relpath(ref.path, root), []).append(ref.role)
        return {rel: ", ".join(names) for rel, names in roles.items()}
    except Exception:  # a package that does not open still diffs; it just has no role labels
        return {}


def diff_packages(a: Path | str, b: Path | str) -> PackageDiff:
    """Compare two package directories (see the module docstring)."""
    side_a, side_b = _read_side(Path(a)), _read_side(Path(b))
    diffs: list[Difference] = []
    for rel in sorted(side_a.documents.keys() | side_b.documents.keys()):
        if rel in side_a.documents and rel in side_b.documents:
            diffs.extend(diff_tree(rel, side_a.documents[rel], side_b.documents[rel]))
    for rel in sorted(side_a.pools.keys() | side_b.pools.keys()):
        if rel in side_a.pools and rel in side_b.pools:
            diffs.extend(_diff_pools(rel, side_a.pools[rel], side_b.pools[rel]))
    for rel in sorted(side_a.graphs.keys() | side_b.graphs.keys()):
        if rel in side_a.graphs and rel in side_b.graphs:
            _LOG.info("comparing graph %s", rel)
            diffs.extend(diff_graph(rel, side_a.graphs[rel], side_b.graphs[rel]))
    diffs.extend(_diff_files(side_a, side_b))
    compared = len(side_a.files.keys() & side_b.files.keys())
    roles = {**_roles(side_b.root), **_roles(side_a.root)}
    graphs = tuple(sorted(side_a.graphs.keys() & side_b.graphs.keys()))
    return PackageDiff(Path(a), Path(b), compared, tuple(diffs), roles, graphs)
