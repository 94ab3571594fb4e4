"""``q38 export-genai PKG OUT``: a model directory released onnxruntime-genai (0.18.0) loads on CPU."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from q38.commands._options import say_wrote
from q38.commands._placement import add_placement_arguments, placement_options
from q38.commands._source_gate import add_allow_flag, gated
from q38.errors import FlagError, quote
from q38.export_plan import DEFAULT_PROMPT
from q38.progress import elapsed

__all__ = ["DEFAULT_PROMPT", "register", "run"]


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """Add ``q38 export-genai`` to the command line."""
    p = sub.add_parser(
        "export-genai",
        parents=[common],
        help="export a package for onnxruntime-genai 0.18.0 on CPU",
        description="Write OUT, a model directory that released onnxruntime-genai (0.18.0) loads on CPU. "
        "From a q38 package (cpu variant, contrib lineage): a 0.18-compatible genai_config.json (model.type "
        "qwen3_5_moe_text, string provider options, no runtime profiles, no q38-only keys) and the target "
        "graph with its external data. From an onnxruntime-genai builder package: every file passed "
        "through, the config rewritten only where 0.18.0 on CPU needs it (CUDA provider options, "
        "runtime_profiles and shared_initializers dropped); an mtp.onnx without CPU kernels is dropped "
        "with a warning. Files are reflinked or copied (hard-linked only with --link hardlink). "
        "PKG is never modified; OUT must not exist.",
    )
    p.add_argument("pkg", metavar="PKG", type=Path,
                   help="cpu-variant q38 package or onnxruntime-genai builder package (never modified)")
    p.add_argument("out", metavar="OUT", type=Path, help="model directory to write (must not exist)")
    add_placement_arguments(p)
    p.add_argument(
        "--provider", choices=("cpu", "cuda"), default="cpu",
        help="provider_options to write (default cpu: none; cuda keeps the package's CUDA options)",
    )
    p.add_argument(
        "--generate", type=int, default=0, metavar="N",
        help="after exporting, generate N tokens greedily with onnxruntime-genai on CPU and print them; "
        "OUT is written only if generation succeeds (default 0: no generation)",
    )
    p.add_argument("--prompt", default=None, metavar="IDS",
                   help=f"prompt token ids for --generate, comma-separated (default: {DEFAULT_PROMPT})")
    add_allow_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Export PKG to OUT (gated on the source passing ``q38 check``); with --generate, prove it runs.

    With ``--generate N`` the export is staged, N tokens are generated with onnxruntime-genai,
    and only then is it moved to OUT: a failed generation leaves no OUT. Returns 0.
    """
    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.export_genai import export_genai, generate_tokens

    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.package.io.staging import StagedDirectory, rename_noreplace

    link, digest = placement_options(args)

    if args.prompt is not None and not args.generate:
        raise FlagError("--prompt is only used with --generate N (nothing would be generated)")
    if args.generate < 0:
        raise FlagError(f"--generate {args.generate}: expected N >= 0 tokens")
    prompt: list[int] = []
    if args.generate:
        text = DEFAULT_PROMPT if args.prompt is None else args.prompt
        try:
            prompt = [int(t) for t in text.split(",")]
        except ValueError:
            raise FlagError(f"--prompt {quote(text)}: expected comma-separated token ids") from None
    tokens: list[int] | None = None
    with gated(args.pkg, args):
        if not args.generate:
            result = export_genai(args.pkg, args.out, link=link.value, provider=args.provider, digest=digest)
        else:
            # Export next to OUT, generate from there, and only then move it into place: a failed
            # generation leaves no OUT behind.
            with StagedDirectory(args.out) as staged:
                inner = staged.path / "model"
                result = export_genai(args.pkg, inner, link=link.value, provider=args.provider, digest=digest)
                with elapsed(f"q38 export-genai: generating {args.generate} token(s) with onnxruntime-genai"):
                    tokens = generate_tokens(inner, prompt, args.generate)
                rename_noreplace(inner, staged.dest)
    if args.json:
        print(json.dumps({"out": str(args.out), "graph": result.graph, "files": result.files,
                          "states": result.states, "rewrites": list(result.rewrites),
                          "dropped": list(result.dropped), "tokens": tokens}, sort_keys=True))
    else:
        for line in result.rewrites:
            print(f"config: {line}")
        for line in result.dropped:
            print(f"dropped: {line}")
        if tokens is not None:
            print("tokens: " + " ".join(str(t) for t in tokens))
    # The last line names what was written (stderr with --json: stdout is the JSON document).
    say_wrote("export-genai", f"{args.out} ({len(result.files)} files, graph {result.graph}; exported from {args.pkg})",
              machine=args.json)
    return 0
