"""``q38 offload OUT --from-package SRC``: convert a package for ORT's QMoE offload (SPEC §5.3).

Module level imports the standard library only; ``run`` imports the converter.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from q38.commands._options import byte_size, nonneg_int
from q38.commands._placement import add_placement_arguments, placement_options
from q38.commands._source_gate import add_allow_flag, gated
from q38.offload.legacy import LEGACY_FLAGS, legacy_flag_message

__all__ = ["register", "run"]

_DESCRIPTION = (
    "Convert a package for GPUs with 20-34 GiB that cannot hold the routed experts: a v12b-lineage "
    "package (flat or layered) or an onnxruntime-genai builder package (the output keeps its "
    "surface). Every com.microsoft::QMoE node stays a QMoE node with router_weights cleared; ORT "
    "offloads them as configured by session.moe.offload.* options. With an MTP draft, writes "
    "model_s2/s3/s4.onnx (2/3/4 verify rows); v12b: model.onnx (= model_s4.onnx), runtime_profiles "
    "and the pool placements. With --expert-profile, prints the plan's expected hit rate. "
    "Refuses before writing anything."
)


class _LegacyFlag(argparse.Action):
    """A flag of the old QMoEOffload-operator tool: refused at once, with the reason."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error(legacy_flag_message(str(option_string)))




def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 offload`` to the command line; the old QMoEOffload tool's flags are refused."""
    p = sub.add_parser(
        "offload", parents=[common], help="convert a package for QMoE offload (GPUs with 20-34 GiB)",
        description=_DESCRIPTION,
    )
    p.add_argument("out", metavar="OUT", help="output package directory (must not exist)")
    p.add_argument("--from-package", dest="src", metavar="SRC", required=True, help="source package: q38 v12b or onnxruntime-genai builder package (required; never modified)")
    p.add_argument("--offload-mode", choices=("required", "auto"), default="required",
                   help="required (default): refuse if ORT would not offload a QMoE node; auto: keep such nodes resident")
    p.add_argument("--offload-placement", choices=("adaptive", "static"), default="adaptive",
                   help="session.moe.offload.placement (default adaptive)")
    p.add_argument("--cpu-execution", action="store_true", help="let ORT run cold experts on the CPU")
    p.add_argument("--device-expert-bytes", type=byte_size, metavar="SIZE", help="session.moe.offload device expert budget: a byte count or a size with a unit, 8GiB (default: not set, ORT decides)")
    p.add_argument("--host-expert-bytes", type=byte_size, metavar="SIZE", help="session.moe.offload host expert budget: a byte count or a size with a unit, 64GiB (default: not set, ORT decides)")
    p.add_argument("--expert-profile", metavar="FILE",
                   help="STRP v1 expert-popularity profile (copied as expert-profile.bin, set as popularity_file; "
                   "default: none)")
    slots = p.add_mutually_exclusive_group()
    slots.add_argument("--target-resident-slots", type=nonneg_int, metavar="N", help="per-layer resident-slot cap (default: not capped)")
    slots.add_argument("--total-resident-slots", type=nonneg_int, metavar="N",
                       help="total resident slots spread by --expert-profile (met exactly or refused; default: not set)")
    p.add_argument("--uniform-profile-slots", action="store_true", help="the same share for every layer")
    p.add_argument("--min-slots-per-layer", type=nonneg_int, default=0, metavar="M", help="per-layer floor")
    p.add_argument("--mtp-moe-placement", choices=("cpu_mmap", "host_mapped"), default="cpu_mmap",
                   help="pool placement of the MTP draft's experts (host_mapped moves unaligned ones to an aligned file)")
    add_placement_arguments(p)
    add_allow_flag(p)
    for flag in LEGACY_FLAGS:
        p.add_argument(flag, nargs="?", action=_LegacyFlag, help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Convert SRC into OUT for QMoE offload (gated on the source passing ``q38 check``); returns 0."""
    # deferred: pulls numpy into q38 --help (q38.offload.session_plan)
    from q38.offload.convert import convert_package

    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.offload.options import OffloadOptions

    options = OffloadOptions(
        mode=args.offload_mode,
        placement=args.offload_placement,
        cpu_execution=args.cpu_execution,
        device_expert_bytes=args.device_expert_bytes,
        host_expert_bytes=args.host_expert_bytes,
        expert_profile=args.expert_profile,
        target_resident_slots=args.target_resident_slots,
        total_resident_slots=args.total_resident_slots,
        uniform_profile_slots=args.uniform_profile_slots,
        min_slots_per_layer=args.min_slots_per_layer,
        mtp_moe_placement=args.mtp_moe_placement,
    )
    link, digest = placement_options(args)
    with gated(args.src, args):
        report = convert_package(args.src, args.out, options, link=link, digest=digest)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(report.summary()))
    return 0
