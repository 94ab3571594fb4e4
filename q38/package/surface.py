"""The package interface: what every command, converter and ``q38 check`` may ask of a package.

q38 reads two package surfaces (docs/package-format.md, docs/architecture.md):

* ``v12b``: q38's own (``model.type = "qwen38_flash_graph"``, ``qwen38_graph`` section, weights
  pool, manifest; flat or layered), :mod:`q38.package.readers.v12b`;
* ``genai``: what the onnxruntime-genai builder writes (``model.type`` such as
  ``qwen3_5_moe_text``; ``model.decoder`` / ``mtp`` / ``engram``, tokenizer files),
  :mod:`q38.package.readers.genai`.

:class:`AnyPackage` is an opened, validated package of either surface; :class:`SurfaceReader` is
what a surface answers about a config *document* that may be broken (``q38 check`` examines every
graph of a broken package). :func:`open_any` and :func:`list_graphs` pick the reader from
:mod:`q38.package.detect`; nothing outside ``q38/package/`` asks which surface it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import onnx_ir as ir

from q38.errors import PackageError
from q38.package.detect import (
    CONFIG_FILENAME,
    SURFACES,
    SurfaceName,
    detect_surface,
    is_genai_document,
    read_raw_config,
    surface_of_document,
)
from q38.package.graph_ref import GraphRef
from q38.package.links import LinkPolicy, Placer
from q38.package.readers import reader_for
from q38.package.step_graphs import DecodeGraphs

if TYPE_CHECKING:
    from q38.package.config import Config
    from q38.package.genai_config import GenaiConfig

__all__ = [
    "SURFACES",
    "AnyPackage",
    "GraphListing",
    "SurfaceName",
    "SurfaceReader",
    "detect_surface",
    "document_reader",
    "exporter_config",
    "list_graphs",
    "open_any",
    "require_surface",
]


class AnyPackage(Protocol):
    """An opened, validated package of either surface: what every command may rely on."""

    @property
    def surface(self) -> str:
        """The surface's name (``v12b``, ``genai``), for reports and manifests only."""

    @property
    def root(self) -> Path:
        """The package directory."""

    @property
    def config_path(self) -> Path:
        """The config file."""

    def graphs(self) -> list[GraphRef]:
        """Every graph the config names, with its role, session options and providers."""

    def load(self, role: str) -> ir.Model:
        """One graph by role, without its external weights."""

    def placer(self, link: LinkPolicy, *, digest: bool) -> Placer:
        """How a command that writes a new package places this package's unchanged files."""

    def preferred_target(self) -> tuple[str, str]:
        """The runtime the package runs on (``cpu`` / ``cuda``) and why."""

    def decode_graphs(self) -> DecodeGraphs:
        """The graphs one decode step runs (decoder first), for ``q38 profile``."""


class SurfaceReader(Protocol):
    """A surface's answers about a config document that may be broken (``q38 check``, listings)."""

    @property
    def name(self) -> str:
        """The surface's name."""

    def graph_refs(self, root: Path, config_dir: Path, document: Mapping[str, Any]) -> list[GraphRef]:
        """Every graph the document names (tolerant: a broken value names no graph)."""

    def open(self, path: Path | str) -> AnyPackage:
        """The strict reader: the opened package, or one PackageError line."""

    def config_problem(self, document: Mapping[str, Any]) -> tuple[str, str] | None:
        """(``error`` / ``warning``, message) when the surface's strict parser objects, else None."""

    def graph_eps(self, document: Mapping[str, Any], providers: tuple[str, ...]) -> frozenset[str]:
        """The execution providers the kernel rules of a graph with these providers concern."""

    def session_blocks(self, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> list[tuple[str, Any]]:
        """(JSON path, block) of session-option blocks beyond the decoder / head / overlays."""

    def rule_context(self, document: Mapping[str, Any], config_path: Path,
                     models: Mapping[str, ir.Model]) -> dict[str, Any]:  # fmt: skip
        """Surface facts the package rules read (``PackageView.extra``)."""


def open_any(path: Path | str) -> AnyPackage:
    """Open a package of either surface, validated by that surface's reader."""
    return reader_for(detect_surface(path)).open(path)


def document_reader(document: Mapping[str, Any]) -> SurfaceReader:
    """The reader of a config document on its own (no directory: a layered package is not known)."""
    return reader_for("genai" if is_genai_document(document) else "v12b")


def exporter_config(directory: Path) -> Config | GenaiConfig:
    """The typed config of an exporter's output folder (a source bundle): v12b or builder surface.

    ``q38 build`` reads the model fields from it; which surface it is shows in the type returned.
    """
    from q38.package.config import read_config
    from q38.package.genai_config import read_genai_config

    path = directory / CONFIG_FILENAME
    return read_genai_config(path) if detect_surface(directory) == "genai" else read_config(path)


@dataclass(frozen=True)
class GraphListing:
    """A package's surface, config and graphs, as far as its config document says."""

    surface: SurfaceName
    root: Path
    config_path: Path
    document: dict[str, Any]
    graphs: list[GraphRef] = field(default_factory=list)

    @property
    def config_dir(self) -> Path:
        """The directory of the config (``target/`` in a layered package)."""
        return self.config_path.parent

    @property
    def reader(self) -> SurfaceReader:
        """The reader of the package's surface."""
        return reader_for(self.surface)


def list_graphs(path: Path | str) -> GraphListing:
    """Read the config of the package at ``path`` (safely) and list the graphs it names."""
    root = Path(path)
    config_path, doc = read_raw_config(root)
    surface = surface_of_document(config_path, root, doc)
    refs = reader_for(surface).graph_refs(root, config_path.parent, doc)
    return GraphListing(surface, root, config_path, doc, refs)


_WHY: Final = {
    "v12b": "q38's own package (model.type 'qwen38_flash_graph')",
    "genai": "an onnxruntime-genai builder package",
}


def require_surface(
    path: Path | str, accepted: tuple[SurfaceName, ...], *, command: str, reason: str = ""
) -> SurfaceName:
    """The surface of ``path`` if ``command`` takes it; otherwise one PackageError line saying why."""
    surface = detect_surface(path)
    if surface not in accepted:
        takes = " or ".join(_WHY[s] for s in accepted)
        raise PackageError(
            f"{path}: {_WHY[surface]}; q38 {command} takes {takes}" + (f" ({reason})" if reason else "")
        )
    return surface
