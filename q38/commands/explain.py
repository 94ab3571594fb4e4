"""``q38 explain RULE-ID``: one contract rule in full.

What ORT does (and the message it prints), the ORT source it mirrors, where and in which ORT
versions it is enforced, a violating example and the fix, read from the rule's own records
(``contracts.catalogue``). An unknown id exits 2 with one line.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from q38.errors import FlagError, quote

__all__ = ["register", "run"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 explain`` to the command line."""
    p = sub.add_parser(
        "explain",
        parents=[common],
        help="print one contract rule's full text: what ORT does, its source, a violating example, the fix",
        description="Explain one rule of q38 check (q38 rules lists the ids).",
    )
    p.add_argument("rule_id", metavar="RULE-ID", help="a rule id, e.g. ORT-SCHEMA-001 (case-insensitive)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the rule's text (or its catalogue entry as JSON with --json)."""
    from contracts.catalogue import entry  # deferred: pulls onnx into q38 --help (contracts._graph)

    e = entry(args.rule_id)
    if e is None:
        raise FlagError(f"unknown rule {quote(args.rule_id)} (q38 rules lists them)")
    if args.json:
        print(json.dumps(e.to_dict(), indent=2))
        return 0

    def para(text: str) -> str:
        return textwrap.fill(text, width=100, initial_indent="  ", subsequent_indent="  ",
                             break_long_words=False, break_on_hyphens=False)

    print(f"{e.rule_id} ({e.name}): {e.summary}")
    print(f"  severity: {e.severity}; families: {', '.join(e.families)}; surface: {e.kind}; EP: {e.ep}")
    print(f"  enforced: {e.enforced}; onnxruntime versions: {e.versions}")
    print(f"  ORT source: {e.source}")
    print("\nWhat ORT does:")
    print(para(e.explanation))
    print("\nViolating example:")
    print(f"  {e.example}")
    print("\nFix:")
    print(para(e.fix))
    return 0
