"""The file work both converters share: graph bytes, the profile read, unchanged files placed."""

from __future__ import annotations

import os
from pathlib import Path

import onnx_ir as ir

from q38.errors import OffloadError
from q38.offload.options import OffloadOptions
from q38.package import ExpertProfile, FileRecord, PackageWriter
from q38.package.graph_memo import active_memo
from q38.package.profile import read_profile

__all__ = ["keep_final", "keep_unchanged", "place_unchanged", "read_expert_profile", "serialize_graph", "source_files"]


def serialize_graph(model: ir.Model, *, where: str, final: bool = False) -> bytes:
    """The graph's protobuf bytes; external tensors stay references, inline initializers inline.

    Inline stays inline whatever its size (the builder inlines 64 KiB rotary caches). Refused in
    one line only where protobuf cannot hold the graph (2 GiB). ``final``: the conversion changes
    ``model`` no more (see :func:`keep_final`).
    """
    try:
        data: bytes = ir.serde.serialize_model(model).SerializeToString()
    except ValueError as exc:  # protobuf: "Message ... exceeds maximum protobuf size of 2GB"
        raise OffloadError(f"{where}: the graph does not fit in one protobuf (2 GiB): {exc}") from None
    if final:
        keep_final(model, data)
    return data


def keep_final(model: ir.Model, data: bytes) -> None:
    """``data`` is ``model`` serialized and the conversion changes ``model`` no more.

    In a gated command the output check then judges ``model`` in memory wherever a staged graph
    file holds exactly ``data`` (:mod:`q38.package.graph_memo`) instead of parsing it again.
    """
    memo = active_memo()
    if memo is not None:
        memo.keep_written(model, data)


def keep_unchanged(model: ir.Model) -> None:
    """The conversion only read ``model`` (as loaded): a graph it places unchanged is judged as it.

    See :meth:`q38.package.graph_memo.GraphMemo.keep_unchanged`; outside a gated command, nothing.
    """
    memo = active_memo()
    if memo is not None:
        memo.keep_unchanged(model)


def read_expert_profile(options: OffloadOptions) -> ExpertProfile | None:
    """The ``--expert-profile`` (strict STRP v1), read once before anything else."""
    if options.expert_profile is None:
        return None
    return read_profile(Path(options.expert_profile), what="--expert-profile")


def place_unchanged(writer: PackageWriter, items: list[tuple[Path, str]], label: str) -> dict[str, FileRecord]:
    """Place the files the conversion does not change; returns their manifest records by output rel.

    ``items`` are (source path, output rel), placed by the writer's :class:`~q38.package.Placer`
    (the shared link policy: never a hard link unless asked), under one progress bar in bytes.
    """
    records: dict[str, FileRecord] = {}
    with writer.placer.progress([src for src, _ in items], label):
        for src, rel in items:
            writer.place(src, rel)
            records[rel] = writer.records[rel]
    return records


def source_files(root: Path) -> list[str]:
    """Every file under ``root``, relative, in a fixed order."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return out
