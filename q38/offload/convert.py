"""``q38 offload OUT --from-package SRC``: a QMoE-offload package from a package of either surface.

One flow, :func:`convert_package`, in two phases:

1. **Plan** (reads only; every refusal happens here, so nothing is written on failure): open the
   source through the package interface and compute the whole conversion. How the offload
   options reach the runtime is the one thing the surfaces differ in, so the planner is the
   package's: a package with a weights pool and runtime profiles (v12b) is planned by
   :mod:`q38.offload.pool_plan`; a package whose graphs each run in their own session (genai,
   and any reader that can ``edit_sessions``) by :mod:`q38.offload.session_plan`.
2. **Write** (:func:`write_offload`, the same for every plan) through
   :class:`q38.package.PackageWriter` (staged next to OUT, renamed into place): unchanged files
   placed by the package's placer (reflink, else copy; ``--link`` to choose), graphs and profiles
   written fresh, the aligned MTP-expert file filled with ``copy_file_range``, the config (and
   pool) written, and one manifest.

Weight bytes are never read into Python: graphs load lazily and data moves kernel-side.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from q38.errors import OffloadError
from q38.offload.eligibility import EligibilityCheck, resolve_eligibility
from q38.offload.options import OffloadOptions
from q38.offload.package_io import place_unchanged, read_expert_profile
from q38.offload.placement import write_moves
from q38.offload.plan import OffloadPlan
from q38.offload.pool_plan import plan_pool_offload
from q38.offload.report import OffloadReport
from q38.offload.session_plan import plan_session_offload
from q38.package import (
    ExpertProfile,
    FileRecord,
    LinkPolicy,
    Manifest,
    PackageWriter,
    SurfaceVisitor,
    check_output_outside,
    open_any,
    visit,
    written_record,
)
from q38.package.interface import AnyPackage, SessionPackage

if TYPE_CHECKING:  # each surface's package module loads when a package of it opens
    from q38.package import V12bPackage

__all__ = ["OffloadPlan", "OffloadReport", "convert_package", "plan_offload", "preview_offload", "write_offload"]

_LOG = logging.getLogger("q38.offload")

class _Planner(SurfaceVisitor[OffloadPlan]):
    """How each surface's offload options reach the runtime.

    The v12b weights pool and runtime-profile tiers, else one session per graph (the package
    edits its own config).
    """

    def __init__(self, src: Path, options: OffloadOptions, *, out: Path, check: EligibilityCheck,
                 profile: ExpertProfile | None) -> None:  # fmt: skip
        self.src, self.options, self.out, self.check, self.profile = src, options, out, check, profile

    def v12b(self, package: V12bPackage) -> OffloadPlan:
        """A weights pool and runtime profiles: :mod:`q38.offload.pool_plan`."""
        return plan_pool_offload(package, self.options, out=self.out, check=self.check, profile=self.profile)

    def other(self, package: AnyPackage) -> OffloadPlan:
        """One session per graph: :mod:`q38.offload.session_plan` (genai, and any reader that can ``edit_sessions``)."""
        if not isinstance(package, SessionPackage):
            raise OffloadError(f"{self.src}: a {package.surface} package; its reader cannot write offload options "
                               "into its config")  # fmt: skip
        return plan_session_offload(package, self.options, out=self.out, check=self.check, profile=self.profile)


def plan_offload(
    src: Path,
    options: OffloadOptions,
    *,
    out: Path,
    eligibility: EligibilityCheck | None = None,
    profile: ExpertProfile | None = None,
) -> OffloadPlan:
    """Phase 1: read ``src`` and compute the whole conversion; raises before anything is written.

    ``profile``: an expert profile already in memory (``q38 profile --plan``), instead of reading
    ``options.expert_profile``.
    """
    check = resolve_eligibility(eligibility)
    profile = profile if profile is not None else read_expert_profile(options)
    return visit(open_any(src), _Planner(src, options, out=out, check=check, profile=profile))


def write_offload(
    plan: OffloadPlan, out: Path, *, link: LinkPolicy = LinkPolicy.AUTO, digest: bool = False
) -> OffloadReport:
    """Phase 2: write the planned package at ``out`` (staged; nothing left behind on failure)."""
    report = plan.report
    files: dict[str, FileRecord] = {}
    with PackageWriter(out, plan.package.placer(link, digest=digest)) as writer:
        files.update(place_unchanged(writer, plan.unchanged, "offload: placing files"))
        for rel, data in plan.blobs.items():
            files[rel] = written_record(writer.write_bytes(rel, data), hashlib.sha256(data).hexdigest())
        if plan.aligned is not None:
            aligned = writer.path / plan.aligned.rel
            write_moves(plan.aligned.moves, src_root=plan.aligned.src_root, dst=aligned)
            files[plan.aligned.rel] = written_record(aligned)
        for rel, text in plan.texts.items():
            writer.write_text(rel, text)
            files[rel] = FileRecord("write")
        manifest = Manifest(
            command="offload",
            sources=({"role": "source", "path": str(plan.package.root)},),
            files=files,
            rewrites={"router_weights_cleared": report.router_weights_cleared,
                      "multidraft_graphs": len(report.graphs)},
            router_weights_cleared=report.router_weights_cleared,
            resident_slots=dict(report.resident_slots),
            notes=tuple(report.notes),
            extra={
                **plan.manifest_extra,
                "offload_mode": plan.options.mode,
                "offloaded_nodes": len(report.offloaded),
                "kept_resident": [{"node": n, "reason": r} for n, r in report.kept_resident],
                **({"hit_rates": [h.to_dict() for h in report.hit_rates]} if report.hit_rates else {}),
            },
        )
        writer.write_manifest(manifest, plan.subdir)
    return report


def convert_package(
    src: Path | str,
    out: Path | str,
    options: OffloadOptions,
    *,
    eligibility: EligibilityCheck | None = None,
    link: LinkPolicy = LinkPolicy.AUTO,
    digest: bool = False,
) -> OffloadReport:
    """Convert ``src`` (either surface) into a new offload package at ``out``; ``src`` is only read.

    The output keeps the source's surface: a v12b package gives a v12b package, a builder
    package a builder package.
    """
    src, out = Path(src), Path(out)
    check_output_outside(out, [src])
    plan = plan_offload(src, options, out=out, eligibility=eligibility)
    for check in plan.before_write:  # refusals of a conversion, not of a preview (issue 29: profile fit)
        check()
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
    """The report a conversion of ``src`` would give (hit rates included), writing nothing.

    ``q38 profile --plan`` prints it; the output path is only named in messages, never created.
    """
    src = Path(src)
    out = src.parent / f"{src.name}.offload-preview"  # named in messages only: never created
    return plan_offload(src, options, out=out, profile=profile).report
