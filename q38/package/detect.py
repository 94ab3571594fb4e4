"""Which surface a package directory is, from its config document alone (a leaf module).

q38 reads two package surfaces (docs/package-format.md): ``v12b`` (q38's own: ``model.type``
``qwen38_flash_graph``, a ``qwen38_graph`` section, flat or layered) and ``genai`` (what the
onnxruntime-genai builder writes). Telling them apart must be cheap and must not import either
surface's schema (a tenth of a second of every command's start-up), so this module imports only
q38's error types and the safe file readers, and every reader and command asks it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from q38.errors import PackageError, UnsafePathError
from q38.package.io.jsonio import read_json
from q38.package.io.paths import resolve_inside

__all__ = [
    "CONFIG_FILENAME",
    "SURFACES",
    "V12B_MODEL_TYPES",
    "SurfaceName",
    "detect_surface",
    "document_surface",
    "inside_package",
    "is_genai_document",
    "read_raw_config",
    "surface_of_document",
]

CONFIG_FILENAME: Final = "genai_config.json"
SurfaceName = Literal["v12b", "genai"]
SURFACES: Final[tuple[SurfaceName, ...]] = ("v12b", "genai")
# The model types of q38's own (v12b) configs; every other string type is a genai document.
V12B_MODEL_TYPES: Final = frozenset({"qwen38_flash_graph", "qwen38_flash"})


def inside_package(root: Path, path: Path) -> None:
    """Refuse (one PackageError line) a path whose links loop or resolve outside ``root``."""
    try:
        resolve_inside(root, path.relative_to(root).as_posix(), what=str(path), must_exist=False)
    except UnsafePathError as exc:
        raise PackageError(str(exc)) from None
    except (OSError, RuntimeError):
        raise PackageError(f"{path}: symlink loop") from None


def read_raw_config(root: Path) -> tuple[Path, dict[str, Any]]:
    """(config path, JSON object) of a flat (``root/``) or layered (``root/target/``) package."""
    if not root.is_dir():
        raise PackageError(f"{root}: not a package directory")
    for candidate in (root / CONFIG_FILENAME, root / "target" / CONFIG_FILENAME):
        if not os.path.lexists(candidate):
            continue
        inside_package(root, candidate)  # nothing is read through a link that leaves the package
        if candidate.is_dir():
            raise PackageError(f"{candidate}: is a directory, not a JSON file")
        data = read_json(candidate, what="config")  # strict JSON, bounded, regular files only
        if not isinstance(data, dict):
            raise PackageError(f"{candidate}: expected a JSON object")
        return candidate, data
    raise PackageError(f"{root}: not a q38 package (no {CONFIG_FILENAME}, no target/{CONFIG_FILENAME})")


def is_genai_document(data: object) -> bool:
    """Whether ``data`` is a genai-surface document, not q38's v12b one.

    v12b: ``model.type`` ``qwen38_flash_graph`` / ``qwen38_flash``, no (string) type at all, or a
    ``model.qwen38_graph`` / ``model.qwen38`` section (whatever the type says: the v12b parser
    then names the wrong type).
    """
    if not isinstance(data, Mapping):
        return False
    model = data.get("model")
    if not isinstance(model, Mapping) or "qwen38_graph" in model or "qwen38" in model:
        return False
    mtype = model.get("type")
    return isinstance(mtype, str) and mtype not in V12B_MODEL_TYPES


def document_surface(doc: Mapping[str, Any]) -> SurfaceName:
    """The surface a config document alone says (every other decision here ends in this one)."""
    return "genai" if is_genai_document(doc) else "v12b"


def surface_of_document(config_path: Path, root: Path, doc: Mapping[str, Any]) -> SurfaceName:
    """``v12b`` for q38's own configs (and any layered package), else what the document says."""
    if config_path.parent != root:
        return "v12b"
    return document_surface(doc)


def detect_surface(path: Path | str) -> SurfaceName:
    """Which surface the package at ``path`` is, from its config's ``model.type`` alone.

    A layered directory (``target/genai_config.json``) is v12b; otherwise ``model.type``
    ``qwen38_flash_graph`` (or the v12 ``qwen38_flash``) is v12b and anything else genai.
    """
    root = Path(path)
    config_path, doc = read_raw_config(root)
    return surface_of_document(config_path, root, doc)
