"""``q38 fit PKG``: device and host memory per graph, placement, context tier and profile (issue 29).

Module level imports the standard library only; ``run`` imports the fit.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from q38.commands._options import positive_int, say_wrote
from q38.errors import FlagError

__all__ = ["register", "run"]

_DESCRIPTION = (
    "Will the package fit its device? Weight bytes per file, class (dense, routed experts, MTP, "
    "embeddings, head) and placement, exact from shapes and dtypes (no weight byte is read); per "
    "context tier the decoder state (attention KV, indexer caches, Gated DeltaNet recurrent and conv "
    "state); per runtime profile (or --gpu) the device budget against the exact sum, the headroom and "
    "a verdict. What only the device knows (CUDA context, cuBLAS workspaces, CUDA-graph pool, arena "
    "slack) is a separate, labelled estimate. docs/fit.md."
)


def _contexts(text: str) -> list[int]:
    out = []
    for piece in text.split(","):
        piece = piece.strip().lower()
        scale = 1
        if piece.endswith("k"):
            piece, scale = piece[:-1], 1024
        if not piece.isdigit() or int(piece) * scale < 1:
            raise argparse.ArgumentTypeError(f"expected positive token counts such as 4096,32k, got {text!r}")
        out.append(int(piece) * scale)
    return out




def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 fit`` to the command line."""
    p = sub.add_parser("fit", parents=[common], help="device and host memory per tier and runtime profile",
                       description=_DESCRIPTION)  # fmt: skip
    p.add_argument("package", metavar="PKG", help="package directory (either surface; only read)")
    p.add_argument("--context", type=_contexts, metavar="N[,N..]",
                   help="context tiers in tokens (4096,32k; default: each profile's own tier)")
    p.add_argument("--gpu", metavar="SIZE|CLASS", help="a device to fit: a size with its unit (24GiB, 24GB) or a class (rtx4090, h200); "
                   "exit 1 when it is over (default: none)")
    p.add_argument("--batch", type=positive_int, default=1, metavar="B", help="sequences held at once")
    p.add_argument("--plot", metavar="FILE.png", help="write stacked bars per tier and profile (must not exist; default: no plot)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the memory fit of the package per tier and profile (or --json); --plot also draws it.

    Refuses (FlagError) a --plot file that exists: q38 never replaces a file. Returns 1 when a row
    is ``over`` (a runtime profile's budget or the --gpu device; docs/fit.md), else 0.
    """
    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.fit import fit_package, parse_gpu

    if args.plot is not None and os.path.lexists(args.plot):
        raise FlagError(f"--plot {args.plot}: exists (q38 never replaces a file)")
    gpu = parse_gpu(args.gpu) if args.gpu is not None else None
    report = fit_package(args.package, contexts=args.context or (), gpu=gpu, batch=args.batch)
    if args.plot is not None:
        # deferred: pulls numpy into q38 --help (q38.package.profile)
        from q38.fit.plot import plot_report

        if not report.rows:
            raise FlagError("--plot: nothing to draw")
        plot_report(report, Path(args.plot))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(report.lines()))
    if args.plot is not None:
        say_wrote("fit", f"{args.plot} (the plot)", machine=args.json)
    return 1 if any(row.verdict == "over" for row in report.rows) else 0
