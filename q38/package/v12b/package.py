"""The package model: open a package directory, and write one through a staged writer."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final

import onnx_ir as ir

from q38.errors import PackageError, PoolError, clip, quote
from q38.package.graphs import ExternalRef, load_graph, load_graph_refs
from q38.package.io.hashing import KnownDigests
from q38.package.io.links import LinkMode, LinkPolicy, Placer, place
from q38.package.io.paths import safe_relpath
from q38.package.io.staging import StagedDirectory
from q38.package.manifest import (
    MANIFEST_FILENAME,
    FileRecord,
    Manifest,
    dumps_manifest,
    read_manifest,
)
from q38.package.path_fields import check_path_fields
from q38.package.profile import ExpertProfile, read_profile
from q38.package.tree import Layout, check_tree, package_dirs, require_file
from q38.package.v12b.config import (
    CONFIG_FILENAME,
    Config,
    config_to_dict,
    dumps_config,
    read_config,
)
from q38.package.v12b.pool import POOL_FILENAME, WeightsPool, format_pool, read_pool

__all__ = ["GRAPH_ROLES", "Package", "PackageWriter", "open_package", "source_placer"]

_LOG = logging.getLogger(__name__)

GRAPH_ROLES: Final = ("target", "head", "prefill", "s2", "s3", "s4")


@dataclass(frozen=True)
class Package:
    """A package directory, read and validated; graphs are loaded on demand."""

    root: Path
    layout: Layout
    config: Config
    pool: WeightsPool
    manifest: Manifest | None
    head_pool: WeightsPool | None = None
    head_manifest: Manifest | None = None
    profile: ExpertProfile | None = None
    dirs: dict[str, Path] = field(default_factory=dict)

    @property
    def target_dir(self) -> Path:
        """The directory holding the config, the target graph and its pool (the root when flat)."""
        return self.dirs["target"]

    @property
    def head_dir(self) -> Path:
        """The directory holding the head graph (``head/`` when layered, the root when flat)."""
        return self.dirs["head"]

    def roles(self) -> list[str]:
        """The graph roles this package has, in a fixed order."""
        g = self.config.model.qwen38_graph
        roles = ["target", "head"]
        if g.prefill is not None:
            roles.append("prefill")
        roles.extend(k for k in ("s2", "s3", "s4") if k in g.multidraft)
        return roles

    def graph_filename(self, role: str) -> str:
        """The config's file name for ``role``; one PackageError line when the package has no such graph."""
        g = self.config.model.qwen38_graph
        if role == "target":
            return g.target
        if role == "head":
            return g.head_r2.filename
        if role == "prefill":
            if g.prefill is None:
                raise PackageError(f"{clip(self.root)}: package has no prefill graph")
            return g.prefill.filename
        if role in g.multidraft:
            return g.multidraft[role]
        raise PackageError(f"{clip(self.root)}: package has no {quote(role)} graph")

    def graph_dir(self, role: str) -> Path:
        """The directory ``role``'s file name is relative to (the head's own in a layered package)."""
        return self.dirs["head"] if role == "head" else self.dirs["target"]

    def graph_path(self, role: str) -> Path:
        """The graph file of ``role`` (not checked to exist: :func:`open_package` did that)."""
        return self.graph_dir(role) / self.graph_filename(role)

    def load(self, role: str) -> ir.Model:
        """Load one graph without its external weights (validated, hard-link tolerant)."""
        return load_graph(self.graph_path(role), root=self.graph_dir(role))

    def load_with_refs(self, role: str) -> tuple[ir.Model, list[ExternalRef]]:
        """:meth:`load`, and the external-data references it validated (``external_refs``)."""
        return load_graph_refs(self.graph_path(role), root=self.graph_dir(role))


def _check_pool_ranges(base: Path, pool: WeightsPool, source: Path) -> None:
    for entry in pool.entries:
        path = require_file(base, entry.file, what=f"{clip(source)}: pool entry {quote(entry.pool_id)}")
        size = path.stat().st_size
        end = entry.offset + (entry.length or 0)
        if entry.offset > size or end > size:
            raise PoolError(
                f"{clip(source)}: pool entry {quote(entry.pool_id)}: byte range [{entry.offset}, {end}) is past "
                f"the end of {quote(entry.file)} ({size} bytes)"
            )


def open_package(path: Path | str) -> Package:
    """Open and validate a flat or layered package; any problem is one PackageError line.

    Every file is opened through :mod:`q38.package.io.files` (regular files only, bounded reads) and
    every path field of the config meets :mod:`q38.package.path_fields`' contract before a
    byte of it is read.
    """
    root = Path(path)
    layout, dirs = package_dirs(root)
    tdir = dirs["target"]
    _LOG.info("reading package %s (%s)", clip(root), layout)
    check_tree(root)
    config_path = require_file(tdir, CONFIG_FILENAME, what=f"{clip(tdir)}: config")
    config = read_config(config_path)
    check_path_fields(
        config_to_dict(config), root=root, config_dir=tdir, head_dir=dirs["head"], source=clip(config_path)
    )
    g = config.model.qwen38_graph
    pool_path = require_file(tdir, g.weights_pool, what=f"{clip(config_path)}: model.qwen38_graph.weights_pool")
    pool = read_pool(pool_path)
    manifest = (
        read_manifest(require_file(tdir, MANIFEST_FILENAME, what=f"{clip(tdir)}: manifest"))
        if os.path.lexists(tdir / MANIFEST_FILENAME)
        else None
    )
    head_pool = head_manifest = None
    if layout == "layered":
        hdir = dirs["head"]
        if os.path.lexists(hdir / POOL_FILENAME):
            head_pool_path = require_file(hdir, POOL_FILENAME, what=f"{clip(hdir)}: weights pool")
            head_pool = read_pool(head_pool_path)
            _check_pool_ranges(hdir, head_pool, head_pool_path)
        if os.path.lexists(hdir / MANIFEST_FILENAME):
            head_manifest = read_manifest(require_file(hdir, MANIFEST_FILENAME, what=f"{clip(hdir)}: manifest"))
    profile = None
    if g.expert_profile is not None:
        profile = read_profile(
            require_file(tdir, g.expert_profile, what=f"{clip(config_path)}: model.qwen38_graph.expert_profile")
        )
    _check_pool_ranges(tdir, pool, pool_path)
    so = config.model.decoder.session_options
    libs = dict(g.libraries)
    if so.custom_ops_library is not None:
        libs["custom_ops_library"] = so.custom_ops_library
    for name, rel in libs.items():
        require_file(tdir, rel, what=f"{clip(config_path)}: library {quote(name)}")
    package = Package(
        root=root,
        layout=layout,
        config=config,
        pool=pool,
        manifest=manifest,
        head_pool=head_pool,
        head_manifest=head_manifest,
        profile=profile,
        dirs=dirs,
    )
    for role in package.roles():
        rel = package.graph_filename(role)
        require_file(package.graph_dir(role), rel, what=f"{clip(config_path)}: {role} graph")
    return package


def source_placer(package: Package, policy: LinkPolicy = LinkPolicy.AUTO, *, digest: bool = False) -> Placer:
    """The :class:`Placer` of a command that writes a new package from ``package``.

    Digests the source's manifests hold are reused for files whose identity still matches, or,
    for records without one, that were not modified after the manifest was written.
    """
    known = KnownDigests()
    for manifest, where in ((package.manifest, package.target_dir), (package.head_manifest, package.head_dir)):
        if manifest is not None:
            try:
                written = os.lstat(where / MANIFEST_FILENAME).st_mtime_ns
            except OSError:
                written = None
            known.add_manifest(where, manifest.files, manifest_mtime_ns=written)
    return Placer(policy, digest=digest, known=known)


class PackageWriter:
    """Write a package into a staging directory; it is renamed into place on success.

    Usage::

        with PackageWriter(dest) as w:
            w.write_config(cfg)
            w.place(src_data, "model.onnx.data", LinkPolicy.COPY)
        # dest now exists, complete; on any exception nothing is left behind.
    """

    def __init__(self, dest: Path | str, placer: Placer | None = None) -> None:
        self._staged = StagedDirectory(Path(dest))
        self.placer = placer if placer is not None else Placer(LinkPolicy.AUTO)
        self.link_modes: dict[str, str] = {}
        self.records: dict[str, FileRecord] = {}
        """Manifest records of the files :meth:`place` put here (mode, identity, digest if any)."""

    @property
    def dest(self) -> Path:
        """Where the package appears on commit (absolute); nothing is there until then."""
        return self._staged.dest

    @property
    def path(self) -> Path:
        """The staging directory; write everything under it."""
        return self._staged.path

    def __enter__(self) -> PackageWriter:
        self._staged.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                self._staged.commit()
        finally:
            self._staged.__exit__(exc_type, exc, tb)

    def _target(self, rel: str) -> Path:
        norm = safe_relpath(rel, what=f"output file {rel!r}")
        target = self.path / norm
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write_text(self, rel: str, text: str) -> Path:
        """Write ``text`` as the new file ``rel`` (UTF-8, no newline translation); an existing file is refused."""
        target = self._target(rel)
        with open(target, "x", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        self.link_modes[rel] = "write"
        _LOG.info("wrote %s", rel)
        return target

    def write_bytes(self, rel: str, data: bytes) -> Path:
        """Write ``data`` as the new file ``rel``; an existing file is refused, as by :meth:`write_text`."""
        target = self._target(rel)
        with open(target, "xb") as fh:
            fh.write(data)
        self.link_modes[rel] = "write"
        _LOG.info("wrote %s", rel)
        return target

    def write_config(self, config: Config, subdir: str = "") -> Path:
        """Write ``config`` as ``genai_config.json`` (under ``subdir``), in its deterministic form."""
        return self.write_text(_rel(subdir, CONFIG_FILENAME), dumps_config(config))

    def write_pool(self, pool: WeightsPool, subdir: str = "", name: str = POOL_FILENAME) -> Path:
        """Write ``pool`` as ``name`` (under ``subdir``); its comment lines round-trip."""
        return self.write_text(_rel(subdir, name), format_pool(pool))

    def write_manifest(self, manifest: Manifest, subdir: str = "") -> Path:
        """Write ``manifest`` (under ``subdir``); commands write it last, once every file is recorded."""
        return self.write_text(_rel(subdir, MANIFEST_FILENAME), dumps_manifest(manifest))

    def place(self, src: Path, rel: str, policy: LinkPolicy | None = None) -> LinkMode:
        """Place ``src`` at ``rel`` by the writer's :class:`Placer` (or an explicit ``policy``)."""
        target = self._target(rel)
        if policy is None or policy is self.placer.policy:
            placed = self.placer.place(src, target)
        else:
            placed = place(src, target, policy, digest=self.placer.digest, known=self.placer.known)
        self.link_modes[rel] = str(placed.mode)
        self.records[rel] = FileRecord(placed.mode, placed.sha256, identity=placed.identity)
        _LOG.info("placed %s (%s of %s)", rel, placed.mode, src)
        return placed.mode


def _rel(subdir: str, name: str) -> str:
    return f"{subdir}/{name}" if subdir else name
