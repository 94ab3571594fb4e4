"""What an offload conversion writes, computed before anything is written (either surface)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from q38.offload.options import OffloadOptions
from q38.offload.report import OffloadReport

if TYPE_CHECKING:  # onnx_ir loads with the planners, not with this record
    from q38.offload.placement import Move
    from q38.package.interface import AnyPackage

__all__ = ["AlignedFile", "OffloadPlan"]


@dataclass(frozen=True)
class AlignedFile:
    """A file filled kernel-side from byte ranges of the source (the aligned MTP-expert file)."""

    rel: str  # output-relative name
    moves: tuple[Move, ...]
    src_root: Path  # the directory the moves' source files are relative to


@dataclass
class OffloadPlan:
    """Phase 1's result: every refusal has happened; :func:`q38.offload.convert.write_offload` writes it.

    ``package`` is the opened source (the package interface); ``unchanged`` the files placed as
    they are (source path, output name); ``blobs`` the bytes written fresh (graphs, profiles), by
    output name, in order; ``texts`` the text files written (config, pool); ``subdir`` where the
    manifest goes (``target`` in a layered package); ``manifest_extra`` the surface's own
    manifest entries beside the shared ones.
    """

    package: AnyPackage
    options: OffloadOptions
    report: OffloadReport
    unchanged: list[tuple[Path, str]]
    blobs: dict[str, bytes]
    texts: dict[str, str]
    subdir: str = ""
    aligned: AlignedFile | None = None
    manifest_extra: dict[str, Any] = field(default_factory=dict)
    before_write: tuple[Callable[[], None], ...] = ()  # refusals of a conversion, not of a preview
