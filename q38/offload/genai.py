"""``q38 offload`` of a package the onnxruntime-genai builder wrote (the genai surface).

The output is again a builder package — ``genai_config.json`` as onnxruntime-genai 0.18.0 parses
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

import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import onnx_ir as ir

from q38 import __version__
from q38.errors import OffloadError
from q38.offload.eligibility import EligibilityCheck, resolve_eligibility, split_verdicts
from q38.offload.hitrate import HitReport, hit_report
from q38.offload.multidraft import DRAFT_ROWS, multidraft_filenames, verify_graph
from q38.offload.options import (
    OFFLOAD_PREFIX,
    PROFILE_FILENAME,
    OffloadOptions,
    offload_config_entries,
    parse_node_overrides,
)
from q38.offload.package_io import (
    place_unchanged,
    read_expert_profile,
    serialize_graph,
    source_files,
)
from q38.offload.report import OffloadReport
from q38.offload.router import clear_router_weights, qmoe_nodes, refuse_qmoe_offload
from q38.offload.rows import ProfileRows, Site, match_profile, qmoe_sites
from q38.offload.slot_plan import SlotPlan, check_emitted, plan_caps
from q38.package import (
    CONFIG_FILENAME,
    MANIFEST_FILENAME,
    ExpertProfile,
    FileRecord,
    LinkPolicy,
    Manifest,
    PackageWriter,
    Placer,
    encode_profile,
    written_record,
)
from q38.package.genai_config import (
    GenaiConfig,
    GenaiProvider,
    GenaiSessionOptions,
    dumps_genai_config,
    genai_config_to_dict,
    parse_genai_config,
)
from q38.package.genai_package import GenaiPackage, open_genai_package

__all__ = ["MTP_PROFILE_FILENAME", "GenaiOffloadPlan", "plan_genai_offload", "write_genai_offload"]

MTP_PROFILE_FILENAME: Final = "mtp.expert-profile.bin"
_CUDA_ARENA: Final = {"arena_extend_strategy": "kSameAsRequested"}


@dataclass(frozen=True)
class _Graph:
    """One QMoE-bearing graph of the package and what the conversion does with it."""

    role: str  # decoder, mtp, profile:ID
    rel: str
    model: ir.Model
    cleared: int
    offloaded: tuple[ir.Node, ...]
    kept: tuple[tuple[ir.Node, str], ...]


@dataclass
class GenaiOffloadPlan:
    package: GenaiPackage
    options: OffloadOptions
    config: GenaiConfig
    graphs: dict[str, bytes]  # package-relative file -> serialized graph
    profiles: dict[str, bytes]  # package-relative file -> STRP bytes
    report: OffloadReport


def _load(pkg: GenaiPackage, role: str, check: EligibilityCheck, mode: str) -> _Graph:
    ref = pkg.graph(role)
    where = str(ref.path)
    model = pkg.load(role)
    refuse_qmoe_offload(model, where=where)
    model, cleared = clear_router_weights(model, in_place=True)
    offloaded, kept = split_verdicts(check, model, mode, where)
    return _Graph(role, ref.rel, model, cleared, tuple(offloaded), tuple(kept))


def _sessions(pkg: GenaiPackage) -> tuple[list[str], list[str]]:
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


def _session_with(so: GenaiSessionOptions | None, entries: Mapping[str, str]) -> GenaiSessionOptions:
    """``so`` with the offload entries (older ones replaced) and the CUDA arena option."""
    so = so or GenaiSessionOptions()
    kept = {k: v for k, v in so.config_entries.items() if not k.startswith(OFFLOAD_PREFIX)}
    providers = tuple(
        GenaiProvider(p.name, {**p.options, **_CUDA_ARENA}, p.device_filtering_options) if p.canonical == "cuda" else p
        for p in so.providers
    )
    return dataclasses.replace(so, config_entries={**kept, **dict(sorted(entries.items()))}, providers=providers)


def _split_profile(rows: ProfileRows, graph: str) -> ExpertProfile | None:
    picked = [r for site, r in zip(rows.sites, rows.rows) if site.graph == graph and r is not None]
    if not picked:
        return None
    return ExpertProfile(np.ascontiguousarray(rows.profile.counts[picked]))


def plan_genai_offload(
    src: Path,
    options: OffloadOptions,
    *,
    out: Path,
    eligibility: EligibilityCheck | None = None,
    profile: ExpertProfile | None = None,
) -> GenaiOffloadPlan:
    """Phase 1 for a builder package: every refusal happens here; nothing is written."""
    check = resolve_eligibility(eligibility)
    profile = profile if profile is not None else read_expert_profile(options)
    pkg = open_genai_package(src)
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
        with_profile = dataclasses.replace(options, expert_profile=options.expert_profile if part is not None else None)
        entries = offload_config_entries(with_profile, caps)
        if part is not None and profile_name != PROFILE_FILENAME:
            entries[OFFLOAD_PREFIX + "popularity_file"] = profile_name
        check_emitted(entries)
        session_entries[g.role] = entries
    for g in graphs:
        files[g.rel] = serialize_graph(g.model, where=g.rel)
    notes = list(plan.notes)
    verify: dict[str, str] = {}
    if mtp is not None:
        names = multidraft_filenames()
        taken = {r.rel for r in pkg.graphs()} | set(os.listdir(pkg.root))
        for rows_n in DRAFT_ROWS:
            name = names[f"s{rows_n}"]
            if name in taken and name not in files:
                raise OffloadError(f"{pkg.root / name}: exists in the source; the verify graph of S={rows_n} would replace it")
            model = verify_graph(decoder.model.clone(), rows_n, where=decoder.rel)
            files[name] = serialize_graph(model, where=name)
            verify[f"s{rows_n}"] = name
    else:
        notes.append(f"{pkg.config_path}: no model.mtp graph: no verify graphs (model_s2/s3/s4) written")
    config = _converted_config(pkg, session_entries, str(out / CONFIG_FILENAME))
    kept_named = [(n.name or "", r) for g in graphs if g.role in ("decoder", "mtp") for n, r in g.kept]
    report = OffloadReport(
        out=str(out),
        surface="genai",
        layout="flat",
        router_weights_cleared=sum(g.cleared for g in graphs),
        offloaded=[f"{g.rel}:{n.name}" for g in (decoder, mtp) if g is not None for n in g.offloaded],
        kept_resident=[(f"{g.rel}:{n.name}", r) for g in (decoder, mtp) if g is not None for n, r in g.kept],
        resident_slots=_flat_caps(config, sites),
        graphs=verify,
        pool={},
        hit_rates=_hit_reports(rows, config, plan, sites),
        notes=notes + [f"kept resident: {n}: {r}" for n, r in kept_named],
    )
    return GenaiOffloadPlan(pkg, options, config, files, profiles, report)


def _role_entries(config: GenaiConfig) -> dict[str, dict[str, str]]:
    out = {}
    for section in config.graph_sections.values():
        if section.filename and section.session_options is not None:
            out[section.filename] = dict(section.session_options.config_entries)
    return out


def _flat_caps(config: GenaiConfig, sites: Sequence[Site]) -> dict[str, int]:
    """``graph:node -> cap`` as the written config carries them (what every emitted graph holds)."""
    written = _role_entries(config)
    out = {}
    for graph, entries in written.items():
        caps = parse_node_overrides(entries.get(OFFLOAD_PREFIX + "node_overrides", ""))
        for site in sites:
            if site.graph == graph and site.name in caps:
                out[site.label] = caps[site.name]
    return out


def _hit_reports(rows: ProfileRows | None, config: GenaiConfig, plan: SlotPlan, sites: Sequence[Site]) -> list[HitReport]:
    if rows is None:
        return []
    caps = {}
    for graph, entries in _role_entries(config).items():
        for name, cap in parse_node_overrides(entries.get(OFFLOAD_PREFIX + "node_overrides", "")).items():
            caps[(graph, name)] = cap
    return [hit_report("session_options", rows, caps, plan.kept)]


def _converted_config(pkg: GenaiPackage, entries: Mapping[str, Mapping[str, str]], source: str) -> GenaiConfig:
    cfg = pkg.config
    model = cfg.model
    decoder = dataclasses.replace(
        model.decoder, session_options=_session_with(model.decoder.session_options, entries["decoder"])
    )
    mtp = model.mtp
    if mtp is not None and "mtp" in entries:
        # Without its own session_options the MTP graph runs with the decoder's (GenAI's default):
        # start from those, so giving it its own offload entries changes nothing else.
        base = mtp.session_options if mtp.session_options is not None else model.decoder.session_options
        mtp = dataclasses.replace(mtp, session_options=_session_with(base, entries["mtp"]))
    out = dataclasses.replace(cfg, model=dataclasses.replace(model, decoder=decoder, mtp=mtp))
    # The strict parse GenAI 0.18.0 runs (or the research builder's surface, as the source was).
    return parse_genai_config(genai_config_to_dict(out), source=source, research=bool(cfg.og_refusal))


def write_genai_offload(
    plan: GenaiOffloadPlan, out: Path, *, link: LinkPolicy = LinkPolicy.AUTO, digest: bool = False
) -> OffloadReport:
    """Phase 2: write the planned builder package at ``out`` (staged, renamed into place)."""
    pkg = plan.package
    report = plan.report
    regenerated = {*plan.graphs, *plan.profiles, CONFIG_FILENAME, MANIFEST_FILENAME}
    files: dict[str, FileRecord] = {}
    with PackageWriter(out, Placer(link, digest=digest)) as writer:
        unchanged = [(pkg.root / rel, rel) for rel in source_files(pkg.root) if rel not in regenerated]
        files.update(place_unchanged(writer, unchanged, "offload: placing files"))
        for rel, data in (*plan.graphs.items(), *plan.profiles.items()):
            files[rel] = written_record(writer.write_bytes(rel, data), hashlib.sha256(data).hexdigest())
        writer.write_text(CONFIG_FILENAME, dumps_genai_config(plan.config))
        files[CONFIG_FILENAME] = FileRecord("write")
        manifest = Manifest(
            command="offload",
            q38_version=__version__,
            sources=({"role": "source", "path": str(pkg.root)},),
            files=files,
            rewrites={"router_weights_cleared": report.router_weights_cleared,
                      "multidraft_graphs": len(report.graphs)},
            router_weights_cleared=report.router_weights_cleared,
            resident_slots=dict(report.resident_slots),
            notes=tuple(report.notes),
            extra={
                "surface": "genai",
                "offload_mode": plan.options.mode,
                "offloaded_nodes": len(report.offloaded),
                "kept_resident": [{"node": n, "reason": r} for n, r in report.kept_resident],
                "verify_graphs": dict(report.graphs),
                **({"hit_rates": [h.to_dict() for h in report.hit_rates]}
                   if report.hit_rates else {}),
            },
        )
        writer.write_manifest(manifest)
    return report
