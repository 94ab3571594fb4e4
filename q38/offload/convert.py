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

import dataclasses
import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir

from q38 import __version__
from q38.errors import InternalError, OffloadError, ProfileError
from q38.offload.eligibility import Eligibility, resolve_eligibility
from q38.offload.multidraft import grow_multidraft, multidraft_filenames
from q38.offload.options import PROFILE_FILENAME, OffloadOptions, offload_config_entries
from q38.offload.placement import ALIGNED_FILE, PoolPlan, plan_pool, retarget_graph, write_moves
from q38.offload.profiles import apply_offload_config, check_prefill_chunk
from q38.offload.router import clear_router_weights, qmoe_nodes, refuse_qmoe_offload
from q38.offload.slots import plan_from_profile, uniform_caps
from q38.package import (
    CONFIG_FILENAME,
    MANIFEST_FILENAME,
    Config,
    FileRecord,
    LinkPolicy,
    Manifest,
    Package,
    PackageWriter,
    check_output_outside,
    config_to_dict,
    external_refs,
    open_package,
    parse_config,
    sha256_file,
    source_placer,
)
from q38.package.pool import POOL_FILENAME
from q38.package.profile import read_profile

__all__ = ["OffloadPlan", "OffloadReport", "convert_package", "plan_offload"]

_LOG = logging.getLogger("q38.offload")


@dataclass
class OffloadReport:
    """What a conversion did (also the ``--json`` summary)."""

    out: str
    layout: str
    router_weights_cleared: int
    offloaded: list[str]
    kept_resident: list[tuple[str, str]]
    resident_slots: dict[str, int]
    graphs: dict[str, str]
    pool: dict[str, int]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d["kept_resident"] = [{"node": n, "reason": r} for n, r in self.kept_resident]
        return d


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
    profile_src: Path | None


def _node_experts(node: ir.Node) -> int:
    value = node.inputs[2] if len(node.inputs) > 2 else None
    if value is None or value.shape is None or not isinstance(value.shape[0], int):
        raise OffloadError(f"QMoE node {node.name!r}: fc1_experts_weights has no static expert count")
    return int(value.shape[0])


def _check_emitted(entries: dict[str, str]) -> None:
    try:
        from contracts.offload_config import check_offload_config
    except ModuleNotFoundError:  # pragma: no cover - contracts ship with q38
        return
    violations = check_offload_config(entries)
    if violations:
        first = violations[0]
        raise OffloadError(
            f"emitted offload options break contract {getattr(first, 'rule_id', '')}: "
            f"{getattr(first, 'message', first)}"
        )


def _plan_slots(
    options: OffloadOptions, offloaded: Sequence[ir.Node], all_qmoe: Sequence[ir.Node]
) -> tuple[dict[str, int], list[str]]:
    notes: list[str] = []
    names = [n.name or "" for n in offloaded]
    if options.target_resident_slots is not None:
        caps = uniform_caps(options.target_resident_slots, [_node_experts(n) for n in offloaded])
        return dict(zip(names, caps)), notes
    if options.total_resident_slots is None:
        return {}, notes
    assert options.expert_profile is not None
    profile = read_profile(Path(options.expert_profile))
    counts = profile.counts
    layers = [n for n in all_qmoe if not (n.name or "").startswith("/mtp/")]
    if counts.shape[0] == len(all_qmoe):
        rows_for = {id(n): i for i, n in enumerate(all_qmoe)}
    elif counts.shape[0] == len(layers):
        rows_for = {id(n): i for i, n in enumerate(layers)}
    else:
        raise ProfileError(
            f"{options.expert_profile}: {counts.shape[0]} layers, but the target has "
            f"{len(all_qmoe)} QMoE nodes ({len(layers)} decoder layers)"
        )
    planned = [n for n in offloaded if id(n) in rows_for]
    for node in planned:
        if _node_experts(node) != counts.shape[1]:
            raise ProfileError(
                f"{options.expert_profile}: {counts.shape[1]} experts per layer, but QMoE node "
                f"{node.name!r} has {_node_experts(node)}"
            )
    if not planned:
        raise OffloadError("--total-resident-slots: no offloaded QMoE node is covered by the profile")
    caps = plan_from_profile(
        counts[[rows_for[id(n)] for n in planned]],
        options.total_resident_slots,
        uniform=options.uniform_profile_slots,
        min_per_layer=options.min_slots_per_layer,
    )
    unplanned = [n.name for n in offloaded if id(n) not in rows_for]
    if unplanned:
        notes.append(f"no profile row (uncapped): {', '.join(str(n) for n in unplanned)}")
    return {n.name or "": c for n, c in zip(planned, caps)}, notes


def _verdicts(eligibility: Eligibility, model: ir.Model, mode: str, where: str) -> tuple[list[ir.Node], list[tuple[str, str]]]:
    offloaded: list[ir.Node] = []
    kept: list[tuple[str, str]] = []
    for node, reason in eligibility(model, mode):
        if reason is None:
            offloaded.append(node)
            continue
        if mode == "required":
            raise OffloadError(
                f"{where}: QMoE node {node.name!r} would not be offloaded by onnxruntime "
                f"(--offload-mode required): {reason}"
            )
        kept.append((node.name or "", reason))
    return offloaded, kept


def _serialize(model: ir.Model, *, where: str) -> bytes:
    """The graph's protobuf bytes; external tensors stay references. The converter creates no
    large in-memory tensors (only the tiny Tile repeats), so nothing needs a new data file."""
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is not None and not isinstance(tensor, ir.ExternalTensor) and tensor.nbytes >= 1024:
            raise InternalError(f"{where}: in-memory initializer {value.name!r} of {tensor.nbytes} bytes")
    return ir.serde.serialize_model(model).SerializeToString()


def _host_bytes(model: ir.Model) -> int:
    seen: dict[tuple[str, int], int] = {}
    for ref in external_refs(model):
        seen[(ref.location, ref.offset)] = max(seen.get((ref.location, ref.offset), 0), ref.length or 0)
    return sum(seen.values())


def plan_offload(
    src: Path,
    options: OffloadOptions,
    *,
    out: Path,
    eligibility: Eligibility | None = None,
) -> OffloadPlan:
    """Phase 1: read ``src`` and compute the whole conversion; raises before anything is written."""
    check = resolve_eligibility(eligibility)
    if options.expert_profile is not None:
        read_profile(Path(options.expert_profile))  # strict STRP v1 check before anything else
    package = open_package(src)
    cfg = package.config
    check_prefill_chunk(cfg, source=str(package.target_dir / CONFIG_FILENAME))
    graph_cfg = cfg.model.qwen38_graph
    target_path = package.graph_path("target")
    where = str(target_path)
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
    offloaded, kept = _verdicts(check, prepared, options.mode, where)
    caps, notes = _plan_slots(options, offloaded, all_qmoe)

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

    names = multidraft_filenames()
    graphs: dict[str, bytes] = {}
    for rows in grow_multidraft(prepared, lineage=graph_cfg.lineage, where=where):
        if rows > 2:  # the chained drafts are new candidates: same rules, same verdicts
            _verdicts(check, prepared, options.mode, f"{names[f's{rows}']} (built from {where})")
        graphs[names[f"s{rows}"]] = _serialize(prepared, where=names[f"s{rows}"])
    if graph_cfg.prefill is not None and "prefill" in package.roles():
        # The prefill graph runs under the decoder's session options, offload entries included:
        # its QMoE nodes must lose router_weights too, or mode=required rejects them (slot 14).
        prefill = package.load("prefill")
        refuse_qmoe_offload(prefill, where=str(package.graph_path("prefill")))
        prefill, prefill_cleared = clear_router_weights(prefill, in_place=True)
        retarget_graph(prefill, pool_plan.relocated)
        _verdicts(check, prefill, options.mode, str(package.graph_path("prefill")))
        graphs[graph_cfg.prefill.filename] = _serialize(prefill, where=graph_cfg.prefill.filename)
        cleared += prefill_cleared
    s4 = prepared
    # Chained drafts share /mtp/0/'s experts: they inherit its cap.
    for node in qmoe_nodes(s4.graph):
        name = node.name or ""
        if name.startswith("/mtp/") and not name.startswith("/mtp/0/"):
            base = "/mtp/0/" + name.split("/", 3)[3]
            if base in caps:
                caps[name] = caps[base]

    entries = offload_config_entries(options, caps)
    _check_emitted(entries)
    new_cfg = apply_offload_config(
        cfg,
        entries,
        min_host_bytes=_host_bytes(s4),
        multidraft=names,
        expert_profile=PROFILE_FILENAME if options.expert_profile is not None else None,
        source=str(tdir / CONFIG_FILENAME),
    )
    # Strict re-parse: only keys of the runtime's surface, profile ranges valid.
    new_cfg = parse_config(config_to_dict(new_cfg), source=f"{out}/{CONFIG_FILENAME}")
    if options.cpu_execution:
        notes.append("cpu_execution=enabled")
    report = OffloadReport(
        out=str(out),
        layout=package.layout,
        router_weights_cleared=cleared,
        offloaded=[n.name or "" for n in offloaded],
        kept_resident=kept,
        resident_slots=dict(caps),
        graphs=dict(names.items()),
        pool=dict(pool_plan.counts),
        notes=notes + [f"kept resident: {n}: {r}" for n, r in kept],
    )
    return OffloadPlan(
        package=package,
        options=options,
        config=new_cfg,
        graphs=graphs,
        pool_plan=pool_plan,
        entries=entries,
        report=report,
        profile_src=Path(options.expert_profile) if options.expert_profile else None,
    )


def _place(writer: PackageWriter, src: Path, rel: str) -> FileRecord:
    """Place an unchanged file by the shared link policy (q38.package.links); its manifest record."""
    writer.place(src, rel)
    return writer.records[rel]


def _source_files(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return out


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
    if plan.profile_src is not None:
        regenerated.add(PROFILE_FILENAME)
    files: dict[str, FileRecord] = {}
    with PackageWriter(out, source_placer(package, link, digest=digest)) as writer:
        stage_t = writer.path / sub if sub else writer.path
        # Data files, libraries, head and prefill graphs: placed unchanged.
        unchanged = [
            (tdir / rel, prefix + rel) for rel in _source_files(tdir)
            if not (package.layout == "layered" and rel.split(os.sep)[0] == "head") and rel not in regenerated
        ]
        if package.layout == "layered":
            unchanged += [(package.root / rel, rel) for rel in _source_files(package.root)
                          if rel.split(os.sep)[0] not in ("target", "head")]
            unchanged += [(package.head_dir / rel, f"head/{rel}") for rel in _source_files(package.head_dir)]
        with writer.placer.progress([src for src, _ in unchanged], "offload: placing files"):
            for src, rel in unchanged:
                files[rel] = _place(writer, src, rel)
        for name, data in plan.graphs.items():
            writer.write_bytes(prefix + name, data)
            files[prefix + name] = FileRecord("write", hashlib.sha256(data).hexdigest())
        s4 = plan.graphs[multidraft_filenames()["s4"]]
        writer.write_bytes(prefix + target_name, s4)  # a written copy, never a link
        files[prefix + target_name] = FileRecord("write", hashlib.sha256(s4).hexdigest())
        if plan.pool_plan.moves:
            aligned = stage_t / ALIGNED_FILE
            write_moves(plan.pool_plan.moves, src_root=tdir, dst=aligned)
            files[prefix + ALIGNED_FILE] = FileRecord("write", sha256_file(aligned))
        if plan.profile_src is not None:
            writer.write_bytes(prefix + PROFILE_FILENAME, plan.profile_src.read_bytes())
            files[prefix + PROFILE_FILENAME] = FileRecord("write", sha256_file(stage_t / PROFILE_FILENAME))
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
                      "multidraft_graphs": len(plan.graphs)},
            router_weights_cleared=report.router_weights_cleared,
            resident_slots=dict(report.resident_slots),
            notes=tuple(report.notes),
            extra={
                "offload_mode": plan.options.mode,
                "offloaded_nodes": len(report.offloaded),
                "kept_resident": [{"node": n, "reason": r} for n, r in report.kept_resident],
                "pool_placements": dict(report.pool),
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
    """Convert ``src`` into a new offload package at ``out``; ``src`` is only read."""
    src, out = Path(src), Path(out)
    check_output_outside(out, [src])
    plan = plan_offload(src, options, out=out, eligibility=eligibility)
    _LOG.info(
        "offload: %d QMoE nodes offloaded, %d kept resident, %d router_weights cleared",
        len(plan.report.offloaded), len(plan.report.kept_resident), plan.report.router_weights_cleared,
    )
    return write_offload(plan, out, link=link, digest=digest)
