"""The placement flags every writing command shares: ``--link``, ``--copy``, ``--digest``.

Standard library only (``--help`` must work without onnx); :func:`placer` imports the package
layer when the command runs. The policy itself lives in :mod:`q38.package.io.links`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from q38.errors import FlagError

if TYPE_CHECKING:
    from q38.package.io.links import LinkPolicy

__all__ = ["add_placement_arguments", "placement_options"]

LINK_HELP = (
    "how existing files are placed: auto (default) = reflink where the filesystem can, else copy; "
    "reflink or copy only; hardlink only (warns: onnx and onnx-ir then refuse the source and the output)"
)


def add_placement_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``--link`` / ``--copy`` / ``--digest``: how a writing command places the files it carries unchanged."""
    p.add_argument("--link", choices=("auto", "reflink", "hardlink", "copy"), default="auto", help=LINK_HELP)
    p.add_argument("--copy", action="store_true", help="shorthand for --link copy")
    p.add_argument("--digest", action="store_true",
                   help="also record the sha256 of every placed file: a copy hashes in the same pass as "
                        "the copy, a reflinked / hard-linked file is read once (default: identity only, "
                        "and digests the source's manifest already holds)")


def placement_options(args: argparse.Namespace) -> tuple[LinkPolicy, bool]:
    """(LinkPolicy, digest) from the flags; the command's core builds one Placer from them."""
    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.package.io.links import LinkPolicy

    if args.copy and args.link not in ("auto", "copy"):
        raise FlagError(f"--copy contradicts --link {args.link}")
    return (LinkPolicy.COPY if args.copy else LinkPolicy(args.link)), bool(args.digest)
