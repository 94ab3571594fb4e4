"""Optimize every graph of a package into a new package; the source is never written.

Files are staged by :class:`q38.package.PackageWriter` (renamed into place on success, removed on
failure). Data files are placed by link or copy (never written); each rewritten graph is written
fresh, and the few tensors a pass creates (fp32 scales, concatenated or FP8 weights) go into a new
``<stem>.opt.data`` file, once per package directory however many graphs use them, each with a
``weights_pool.txt`` entry (see :mod:`q38.optimize.derived_weights`). Untransformed weights stay
external references and are never read, so memory does not grow with weight bytes. The pool and
the manifest are written fresh (never through a hard link to the source's files).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import onnx_ir as ir

from q38.optimize._common import Target, TensorReader
from q38.optimize.derived_weights import (
    DerivedStore,
    reconcile_pool,
    source_identities,
    tensor_refs,
)
from q38.optimize.pipeline import OptimizeResult, optimize_model
from q38.package import (
    FileRecord,
    LinkPolicy,
    Manifest,
    Package,
    PackageWriter,
    WeightsPool,
    check_output_outside,
    detect_surface,
    format_pool,
    open_package,
    read_tensor,
    save_graph,
    sha256_file,
    source_placer,
)
from q38.package.manifest import MANIFEST_FILENAME, dumps_manifest
from q38.package.pool import POOL_FILENAME
from q38.progress import Progress

__all__ = ["optimize_package"]


def _reader(graph_path: Path, root: Path) -> TensorReader:
    files: dict[str, tuple[Path, os.stat_result]] = {}  # path checks once per data file, not per read

    def read(value: ir.Value) -> np.ndarray:
        return read_tensor(value, graph_path=graph_path, root=root, files=files)

    return read


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
    """Write the optimized package at ``out``; returns the result and node counts per graph.

    A package the onnxruntime-genai builder wrote (genai surface) goes through
    :func:`q38.optimize.genai_io.optimize_genai_package`.
    """
    check_output_outside(Path(out), [Path(src)])
    if detect_surface(src) == "genai":
        from q38.optimize.genai_io import optimize_genai_package

        return optimize_genai_package(
            Path(src), Path(out), target=target, passes=passes, skip=skip, link=link, digest=digest
        )
    pkg = open_package(src)
    total = OptimizeResult({}, [], {})
    node_counts: dict[str, tuple[int, int]] = {}
    graph_files = {pkg.graph_path(role).resolve(): role for role in pkg.roles()}
    pools = _pools(pkg)
    rewritten = {pkg.root.joinpath(rel).resolve() for rel in pools} | {
        p.resolve() for p in pkg.root.rglob(MANIFEST_FILENAME)
    }
    store = DerivedStore(e.pool_id for pool in pools.values() for e in pool.entries)
    refs_before: dict[str, dict[str, dict[tuple[str, int], list[str]]]] = {rel: {} for rel in pools}
    refs_after: dict[str, dict[str, dict[tuple[str, int], list[str]]]] = {rel: {} for rel in pools}
    with PackageWriter(out, source_placer(pkg, link, digest=digest)) as writer:
        staged = writer.path
        unchanged = [
            p for p in sorted(pkg.root.rglob("*"))
            if not (p.is_dir() or p.resolve() in graph_files or p.resolve() in rewritten)
        ]
        with writer.placer.progress(unchanged, "optimize: placing files"):
            for path in unchanged:
                writer.place(path, path.relative_to(pkg.root).as_posix())
        records: dict[str, FileRecord] = {}
        bar = Progress(len(pkg.roles()), "optimize: graphs")
        for role in pkg.roles():
            bar.advance()
            gpath, root = pkg.graph_path(role), pkg.graph_dir(role)
            pool_rel = _pool_rel(pkg, role)
            model, ext = pkg.load_with_refs(role)  # the references load checked: no second walk
            sources = source_identities(model, gpath.parent, ext)
            refs_before[pool_rel][role] = tensor_refs(model, gpath.parent, pkg.root / Path(pool_rel).parent, ext)
            before = len(model.graph)
            result = optimize_model(model, target=target, passes=passes, skip=skip, reader=_reader(gpath, root))
            total.merge(result)
            node_counts[role] = (before, len(model.graph))
            rel = gpath.relative_to(pkg.root)
            dest = staged / rel
            data_name = f"{dest.stem}.opt.data"
            i = 1
            while (dest.parent / data_name).exists():
                data_name = f"{dest.stem}.opt{i}.data"
                i += 1
            store.share(model, role=role, graph_dir=dest.parent, provenance=result.provenance,
                        origins=result.origins, sources=sources)
            save_graph(model, dest, new_data=data_name)
            store.register(model, role=role, graph_dir=dest.parent)
            refs_after[pool_rel][role] = tensor_refs(model, dest.parent, staged / Path(pool_rel).parent)
            records[rel.as_posix()] = FileRecord("write", sha256_file(dest))
            if (dest.parent / data_name).exists():
                data_rel = (rel.parent / data_name).as_posix()
                records[data_rel] = FileRecord("write", sha256_file(dest.parent / data_name))
        bar.close()
        dropped: list[str] = []
        for pool_rel, pool in pools.items():
            new_pool, gone = reconcile_pool(pool, refs_before[pool_rel], refs_after[pool_rel])
            dropped.extend(gone)
            added = store.entries(staged / Path(pool_rel).parent)
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
