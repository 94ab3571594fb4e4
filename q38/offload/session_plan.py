"""Phase 1 of :func:`q38.offload.convert.convert_package` for a package with one session per graph.

That is the genai surface, or any reader with ``edit_sessions``.

For an onnxruntime-genai builder package the output is again a builder package — ``genai_config.json`` as onnxruntime-genai 0.18.0 parses
it (re-parsed strictly before anything is written), the same graph files, data files, tokenizer
files — plus what only q38 reads, which GenAI ignores:

- ``model.decoder.session_options`` gains the ``session.moe.offload.*`` entries for the decoder's
  QMoE nodes, ``model.mtp.session_options`` its own for the MTP graph's (a separate session: its
  own mode, ``node_overrides`` and popularity file); an existing ``cuda`` provider gains
  ``arena_extend_strategy=kSameAsRequested`` (``enable_cuda_graph`` stays as the builder set it:
  GenAI decides capture for its graphs). No ``runtime_profiles`` are written: 0.18.0's overlay
  cannot carry session options, its eligibility has no host-memory bound, and GenAI refuses
  profiles on CPU;
- with ``--expert-profile``: ``expert-profile.bin`` (the decoder's rows) and, when the profile
  has MTP rows, ``mtp.expert-profile.bin``, each named by its session's ``popularity_file``;
- with an MTP graph: ``model_s2.onnx``, ``model_s3.onnx``, ``model_s4.onnx``, the decoder with
  its sequence dim bound to S = 2, 3, 4 (docs/offload.md: S is 1 + the drafts ``mtp.onnx``
  proposes, one per call); 0.18.0 has no config key for them, so the manifest lists them;
- ``package_manifest.json``: provenance, resident slots, hit rates, the verify graphs.

``model.onnx`` and ``mtp.onnx`` are written fresh (router_weights cleared where a node had
them: the public builder writes none); every other file is placed unchanged, never hard-linked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import onnx_ir as ir

from q38.errors import OffloadError
from q38.offload.eligibility import EligibilityCheck, split_verdicts
from q38.offload.hitrate import HitReport, hit_report
from q38.offload.multidraft import DRAFT_ROWS, multidraft_filenames, verify_graph
from q38.offload.options import (
    OFFLOAD_PREFIX,
    PROFILE_FILENAME,
    OffloadOptions,
    offload_config_entries,
    parse_node_overrides,
)
from q38.offload.package_io import serialize_graph, source_files
from q38.offload.plan import OffloadPlan
from q38.offload.report import OffloadReport
from q38.offload.router import clear_router_weights, qmoe_nodes, refuse_qmoe_offload
from q38.offload.rows import ProfileRows, Site, match_profile, qmoe_sites
from q38.offload.slot_plan import SlotPlan, check_emitted, plan_caps
from q38.package import CONFIG_FILENAME, MANIFEST_FILENAME, ExpertProfile, encode_profile
from q38.package.interface import SessionPackage

__all__ = ["MTP_PROFILE_FILENAME", "plan_session_offload"]

MTP_PROFILE_FILENAME: Final = "mtp.expert-profile.bin"
_CUDA_ARENA: Final = {"cuda": {"arena_extend_strategy": "kSameAsRequested"}}


@dataclass(frozen=True)
class _Graph:
    """One QMoE-bearing graph of the package and what the conversion does with it."""

    role: str  # decoder, mtp, profile:ID
    rel: str
    model: ir.Model
    cleared: int
    offloaded: tuple[ir.Node, ...]
    kept: tuple[tuple[ir.Node, str], ...]


def _load(pkg: SessionPackage, role: str, check: EligibilityCheck, mode: str) -> _Graph:
    ref = pkg.graph(role)
    where = str(ref.path)
    model = pkg.load(role)
    refuse_qmoe_offload(model, where=where)
    model, cleared = clear_router_weights(model, in_place=True)
    offloaded, kept = split_verdicts(check, model, mode, where)
    return _Graph(role, ref.rel, model, cleared, tuple(offloaded), tuple(kept))


def _sessions(pkg: SessionPackage) -> tuple[list[str], list[str]]:
    """(roles offload converts, other roles) of the graphs the config names."""
    refs = pkg.graphs()
    decoder_files = {r.rel for r in refs if r.role == "decoder"}
    convert, other = [], []
    for ref in refs:
        if ref.role in ("decoder", "mtp"):
            convert.append(ref.role)
        elif ref.role.startswith("profile:") and ref.rel not in decoder_files:
            convert.append(ref.role)  # an alternate decoder runs under the decoder's options
        elif not ref.role.startswith("profile:"):
            other.append(ref.role)
    return convert, other


def _split_profile(rows: ProfileRows, graph: str) -> ExpertProfile | None:
    picked = [r for site, r in zip(rows.sites, rows.rows) if site.graph == graph and r is not None]
    if not picked:
        return None
    return ExpertProfile(np.ascontiguousarray(rows.profile.counts[picked]))


def plan_session_offload(
    pkg: SessionPackage,
    options: OffloadOptions,
    *,
    out: Path,
    check: EligibilityCheck,
    profile: ExpertProfile | None,
) -> OffloadPlan:
    """Phase 1 for a package of per-graph sessions: every refusal happens here; nothing is written."""
    convert, other = _sessions(pkg)
    for role in other:  # copied unchanged: parsed, and refused if they hold the old operator
        model = pkg.load(role)
        refuse_qmoe_offload(model, where=str(pkg.graph(role).path))
        if qmoe_nodes(model.graph):
            raise OffloadError(
                f"{pkg.graph(role).path}: the {role} graph holds QMoE nodes; q38 offload converts the decoder, "
                "mtp and runtime-profile decoder graphs only"
            )
    graphs = [_load(pkg, role, check, options.mode) for role in convert]
    by_role = {g.role: g for g in graphs}
    decoder = by_role["decoder"]
    if not qmoe_nodes(decoder.model.graph) and ("mtp" not in by_role or not qmoe_nodes(by_role["mtp"].model.graph)):
        moe = [n.name for n in decoder.model.graph if n.op_type == "MoE"]
        why = f" (plain MoE nodes such as {moe[0]!r} are not offloaded by ORT)" if moe else ""
        raise OffloadError(f"{pkg.graph('decoder').path}: no com.microsoft::QMoE node to offload{why}")
    mtp = by_role.get("mtp")
    sites: list[Site] = qmoe_sites(decoder.model, decoder.rel)
    if mtp is not None:
        sites += qmoe_sites(mtp.model, mtp.rel, draft_graph=True)
    rows = match_profile(profile, sites, source=str(options.expert_profile)) if profile is not None else None
    offloaded = {(g.rel, n.name or "") for g in (decoder, mtp) if g is not None for n in g.offloaded}
    kept = [(g.rel, n.name or "") for g in (decoder, mtp) if g is not None for n, _r in g.kept]
    plan = plan_caps(options, sites, offloaded, kept, rows)

    files: dict[str, bytes] = {}
    profiles: dict[str, bytes] = {}
    session_entries: dict[str, dict[str, str]] = {}
    for g, profile_name in ((decoder, PROFILE_FILENAME), (mtp, MTP_PROFILE_FILENAME)):
        if g is None:
            continue
        part = _split_profile(rows, g.rel) if rows is not None else None
        if part is not None:
            profiles[profile_name] = encode_profile(part)
        caps = {name: c for (graph, name), c in plan.caps.items() if graph == g.rel}
        entries = offload_config_entries(options, caps)
        if part is None:  # no rows for this graph (a decoder-only profile leaves the MTP graph out)
            entries.pop(OFFLOAD_PREFIX + "popularity_file", None)
        elif profile_name != PROFILE_FILENAME:
            entries[OFFLOAD_PREFIX + "popularity_file"] = profile_name
        check_emitted(entries)
        session_entries[g.role] = entries
    for g in graphs:
        files[g.rel] = serialize_graph(g.model, where=g.rel, final=True)
    notes = list(plan.notes)
    verify: dict[str, str] = {}
    if mtp is not None:
        names = multidraft_filenames()
        taken = {r.rel for r in pkg.graphs()} | set(os.listdir(pkg.root))
        for rows_n in DRAFT_ROWS:
            name = names[f"s{rows_n}"]
            if name in files:  # a graph the config names (the decoder, the MTP graph) has the verify graph's name
                role = next(g.role for g in graphs if g.rel == name)
                raise OffloadError(f"{pkg.root / name}: the {role} graph has the name of the verify graph of S={rows_n}, "
                                   "which would replace it; rename the graph in the source")
            if name in taken:
                raise OffloadError(f"{pkg.root / name}: exists in the source; the verify graph of S={rows_n} would replace it")
            model = verify_graph(decoder.model.clone(), rows_n, where=decoder.rel)
            files[name] = serialize_graph(model, where=name, final=True)
            verify[f"s{rows_n}"] = name
    else:
        notes.append(f"{pkg.config_path}: no model.mtp graph: no verify graphs (model_s2/s3/s4) written")
    edited = pkg.edit_sessions(session_entries, drop_prefix=OFFLOAD_PREFIX, provider_options=_CUDA_ARENA,
                               source=str(out / CONFIG_FILENAME))  # fmt: skip
    kept_named = [(n.name or "", r) for g in graphs if g.role in ("decoder", "mtp") for n, r in g.kept]
    report = OffloadReport(
        out=str(out),
        surface=pkg.surface,
        layout="flat",
        router_weights_cleared=sum(g.cleared for g in graphs),
        offloaded=[f"{g.rel}:{n.name}" for g in (decoder, mtp) if g is not None for n in g.offloaded],
        kept_resident=[(f"{g.rel}:{n.name}", r) for g in (decoder, mtp) if g is not None for n, r in g.kept],
        resident_slots=_flat_caps(edited.entries_by_file, sites),
        graphs=verify,
        pool={},
        hit_rates=_hit_reports(rows, edited.entries_by_file, plan),
        notes=notes + [f"kept resident: {n}: {r}" for n, r in kept_named],
    )
    regenerated = {*files, *profiles, CONFIG_FILENAME, MANIFEST_FILENAME}
    return OffloadPlan(
        package=pkg,
        options=options,
        report=report,
        unchanged=[(pkg.root / rel, rel) for rel in source_files(pkg.root) if rel not in regenerated],
        blobs={**files, **profiles},
        texts={CONFIG_FILENAME: edited.text},
        manifest_extra={"surface": pkg.surface, "verify_graphs": dict(report.graphs)},
    )


def _flat_caps(written: Mapping[str, Mapping[str, str]], sites: Sequence[Site]) -> dict[str, int]:
    """``graph:node -> cap`` as the written config carries them (what every emitted graph holds)."""
    out = {}
    for graph, entries in written.items():
        caps = parse_node_overrides(entries.get(OFFLOAD_PREFIX + "node_overrides", ""))
        for site in sites:
            if site.graph == graph and site.name in caps:
                out[site.label] = caps[site.name]
    return out


def _hit_reports(rows: ProfileRows | None, written: Mapping[str, Mapping[str, str]], plan: SlotPlan) -> list[HitReport]:
    """The one tier's hit report (every session's own options), read from the written node_overrides."""
    if rows is None:
        return []
    caps = {}
    for graph, entries in written.items():
        for name, cap in parse_node_overrides(entries.get(OFFLOAD_PREFIX + "node_overrides", "")).items():
            caps[(graph, name)] = cap
    return [hit_report("session_options", rows, caps, plan.kept)]
