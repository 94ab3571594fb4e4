"""``q38 optimize SRC OUT``: rewrite every graph of a package into com.microsoft contrib ops."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Literal

from q38.commands._options import OrtVersion, comma_list
from q38.commands._placement import add_placement_arguments, placement_options
from q38.commands._source_gate import add_allow_flag, gated

__all__ = ["default_target", "register", "run"]

_LOG = logging.getLogger("q38.optimize")

PASSES_HELP = "rms_norm_rotary, shared_expert, hyper_connection, causal_conv_state, fp8_head"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """Add ``q38 optimize`` to the command line."""
    p = sub.add_parser(
        "optimize",
        parents=[common],
        help="fuse exporter patterns into com.microsoft contrib operators",
        description="Rewrite every graph of the package SRC into a new package OUT with guarded fusions "
        "(RMSNormRotary, shared-expert projections, HyperConnectionLowRankMix, CausalConvWithState carry "
        "state, FP8 head). SRC is never modified. --target cpu keeps to ops with ORT CPU kernels.",
    )
    p.add_argument("src", metavar="SRC", type=Path,
                   help="source package (q38 v12b or onnxruntime-genai builder package; never modified)")
    p.add_argument("out", metavar="OUT", type=Path, help="output package directory (must not exist)")
    p.add_argument(
        "--target", choices=("cuda", "cpu"), default=None,
        help="the runtime the output is for; cpu keeps to ops with ORT CPU kernels (default: what SRC "
        "can run: cpu for a cpu-variant package or one whose session options name no CUDA provider, "
        "else cuda)",
    )
    p.add_argument("--passes", type=comma_list(), metavar="PASS,...", default=None,
                   help=f"run only these passes, comma-separated, in pipeline order ({PASSES_HELP}; default: all)")
    p.add_argument("--skip", type=comma_list(), action="extend", metavar="PASS,...", default=[],
                   help="skip these passes, comma-separated (default: none)")
    p.add_argument("--target-ort", action=OrtVersion, default=None, metavar="VERSION",
                   help="emit only ops onnxruntime VERSION (1.31.1, 1.32.0) has a kernel for on the target EP "
                   "(cpu: its committed CPU kernels; cuda: its CUDA kernel facts where a GPU run committed them, "
                   "else its operator schemas; default: no version limit, every op the target EP has)")
    p.add_argument("--explain", action="store_true", help="print every candidate, its graph, and why it was declined")
    add_placement_arguments(p)
    add_allow_flag(p)
    p.set_defaults(run=run)


Target = Literal["cuda", "cpu"]


def default_target(src: Path) -> tuple[Target, str]:
    """The ``--target`` SRC can run and why: cpu for a cpu variant or a CPU-only config, else cuda."""
    from q38.package import open_any  # deferred: pulls numpy into q38 --help (q38.package.profile)

    target, why = open_any(src).preferred_target()
    return ("cuda" if target == "cuda" else "cpu"), why


def run(args: argparse.Namespace) -> int:
    """Rewrite SRC into OUT for the --target EP (default: what SRC can run), gated on ``q38 check``.

    --target-ort rewrites only into ops that onnxruntime version has kernels for; --explain prints
    each candidate's outcome, naming its graph (with --json: an ``explain`` list in the one JSON
    document). Returns 0.
    """
    # deferred: pulls ml_dtypes into q38 --help (q38.optimize.fp8_head)
    from q38.optimize.driver import optimize_package

    target: Target
    target, why = (args.target, "--target") if args.target else default_target(args.src)
    _LOG.info("target %s (%s)", target, why)
    link, digest = placement_options(args)
    # deferred: pulls ml_dtypes into q38 --help (q38.optimize.fp8_head)
    from q38.optimize.target_kernels import active, for_target

    kernels = for_target(args.target_ort, target) if args.target_ort else None
    with gated(args.src, args), active(kernels):
        result, counts = optimize_package(
            args.src, args.out, target=target, passes=args.passes, skip=tuple(args.skip), link=link, digest=digest
        )
    if args.json:
        # stdout is one JSON document: --explain's outcomes are a list in it, not text before it.
        doc: dict[str, object] = {"out": str(args.out), "target": target, "target_reason": why, "rewrites": result.rewrites,
               "nodes": {k: list(v) for k, v in counts.items()}}
        if args.explain:
            doc["explain"] = [{"graph": o.graph, "pass": o.pass_name, "anchor": o.anchor, "applied": o.applied,
                               "reason": o.reason} for o in result.outcomes]
        print(json.dumps(doc, sort_keys=True))
    else:
        if args.explain:
            for outcome in result.outcomes:
                print(outcome.line())
        summary = ", ".join(f"{k}={v}" for k, v in result.rewrites.items())
        print(f"optimized {args.src} -> {args.out} (target {target}: {why}): {summary}", file=sys.stdout)
    return 0
