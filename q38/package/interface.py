"""The package interface: what every command, converter and ``q38 check`` may ask of a package.

:class:`AnyPackage` is an opened, validated package of any surface; :class:`SurfaceReader` is what
a surface answers about a config *document* that may be broken. Each reader
(:mod:`q38.package.readers`) implements both; docs/architecture.md says how to add one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from q38.package.graph_ref import GraphRef
from q38.package.io.links import LinkPolicy, Placer
from q38.package.step_graphs import DecodeGraphs

if TYPE_CHECKING:  # onnx_ir (and sympy through it) loads when a graph does
    import onnx_ir as ir

__all__ = ["AnyPackage", "EditedSessions", "SessionPackage", "StateLayout", "SurfaceReader"]


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


@dataclass(frozen=True)
class StateLayout:
    """Where a surface keeps state and pooled weights, for the memory model (:mod:`q38.package.memory`).

    ``state_graphs``: the graphs besides the decoder that carry KV caches of their own;
    ``mtp_graphs``: those of them that are MTP drafts; ``placements``: ``(file, offset) ->
    placement`` of the weights the config pools (paths as the config resolves them).
    """

    state_graphs: tuple[Path, ...] = ()
    mtp_graphs: tuple[Path, ...] = ()
    placements: Mapping[tuple[Path, int], str] = field(default_factory=dict)


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

    def session_blocks(self, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> list[tuple[str, Mapping[str, Any]]]:
        """(JSON path, block) of session-option blocks beyond the decoder / head / overlays."""

    def state_layout(self, config_dir: Path, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> StateLayout:
        """Which of ``graphs`` carry state of their own and where pooled weights are placed."""

    def rule_context(self, document: Mapping[str, Any], config_path: Path,
                     models: Mapping[str, ir.Model]) -> dict[str, Any]:  # fmt: skip
        """Surface facts the package rules read (``PackageView.extra``)."""


class EditedSessions(Protocol):
    """A config edited by :meth:`SessionPackage.edit_sessions`: its text and each graph file's entries."""

    @property
    def text(self) -> str:
        """The config file's new text (strictly re-parsed by the surface before it is returned)."""

    @property
    def entries_by_file(self) -> Mapping[str, Mapping[str, str]]:
        """Graph file -> the session config entries it runs with under the edited config."""


@runtime_checkable
class SessionPackage(AnyPackage, Protocol):
    """A package whose graphs each run in their own session: what ``q38 offload`` edits in its config."""

    def graph(self, role: str) -> GraphRef:
        """The graph of ``role`` (one PackageError line when the config names none)."""

    def edit_sessions(
        self,
        entries: Mapping[str, Mapping[str, str]],
        *,
        drop_prefix: str,
        provider_options: Mapping[str, Mapping[str, str]],
        source: str,
    ) -> EditedSessions:
        """The config with ``entries`` set per graph role and ``provider_options`` merged in.

        Older entries under ``drop_prefix`` are replaced; ``provider_options`` merge into the
        providers the sessions already name.
        """

