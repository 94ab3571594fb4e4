"""The offload session options q38 emits (``session.moe.offload.*``) and how they are spelled.

Everything here is pure: :class:`OffloadOptions` is what the command line asked for, and
:func:`offload_config_entries` turns it plus the per-node resident-slot caps into the exact string
config entries ORT 1.32.0 parses (ort-contract-rules.md §1A). Values are decimal strings; mode,
placement and cpu_execution use the canonical lower-case spellings ORT documents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from q38.errors import FlagError, OffloadError
from q38.package.memory import parse_caps

__all__ = [
    "OFFLOAD_PREFIX",
    "PROFILE_FILENAME",
    "OffloadOptions",
    "format_node_overrides",
    "offload_config_entries",
    "parse_node_overrides",
]

OFFLOAD_PREFIX: Final = "session.moe.offload."
PROFILE_FILENAME: Final = "expert-profile.bin"
_U64_MAX: Final = 2**64 - 1
# ORT's node_overrides grammar splits on ';', ':', ',' and '=' and trims spaces.
_BAD_NODE_NAME: Final = re.compile(r"[;:,=]|^\s|\s$")


@dataclass(frozen=True)
class OffloadOptions:
    """What ``q38 offload`` was asked for (flags, validated)."""

    mode: Literal["required", "auto"] = "required"
    placement: Literal["adaptive", "static"] = "adaptive"
    cpu_execution: bool = False
    device_expert_bytes: int | None = None
    host_expert_bytes: int | None = None
    expert_profile: str | None = None  # source path of --expert-profile
    target_resident_slots: int | None = None
    total_resident_slots: int | None = None
    uniform_profile_slots: bool = False
    min_slots_per_layer: int = 0
    mtp_moe_placement: Literal["cpu_mmap", "host_mapped"] = "cpu_mmap"
    extra_notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.mode not in ("required", "auto"):
            raise FlagError(f"--offload-mode {self.mode!r}: expected 'required' or 'auto'")
        if self.placement not in ("adaptive", "static"):
            raise FlagError(f"--offload-placement {self.placement!r}: expected 'adaptive' or 'static'")
        for flag, value in (
            ("--device-expert-bytes", self.device_expert_bytes),
            ("--host-expert-bytes", self.host_expert_bytes),
        ):
            if value is not None and not 0 <= value <= _U64_MAX:
                raise FlagError(f"{flag} {value}: expected an integer in [0, 2^64-1]")
        if self.target_resident_slots is not None and self.total_resident_slots is not None:
            raise FlagError(
                "--target-resident-slots and --total-resident-slots are exclusive: pick a per-layer "
                "cap or a profile-driven total"
            )
        if self.total_resident_slots is not None and self.expert_profile is None:
            raise FlagError("--total-resident-slots needs --expert-profile FILE")
        if self.total_resident_slots is None:
            if self.uniform_profile_slots:
                raise FlagError("--uniform-profile-slots needs --total-resident-slots")
            if self.min_slots_per_layer:
                raise FlagError("--min-slots-per-layer needs --total-resident-slots")
        if self.mtp_moe_placement not in ("cpu_mmap", "host_mapped"):
            raise FlagError(
                f"--mtp-moe-placement {self.mtp_moe_placement!r}: expected 'cpu_mmap' or 'host_mapped'"
            )


def format_node_overrides(caps: Mapping[str, int]) -> str:
    """``node:max_resident_slots=N;...`` in the given order; refuses names ORT cannot parse."""
    parts = []
    for name, cap in caps.items():
        if not name or _BAD_NODE_NAME.search(name):
            raise OffloadError(
                f"QMoE node {name!r}: its name cannot be written in session.moe.offload.node_overrides "
                "(empty, or contains ';', ':', ',', '=' or edge spaces)"
            )
        if cap < 0:
            raise OffloadError(f"QMoE node {name!r}: negative resident-slot cap {cap}")
        parts.append(f"{name}:max_resident_slots={cap}")
    return ";".join(parts)


def parse_node_overrides(text: str) -> dict[str, int]:
    """``node -> max_resident_slots`` read back from a ``node_overrides`` value q38 wrote.

    The hit-rate report reads what was emitted, not what was planned; the one reader is
    :func:`q38.package.memory.parse_caps`, which ``q38 fit`` uses too.
    """
    return parse_caps(text)


def offload_config_entries(
    options: OffloadOptions,
    caps: Mapping[str, int],
    *,
    mode: str | None = None,
) -> dict[str, str]:
    """The ``session.moe.offload.*`` config entries (sorted by key).

    ``mode`` overrides ``options.mode`` (the CPU test sessions use ``auto``). The popularity file
    is the package-relative ``expert-profile.bin`` when a profile was given.
    """
    p = OFFLOAD_PREFIX
    entries = {f"{p}mode": mode or options.mode, f"{p}placement": options.placement}
    if options.cpu_execution:
        entries[f"{p}cpu_execution"] = "enabled"
    if options.device_expert_bytes is not None:
        entries[f"{p}device_expert_bytes"] = str(options.device_expert_bytes)
    if options.host_expert_bytes is not None:
        entries[f"{p}host_expert_bytes"] = str(options.host_expert_bytes)
    if options.expert_profile is not None:
        entries[f"{p}popularity_file"] = PROFILE_FILENAME
    if caps:
        entries[f"{p}node_overrides"] = format_node_overrides(caps)
    return dict(sorted(entries.items()))
