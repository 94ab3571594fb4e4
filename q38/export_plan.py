"""What ``q38 export-genai`` writes, planned per surface and written by one writer.

:func:`q38.export_genai.export_genai` asks the source's surface for an :class:`ExportPlan` (every
refusal happens while planning) and :func:`write_export` stages it: the planned files placed by
the package's placer, the config written, the directory renamed into place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from q38.errors import ExportError

if TYPE_CHECKING:  # the CLI's --help reads DEFAULT_PROMPT from here: no package import at start-up
    from q38.package.io.links import Placer

__all__ = ["DEFAULT_PROMPT", "ExportPlan", "write_export"]

# The prompt token ids `q38 export-genai --generate` (and `q38 demo`) generate from by default.
DEFAULT_PROMPT: Final = "1,5,9,17"


@dataclass(frozen=True)
class ExportPlan:
    """What an export writes, decided before anything is staged (every refusal comes first).

    ``sources``: package-relative name -> (source file, never linked); ``config_text``: the
    ``genai_config.json`` written (None: the source's config is among ``sources``, placed as it is).
    """

    graph: str
    sources: dict[str, tuple[Path, bool]]
    config_text: str | None
    placer: Placer
    states: dict[str, int] = field(default_factory=dict)
    rewrites: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


def write_export(plan: ExportPlan, out: Path) -> dict[str, str]:
    """Stage the planned files and config at ``out`` (renamed into place; nothing left on failure)."""
    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.package import StagedDirectory

    files: dict[str, str] = {}
    placer = plan.placer
    try:
        with StagedDirectory(out) as staged:
            with placer.progress([path for path, _ in plan.sources.values()], "export-genai: placing files"):
                for rel, (source, outside) in plan.sources.items():
                    target = staged.path / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    files[rel] = str(placer.place(source, target, outside=outside).mode)
            if plan.config_text is not None:
                with open(staged.path / "genai_config.json", "x", encoding="utf-8", newline="\n") as fh:
                    fh.write(plan.config_text)
                files["genai_config.json"] = "write"
            staged.commit()
    except OSError as exc:
        raise ExportError(f"{out}: cannot write the export: {exc.strerror or exc}") from None
    return files
