"""A third package surface, for tests only: the proof that a new surface is one reader.

Its config (``genai_config.json``, ``model.type`` :data:`STUB_TYPE`) names each graph and the
session config entries it runs with, nothing else::

    {"model": {"type": "q38_stub_lm", "graphs": {"decoder": {"filename": "model.onnx",
                                                             "session_entries": {...}}}}}

:class:`StubReader` / :class:`StubPackage` implement q38's package interface
(:class:`q38.package.interface.SurfaceReader`, :class:`q38.package.interface.AnyPackage`, and
``edit_sessions`` for ``q38 offload``); :func:`install` routes detection to it for one test.
No command or capability knows this surface.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import onnx_ir as ir
import pytest

from q38.errors import PackageError
from q38.package import detect, load_graph
from q38.package.graph_ref import GraphRef
from q38.package.interface import StateLayout
from q38.package.io.links import LinkPolicy, Placer
from q38.package.readers import READER_MODULES
from q38.package.step_graphs import DecodeGraphs, StepGraph

STUB_TYPE: Final = "q38_stub_lm"
CONFIG: Final = "genai_config.json"


def _graphs(document: Mapping[str, Any]) -> dict[str, Any]:
    model = document.get("model")
    graphs = model.get("graphs") if isinstance(model, Mapping) else None
    return graphs if isinstance(graphs, dict) else {}


def _refs(root: Path, document: Mapping[str, Any]) -> list[GraphRef]:
    refs = []
    for role, spec in _graphs(document).items():
        if isinstance(spec, Mapping) and isinstance(spec.get("filename"), str):
            entries = {k: v for k, v in (spec.get("session_entries") or {}).items() if isinstance(v, str)}
            refs.append(GraphRef(role, root / spec["filename"], spec["filename"], f"model.graphs.{role}",
                                 entries, (), root))
    return refs


@dataclass(frozen=True)
class EditedStubConfig:
    """What ``edit_sessions`` gives back: the document, its text, each graph file's entries."""

    config: dict[str, Any]
    text: str
    entries_by_file: dict[str, dict[str, str]]


@dataclass(frozen=True)
class StubPackage:
    """An opened stub package."""

    root: Path
    document: dict[str, Any]
    surface: str = "stub"

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG

    def graphs(self) -> list[GraphRef]:
        return _refs(self.root, self.document)

    def graph(self, role: str) -> GraphRef:
        for ref in self.graphs():
            if ref.role == role:
                return ref
        raise PackageError(f"{self.config_path}: no {role} graph")

    def load(self, role: str) -> ir.Model:
        return load_graph(self.graph(role).path, root=self.root)

    def placer(self, link: LinkPolicy, *, digest: bool) -> Placer:
        return Placer(link, digest=digest)

    def preferred_target(self) -> tuple[str, str]:
        return "cpu", "a stub package runs on the CPU"

    def decode_graphs(self) -> DecodeGraphs:
        return DecodeGraphs((StepGraph("decoder", self.graph("decoder").rel, self.root, self.load("decoder"), {}, {}),),
                            None, 0)

    def edit_sessions(self, entries: Mapping[str, Mapping[str, str]], *, drop_prefix: str,
                      provider_options: Mapping[str, Mapping[str, str]], source: str) -> EditedStubConfig:
        doc = json.loads(json.dumps(self.document))
        for role, new in entries.items():
            spec = doc["model"]["graphs"][role]
            kept = {k: v for k, v in (spec.get("session_entries") or {}).items() if not k.startswith(drop_prefix)}
            spec["session_entries"] = {**kept, **dict(sorted(new.items()))}
        by_file = {spec["filename"]: dict(spec["session_entries"]) for spec in doc["model"]["graphs"].values()}
        return EditedStubConfig(doc, json.dumps(doc, indent=2, sort_keys=True) + "\n", by_file)


class StubReader:
    """The stub surface's answers about a config document."""

    name: Final = "stub"

    def graph_refs(self, root: Path, config_dir: Path, document: Mapping[str, Any]) -> list[GraphRef]:
        return _refs(root, document)

    def open(self, path: Path | str) -> StubPackage:
        root = Path(path)
        _config_path, document = detect.read_raw_config(root)
        package = StubPackage(root, document)
        if not package.graphs():
            raise PackageError(f"{root / CONFIG}: model.graphs: names no graph")
        for ref in package.graphs():
            if not ref.path.is_file():
                raise PackageError(f"{ref.path}: no such graph file")
        return package

    def config_problem(self, document: Mapping[str, Any]) -> tuple[str, str] | None:
        return None if _graphs(document) else ("error", "model.graphs: expected an object")

    def graph_eps(self, document: Mapping[str, Any], providers: tuple[str, ...]) -> frozenset[str]:
        return frozenset({"cpu"})

    def session_blocks(self, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> list[tuple[str, Any]]:
        return []

    def state_layout(self, config_dir: Path, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> StateLayout:
        return StateLayout()

    def rule_context(self, document: Mapping[str, Any], config_path: Path,
                     models: Mapping[str, ir.Model]) -> dict[str, Any]:
        return {}


READER: Final = StubReader()


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route detection of :data:`STUB_TYPE` documents to this reader (the two lines a real surface adds)."""
    monkeypatch.setitem(READER_MODULES, "stub", __name__)
    plain = detect.document_surface

    def document_surface(doc: Mapping[str, Any]) -> Any:
        model = doc.get("model")
        return "stub" if isinstance(model, Mapping) and model.get("type") == STUB_TYPE else plain(doc)

    monkeypatch.setattr(detect, "document_surface", document_surface)


def write_stub_package(source: Path, dest: Path) -> Path:
    """A stub package at ``dest`` holding ``source``'s decoder graph and its data, renamed."""
    import shutil

    import onnx

    dest.mkdir()
    proto = onnx.load(str(source / "model.onnx"), load_external_data=False)
    locations = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    shutil.copy(source / "model.onnx", dest / "decoder.onnx")
    for loc in locations:
        shutil.copy(source / loc, dest / loc)
    doc = {"model": {"type": STUB_TYPE, "graphs": {"decoder": {"filename": "decoder.onnx", "session_entries": {}}}}}
    (dest / CONFIG).write_text(json.dumps(doc, indent=2) + "\n")
    return dest
