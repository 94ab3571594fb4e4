"""``q38 build OUT --target DIR --head DIR``: assemble a package from source bundles (SPEC §5.1)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from q38.commands._placement import add_placement_arguments, placement_options

__all__ = ["register", "run"]

_LIB_PREFIX = "--lib-"


def _take_libs(args: Sequence[str], parser: argparse.ArgumentParser) -> tuple[list[str], list[tuple[str, str]]]:
    """Split ``--lib-NAME PATH`` / ``--lib-NAME=PATH`` out of ``args`` (a dynamic flag family)."""
    rest: list[str] = []
    libs: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg.startswith(_LIB_PREFIX):
            name, sep, value = arg[len(_LIB_PREFIX):].partition("=")
            if not sep:
                if i + 1 >= len(args) or args[i + 1].startswith("-"):
                    parser.error(f"argument {arg}: expected one argument (a library path)")
                value = args[i + 1]
                i += 1
            if not name:
                parser.error(f"argument {arg}: expected --lib-NAME PATH")
            libs.append((name, value))
        else:
            rest.append(arg)
        i += 1
    return rest, libs


class _BuildParser(argparse.ArgumentParser):
    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        rest, libs = _take_libs(list(sys.argv[1:] if args is None else args), self)
        ns, extras = super().parse_known_args(rest, namespace)
        ns.libs = libs
        return ns, extras


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 build`` to the command line.

    Its parser also accepts the ``--lib-NAME PATH`` flag family, which argparse cannot declare.
    """
    p = sub.add_parser(
        "build",
        parents=[common],
        help="assemble a package from source bundles",
        description=(
            "Assemble a layered (OUT/target, OUT/head) or folded (one package, shared weights "
            "stored once) package from the source bundles of an exporter or `q38 synth --bundles`. "
            "Custom-op libraries: --lib-NAME PATH (repeatable; copied into libs/)."
        ),
    )
    p.__class__ = type("_BuildSubParser", (_BuildParser, type(p)), {})
    p.add_argument("out", metavar="OUT", type=Path, help="destination (must not exist)")
    p.add_argument("--target", required=True, type=Path, metavar="DIR", help="target bundle directory (required): a q38 bundle or an exporter's output folder (an "
                   "onnxruntime-genai builder package: its genai_config.json supplies the dimensions the graph "
                   "leaves symbolic)")
    p.add_argument("--head", required=True, type=Path, metavar="DIR", help="head bundle directory (required)")
    p.add_argument("--prefill", type=Path, metavar="DIR", help="prefill bundle (default: none, no prefill graph)")
    p.add_argument("--layout", choices=("layered", "folded"), default="folded",
                   help="folded: one package, shared weights stored once; layered: OUT/target and OUT/head")
    p.add_argument("--provider", choices=("cuda", "cpu"), default="cpu",
                   help="execution provider the config's session options name")
    p.add_argument("--cuda-option", action="append", default=[], metavar="KEY=VALUE",
                   help="CUDA provider option (numbers are written as decimal strings)")
    add_placement_arguments(p)
    p.add_argument("--multidraft", action="store_true",
                   help="also emit model_s2/s3/s4.onnx (2, 3 and 4 verify rows: 1-3 chained MTP drafts)")
    p.add_argument("--offload-profiles", action="store_true",
                   help="add the QMoE-offload runtime profiles and session options (implies --multidraft)")
    p.set_defaults(run=run, libs=[])


def run(args: argparse.Namespace) -> int:
    """Assemble the package(s) from the bundles; print what was built (or, with --json, a summary).

    Returns 0; a bundle or flag the builder refuses raises its one-line error (exit 2).
    """
    # deferred: pulls ml_dtypes into q38 --help (q38.assembly.proto_io)
    from q38.assembly import BuildRequest, build_package

    link, digest = placement_options(args)
    req = BuildRequest(
        out=args.out, target=args.target, head=args.head, prefill=args.prefill,
        layout=args.layout, libs=tuple(args.libs), provider=args.provider,
        cuda_options=tuple(args.cuda_option),
        link=link,
        digest=digest,
        multidraft=args.multidraft or args.offload_profiles,
        offload_profiles=args.offload_profiles,
    )
    result = build_package(req)
    if args.json:
        print(json.dumps(result.summary(), sort_keys=True))
    else:
        modes = ", ".join(f"{k} {v}" for k, v in sorted(result.link_modes.items()))
        print(f"built {', '.join(str(p) for p in result.packages)} ({modes})")
    return 0
