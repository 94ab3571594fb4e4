"""Optimize every graph of a package into a new package; the source is never written (both surfaces).

One flow for every surface: open the package through the package interface
(:func:`q38.package.open_any`), place every file that is not a graph (by link or copy, never
written), load each graph the config names without its weights, run the pipeline, write it fresh
with the tensors a pass creates in a new ``<stem>.opt.data`` beside it, then let the package's
*write-back* bring what describes the files up to date. Untransformed weights stay external
references and are never read, so memory does not grow with weight bytes. Files are staged by
:class:`q38.package.PackageWriter` (renamed into place on success, removed on failure).

Write-backs (:class:`WriteBack`), the one place the surfaces differ:

* a package with weights pools and manifests (v12b, :class:`PoolWriteBack`): the derived tensors
  are shared once per package directory, each with a ``weights_pool.txt`` entry (see
  :mod:`q38.optimize.derived_weights`), and the pools and manifests are written fresh;
* a package whose config lists ``shared_initializers`` (genai, :class:`SharedInitializerWriteBack`):
  ``genai_config.json`` is copied byte for byte unless the rewrite broke an entry; that entry is
  then dropped from every list that names it and the config rewritten;
* any other surface (:class:`WriteBack`): the config is placed unchanged with the other files.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

import numpy as np
import onnx_ir as ir

from q38.errors import PackageError, quote
from q38.optimize._common import Target, TensorReader
from q38.optimize.derived_weights import (
    DerivedStore,
    SourceIdentity,
    reconcile_pool,
    source_identities,
    tensor_refs,
)
from q38.optimize.pipeline import OptimizeResult, optimize_model
from q38.package import (
    AnyPackage,
    FileRecord,
    GraphRef,
    LinkPolicy,
    Manifest,
    PackageWriter,
    SurfaceVisitor,
    WeightsPool,
    check_output_outside,
    format_pool,
    open_any,
    read_tensor,
    save_graph,
    sha256_file,
    visit,
)
from q38.package.genai.config import dumps_genai_config
from q38.package.genai.shared_initializers import shared_initializer_problems
from q38.package.manifest import MANIFEST_FILENAME, dumps_manifest
from q38.package.v12b.pool import POOL_FILENAME
from q38.progress import Progress

if TYPE_CHECKING:  # each surface's package and config modules load when a package of it opens
    from q38.package import GenaiConfig, GenaiPackage, Package, V12bPackage

__all__ = ["PoolWriteBack", "SharedInitializerWriteBack", "WriteBack", "optimize_package"]


def _reader(graph_path: Path, root: Path) -> TensorReader:
    files: dict[str, tuple[Path, os.stat_result]] = {}  # path checks once per data file, not per read

    def read(value: ir.Value) -> np.ndarray:
        return read_tensor(value, graph_path=graph_path, root=root, files=files)

    return read


def _data_name(dest: Path) -> str:
    """``<stem>.opt.data`` beside ``dest``, numbered when a file of that name is already there."""
    name = f"{dest.stem}.opt.data"
    i = 1
    while (dest.parent / name).exists():
        name = f"{dest.stem}.opt{i}.data"
        i += 1
    return name


class WriteBack:
    """What a package needs besides its rewritten graphs; this base: nothing (the config is placed)."""

    def __init__(self, pkg: AnyPackage) -> None:
        self.pkg = pkg

    def regenerated(self) -> set[Path]:
        """Resolved paths of the package's own files this write-back writes (not placed unchanged)."""
        return set()

    def load(self, ref: GraphRef) -> ir.Model:
        """Load one graph (without its weights) before the pipeline runs on it."""
        return self.pkg.load(ref.role)

    def before_save(self, ref: GraphRef, model: ir.Model, dest: Path, result: OptimizeResult) -> None:
        """``model`` (of ``ref``) is about to be written at ``dest``, ``result`` what the pipeline did."""

    def saved(self, ref: GraphRef, model: ir.Model, dest: Path, data_name: str, staged: Path) -> None:
        """``model`` (of ``ref``) was just written at ``dest``, its new tensors in ``data_name``."""

    def finish(self, writer: PackageWriter, total: OptimizeResult, target: Target) -> None:
        """Write what describes the files (config, pools, manifest) once every graph is written."""


class SharedInitializerWriteBack(WriteBack):
    """A builder package: drop the ``shared_initializers`` entries the rewrite broke, else copy the config."""

    def __init__(self, pkg: GenaiPackage) -> None:
        super().__init__(pkg)
        self.genai = pkg
        self.models: dict[str, ir.Model] = {}

    def regenerated(self) -> set[Path]:
        """The config: copied or rewritten at the end."""
        return {self.pkg.config_path.resolve()}

    def saved(self, ref: GraphRef, model: ir.Model, dest: Path, data_name: str, staged: Path) -> None:
        """Keep the written model (it now names its new path) for the shared-initializer check."""
        model.meta["q38.path"] = str(dest)
        self.models[ref.role] = model

    def finish(self, writer: PackageWriter, total: OptimizeResult, target: Target) -> None:
        """Copy the config byte for byte, or write it without the broken shared-initializer entries."""
        pkg = self.genai
        config_rel = pkg.config_path.relative_to(pkg.root).as_posix()
        config, dropped = _reconciled_config(pkg, self.models, writer.path)
        if dropped:
            total.rewrites["shared_initializers_dropped"] = len(dropped)
            writer.write_text(config_rel, dumps_genai_config(config))
        else:
            writer.place(pkg.config_path, config_rel, LinkPolicy.COPY)


def _reconciled_config(pkg: GenaiPackage, models: dict[str, ir.Model], staged: Path) -> tuple[GenaiConfig, list[str]]:
    """The config with every shared-initializer entry the rewrite broke dropped, and the names."""
    cfg = pkg.config
    sections = {role: s.shared_initializers for role, s in cfg.graph_sections.items() if s.shared_initializers}
    if not sections:
        return cfg, []
    sharing = {role: models.get(role) for role in ["decoder", *(r for r in sections if r != "decoder")]}
    broken = {path for path, _ in shared_initializer_problems(staged, sections, sharing)}
    names = sorted({
        entry.name
        for role, entries in sections.items()
        for i, entry in enumerate(entries)
        if f"model.{role}.shared_initializers[{i}]" in broken
    })  # fmt: skip
    if not names:
        return cfg, []
    m = cfg.model
    keep = {role: tuple(e for e in entries if e.name not in names) for role, entries in sections.items()}
    decoder = dataclasses.replace(m.decoder, shared_initializers=keep.get("decoder", ()))
    mtp = dataclasses.replace(m.mtp, shared_initializers=keep.get("mtp", ())) if m.mtp is not None else None
    engram = dataclasses.replace(m.engram, shared_initializers=keep.get("engram", ())) if m.engram is not None else None
    return dataclasses.replace(cfg, model=dataclasses.replace(m, decoder=decoder, mtp=mtp, engram=engram)), names


class PoolWriteBack(WriteBack):
    """A q38 package: derived tensors shared and listed in the weights pools; pools and manifests rewritten."""

    def __init__(self, opened: V12bPackage) -> None:
        super().__init__(opened)
        pkg: Package = opened.package
        self.package = pkg
        self.pools = _pools(pkg)
        self.store = DerivedStore(e.pool_id for pool in self.pools.values() for e in pool.entries)
        self.refs_before: dict[str, dict[str, dict[tuple[str, int], list[str]]]] = {rel: {} for rel in self.pools}
        self.refs_after: dict[str, dict[str, dict[tuple[str, int], list[str]]]] = {rel: {} for rel in self.pools}
        self.records: dict[str, FileRecord] = {}
        self.sources: dict[str, dict[str, SourceIdentity]] = {}

    def regenerated(self) -> set[Path]:
        """The weights pools and every manifest."""
        pkg = self.package
        return {pkg.root.joinpath(rel).resolve() for rel in self.pools} | {
            p.resolve() for p in pkg.root.rglob(MANIFEST_FILENAME)
        }

    def load(self, ref: GraphRef) -> ir.Model:
        """Load the graph and note, from the references the load checked, where its tensors live."""
        pkg = self.package
        gpath = ref.path
        pool_rel = _pool_rel(pkg, ref.role)
        model, ext = pkg.load_with_refs(ref.role)  # the references load checked: no second walk
        self.sources[ref.role] = source_identities(model, gpath.parent, ext)
        self.refs_before[pool_rel][ref.role] = tensor_refs(model, gpath.parent, pkg.root / Path(pool_rel).parent, ext)
        return model

    def before_save(self, ref: GraphRef, model: ir.Model, dest: Path, result: OptimizeResult) -> None:
        """Share the derived tensors identical to ones another graph of this directory already wrote."""
        self.store.share(model, role=ref.role, graph_dir=dest.parent, provenance=result.provenance,
                         origins=result.origins, sources=self.sources[ref.role])  # fmt: skip

    def saved(self, ref: GraphRef, model: ir.Model, dest: Path, data_name: str, staged: Path) -> None:
        """Register the derived tensors written, and record the graph and its new data file."""
        pkg = self.package
        pool_rel = _pool_rel(pkg, ref.role)
        self.store.register(model, role=ref.role, graph_dir=dest.parent)
        self.refs_after[pool_rel][ref.role] = tensor_refs(model, dest.parent, staged / Path(pool_rel).parent)
        rel = ref.path.relative_to(pkg.root)
        self.records[rel.as_posix()] = FileRecord("write", sha256_file(dest))
        if (dest.parent / data_name).exists():
            data_rel = (rel.parent / data_name).as_posix()
            self.records[data_rel] = FileRecord("write", sha256_file(dest.parent / data_name))

    def finish(self, writer: PackageWriter, total: OptimizeResult, target: Target) -> None:
        """Reconcile and write the pools, then the manifests (the head's in a layered package)."""
        pkg = self.package
        staged = writer.path
        records = self.records
        dropped: list[str] = []
        for pool_rel, pool in self.pools.items():
            new_pool, gone = reconcile_pool(pool, self.refs_before[pool_rel], self.refs_after[pool_rel])
            dropped.extend(gone)
            added = self.store.entries(staged / Path(pool_rel).parent)
            if added:
                if not new_pool.records:
                    new_pool = WeightsPool.from_entries(())
                new_pool = WeightsPool(new_pool.records + tuple(added))
            if (pkg.root / pool_rel).is_file() or added:
                writer.write_text(pool_rel, format_pool(new_pool))
                records[pool_rel] = FileRecord("write", sha256_file(staged / pool_rel))
        base = pkg.manifest or Manifest(command="optimize")
        extra = {
            **base.extra,
            "optimize_target": target,
            "provenance": dict(sorted(total.provenance.items())),
        }
        if dropped:
            extra["pool_dropped"] = sorted(dropped)
        manifest = dataclasses.replace(
            base,
            command="optimize",
            files={**base.files, **writer.records, **records},
            rewrites=dict(sorted(total.rewrites.items())),
            extra=extra,
        )
        writer.write_text(_manifest_rel(pkg), dumps_manifest(manifest))
        if pkg.layout == "layered" and pkg.head_manifest is not None:
            head = dataclasses.replace(pkg.head_manifest, command="optimize", files={
                **pkg.head_manifest.files,
                **{k.removeprefix("head/"): v for k, v in records.items() if k.startswith("head/")},
            })
            writer.write_text(f"head/{MANIFEST_FILENAME}", dumps_manifest(head))


class _WriteBacks(SurfaceVisitor[WriteBack]):
    """The write-back of each surface that has more to write than its graphs.

    Any other surface (a new reader) gets the plain :class:`WriteBack`.
    """

    def v12b(self, package: V12bPackage) -> WriteBack:
        """The weights pool and manifests."""
        return PoolWriteBack(package)

    def genai(self, package: GenaiPackage) -> WriteBack:
        """The shared-initializer table of the config."""
        return SharedInitializerWriteBack(package)

    def other(self, package: AnyPackage) -> WriteBack:
        """Nothing besides the graphs: the config is placed unchanged."""
        return WriteBack(package)


def optimize_package(
    src: Path,
    out: Path,
    *,
    target: Target = "cuda",
    passes: list[str] | None = None,
    skip: tuple[str, ...] = (),
    link: LinkPolicy = LinkPolicy.AUTO,
    digest: bool = False,
) -> tuple[OptimizeResult, dict[str, tuple[int, int]]]:
    """Write the optimized package at ``out``; returns the result and node counts per graph role.

    Raises:
        PackageError: the package is malformed, or a file in it links outside it (nothing outside
            the input is ever placed into the output).

    """
    check_output_outside(Path(out), [Path(src)])
    pkg = open_any(src)
    back = visit(pkg, _WriteBacks())
    refs = pkg.graphs()
    skipped = {ref.path.resolve() for ref in refs} | back.regenerated()
    total = OptimizeResult({}, [], {})
    node_counts: dict[str, tuple[int, int]] = {}
    root = pkg.root.resolve()
    unchanged = {}
    for path in sorted(p for p in pkg.root.rglob("*") if not p.is_dir()):
        if not path.resolve().is_relative_to(root):
            raise PackageError(f"{path}: a link to {quote(str(path.resolve()))}, outside the package")
        if path.resolve() not in skipped:
            unchanged[path.relative_to(pkg.root).as_posix()] = path
    with PackageWriter(out, pkg.placer(link, digest=digest)) as writer:
        staged = writer.path
        with writer.placer.progress(list(unchanged.values()), "optimize: placing files"):
            for rel, path in unchanged.items():
                writer.place(path, rel)
        bar = Progress(len(refs), "optimize: graphs")
        written: set[Path] = set()
        for ref in refs:
            bar.advance()
            if ref.path.resolve() in written:
                continue  # a runtime profile naming the decoder's own file
            model = back.load(ref)
            before = len(model.graph)
            reader = _reader(ref.path, ref.root if ref.root is not None else pkg.root)
            result = optimize_model(model, target=target, passes=passes, skip=skip, reader=reader)
            graph = PurePath(ref.rel).as_posix()
            result.outcomes[:] = [dataclasses.replace(o, graph=graph) for o in result.outcomes]
            total.merge(result)
            node_counts[ref.role] = (before, len(model.graph))
            dest = staged / ref.rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            data_name = _data_name(dest)
            back.before_save(ref, model, dest, result)
            save_graph(model, dest, new_data=data_name, keep=True)  # the output check judges it in memory
            written.add(ref.path.resolve())
            back.saved(ref, model, dest, data_name, staged)
        bar.close()
        back.finish(writer, total, target)
    return total, node_counts


def _pool_rel(pkg: Package, role: str) -> str:
    """The pool (relative to the package root) that lists the weights of ``role``'s directory."""
    if pkg.layout == "layered" and role == "head":
        return f"head/{POOL_FILENAME}"
    rel = pkg.config.model.qwen38_graph.weights_pool
    return rel if pkg.layout == "flat" else f"target/{rel}"


def _pools(pkg: Package) -> dict[str, WeightsPool]:
    pools = {_pool_rel(pkg, "target"): pkg.pool}
    if pkg.layout == "layered":
        pools[_pool_rel(pkg, "head")] = pkg.head_pool or WeightsPool()
    return pools


def _manifest_rel(pkg: Package) -> str:
    return MANIFEST_FILENAME if pkg.layout == "flat" else f"target/{MANIFEST_FILENAME}"
