"""``q38 demo``: the main job end to end on the embedded synthetic default.

synth (source bundles) → build (folded) → optimize → offload → check, each step through the
very same entry points as the subcommands, then a summary table of what each step produced.
"""

from __future__ import annotations

import argparse
from typing import Any

from q38.demo import run_demo


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 demo`` to the command line."""
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="run the main job end to end on the embedded synthetic default",
        description=(
            "Synthesize source bundles, build a folded package, optimize it, convert it for QMoE "
            "offload, check every result against the ORT contracts (with real ORT sessions), and for the "
            "cpu variant export it for onnxruntime-genai and generate tokens. One line per step, as it "
            "finishes, says what it made and what the figures mean."
        ),
    )
    p.add_argument("--workdir", default="q38-demo",
                   help="where the demo writes: each run adds WORKDIR/run-N and deletes nothing; a directory "
                   "the demo did not make must be empty (default: q38-demo)")
    p.add_argument("--preset", default="full", choices=("tiny", "full"), help="synthetic preset (default: full)")
    p.add_argument("--variant", default="cpu", choices=("cpu", "faithful"),
                   help="cpu: runs here, ORT sessions and onnxruntime-genai generation included; faithful: built "
                   "for CUDA (real QSA ops), stops before ORT sessions (default: cpu)")
    p.add_argument("--no-ort", action="store_true", help="skip real onnxruntime session creation in the checks")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo in --workdir (see :mod:`q38.demo`); the exit code of the first failed step, or 0."""
    return run_demo(
        workdir=args.workdir,
        preset=args.preset,
        variant=args.variant,
        use_ort=not args.no_ort,
        as_json=args.json,
    )
