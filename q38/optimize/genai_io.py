"""Optimize a package the onnxruntime-genai builder wrote (the genai surface).

The package I/O of ``q38 optimize`` for builder packages: every graph the config names
(decoder, mtp, engram, pipeline stages, runtime-profile decoders) is loaded without its weights,
run through the same pipeline as a v12b package's graphs, and written fresh; the tensors a pass
creates go to ``<stem>.opt.data`` beside the graph. Every other file (external data, tokenizer
and processor files, anything else) is placed by link or copy, never written.

``genai_config.json`` is copied byte for byte unless the rewrite broke a ``shared_initializers``
entry (a pass replaced or re-stored a tensor two graphs shared): that entry is dropped from every
list that names it (the graphs then each read their own bytes), the config is rewritten with
the deterministic writer, and the result says so. There is no weights pool or manifest in a
builder package, and the optimizer adds none.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import onnx_ir as ir

from q38.errors import PackageError, quote
from q38.optimize._common import Target
from q38.optimize.package_io import _reader
from q38.optimize.pipeline import OptimizeResult, optimize_model
from q38.package import LinkPolicy, PackageWriter, Placer, save_graph
from q38.package.genai_config import dumps_genai_config
from q38.package.genai_package import GenaiPackage, open_genai_package
from q38.package.shared_initializers import shared_initializer_problems
from q38.progress import Progress

__all__ = ["optimize_genai_package"]


def _data_name(dest: Path) -> str:
    name = f"{dest.stem}.opt.data"
    i = 1
    while (dest.parent / name).exists():
        name = f"{dest.stem}.opt{i}.data"
        i += 1
    return name


def _reconciled_config(pkg: GenaiPackage, models: dict[str, ir.Model], staged: Path) -> tuple[Any, list[str]]:
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


def optimize_genai_package(
    src: Path,
    out: Path,
    *,
    target: Target = "cuda",
    passes: list[str] | None = None,
    skip: tuple[str, ...] = (),
    link: LinkPolicy = LinkPolicy.AUTO,
    digest: bool = False,
) -> tuple[OptimizeResult, dict[str, tuple[int, int]]]:
    """Write the optimized builder package at ``out``; returns the result and node counts per graph.

    Raises:
        PackageError: the package is malformed, or a file in it links outside it (nothing outside
            the input is ever placed into the output).
    """
    pkg = open_genai_package(src)
    refs = pkg.graphs()
    graph_files = {ref.path.resolve() for ref in refs}
    total = OptimizeResult({}, [], {})
    node_counts: dict[str, tuple[int, int]] = {}
    models: dict[str, ir.Model] = {}
    root = pkg.root.resolve()
    config_rel = pkg.config_path.relative_to(pkg.root).as_posix()
    others = {}
    for path in sorted(p for p in pkg.root.rglob("*") if not p.is_dir()):
        rel = path.relative_to(pkg.root).as_posix()
        if not path.resolve().is_relative_to(root):
            raise PackageError(f"{path}: a link to {quote(str(path.resolve()))}, outside the package")
        if path.resolve() not in graph_files and rel != config_rel:
            others[rel] = path
    with PackageWriter(out, Placer(link, digest=digest)) as writer:
        staged = writer.path
        with writer.placer.progress(list(others.values()), "optimize: placing files"):
            for rel, path in others.items():
                writer.place(path, rel)
        bar = Progress(len(refs), "optimize: graphs")
        written: set[Path] = set()
        for ref in refs:
            bar.advance()
            if ref.path.resolve() in written:
                continue  # a runtime profile naming the decoder's own file
            model = pkg.load(ref.role)
            before = len(model.graph)
            result = optimize_model(model, target=target, passes=passes, skip=skip, reader=_reader(ref.path, pkg.root))
            total.merge(result)
            node_counts[ref.role] = (before, len(model.graph))
            dest = staged / ref.rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            save_graph(model, dest, new_data=_data_name(dest))
            written.add(ref.path.resolve())
            model.meta["q38.path"] = str(dest)
            models[ref.role] = model
        bar.close()
        config, dropped = _reconciled_config(pkg, models, staged)
        if dropped:
            total.rewrites["shared_initializers_dropped"] = len(dropped)
            writer.write_text(config_rel, dumps_genai_config(config))
        else:
            writer.place(pkg.config_path, config_rel, LinkPolicy.COPY)
    return total, node_counts
