"""The genai surface (packages the onnxruntime-genai builder writes), behind the package interface.

The typed config is :mod:`q38.package.genai.config`, the strict reader and the tolerant graph
listing :mod:`q38.package.genai.package`; this module answers what ``q38 check`` asks of any
surface (:class:`q38.package.interface.SurfaceReader`) for a builder config document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from q38.errors import ConfigError
from q38.package.genai.config import parse_genai_config
from q38.package.genai.package import GenaiPackage, genai_graph_refs, open_genai_package
from q38.package.graph_ref import GraphRef
from q38.package.interface import StateLayout

if TYPE_CHECKING:  # onnx_ir (and sympy through it) loads when a graph does
    import onnx_ir as ir

__all__ = ["READER", "GenaiReader"]


class GenaiReader:
    """The genai surface's answers to what listings and ``q38 check`` ask of a config document."""

    name: Final = "genai"

    def graph_refs(self, root: Path, config_dir: Path, document: Mapping[str, Any]) -> list[GraphRef]:
        """Every graph a builder document names, decoder first (tolerant of a broken document)."""
        return genai_graph_refs(root, dict(document))

    def open(self, path: Path | str) -> GenaiPackage:
        """The strict reader: one PackageError line for any problem."""
        return open_genai_package(path)

    def config_problem(self, document: Mapping[str, Any]) -> tuple[str, str] | None:
        """(severity, message) for a config GenAI 0.18.0 (or the research builder's surface) refuses.

        A config only the research builder's keys keep 0.18.0 from loading is a warning: q38
        reads it, released onnxruntime-genai would refuse it.
        """
        try:
            parsed = parse_genai_config(dict(document), research=True)
        except ConfigError as exc:
            return "error", str(exc)
        if parsed.og_refusal:
            return "warning", f"onnxruntime-genai 0.18.0 refuses this config: {parsed.og_refusal}"
        return None

    def graph_eps(self, document: Mapping[str, Any], providers: tuple[str, ...]) -> frozenset[str]:
        """The EPs a graph's kernel rules concern: the providers its session options name."""
        if "cuda" in providers:
            return frozenset({"cuda"})
        return frozenset({"cpu"} if not providers or "CPU" in providers else set())

    def session_blocks(self, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> list[tuple[str, Mapping[str, Any]]]:
        """The session_options of every graph section other than the decoder (mtp, engram, ...)."""
        model = document.get("model") or {}
        blocks: list[tuple[str, Mapping[str, Any]]] = []
        for ref in graphs:
            section = model.get(ref.role) if ref.role != "decoder" and isinstance(model, Mapping) else None
            so = section.get("session_options") if isinstance(section, Mapping) else None
            if isinstance(so, Mapping):
                blocks.append((f"{ref.section}.session_options", so))
        return blocks

    def state_layout(self, config_dir: Path, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> StateLayout:
        """Builder packages: the MTP / engram / draft graphs carry KV caches of their own; nothing is pooled."""
        rest = graphs[1:]
        return StateLayout(
            state_graphs=tuple(r.path for r in rest if r.role in ("mtp", "engram", "draft")),
            mtp_graphs=tuple(r.path for r in rest if r.role == "mtp"),
        )

    def rule_context(self, document: Mapping[str, Any], config_path: Path,
                     models: Mapping[str, ir.Model]) -> dict[str, Any]:  # fmt: skip
        """The parsed config (when it parses) and the loaded graphs, for the builder package rules."""
        try:
            config = parse_genai_config(dict(document), source=str(config_path), research=True)
        except ConfigError:
            return {}  # CFG-SURFACE-001 reports it
        return {"genai_config": config, "models": dict(models)}


READER: Final = GenaiReader()
