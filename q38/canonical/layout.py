"""The text layout of canonical forms: JSON a reviewer reads as a diff.

Indented by 2; a value is written on one line when that line fits :data:`WIDTH` characters,
else its members go one per line, recursively. A small node, an initializer, a config entry
is one line; a changed attribute of a big node is one line of its own. Keys keep the order of
the canonical form (which sorts what has no meaningful order). Ends with a newline.
"""

from __future__ import annotations

import json
from typing import Final

__all__ = ["WIDTH", "dumps"]

WIDTH: Final = 160
"""The longest line the layout writes, unless one scalar (a long name) is longer by itself."""


def _inline(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), allow_nan=False, default=str)


def dumps(data: object, *, width: int = WIDTH) -> str:
    """``data`` as JSON in the reviewable layout (see the module docstring)."""

    def emit(value: object, indent: int, lead: int) -> str:
        if not isinstance(value, (dict, list)) or not value:
            return _inline(value)
        # A container longer than the width by its size alone is never tried inline.
        if len(value) * 2 + indent + lead <= width:
            text = _inline(value)
            if indent + lead + len(text) <= width - 1:  # room for the trailing comma
                return text
        pad, inner = " " * indent, " " * (indent + 2)
        if isinstance(value, dict):
            parts = []
            for key, member in value.items():
                k = json.dumps(str(key), ensure_ascii=False) + ": "
                parts.append(inner + k + emit(member, indent + 2, len(k)))
            return "{\n" + ",\n".join(parts) + "\n" + pad + "}"
        return "[\n" + ",\n".join(inner + emit(m, indent + 2, 0) for m in value) + "\n" + pad + "]"

    return emit(data, 0, 0) + "\n"
