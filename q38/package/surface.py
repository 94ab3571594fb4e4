"""The package interface: what every command, converter and ``q38 check`` may ask of a package.

q38 reads two package surfaces (docs/package-format.md, docs/architecture.md):

* ``v12b``: q38's own (``model.type = "qwen38_flash_graph"``, ``qwen38_graph`` section, weights
  pool, manifest; flat or layered), :mod:`q38.package.v12b.reader`;
* ``genai``: what the onnxruntime-genai builder writes (``model.type`` such as
  ``qwen3_5_moe_text``; ``model.decoder`` / ``mtp`` / ``engram``, tokenizer files),
  :mod:`q38.package.genai.reader`.

:class:`AnyPackage` is an opened, validated package of either surface; :class:`SurfaceReader` is
what a surface answers about a config *document* that may be broken (``q38 check`` examines every
graph of a broken package). :func:`open_any` and :func:`list_graphs` pick the reader from
:mod:`q38.package.detect`; nothing outside ``q38/package/`` asks which surface it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from q38.errors import PackageError
from q38.package import detect
from q38.package.detect import CONFIG_FILENAME, SURFACES, SurfaceName, read_raw_config
from q38.package.genai.config import read_genai_config
from q38.package.graph_ref import GraphRef
from q38.package.interface import AnyPackage, SurfaceReader
from q38.package.readers import reader_for
from q38.package.v12b.config import read_config

if TYPE_CHECKING:
    from q38.package.genai.config import GenaiConfig
    from q38.package.genai.package import GenaiPackage
    from q38.package.v12b.config import Config
    from q38.package.v12b.reader import V12bPackage

T = TypeVar("T")

__all__ = [
    "SURFACES",
    "AnyPackage",
    "GraphListing",
    "SurfaceName",
    "SurfaceReader",
    "SurfaceVisitor",
    "detect_surface",
    "document_reader",
    "exporter_config",
    "list_graphs",
    "open_any",
    "require_surface",
    "visit",
]


def detect_surface(path: Path | str) -> SurfaceName:
    """Which surface the package at ``path`` is (:func:`q38.package.detect.detect_surface`)."""
    return detect.detect_surface(path)


def open_any(path: Path | str) -> AnyPackage:
    """Open a package of either surface, validated by that surface's reader."""
    return reader_for(detect.detect_surface(path)).open(path)


class SurfaceVisitor(Generic[T]):
    """What a capability does differently per surface: one method per surface that has its own.

    A capability subclasses it and overrides the surfaces it treats apart (``q38 offload``'s
    weights-pool plan for v12b, ``q38 optimize``'s write-backs, ``q38 export-genai``'s plans);
    :meth:`other` is what it does with any other surface (a new reader gets it without a line of
    capability code). :func:`visit` picks the method from the opened package's type, so no
    capability keys anything on the surface's name.
    """

    def v12b(self, package: V12bPackage) -> T:
        """A q38 (v12b) package."""
        return self.other(package)

    def genai(self, package: GenaiPackage) -> T:
        """A package the onnxruntime-genai builder wrote."""
        return self.other(package)

    def other(self, package: AnyPackage) -> T:
        """Any surface without a method of its own here."""
        raise NotImplementedError(f"{type(self).__name__} has no plan for a {package.surface} package")


def visit(package: AnyPackage, visitor: SurfaceVisitor[T]) -> T:
    """``visitor``'s method for ``package``'s surface (:class:`SurfaceVisitor`)."""
    # deferred: the reader modules are loaded already (the package was opened through one); a
    # top-level import would load both surfaces' graph code into every command's start-up
    from q38.package.genai.package import GenaiPackage
    from q38.package.v12b.reader import V12bPackage

    if isinstance(package, V12bPackage):
        return visitor.v12b(package)
    if isinstance(package, GenaiPackage):
        return visitor.genai(package)
    return visitor.other(package)


def document_reader(document: Mapping[str, Any]) -> SurfaceReader:
    """The reader of a config document on its own (no directory: a layered package is not known)."""
    return reader_for(detect.document_surface(document))


def exporter_config(directory: Path) -> Config | GenaiConfig:
    """The typed config of an exporter's output folder (a source bundle): v12b or builder surface.

    ``q38 build`` reads the model fields from it; which surface it is shows in the type returned.
    """
    path = directory / CONFIG_FILENAME
    return read_genai_config(path) if detect.detect_surface(directory) == "genai" else read_config(path)


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
    surface = detect.surface_of_document(config_path, root, doc)
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
    surface = detect.detect_surface(path)
    if surface not in accepted:
        takes = " or ".join(_WHY[s] for s in accepted)
        raise PackageError(
            f"{path}: {_WHY[surface]}; q38 {command} takes {takes}" + (f" ({reason})" if reason else "")
        )
    return surface
