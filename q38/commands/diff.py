"""``q38 diff A B``: what differs between two packages, in terms of what they contain.

Exit codes: 0 the packages are the same, 1 they differ, 2 one of them is unreadable.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["register", "run"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 diff`` to the command line."""
    p = sub.add_parser(
        "diff",
        parents=[common],
        help="semantic diff of two packages (exit 0 same, 1 different, 2 unreadable)",
        description=(
            "Compare two packages (either surface, flat or layered) on their canonical forms, the "
            "same ones the goldens store: configs and manifests by key path (q38 version, times, "
            "graph and library hashes masked), pool entries by id, and per graph the nodes added, "
            "removed or changed (attribute, input, output, domain), initializers by dtype, shape "
            "and digest, opset imports; then files added, removed, resized or rewritten. A summary "
            "line per graph leads (nodes, initializers, I/O, value_info counted by change), then "
            "one line per difference, grouped per file, graphs first; value_info only with "
            "--value-info. Weights are hashed streamed, and only where the "
            "same file or a manifest's recorded digest does not already decide. "
            "Exit 0 same, 1 different, 2 unreadable."
        ),
    )
    p.add_argument("a", metavar="A", type=Path, help="the first package directory (shown as -)")
    p.add_argument("b", metavar="B", type=Path, help="the second package directory (shown as +)")
    p.add_argument("--value-info", action="store_true",
                   help="list each graph's value_info (shape annotation) differences; by default a graph shows "
                        "their count (--json always carries them)")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the differences between packages A and B, one line each (or the --json document).

    Returns 0 when they are the same, 1 when they differ; an unreadable package raises (exit 2).
    """
    # deferred: pulls numpy into q38 --help (q38.canonical.graph)
    from q38.diff import diff_packages

    result = diff_packages(args.a, args.b)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(result.lines(value_info=args.value_info)))
    return 0 if result.same else 1
