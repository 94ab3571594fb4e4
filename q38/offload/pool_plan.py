"""The offload plan of a q38 (v12b) package: one target graph, a weights pool, runtime profiles.

Phase 1 of :func:`q38.offload.convert.convert_package` for a package with a weights pool (reads
only; every refusal happens here): refuse QMoEOffload graphs, clear ``router_weights`` (a
FunctionalPass: the loaded source model is never mutated), ask the contracts which QMoE nodes
ORT would offload (``required`` stops at the first one it would not, ``auto`` keeps them
resident), plan resident slots, build the S=2/3/4 verify graphs from the target's embedded draft,
plan pool placements (the aligned MTP-expert file), build and strictly re-parse the config with
its runtime-profile tiers, and check the emitted offload options against ``contracts.offload_config``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import onnx_ir as ir

from q38.errors import OffloadError
from q38.offload.eligibility import EligibilityCheck, split_verdicts
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
from q38.offload.package_io import keep_final, keep_unchanged, serialize_graph, source_files
from q38.offload.placement import ALIGNED_FILE, plan_pool, retarget_graph
from q38.offload.plan import AlignedFile, OffloadPlan
from q38.offload.profiles import apply_offload_config
from q38.offload.report import OffloadReport
from q38.offload.router import clear_router_weights, qmoe_nodes, refuse_qmoe_offload
from q38.offload.rows import ProfileRows, match_profile, qmoe_sites
from q38.offload.slot_plan import chained_caps, check_emitted, plan_caps
from q38.package import (
    CONFIG_FILENAME,
    MANIFEST_FILENAME,
    ExpertProfile,
    Package,
    config_to_dict,
    dumps_config,
    encode_profile,
    external_refs,
    format_pool,
    parse_config,
)
from q38.package.v12b.pool import POOL_FILENAME

if TYPE_CHECKING:
    from q38.package import V12bPackage

__all__ = ["plan_pool_offload"]

_LOG = logging.getLogger("q38.offload")


def _host_bytes(model: ir.Model) -> int:
    seen: dict[tuple[str, int], int] = {}
    for ref in external_refs(model):
        seen[(ref.location, ref.offset)] = max(seen.get((ref.location, ref.offset), 0), ref.nbytes)
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


def plan_pool_offload(
    opened: V12bPackage,
    options: OffloadOptions,
    *,
    out: Path,
    check: EligibilityCheck,
    profile: ExpertProfile | None,
) -> OffloadPlan:
    """Phase 1 for a q38 package: compute the whole conversion; raises before anything is written."""
    package: Package = opened.package
    cfg = package.config
    # prefill.chunk <= kv_capacity: refused by the config parser (open_package) before this point.
    graph_cfg = cfg.model.qwen38_graph
    # A source converted before carries its prepared target as model_s2: regenerate from it.
    base_role = "s2" if "s2" in package.roles() else "target"
    where = str(package.graph_path(base_role))
    for role in package.roles():
        if role != base_role:  # graphs q38 only copies: parsed and their external data checked
            copied = package.load(role)
            refuse_qmoe_offload(copied, where=str(package.graph_path(role)))
            keep_unchanged(copied)
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
        graphs[target_name] = serialize_graph(prepared, where=target_name, final=True)
    if graph_cfg.prefill is not None and "prefill" in package.roles():
        # The prefill graph runs under the decoder's session options, offload entries included:
        # its QMoE nodes must lose router_weights too, or mode=required rejects them (slot 14).
        prefill = package.load("prefill")  # refused above if it holds QMoEOffload (every role but the base is)
        prefill, prefill_cleared = clear_router_weights(prefill, in_place=True)
        retarget_graph(prefill, pool_plan.relocated)
        split_verdicts(check, prefill, options.mode, str(package.graph_path("prefill")))
        graphs[graph_cfg.prefill.filename] = serialize_graph(prefill, where=graph_cfg.prefill.filename, final=True)
        cleared += prefill_cleared
    s4 = prepared
    keep_final(s4, graphs[decoder_file])  # grown in place through s2 and s3: only its last form is final
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
    sub = "target" if package.layout == "layered" else ""
    prefix = f"{sub}/" if sub else ""
    blobs = {prefix + name: data for name, data in graphs.items()}
    if target_name not in graphs:
        blobs[prefix + target_name] = graphs[multidraft_filenames()["s4"]]  # a written copy, never a link
    if profile is not None:
        blobs[prefix + PROFILE_FILENAME] = encode_profile(profile)
    regenerated = {target_name, *graphs, CONFIG_FILENAME, MANIFEST_FILENAME, graph_cfg.weights_pool, POOL_FILENAME}
    regenerated.update(graph_cfg.multidraft.values())
    if profile is not None:
        regenerated.add(PROFILE_FILENAME)
    unchanged = [
        (tdir / rel, prefix + rel) for rel in source_files(tdir)
        if not (package.layout == "layered" and rel.split(os.sep)[0] == "head") and rel not in regenerated
    ]
    if package.layout == "layered":
        unchanged += [(package.root / rel, rel) for rel in source_files(package.root)
                      if rel.split(os.sep)[0] not in ("target", "head")]
        unchanged += [(package.head_dir / rel, f"head/{rel}") for rel in source_files(package.head_dir)]
    return OffloadPlan(
        package=opened,
        options=options,
        report=report,
        unchanged=unchanged,
        blobs=blobs,
        texts={prefix + graph_cfg.weights_pool: format_pool(pool_plan.pool), prefix + CONFIG_FILENAME: dumps_config(new_cfg)},
        subdir=sub,
        aligned=AlignedFile(prefix + ALIGNED_FILE, pool_plan.moves, tdir) if pool_plan.moves else None,
        manifest_extra={"pool_placements": dict(report.pool)},
        # the planned runtime profiles fit their tiers (issue 29): before anything is written
        before_write=(lambda: refuse_unfit_profiles(package.root, new_cfg, pool_plan.pool),),
    )
