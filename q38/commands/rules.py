"""``q38 rules [--family F] [--json]``: the contract catalogue, one line per rule.

Read from the rules' own records (``contracts.catalogue``): id, default severity, families, the
onnxruntime versions the rule exists in, where ORT enforces it, and its summary.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from q38.errors import FlagError, quote

__all__ = ["register", "run"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 rules`` to the command line."""
    p = sub.add_parser(
        "rules",
        parents=[common],
        help="list every contract rule (id, severity, families, ORT versions, enforcement point)",
        description="List the contract rules q38 check runs; q38 explain RULE-ID prints one in full.",
    )
    p.add_argument("--family", metavar="FAMILY", default=None,
                   help="only the rules of this family (schema, qsa, causal-conv, offload, layout, config, "
                   "cuda, cpu-kernel, run-time, ...; default: every rule)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the catalogue (filtered by --family) as a table or, with --json, a JSON list."""
    # deferred: pulls onnx into q38 --help (contracts._graph)
    from contracts.catalogue import catalogue

    entries = list(catalogue())
    if args.family is not None:
        wanted = args.family.strip().lower()
        known = sorted({f for e in entries for f in e.families})
        if wanted not in known:
            raise FlagError(f"--family {quote(args.family)}: no such family; one of {', '.join(known)}")
        entries = [e for e in entries if wanted in e.families]
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
        return 0
    rows = [(e.rule_id, e.severity, ",".join(e.families), e.versions, e.enforced, e.summary) for e in entries]
    header = ("RULE", "SEVERITY", "FAMILIES", "ORT", "ENFORCED", "SUMMARY")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5])
    print(f"{len(entries)} rule(s); q38 explain RULE-ID for one rule's full text")
    return 0
