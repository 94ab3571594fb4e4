"""Which QMoE node each row of an expert profile (STRP v1) describes.

A profile is a bare ``[L, E]`` count matrix; its rows are the package's QMoE nodes in a fixed
order, the *sites*:

- v12b packages: the QMoE nodes of the target graph in graph order — the decoder layers, then
  the MTP draft ``/mtp/0/`` when the target has one. A profile may also leave the draft out
  (one row per decoder layer).
- builder packages: the QMoE nodes of the decoder graph (``model.onnx``) in graph order, then
  those of the MTP graph (``mtp.onnx``) when the package has one; again the MTP rows may be left
  out.

Chained drafts of the verify graphs (``/mtp/1/``, ``/mtp/2/``) are copies of draft 0 sharing
its expert bank: they are not sites. ``q38 profile`` writes rows in exactly this order, and
``q38 offload`` / ``q38 profile --plan`` read them back through :func:`match_profile`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from q38.errors import OffloadError, ProfileError, clip
from q38.offload.router import qmoe_nodes
from q38.package.profile import ExpertProfile

__all__ = ["ProfileRows", "Site", "match_profile", "node_experts", "qmoe_sites"]

DRAFT_PREFIX = "/mtp/"


def node_experts(node: ir.Node, *, where: str) -> int:
    """The static expert count of a QMoE node (dim 0 of ``fc1_experts_weights``)."""
    value = node.inputs[2] if len(node.inputs) > 2 else None
    if value is None or value.shape is None or not value.shape or not isinstance(value.shape[0], int):
        raise OffloadError(f"{where}: QMoE node {node.name!r}: fc1_experts_weights has no static expert count")
    return int(value.shape[0])


@dataclass(frozen=True)
class Site:
    """One QMoE node a profile row can describe."""

    graph: str  # the graph file, package-relative (model.onnx, mtp.onnx)
    name: str  # the node name ("" if the exporter left it empty)
    experts: int
    k: int
    draft: bool  # an MTP draft's node (inside the target, or in mtp.onnx)

    @property
    def label(self) -> str:
        """``graph:node``, how messages and notes name the site."""
        return f"{self.graph}:{self.name}"


def qmoe_sites(model: ir.Model, graph: str, *, draft_graph: bool = False) -> list[Site]:
    """The sites of one graph in graph order; ``draft_graph``: every node is a draft's (mtp.onnx)."""
    out = []
    for node in qmoe_nodes(model.graph):
        name = node.name or ""
        k_attr = node.attributes.get("k")
        k = int(k_attr.value) if k_attr is not None else 1
        out.append(Site(graph, name, node_experts(node, where=graph), k, draft_graph or name.startswith(DRAFT_PREFIX)))
    return out


@dataclass(frozen=True, eq=False)
class ProfileRows:
    """A profile matched to the sites it describes: ``rows[i]`` is the profile row of ``sites[i]``.

    ``None``: the profile leaves that site out.
    """

    profile: ExpertProfile
    sites: tuple[Site, ...]
    rows: tuple[int | None, ...]

    def counts(self, index: int) -> np.ndarray | None:
        """The selection counts of site ``index`` (one per expert); None when the profile leaves it out."""
        row = self.rows[index]
        return None if row is None else self.profile.counts[row]

    @property
    def covered(self) -> list[int]:
        """Indices of the sites the profile has a row for."""
        return [i for i, r in enumerate(self.rows) if r is not None]


def match_profile(profile: ExpertProfile, sites: Sequence[Site], *, source: str) -> ProfileRows:
    """Match ``profile`` to ``sites``: one row per site, or one per non-draft site.

    Every covered site must have the profile's expert count; one :class:`ProfileError` line
    otherwise.
    """
    source = clip(source)
    layers = [i for i, s in enumerate(sites) if not s.draft]
    if profile.num_layers == len(sites):
        rows: list[int | None] = list(range(len(sites)))
    elif profile.num_layers == len(layers):
        by_site = {site: row for row, site in enumerate(layers)}
        rows = [by_site.get(i) for i in range(len(sites))]
    else:
        drafts = len(sites) - len(layers)
        raise ProfileError(
            f"{source}: {profile.num_layers} layers, but the package has {len(sites)} QMoE nodes "
            f"({len(layers)} decoder layers + {drafts} MTP)"
        )
    for i, row in enumerate(rows):
        if row is not None and sites[i].experts != profile.num_experts:
            raise ProfileError(
                f"{source}: {profile.num_experts} experts per layer, but QMoE node {sites[i].name!r} "
                f"({sites[i].graph}) has {sites[i].experts}"
            )
    return ProfileRows(profile, tuple(sites), tuple(rows))
