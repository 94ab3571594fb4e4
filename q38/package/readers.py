"""The package readers, one per surface, side by side: an explicit table, nothing registered by import.

A surface is one reader module exposing ``READER`` (a :class:`q38.package.interface.SurfaceReader`);
:data:`READER_MODULES` names them. A new surface is one more module here and one more row (and a
branch in :mod:`q38.package.detect` that recognises its config); docs/architecture.md lists the files.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from q38.package.interface import SurfaceReader

__all__ = ["READER_MODULES", "reader_for"]

# surface name -> the module that holds its READER. Imported on first use: the genai surface's
# schema costs a tenth of a second that a v12b command must not pay at start-up.
READER_MODULES: Final[dict[str, str]] = {
    "v12b": "q38.package.v12b.reader",
    "genai": "q38.package.genai.reader",
}


def reader_for(surface: str) -> SurfaceReader:
    """The reader of ``surface`` (one of :data:`READER_MODULES`)."""
    reader: SurfaceReader = importlib.import_module(READER_MODULES[surface]).READER
    return reader
