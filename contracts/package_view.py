"""What a package rule reads: the package root, its graphs and the libraries its config names.

A leaf of ``contracts``: :mod:`contracts._rule` types the package rules' checks with it, and the
package rules (``contracts.package_layout`` and the other family modules) read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GraphFile", "PackageView"]


@dataclass(frozen=True)
class GraphFile:
    """One graph of a package: its label, path and the directory that bounds its data."""

    label: str
    path: Path
    root: Path
    refs: tuple[tuple[str, str], ...]  # (initializer name, external-data location)
    load_error: str = ""  # why q38.package.load_graph refused the graph ("" when it loaded)


@dataclass(frozen=True)
class PackageView:
    """What the layout rules look at: the package root, its graphs and named libraries."""

    root: Path
    graphs: tuple[GraphFile, ...] = ()
    libraries: tuple[tuple[str, str], ...] = ()  # (JSON path, relative path)
    extra: dict[str, Any] = field(default_factory=dict)
