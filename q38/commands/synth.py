"""``q38 synth``: write a deterministic synthetic Qwen3.8-Flash package or source bundles."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from q38.commands._options import OrtVersion, say_wrote
from q38.progress import elapsed

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """Add ``q38 synth`` to the command line."""
    p = sub.add_parser(
        "synth",
        parents=[common],
        help="write a synthetic Qwen3.8-Flash package (or source bundles)",
        description="Write a deterministic synthetic Qwen3.8-Flash package (docs/synthetic-model.md) at OUT, "
        "or with --bundles the unassembled source bundles an exporter leaves. OUT must not exist.",
    )
    p.add_argument("out", metavar="OUT", type=Path, help="output directory (must not exist)")
    p.add_argument("--preset", default="tiny", choices=("tiny", "full", "large", "slice"),
                   help="model size: tiny (8 layers, unit tests), full (48 layers, small dimensions), "
                   "large (full graph with --weight-gb of routed experts), slice (the real dimensions, "
                   "3 GDN + 1 QSA layers, ~8 GB; docs/synthetic-model.md)")
    p.add_argument("--variant", default="cpu", choices=("faithful", "cpu"),
                   help="cpu: every op has an ORT CPU kernel (runs here); faithful: the real QSA ops "
                   "(needs a Qwen3.8-capable CUDA build)")
    p.add_argument("--layout", default="flat", choices=("flat", "layered"),
                   help="flat: one directory; layered: target/ and head/ packages")
    p.add_argument("--lineage", default="contrib", choices=("contrib", "custom"),
                   help="contrib: com.microsoft ops; custom: the qwen.fold custom-op library lineage")
    p.add_argument("--experts", default="int4", choices=("int4", "nvfp4"), help="routed-expert weight format")
    p.add_argument(
        "--exporter",
        default="research",
        choices=("research", "builder"),
        help="graph forms: the research exporter's (default) or the public builder's "
        "(genai package with mtp.onnx / engram.onnx; docs/synthetic-model.md)",
    )
    p.add_argument(
        "--weights-prepacked",
        action="store_true",
        help="builder only: QMoE weights_prepacked=1 with CUTLASS SM80 expert bytes "
        "(default: attribute absent, raw bytes)",
    )
    p.add_argument(
        "--linear-attn",
        default=None,
        choices=("gated_delta_net", "linear_attention"),
        help="builder only: GatedDeltaNet layers (Qwen3.8, default) or the 0.18.0 builder's "
        "LinearAttentionGate + LinearAttention form (the default with --target-ort 1.31.1)",
    )
    p.add_argument("--seed", type=int, default=0, help="weight seed (same arguments, byte-identical output)")
    p.add_argument(
        "--bundles", action="store_true", help="write source bundles instead of a package"
    )
    p.add_argument(
        "--weight-gb",
        type=float,
        default=None,
        help="routed-expert gigabytes (--preset large only; default: the preset's size)",
    )
    p.add_argument(
        "--context-length",
        type=int,
        default=4096,
        metavar="N",
        help="model.context_length and kv_capacity in tokens (default 4096; at least 256, the prefill chunk)",
    )
    p.add_argument(
        "--target-ort", action=OrtVersion, default=None, metavar="VERSION",
        help="the onnxruntime release the package must load and run in (1.31.1 or 1.32.0): IR version, "
        "opsets, GatedDeltaNet gate dtypes and which contrib ops exist (default: the newest forms, 1.32.0)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write the synthetic package (or, with --bundles, source bundles) to OUT; returns 0.

    The last line names what was written (stderr with --json, where stdout is the JSON document).
    """
    # deferred: pulls ml_dtypes into q38 --help (q38.synth.builder_forms.forms)
    from q38.synth import synthesize

    with elapsed(f"q38 synth: writing the {args.preset} {args.variant} {'bundles' if args.bundles else 'package'}"):
        out = synthesize(
            args.out,
            preset=args.preset,
            variant=args.variant,
            layout=args.layout,
            lineage=args.lineage,
            experts=args.experts,
            seed=args.seed,
            bundles=args.bundles,
            weight_gb=args.weight_gb,
            context_length=args.context_length,
            exporter=args.exporter,
            weights_prepacked=args.weights_prepacked,
            linear_attn=args.linear_attn,
            target_ort=args.target_ort,
        )
    if args.json:
        doc = {"out": str(out), "preset": args.preset, "variant": args.variant}
        print(json.dumps(doc | {"exporter": args.exporter}))
    what = "source bundles" if args.bundles else f"{args.layout} package"
    say_wrote("synth", f"{out} ({what}: {args.preset} preset, {args.variant} variant, {args.exporter} exporter)",
              machine=args.json)
    return 0
