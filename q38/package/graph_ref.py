"""One graph a package config names, as every command and ``q38 check`` sees it (both surfaces)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["GraphRef"]


@dataclass(frozen=True)
class GraphRef:
    """A graph of a package: its role, file, config section, session options and providers.

    ``role`` is ``target``/``head``/``prefill``/``s2``.. on the v12b surface, ``decoder``/``mtp``/
    ``engram``/``vision``/.. on the genai surface, and ``profile:ID`` for a runtime profile's
    alternate decoder. ``providers`` are canonical GenAI provider names in config order; empty
    means the CPU provider. ``session_entries`` are the string session config entries.
    """

    role: str
    path: Path
    rel: str
    section: str
    session_entries: dict[str, str] = field(default_factory=dict)
    providers: tuple[str, ...] = ()
    root: Path | None = None  # the directory its external data must stay inside
    overlay_entries: tuple[dict[str, str], ...] = ()  # session entries runtime profiles apply to it

    @property
    def provider(self) -> str:
        """The provider the config names first (``CPU`` when none)."""
        return self.providers[0] if self.providers else "CPU"
