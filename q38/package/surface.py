"""One entry point for both package surfaces: ``open_any(path)``.

q38 reads two kinds of package (docs/package-format.md):

* ``v12b``: q38's own (``model.type = "qwen38_flash_graph"``, ``qwen38_graph`` section, weights
  pool, manifest; flat or layered), read by :func:`q38.package.open_package`;
* ``genai``: what the onnxruntime-genai builder writes (``model.type`` such as
  ``qwen3_5_moe_text``; ``model.decoder`` / ``mtp`` / ``engram``, tokenizer files), read by
  :func:`q38.package.genai_package.open_genai_package`.

:func:`open_any` returns an object with ``.surface``, ``.root`` and ``.graphs()`` (a
:class:`GraphRef` per graph the config names, with its session options and providers);
commands and ``q38 check`` iterate that instead of the raw JSON. :func:`require_surface` is how
a command that takes one surface refuses the other, in one line that says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from q38.errors import PackageError
from q38.package.config import config_to_dict
from q38.package.graph_listing import Surface, read_raw_config, surface_of_document, v12b_graph_refs
from q38.package.graph_ref import GraphRef
from q38.package.package import Package, open_package

if TYPE_CHECKING:  # the genai reader is imported when a genai package is opened
    from q38.package.genai_package import GenaiPackage

__all__ = ["SURFACES", "AnyPackage", "Surface", "V12bPackage", "detect_surface", "open_any", "require_surface"]

SURFACES: Final = ("v12b", "genai")


class AnyPackage(Protocol):
    """What every command may rely on, whatever the surface."""

    @property
    def surface(self) -> str: ...

    @property
    def root(self) -> Path: ...

    def graphs(self) -> list[GraphRef]: ...


@dataclass(frozen=True)
class V12bPackage:
    """A v12b package seen through the surface-neutral protocol (``.package`` is the full model)."""

    package: Package
    surface: str = "v12b"

    @property
    def root(self) -> Path:
        return self.package.root

    def graphs(self) -> list[GraphRef]:
        pkg = self.package
        return v12b_graph_refs(pkg.root, pkg.target_dir, config_to_dict(pkg.config))


def detect_surface(path: Path | str) -> Surface:
    """Which surface the package at ``path`` is, from its config's ``model.type`` alone.

    A layered directory (``target/genai_config.json``) is v12b; otherwise ``model.type``
    ``qwen38_flash_graph`` (or the v12 ``qwen38_flash``) is v12b and anything else genai.
    """
    root = Path(path)
    config_path, doc = read_raw_config(root)
    return surface_of_document(config_path, root, doc)


def open_any(path: Path | str) -> V12bPackage | GenaiPackage:
    """Open a package of either surface, validated by that surface's reader."""
    if detect_surface(path) == "genai":
        from q38.package.genai_package import open_genai_package

        return open_genai_package(path)
    return V12bPackage(open_package(path))


_WHY: Final = {
    "v12b": "q38's own package (model.type 'qwen38_flash_graph')",
    "genai": "an onnxruntime-genai builder package",
}


def require_surface(path: Path | str, accepted: tuple[Surface, ...], *, command: str, reason: str = "") -> Surface:
    """The surface of ``path`` if ``command`` takes it; otherwise one PackageError line saying why."""
    surface = detect_surface(path)
    if surface not in accepted:
        takes = " or ".join(_WHY[s] for s in accepted)
        raise PackageError(
            f"{path}: {_WHY[surface]}; q38 {command} takes {takes}" + (f" ({reason})" if reason else "")
        )
    return surface
