"""``q38 optimize SRC OUT``: rewrite every graph of a package into com.microsoft contrib ops."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "optimize",
        parents=[common],
        help="fuse exporter patterns into com.microsoft contrib operators",
        description="Rewrite every graph of the package SRC into a new package OUT with guarded fusions "
        "(RMSNormRotary, shared-expert projections, HyperConnectionLowRankMix, CausalConvWithState carry "
        "state, FP8 head). SRC is never modified. --target cpu keeps to ops with ORT CPU kernels.",
    )
    p.add_argument("src", metavar="SRC", type=Path)
    p.add_argument("out", metavar="OUT", type=Path)
    p.add_argument("--target", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--passes", nargs="+", metavar="PASS", help="run only these passes (pipeline order kept)")
    p.add_argument("--skip", nargs="+", metavar="PASS", default=[], help="skip these passes")
    p.add_argument("--explain", action="store_true", help="print every candidate and why it was declined")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from q38.optimize.package_io import optimize_package

    result, counts = optimize_package(
        args.src, args.out, target=args.target, passes=args.passes, skip=tuple(args.skip)
    )
    if args.explain:
        for outcome in result.outcomes:
            print(outcome.line())
    if args.json:
        print(json.dumps({"out": str(args.out), "rewrites": result.rewrites,
                          "nodes": {k: list(v) for k, v in counts.items()}}, sort_keys=True))
    else:
        summary = ", ".join(f"{k}={v}" for k, v in result.rewrites.items())
        print(f"optimized {args.src} -> {args.out} ({args.target}): {summary}", file=sys.stdout)
    return 0
