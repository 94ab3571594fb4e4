"""``q38 offload OUT --from-package SRC``: a QMoE-offload package from a v12b-lineage package.

One function, :func:`convert_package`, does the whole conversion in two phases:

1. **Plan** (reads only; every refusal happens here, so nothing is written on failure): open the
   source, refuse QMoEOffload graphs, clear ``router_weights`` (a FunctionalPass: the loaded source
   model is never mutated), ask the contracts which QMoE nodes ORT would offload (``required``
   stops at the first one it would not, ``auto`` keeps them resident), plan resident slots,
   build the S=2/3/4 verify graphs, plan pool placements, build and strictly re-parse the config,
   and check the emitted offload options against ``contracts.offload_config``.
2. **Write** through :class:`q38.package.PackageWriter` (staged next to OUT, renamed into place):
   graphs are regenerated (``model.onnx`` is a written copy of ``model_s4.onnx``, never a link to
   the source), data files and libraries are placed (reflink, else copy; ``--link`` to choose),
   the aligned MTP-expert file is filled with ``copy_file_range``.

Weight bytes are never read into Python: graphs load lazily and data moves kernel-side.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx_ir as ir

from q38 import __version__
from q38.errors import OffloadError
from q38.offload.eligibility import Eligibility, resolve_eligibility, split_verdicts
from q38.offload.fit_guard import refuse_unfit_profiles
from q38.offload.hitrate import HitReport, hit_report
from q38.offload.multidraft import grow_multidraft, has_draft, multidraft_filenames
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
from q38.offload.placement import ALIGNED_FILE, PoolPlan, plan_pool, retarget_graph, write_moves
from q38.offload.profiles import apply_offload_config
from q38.offload.report import OffloadReport
from q38.offload.router import clear_router_weights, qmoe_nodes, refuse_qmoe_offload
from q38.offload.rows import ProfileRows, match_profile, qmoe_sites
from q38.offload.slot_plan import chained_caps, check_emitted, plan_caps
from q38.package import (
    CONFIG_FILENAME,
    MANIFEST_FILENAME,
    Config,
    ExpertProfile,
    FileRecord,
    LinkPolicy,
    Manifest,
    Package,
    PackageWriter,
    check_output_outside,
    config_to_dict,
    encode_profile,
    external_refs,
    open_package,
    parse_config,
    source_placer,
    written_record,
)
from q38.package.pool import POOL_FILENAME

__all__ = ["OffloadPlan", "OffloadReport", "convert_package", "plan_offload"]

_LOG = logging.getLogger("q38.offload")


@dataclass
class OffloadPlan:
    """Everything computed before writing (phase 1)."""

    package: Package
    options: OffloadOptions
    config: Config
    graphs: dict[str, bytes]  # filename -> serialized graph, written in this order
    pool_plan: PoolPlan
    entries: dict[str, str]
    report: OffloadReport
    profile_bytes: bytes | None  # the --expert-profile bytes checked, written as expert-profile.bin


def _host_bytes(model: ir.Model) -> int:
    seen: dict[tuple[str, int], int] = {}
    for ref in external_refs(model):
        seen[(ref.location, ref.offset)] = max(seen.get((ref.location, ref.offset), 0), ref.length or 0)
    return sum(seen.values())


def _hit_reports(rows: ProfileRows | None, tiers: Sequence[tuple[str, Mapping[str, str]]], graph: str,
                 kept: Sequence[tuple[str, str]]) -> list[HitReport]:  # fmt: skip
    """One report per tier, read from the node_overrides that tier's options carry."""
    if rows is None:
        return []
    reports = []
    for tier, entries in tiers:
        caps = parse_node_overrides(entries.get(OFFLOAD_PREFIX + "node_overrides", ""))
        reports.append(hit_report(tier, rows, {(graph, n): c for n, c in caps.items()}, kept))
    return reports


def plan_offload(
    src: Path,
    options: OffloadOptions,
    *,
    out: Path,
    eligibility: Eligibility | None = None,
    profile: ExpertProfile | None = None,
) -> OffloadPlan:
    """Phase 1: read ``src`` and compute the whole conversion; raises before anything is written.

    ``profile``: an expert profile already in memory (``q38 profile --plan``), instead of reading
    ``options.expert_profile``."""
    check = resolve_eligibility(eligibility)
    profile = profile if profile is not None else read_expert_profile(options)
    package = open_package(src)
    cfg = package.config
    # prefill.chunk <= kv_capacity: refused by the config parser (open_package) before this point.
    graph_cfg = cfg.model.qwen38_graph
    # A source converted before carries its prepared target as model_s2: regenerate from it.
    base_role = "s2" if "s2" in package.roles() else "target"
    where = str(package.graph_path(base_role))
    for role in package.roles():
        if role != base_role:  # graphs q38 only copies: parsed and their external data checked
            refuse_qmoe_offload(package.load(role), where=str(package.graph_path(role)))
    source_model = package.load(base_role)  # private: the file on disk is never written
    refuse_qmoe_offload(source_model, where=where)
    prepared, cleared = clear_router_weights(source_model, in_place=True)
    all_qmoe = qmoe_nodes(prepared.graph)
    if not all_qmoe:
        raise OffloadError(f"{where}: no com.microsoft::QMoE node to offload")
    offloaded, kept_nodes = split_verdicts(check, prepared, options.mode, where)
    target_name = graph_cfg.target
    sites = qmoe_sites(prepared, target_name)
    rows = match_profile(profile, sites, source=str(options.expert_profile)) if profile is not None else None
    kept = [(target_name, n.name or "") for n, _r in kept_nodes]
    slot_plan = plan_caps(options, sites, {(target_name, n.name or "") for n in offloaded}, kept, rows)
    caps = {name: c for (_g, name), c in slot_plan.caps.items()}
    notes = list(slot_plan.notes)

    tdir = package.target_dir
    file_sizes = {}
    for entry in package.pool.entries:
        file_sizes[entry.file] = (tdir / entry.file).stat().st_size
    pool_plan = plan_pool(
        package.pool, prepared.graph,
        mtp_host_mapped=options.mtp_moe_placement == "host_mapped",
        file_sizes=file_sizes,
    )
    retarget_graph(prepared, pool_plan.relocated)  # chained drafts share these initializers

    graphs: dict[str, bytes] = {}
    if has_draft(prepared.graph):
        names = multidraft_filenames()
        for n_rows in grow_multidraft(prepared, lineage=graph_cfg.lineage, where=where):
            if n_rows > 2:  # the chained drafts are new candidates: same rules, same verdicts
                split_verdicts(check, prepared, options.mode, f"{names[f's{n_rows}']} (built from {where})")
            graphs[names[f"s{n_rows}"]] = serialize_graph(prepared, where=names[f"s{n_rows}"])
        decoder_file = names["s4"]
    else:
        names = {}
        notes.append(f"{where}: no MTP draft (/mtp/0/): no verify graphs (model_s2/s3/s4) written")
        decoder_file = target_name
        graphs[target_name] = serialize_graph(prepared, where=target_name)
    if graph_cfg.prefill is not None and "prefill" in package.roles():
        # The prefill graph runs under the decoder's session options, offload entries included:
        # its QMoE nodes must lose router_weights too, or mode=required rejects them (slot 14).
        prefill = package.load("prefill")
        refuse_qmoe_offload(prefill, where=str(package.graph_path("prefill")))
        prefill, prefill_cleared = clear_router_weights(prefill, in_place=True)
        retarget_graph(prefill, pool_plan.relocated)
        split_verdicts(check, prefill, options.mode, str(package.graph_path("prefill")))
        graphs[graph_cfg.prefill.filename] = serialize_graph(prefill, where=graph_cfg.prefill.filename)
        cleared += prefill_cleared
    s4 = prepared
    caps.update(chained_caps(slot_plan, target_name, [n.name or "" for n in qmoe_nodes(s4.graph)]))

    entries = offload_config_entries(options, caps)
    check_emitted(entries)
    new_cfg = apply_offload_config(
        cfg,
        entries,
        min_host_bytes=_host_bytes(s4),
        multidraft=names,
        expert_profile=PROFILE_FILENAME if options.expert_profile is not None else None,
        source=str(tdir / CONFIG_FILENAME),
        decoder_file=decoder_file,
    )
    # Strict re-parse: only keys of the runtime's surface, profile ranges valid.
    new_cfg = parse_config(config_to_dict(new_cfg), source=f"{out}/{CONFIG_FILENAME}")
    tiers = [("decoder", new_cfg.model.decoder.session_options.config_entries)]
    tiers += [(p.id, p.overlay.session_options.config_entries) for p in new_cfg.runtime_profiles
              if p.overlay.session_options is not None]  # fmt: skip
    if options.cpu_execution:
        notes.append("cpu_execution=enabled")
    report = OffloadReport(
        out=str(out),
        surface="v12b",
        layout=package.layout,
        router_weights_cleared=cleared,
        offloaded=[n.name or "" for n in offloaded],
        kept_resident=[(n.name or "", r) for n, r in kept_nodes],
        resident_slots=dict(caps),
        graphs=dict(names.items()),
        pool=dict(pool_plan.counts),
        hit_rates=_hit_reports(rows, tiers, target_name, kept),
        notes=notes + [f"kept resident: {n.name}: {r}" for n, r in kept_nodes],
    )
    return OffloadPlan(
        package=package,
        options=options,
        config=new_cfg,
        graphs=graphs,
        pool_plan=pool_plan,
        entries=entries,
        report=report,
        profile_bytes=encode_profile(profile) if profile is not None else None,
    )


def write_offload(
    plan: OffloadPlan, out: Path, *, link: LinkPolicy = LinkPolicy.AUTO, digest: bool = False
) -> OffloadReport:
    """Phase 2: write the planned package at ``out`` (staged; nothing left behind on failure)."""
    package = plan.package
    tdir = package.target_dir
    sub = "target" if package.layout == "layered" else ""
    prefix = f"{sub}/" if sub else ""
    g = package.config.model.qwen38_graph
    target_name = g.target
    regenerated = {target_name, *plan.graphs, CONFIG_FILENAME, MANIFEST_FILENAME, g.weights_pool, POOL_FILENAME}
    regenerated.update(package.config.model.qwen38_graph.multidraft.values())
    if plan.profile_bytes is not None:
        regenerated.add(PROFILE_FILENAME)
    files: dict[str, FileRecord] = {}
    with PackageWriter(out, source_placer(package, link, digest=digest)) as writer:
        stage_t = writer.path / sub if sub else writer.path
        # Data files, libraries, head and prefill graphs: placed unchanged.
        unchanged = [
            (tdir / rel, prefix + rel) for rel in source_files(tdir)
            if not (package.layout == "layered" and rel.split(os.sep)[0] == "head") and rel not in regenerated
        ]
        if package.layout == "layered":
            unchanged += [(package.root / rel, rel) for rel in source_files(package.root)
                          if rel.split(os.sep)[0] not in ("target", "head")]
            unchanged += [(package.head_dir / rel, f"head/{rel}") for rel in source_files(package.head_dir)]
        files.update(place_unchanged(writer, unchanged, "offload: placing files"))
        for name, data in plan.graphs.items():
            files[prefix + name] = written_record(writer.write_bytes(prefix + name, data), hashlib.sha256(data).hexdigest())
        if target_name not in plan.graphs:
            s4 = plan.graphs[multidraft_filenames()["s4"]]
            written = writer.write_bytes(prefix + target_name, s4)  # a written copy, never a link
            files[prefix + target_name] = written_record(written, hashlib.sha256(s4).hexdigest())
        if plan.pool_plan.moves:
            aligned = stage_t / ALIGNED_FILE
            write_moves(plan.pool_plan.moves, src_root=tdir, dst=aligned)
            files[prefix + ALIGNED_FILE] = written_record(aligned)
        if plan.profile_bytes is not None:
            written = writer.write_bytes(prefix + PROFILE_FILENAME, plan.profile_bytes)
            files[prefix + PROFILE_FILENAME] = written_record(written, hashlib.sha256(plan.profile_bytes).hexdigest())
        writer.write_pool(plan.pool_plan.pool, sub, g.weights_pool)
        writer.write_config(plan.config, sub)
        files[prefix + CONFIG_FILENAME] = FileRecord("write")
        files[prefix + g.weights_pool] = FileRecord("write")
        report = plan.report
        manifest = Manifest(
            command="offload",
            q38_version=__version__,
            sources=({"role": "source", "path": str(package.root)},),
            files=files,
            rewrites={"router_weights_cleared": report.router_weights_cleared,
                      "multidraft_graphs": len(report.graphs)},
            router_weights_cleared=report.router_weights_cleared,
            resident_slots=dict(report.resident_slots),
            notes=tuple(report.notes),
            extra={
                "offload_mode": plan.options.mode,
                "offloaded_nodes": len(report.offloaded),
                "kept_resident": [{"node": n, "reason": r} for n, r in report.kept_resident],
                "pool_placements": dict(report.pool),
                **({"hit_rates": [h.to_dict() for h in report.hit_rates]} if report.hit_rates else {}),
            },
        )
        writer.write_manifest(manifest, sub)
    return plan.report


def convert_package(
    src: Path | str,
    out: Path | str,
    options: OffloadOptions,
    *,
    eligibility: Eligibility | None = None,
    link: LinkPolicy = LinkPolicy.AUTO,
    digest: bool = False,
) -> OffloadReport:
    """Convert ``src`` (either surface) into a new offload package at ``out``; ``src`` is only read.

    A v12b package gives a v12b package (this module); a builder package a builder package
    (:mod:`q38.offload.genai`)."""
    from q38.package.surface import detect_surface

    src, out = Path(src), Path(out)
    check_output_outside(out, [src])
    if detect_surface(src) == "genai":
        from q38.offload.genai import plan_genai_offload, write_genai_offload

        genai_plan = plan_genai_offload(src, options, out=out, eligibility=eligibility)
        _log_plan(genai_plan.report)
        return write_genai_offload(genai_plan, out, link=link, digest=digest)
    plan = plan_offload(src, options, out=out, eligibility=eligibility)
    refuse_unfit_profiles(src, plan.config, plan.pool_plan.pool)  # issue 29: before anything is written
    _log_plan(plan.report)
    return write_offload(plan, out, link=link, digest=digest)


def _log_plan(report: OffloadReport) -> None:
    _LOG.info(
        "offload: %d QMoE nodes offloaded, %d kept resident, %d router_weights cleared",
        len(report.offloaded), len(report.kept_resident), report.router_weights_cleared,
    )


def preview_offload(
    src: Path | str, options: OffloadOptions, *, profile: ExpertProfile | None = None
) -> OffloadReport:
    """The report a conversion of ``src`` would give (hit rates included), writing nothing:
    ``q38 profile --plan``."""
    from q38.package.surface import detect_surface

    src = Path(src)
    out = src.parent / f"{src.name}.offload-preview"  # named in messages only: never created
    if detect_surface(src) == "genai":
        from q38.offload.genai import plan_genai_offload

        return plan_genai_offload(src, options, out=out, profile=profile).report
    return plan_offload(src, options, out=out, profile=profile).report
