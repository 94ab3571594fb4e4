"""Which graphs a package's config names, on both surfaces, from the config document alone.

``q38 check`` must examine every graph of a package even when the package is broken (a config
with a bad value, external data past the end of its file): a broken package is a list of
violations, not a refusal. So the listing works from the config *document* (read safely: the
config must be inside the package, a regular file, JSON), tolerating any value it does not
understand; the strict readers (``open_package``, ``open_genai_package``) use the same listing
on documents they have validated, so the two can never disagree on which graphs exist.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from q38.errors import PackageError, UnsafePathError
from q38.package.config import CONFIG_FILENAME
from q38.package.graph_ref import GraphRef
from q38.package.paths import resolve_inside

__all__ = ["GraphListing", "list_graphs", "read_raw_config", "surface_of_document", "v12b_graph_refs"]

Surface = Literal["v12b", "genai"]


def _inside_package(root: Path, path: Path) -> None:
    """Refuse (one PackageError line) a path whose links loop or resolve outside ``root``."""
    try:
        resolve_inside(root, path.relative_to(root).as_posix(), what=str(path), must_exist=False)
    except UnsafePathError as exc:
        raise PackageError(str(exc)) from None
    except (OSError, RuntimeError):
        raise PackageError(f"{path}: symlink loop") from None


def read_raw_config(root: Path) -> tuple[Path, dict[str, Any]]:
    """(config path, JSON object) of a flat (``root/``) or layered (``root/target/``) package."""
    from q38.package.jsonio import read_json

    if not root.is_dir():
        raise PackageError(f"{root}: not a package directory")
    for candidate in (root / CONFIG_FILENAME, root / "target" / CONFIG_FILENAME):
        if not os.path.lexists(candidate):
            continue
        _inside_package(root, candidate)  # nothing is read through a link that leaves the package
        if candidate.is_dir():
            raise PackageError(f"{candidate}: is a directory, not a JSON file")
        data = read_json(candidate, what="config")  # strict JSON, bounded, regular files only
        if not isinstance(data, dict):
            raise PackageError(f"{candidate}: expected a JSON object")
        return candidate, data
    raise PackageError(f"{root}: not a q38 package (no {CONFIG_FILENAME}, no target/{CONFIG_FILENAME})")


# The model types of q38's own (v12b) configs; every other string type is a genai document.
V12B_MODEL_TYPES: Final = frozenset({"qwen38_flash_graph", "qwen38_flash"})


def is_genai_document(data: object) -> bool:
    """Whether ``data`` is a genai-surface document, not q38's v12b one.

    v12b: ``model.type`` ``qwen38_flash_graph`` / ``qwen38_flash``, no (string) type at all, or a
    ``model.qwen38_graph`` / ``model.qwen38`` section (whatever the type says: the v12b parser
    then names the wrong type). Here, not in :mod:`q38.package.genai_config` (which re-exports it):
    telling the surfaces apart must not import the genai surface's schema (a tenth of a second of
    every v12b command's start-up).
    """
    if not isinstance(data, Mapping):
        return False
    model = data.get("model")
    if not isinstance(model, Mapping) or "qwen38_graph" in model or "qwen38" in model:
        return False
    mtype = model.get("type")
    return isinstance(mtype, str) and mtype not in V12B_MODEL_TYPES


def surface_of_document(config_path: Path, root: Path, doc: Mapping[str, Any]) -> Surface:
    """``v12b`` for q38's own configs (and any layered package), ``genai`` for builder configs."""
    if config_path.parent != root:
        return "v12b"
    return "genai" if is_genai_document(doc) else "v12b"


def _obj(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _entries(so: object) -> dict[str, str]:
    so = _obj(so)
    out = {k: v for k, v in _obj(so.get("config_entries")).items() if isinstance(v, str)}
    out.update({k: v for k, v in so.items() if "." in k and isinstance(v, str)})
    return out


def _providers(so: object) -> tuple[str, ...]:
    names = []
    for entry in _obj(so).get("provider_options") or []:
        for name in _obj(entry):
            names.append("CPU" if str(name).lower() == "cpu" else str(name))
    return tuple(names)


def v12b_graph_refs(root: Path, tdir: Path, doc: Mapping[str, Any]) -> list[GraphRef]:
    """Every graph a v12b document names: target, head, prefill, s2..s4, profile decoders.

    ``overlay_entries`` of a graph are the session entries runtime profiles apply to it (the
    profile's decoder file, by default the target graph; the head keeps its own options).
    """
    model = _obj(doc.get("model"))
    graph = _obj(model.get("qwen38_graph", model.get("qwen38")))
    decoder = _obj(model.get("decoder"))
    dso = decoder.get("session_options")
    layered = tdir != root and (root / "head").is_dir()
    hdir = root / "head" if layered else tdir
    specs: list[tuple[str, Path, str, object]] = []
    target = _obj(graph.get("target")).get("filename")
    if isinstance(target, str):
        specs.append(("target", tdir, target, dso))
    head = _obj(_obj(graph.get("fold")).get("head_r2"))
    if isinstance(head.get("filename"), str):
        specs.append(("head", hdir, head["filename"], head.get("session_options")))
    prefill = _obj(graph.get("prefill"))
    if isinstance(prefill.get("filename"), str):
        specs.append(("prefill", tdir, prefill["filename"], dso))
    for role, rel in sorted(_obj(graph.get("multidraft")).items()):
        if isinstance(rel, str):
            specs.append((role, tdir, rel, dso))
    decoder_file = str(decoder.get("filename", "model.onnx"))
    overlays: list[tuple[str, str, object]] = []
    profiles = doc.get("runtime_profiles")
    for i, profile in enumerate(profiles if isinstance(profiles, list) else []):
        over = _obj(_obj(_obj(_obj(profile).get("overlay")).get("model")).get("decoder"))
        filename = over.get("filename", decoder_file)
        if isinstance(filename, str):
            overlays.append((f"profile:{_obj(profile).get('id', i)}", filename, over.get("session_options")))
    refs = []
    for role, base, rel, so in specs:
        path = base / rel
        extra = tuple(
            _entries(oso) for _pid, name, oso in overlays if role != "head" and name == path.name and oso is not None
        )
        refs.append(GraphRef(role, path, _rel(root, path, rel), "model.qwen38_graph" if role != "head" else
                             "model.qwen38_graph.fold.head_r2", _entries(so), _providers(so), base, extra))  # fmt: skip
    return refs


def _rel(root: Path, path: Path, fallback: str) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return fallback


@dataclass(frozen=True)
class GraphListing:
    """A package's surface, config and graphs, as far as its config document says."""

    surface: Surface
    root: Path
    config_path: Path
    document: dict[str, Any]
    graphs: list[GraphRef] = field(default_factory=list)

    @property
    def config_dir(self) -> Path:
        return self.config_path.parent


def list_graphs(path: Path | str) -> GraphListing:
    """Read the config of the package at ``path`` (safely) and list the graphs it names."""
    root = Path(path)
    config_path, doc = read_raw_config(root)
    surface = surface_of_document(config_path, root, doc)
    if surface == "genai":
        # the genai surface loads when a genai document is seen
        from q38.package.genai_package import genai_graph_refs

        refs = genai_graph_refs(root, doc)
    else:
        refs = v12b_graph_refs(root, config_path.parent, doc)
    return GraphListing(surface, root, config_path, doc, refs)
