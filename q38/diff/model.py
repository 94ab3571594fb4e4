"""One difference between two canonical forms, as a line and as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from q38.canonical.digests import TensorDigest

__all__ = ["ABSENT", "Change", "Difference", "short_value"]

Change = Literal["added", "removed", "changed"]
SYMBOLS: Final = {"added": "+", "removed": "-", "changed": "~"}
VALUE_CHARS: Final = 100
"""A value shown in a line is cut to this many characters (its JSON keeps it whole)."""
DIGEST_CHARS: Final = 12


class _Absent:
    """The value on the side that has no such position (a node input list that ends before it)."""

    def __repr__(self) -> str:
        return "absent"


ABSENT: Final = _Absent()
"""Shown as ``absent`` in a line and as ``null`` in JSON."""


def _plain(value: object) -> object:
    """``value`` with lazy digests resolved, for JSON."""
    if value is ABSENT:
        return None
    if isinstance(value, TensorDigest):
        return value.hexdigest()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def short_value(value: object) -> str:
    """A value as compact JSON for one line: digests shortened, long values cut with their length."""
    if value is ABSENT:
        return "absent"
    if isinstance(value, TensorDigest):
        value = value.hexdigest()
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:DIGEST_CHARS] + "…"
    text = json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":"), default=str)
    if len(text) > VALUE_CHARS:
        return f"{text[: VALUE_CHARS - 1]}… ({len(text)} chars)"
    return text


@dataclass(frozen=True)
class Difference:
    """What differs at one place of one file of two packages (or two canonical forms).

    ``where`` is the readable place (``model.decoder.session_options.log_id``,
    ``node "/layers.0/attn/RMSNormRotary" (com.microsoft::RMSNormRotary) attribute epsilon``);
    ``a`` / ``b`` are the values on each side (absent on the side that lacks it); ``facts``
    names the place as data for ``--json`` (section, node, field, key ...).
    """

    file: str
    change: Change
    where: str
    a: object = None
    b: object = None
    facts: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The difference as one indented report line: ``~ where: a -> b``, or ``+`` / ``-`` with one value."""
        sym = SYMBOLS[self.change]
        if self.change == "changed":
            return f"  {sym} {self.where}: {short_value(self.a)} -> {short_value(self.b)}"
        value = self.b if self.change == "added" else self.a
        shown = self.facts.get("summary")
        if shown is None:
            shown = short_value(value)
        return f"  {sym} {self.where}" + (f": {shown}" if shown != "" else "")

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` record: file, change, place, the facts, and the side values (digests resolved)."""
        out: dict[str, Any] = {"file": self.file, "change": self.change, "where": self.where, **self.facts}
        out.pop("summary", None)
        if self.change != "added":
            out["a"] = _plain(self.a)
        if self.change != "removed":
            out["b"] = _plain(self.b)
        return out
