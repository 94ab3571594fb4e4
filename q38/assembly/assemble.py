"""``q38 build``: orchestration of checks, composition, staging and placement.

Order (SPEC §5.1): every input check (provider and options, libraries, destinations, graphs,
composition collisions, escaping links, config values) runs before the first byte is written;
then the whole output is staged next to its destination and renamed into place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack

from q38.assembly.bundle import Entry, Source, read_source
from q38.assembly.compose import Composition, PoolRow, compose
from q38.assembly.configure import GraphFacts, graph_facts, make_config
from q38.assembly.inputs import Library, check_destinations, check_libraries, check_provider
from q38.assembly.proto_io import save_proto
from q38.assembly.qsa import qsa_constants
from q38.errors import BuildError, InternalError, PackageError
from q38.offload.build import emit_multidraft_graphs, offload_profiles_config
from q38.offload.router import clear_router_weights
from q38.package import load_graph, save_graph
from q38.package.io.hashing import KnownDigests, sha256_file
from q38.package.io.links import LinkPolicy, Placed, Placer
from q38.package.io.paths import is_inside
from q38.package.io.staging import StagedDirectory
from q38.package.manifest import (
    MANIFEST_FILENAME,
    FileRecord,
    Manifest,
    dumps_manifest,
    read_manifest,
)
from q38.package.v12b.config import config_to_dict, dumps_config, parse_config

__all__ = ["BuildRequest", "BuildResult", "build_package"]

_LOG = logging.getLogger(__name__)
POOL_HEADER = "# q38 weights pool v1\n# pool_id file offset length dtype shape placement provenance\n"


@dataclass(frozen=True)
class BuildRequest:
    """Everything ``q38 build`` takes; ``libs`` are ``(NAME, PATH)`` pairs of ``--lib-NAME PATH``."""

    out: Path
    target: Path
    head: Path
    prefill: Path | None = None
    layout: Literal["layered", "folded"] = "folded"
    libs: tuple[tuple[str, str], ...] = ()
    provider: str = "cpu"
    cuda_options: tuple[str, ...] = ()
    link: LinkPolicy = LinkPolicy.AUTO
    digest: bool = False  # also digest linked / cloned files (--digest)
    multidraft: bool = False  # also emit model_s2/s3/s4.onnx (2/3/4 verify rows)
    offload_profiles: bool = False  # runtime profiles + offload session options (implies multidraft)


@dataclass
class BuildResult:
    """What ``q38 build`` wrote: the package directories, how each file was placed, pool sizes."""

    packages: list[Path]
    link_modes: Counter[str] = field(default_factory=Counter)
    pool_entries: dict[str, int] = field(default_factory=dict)
    bytes_copied: int = 0  # bytes of placed files written as copies (neither cloned nor linked)

    def summary(self) -> dict[str, Any]:
        """The JSON summary ``q38 build --json`` prints.

        Package paths, link-mode counts, the bytes copied (what a reflink or a hard link would have
        saved) and pool entries.
        """
        return {
            "packages": [os.fspath(p) for p in self.packages],
            "link_modes": dict(sorted(self.link_modes.items())),
            "bytes_copied": self.bytes_copied,
            "pool_entries": self.pool_entries,
        }


class _ConfigArgs(TypedDict):
    """The :func:`make_config` arguments every package of one build shares (all but ``decoder_file``)."""

    target_bundle: Path
    facts: GraphFacts
    provider: str
    cuda_options: dict[str, str]
    libraries: dict[str, str]
    custom_ops_library: str | None
    kv_capacity: int | None
    target_file: str
    head_file: str
    prefill_file: str | None


@dataclass
class _Package:
    rel: str  # "" (folded) or "target" / "head"
    comp: Composition
    config_text: str
    sources: list[Source]
    libs: list[Library]


def _format_pool(rows: list[PoolRow]) -> str:
    lines = [POOL_HEADER]
    for i, r in enumerate(rows):
        shape = "x".join(str(d) for d in r.shape) if r.shape else "scalar"
        length = "-" if r.length is None else str(r.length)
        lines.append(f"w{i:04d} {r.file} {r.offset} {length} {r.dtype} {shape} device {','.join(r.provenance)}\n")
    return "".join(lines)


def _known_digests(bundles: list[Path]) -> KnownDigests:
    """Digests a bundle's own manifest holds, for files whose identity still matches."""
    known = KnownDigests()
    for bundle in bundles:
        path = bundle / MANIFEST_FILENAME
        if not path.is_file():
            continue
        try:
            known.add_manifest(bundle, read_manifest(path).files)
        except PackageError as exc:  # a bundle's manifest is regenerated, never carried over
            _LOG.info("%s: not reusing its digests: %s", path, exc)
    return known


def _plan(req: BuildRequest) -> tuple[list[_Package], list[Path]]:
    cuda = check_provider(req.provider, list(req.cuda_options))
    libs = check_libraries(list(req.libs))
    if req.layout not in ("layered", "folded"):
        raise BuildError(f"--layout {req.layout}: expected layered or folded")
    bundles = [req.target, req.head] + ([req.prefill] if req.prefill else [])
    real_bundles = [Path(os.path.realpath(b)) for b in bundles]
    # A library inside a source bundle may be linked like the bundle's files; any other is copied.
    libs = [dataclasses.replace(lib, in_bundle=any(is_inside(rb, lib.real) for rb in real_bundles)) for lib in libs]
    lib_dirs = [lib.real for lib in libs]
    out = Path(req.out)
    if req.layout == "layered" and os.path.isdir(out) and not os.path.islink(out):
        dests = [out / "target", out / "head"]
    else:
        dests = [out]
    check_destinations(dests, bundles + lib_dirs)
    if not out.parent.is_dir() and not (len(dests) == 2):
        raise BuildError(f"{out}: parent directory {out.parent} does not exist")
    target = read_source("target", req.target)
    head = read_source("head", req.head)
    prefill = read_source("prefill", req.prefill) if req.prefill else None
    facts = graph_facts(target.model)
    if req.provider == "cpu" and facts.variant == "faithful":
        raise BuildError(
            f"--provider cpu: {req.target}: the faithful variant's QSA ops have no ORT CPU kernel"
        )
    if facts.lineage == "custom" and not libs:
        _LOG.warning("%s: the graph uses the qwen.fold domain but no --lib-NAME was given", req.target)
    lib_map = {lib.name: f"libs/{lib.basename}" for lib in libs}
    custom = lib_map[libs[0].name] if libs else None
    folded = [prefill] if prefill else []
    kw: _ConfigArgs = {
        "target_bundle": req.target, "facts": facts, "provider": req.provider,
        "cuda_options": cuda, "libraries": lib_map, "custom_ops_library": custom, "kv_capacity": None,
        "target_file": target.graph_rel, "head_file": head.graph_rel,
        "prefill_file": prefill.graph_rel if prefill else None,
    }
    packages = []
    if req.layout == "folded":
        comp = compose(target, [head, *folded])
        packages.append(_Package("", comp, _config(decoder_file=target.graph_rel, **kw), [target, head, *folded], libs))
    else:
        comp_t = compose(target, folded)
        comp_h = compose(head, [], reference=[target])
        packages.append(_Package("target", comp_t, _config(decoder_file=target.graph_rel, **kw), [target, *folded], libs))
        packages.append(_Package("head", comp_h, _config(decoder_file=head.graph_rel, **kw), [head], libs))
    for pkg in packages:
        for lib in libs:
            rel = f"libs/{lib.basename}"
            if rel in pkg.comp.entries and pkg.comp.entries[rel].ident != _ident(lib.real):
                raise BuildError(f"--lib-{lib.name}: {rel} is also a file of the source bundles")
    return packages, dests


def _ident(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def _config(*, decoder_file: str, **kw: Unpack[_ConfigArgs]) -> str:
    cfg = make_config(decoder_file=decoder_file, **kw)
    # Round-trip through the strict parser: a bad value fails here, before anything is written.
    parse_config(config_to_dict(cfg), source=f"{kw['target_bundle']}: derived genai_config.json")
    chunk = cfg.model.qwen38_graph.prefill
    if chunk is not None and not 0 < chunk.chunk <= cfg.model.qwen38_graph.kv_capacity:
        raise BuildError(f"prefill chunk {chunk.chunk} must be in [1, kv_capacity={cfg.model.qwen38_graph.kv_capacity}]")
    return dumps_config(cfg)


def _rel_to(path: Path, where: Path) -> str:
    """A source path relative to the published package's parent (stable across machines)."""
    return os.path.relpath(os.path.realpath(path), os.path.realpath(where))


def _emit_multidraft(root: Path, config_text: str, *, profiles: bool) -> tuple[str, list[str]]:
    """Write model_s2/s3/s4.onnx next to the target graph; return the new config text and files.

    With ``profiles`` the router_weights inputs are cleared (the offload backend does not take
    them) and the config gains the runtime profiles and offload session options of ``q38 offload``.
    """
    cfg = parse_config(json.loads(config_text))
    g = cfg.model.qwen38_graph
    target = load_graph(root / g.target, root=root)
    graphs, _cleared = emit_multidraft_graphs(target, lineage=g.lineage, clear_router=profiles, where=g.target)
    for name, model in graphs.items():
        save_graph(model, root / name)
    if profiles:
        # As `q38 offload` does: the decoder (model.onnx) becomes a written copy of model_s4, and
        # the prefill graph, which runs under the same offload options, loses router_weights.
        (root / g.target).unlink()  # a file this build wrote, never a link to a source
        shutil.copyfile(root / "model_s4.onnx", root / g.target)
        if g.prefill is not None and (root / g.prefill.filename).is_file():
            prefill, _ = clear_router_weights(load_graph(root / g.prefill.filename, root=root), in_place=True)
            (root / g.prefill.filename).unlink()
            save_graph(prefill, root / g.prefill.filename)
        cfg = offload_profiles_config(cfg, graphs["model_s4.onnx"])
    else:
        names = {f"s{rows}": f"model_s{rows}.onnx" for rows in (2, 3, 4)}
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, qwen38_graph=dataclasses.replace(g, multidraft=names)))
    written = sorted(p.name for p in root.iterdir() if p.name.startswith("model_s"))
    return dumps_config(cfg), written


def _record(placed: Placed) -> FileRecord:
    return FileRecord(placed.mode, placed.sha256, identity=placed.identity)


def _place_entry(root: Path, rel: str, e: Entry, placer: Placer, files: dict[str, FileRecord]) -> None:
    dst = root / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if e.kind == "dir":
        dst.mkdir(exist_ok=True)
    elif e.kind == "symlink":
        assert e.link is not None
        os.symlink(e.link, dst)
        files[rel] = FileRecord("symlink", source=e.link)
    elif e.kind == "graph":
        assert e.model is not None
        files[rel] = FileRecord("write", save_proto(e.model, dst))
    else:
        assert e.src is not None
        files[rel] = _record(placer.place(e.src, dst))


def _write(
    root: Path,
    pkg: _Package,
    placer: Placer,
    modes: Counter[str],
    where: Path,
    *,
    multidraft: bool = False,
    offload_profiles: bool = False,
) -> None:
    files: dict[str, FileRecord] = {}
    entries = sorted(pkg.comp.entries.items())
    data = [e.src for _, e in entries if e.kind == "file" and e.src is not None]
    with placer.progress(data + [lib.real for lib in pkg.libs], f"build {pkg.rel or 'package'}: placing"):
        for rel, e in entries:
            _place_entry(root, rel, e, placer, files)
        lib_records: dict[str, FileRecord] = {}
        for lib in pkg.libs:
            rel = f"libs/{lib.basename}"
            if rel in files:  # the bundle's own libs/<basename>: _plan checked it is this file
                lib_records[lib.name] = files[rel]
                continue
            (root / "libs").mkdir(exist_ok=True)
            # Resolved (never a dangling link); copied unless it lies inside a source bundle.
            files[rel] = lib_records[lib.name] = _record(placer.place(lib.real, root / rel, outside=not lib.in_bundle))
    config_text = pkg.config_text
    if (multidraft or offload_profiles) and pkg.rel in ("", "target"):
        config_text, new_files = _emit_multidraft(root, config_text, profiles=offload_profiles)
        for name in new_files:
            files[name] = FileRecord("write", sha256_file(root / name))
    for name, text in (("genai_config.json", config_text), ("weights_pool.txt", _format_pool(pkg.comp.pool))):
        (root / name).write_text(text, encoding="utf-8")
        files[name] = FileRecord("write", hashlib.sha256(text.encode()).hexdigest())
    for rec in files.values():
        modes[rec.link_mode] += 1
    _check_links(root)
    qsa = {
        s.role: qsa_constants(s.model, base=root, what=f"{root.name}/{s.graph_rel}")
        for s in pkg.sources
        if s.role in ("target", "head")
    }
    sources: list[dict[str, str]] = [
        {"role": s.role, "path": _rel_to(s.bundle / s.graph_rel, where), "sha256": sha256_file(s.bundle / s.graph_rel)}
        for s in pkg.sources
    ]
    for lib in pkg.libs:
        entry = {"role": f"lib:{lib.name}", "path": _rel_to(lib.real, where)}
        sha = lib_records[lib.name].sha256
        if sha is not None:
            entry["sha256"] = sha
        sources.append(entry)
    manifest = Manifest(
        command="build",
        sources=tuple(sources),
        files=files,
        rewrites={f"shared_weight_redirects.{k}": v for k, v in sorted(pkg.comp.redirected.items())},
        extra={"qsa_constants": qsa},
    )
    text = dumps_manifest(manifest)
    (root / "package_manifest.json").write_text(text, encoding="utf-8")


def _check_links(root: Path) -> None:
    real_root = Path(os.path.realpath(root))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if os.path.islink(path):
                real = Path(os.path.realpath(path))
                if not real.exists() or not is_inside(real_root, real):
                    raise BuildError(
                        f"{path.relative_to(root)}: symlink -> {os.readlink(path)} dangles or escapes the package"
                    )


def build_package(req: BuildRequest) -> BuildResult:
    """Assemble the package(s) of ``req``; on any failure nothing is left at the destination.

    Raises:
        BuildError, FlagError, PackageError: an input is refused (nothing was written).

    """
    packages, dests = _plan(req)
    result = BuildResult(packages=[])
    bundles = [req.target, req.head] + ([req.prefill] if req.prefill else [])
    placer = Placer(req.link, digest=req.digest, known=_known_digests(bundles))
    if len(dests) == 1:
        with StagedDirectory(dests[0]) as stage:
            assert stage.path is not None
            for pkg in packages:
                root = stage.path / pkg.rel if pkg.rel else stage.path
                root.mkdir(exist_ok=True)
                _write(root, pkg, placer, result.link_modes, dests[0].parent, multidraft=req.multidraft, offload_profiles=req.offload_profiles)
            stage.commit()
        result.packages = [dests[0] / p.rel if p.rel else dests[0] for p in packages]
    else:
        stages = [StagedDirectory(d) for d in dests]
        try:
            for stage, pkg in zip(stages, packages, strict=True):
                stage.__enter__()
                assert stage.path is not None
                _write(stage.path, pkg, placer, result.link_modes, stage.dest.parent, multidraft=req.multidraft, offload_profiles=req.offload_profiles)
            done: list[StagedDirectory] = []
            try:
                for stage in stages:
                    stage.commit()
                    done.append(stage)
            except BaseException:
                for stage in done:  # never leave half of a layered build
                    shutil.rmtree(stage.dest, ignore_errors=True)
                raise
        finally:
            for stage in stages:
                stage.discard()
        result.packages = list(dests)
    for pkg in packages:
        result.pool_entries[pkg.rel or "package"] = len(pkg.comp.pool)
    result.bytes_copied = placer.bytes_copied
    if not result.packages:
        raise InternalError("no package was built")
    return result
