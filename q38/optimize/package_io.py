"""Optimize every graph of a package into a new package; the source is never written.

Files are staged by :class:`q38.package.PackageWriter` (renamed into place on success, removed on
failure). Data files are placed by link or copy (never written); each rewritten graph is written
fresh, and the few tensors a pass creates (fp32 scales, concatenated or FP8 weights) go into a new
``<stem>.opt.data`` file. Untransformed weights stay external references and are never read, so
memory does not grow with weight bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import onnx_ir as ir

from q38.optimize._common import Target, TensorReader
from q38.optimize.pipeline import OptimizeResult, optimize_model
from q38.package import (
    FileRecord,
    LinkPolicy,
    Manifest,
    PackageWriter,
    open_package,
    read_tensor,
    save_graph,
)
from q38.package.manifest import dumps_manifest

__all__ = ["optimize_package"]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _reader(graph_path: Path, root: Path) -> TensorReader:
    def read(value: ir.Value) -> np.ndarray:
        return read_tensor(value, graph_path=graph_path, root=root)

    return read


def optimize_package(
    src: Path,
    out: Path,
    *,
    target: Target = "cuda",
    passes: list[str] | None = None,
    skip: tuple[str, ...] = (),
    link: LinkPolicy = LinkPolicy.AUTO,
) -> tuple[OptimizeResult, dict[str, tuple[int, int]]]:
    """Write the optimized package at ``out``; returns the result and node counts per graph."""
    pkg = open_package(src)
    total = OptimizeResult({}, [], {})
    node_counts: dict[str, tuple[int, int]] = {}
    graph_files = {pkg.graph_path(role).resolve(): role for role in pkg.roles()}
    with PackageWriter(out) as writer:
        staged = writer.path
        for path in sorted(p for p in pkg.root.rglob("*")):
            rel = path.relative_to(pkg.root)
            if path.is_dir() or path.resolve() in graph_files or rel.name == "package_manifest.json":
                continue
            writer.place(path, rel.as_posix(), link)
        records: dict[str, FileRecord] = {}
        for role in pkg.roles():
            gpath, root = pkg.graph_path(role), pkg.graph_dir(role)
            model = pkg.load(role)
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
            save_graph(model, dest, new_data=data_name)
            records[rel.as_posix()] = FileRecord("write", _sha256(dest))
            if (dest.parent / data_name).exists():
                data_rel = (rel.parent / data_name).as_posix()
                records[data_rel] = FileRecord("write", _sha256(dest.parent / data_name))
        base = pkg.manifest or Manifest(command="optimize")
        manifest = dataclasses.replace(
            base,
            command="optimize",
            files={**base.files, **records},
            rewrites=dict(sorted(total.rewrites.items())),
            extra={**base.extra, "optimize_target": target, "provenance": dict(sorted(total.provenance.items()))},
        )
        (staged / "package_manifest.json").write_text(dumps_manifest(manifest))
    return total, node_counts
