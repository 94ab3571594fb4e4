"""Sizes on the command line: one reading of ``24GiB`` / ``24GB`` / ``512MiB`` for every size flag.

``q38 fit --gpu`` and ``q38 offload --device-expert-bytes`` / ``--host-expert-bytes`` read sizes
here (standard library only). A size needs a unit: ``--gpu 24`` was read as a 24-byte GPU, which
no one means; a flag whose name says bytes (``--*-bytes``) keeps a bare decimal as a byte count.
"""

from __future__ import annotations

from typing import Final

__all__ = ["SIZE_EXAMPLES", "SIZE_HINT", "parse_byte_size"]

_UNITS: Final = {"b": 1, "k": 10**3, "kb": 10**3, "ki": 1 << 10, "kib": 1 << 10, "m": 10**6, "mb": 10**6,
                 "mi": 1 << 20, "mib": 1 << 20, "g": 10**9, "gb": 10**9, "gi": 1 << 30, "gib": 1 << 30,
                 "t": 10**12, "tb": 10**12, "ti": 1 << 40, "tib": 1 << 40}  # fmt: skip
SIZE_EXAMPLES: Final = "24GiB, 24GB, 512MiB or 4096B"
SIZE_HINT: Final = f"a number with a unit: {SIZE_EXAMPLES} (GB = 10^9 bytes, GiB = 2^30)"


def parse_byte_size(text: str, *, bare_is_bytes: bool = False) -> int:
    """``24GiB`` / ``24GB`` / ``1.5GiB`` / ``4096B`` -> bytes; ValueError naming the fault otherwise.

    Units: B, kB/KiB, MB/MiB, GB/GiB, TB/TiB (case-insensitive, the B optional; decimal and binary). A bare number
    is refused ("has no unit") unless ``bare_is_bytes``.
    """
    cleaned = text.strip().lower().replace(" ", "")
    number = cleaned.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = cleaned[len(number):]
    digits = number.replace(".", "", 1)
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits) > 30 or (unit and unit not in _UNITS):
        raise ValueError(f"{text!r}: expected {SIZE_HINT}")
    if not unit:
        if not bare_is_bytes or "." in number:
            raise ValueError(f"{text!r} has no unit; give {SIZE_HINT}")
        return int(number)
    return int(float(number) * _UNITS[unit])
