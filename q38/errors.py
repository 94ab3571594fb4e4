"""The q38 error hierarchy, and how user values appear in messages.

Every user-facing failure is a :class:`Q38Error`. The CLI prints ``str(error)`` as one
line and exits 2, so messages must name what is at fault (file, node, rule, flag) and
fit on one line. Internal invariants use :class:`InternalError`.

Messages are bounded: a hostile input can hold a 50 MB string where a name belongs, and the
one error line must stay readable. :func:`quote` shows a user value as its ``repr`` cut to
:data:`QUOTE_LIMIT` characters (with an ellipsis and the full length), :func:`clip` does the
same for a path or free text without quotes, and every :class:`Q38Error` line is capped at
:data:`LINE_LIMIT` characters whatever its parts.
"""

from __future__ import annotations

import reprlib
from typing import Final

__all__ = [
    "LINE_LIMIT",
    "QUOTE_LIMIT",
    "BuildError",
    "ConfigError",
    "ExportError",
    "FlagError",
    "GraphError",
    "InternalError",
    "OffloadError",
    "OptimizeError",
    "PackageError",
    "PoolError",
    "ProfileError",
    "Q38Error",
    "UnsafePathError",
    "bound_line",
    "clip",
    "quote",
]

QUOTE_LIMIT: Final = 120
LINE_LIMIT: Final = 400
_INT_DIGITS_SHOWN: Final = 40


class _Repr(reprlib.Repr):
    """repr of containers with bounded work: a few items, short strings, no huge integers."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = 6
        self.maxstring = QUOTE_LIMIT
        self.maxother = QUOTE_LIMIT
        self.maxlong = _INT_DIGITS_SHOWN

    def repr_int(self, x: int, level: int) -> str:
        return _int_text(x)


_REPR: Final = _Repr()


def _int_text(value: int) -> str:
    # str() of an integer beyond ~4300 digits raises ValueError (CPython's conversion limit), and
    # any integer that long is hostile: show its size, not its digits.
    if value.bit_length() <= 128:
        return str(value)
    digits = int(value.bit_length() * 0.30103) + 1
    return f"<integer of about {digits} digits>"


def _escape(text: str) -> str:
    r"""``text`` with control characters and lone surrogates escaped (``\n``, ``\x1b``, ``\ud800``)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` cut to about ``limit`` characters, with an ellipsis and the full length.

    ``quote("a" * 10**8)`` is ``'aaaa...'... (100000000 chars)``: the work is bounded by
    ``limit``, not by the value. Use it for every user value in an error or violation message.
    """
    if isinstance(value, (str, bytes, bytearray)):
        if len(value) <= limit:
            return repr(value)
        unit = "chars" if isinstance(value, str) else "bytes"
        return f"{repr(value[:limit])[: limit + 8]}... ({len(value)} {unit})"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return _int_text(value)
    text = _REPR.repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def clip(text: object, limit: int = QUOTE_LIMIT + 40) -> str:
    """A path or free text for a message, unquoted: control characters escaped, cut to ``limit``.

    Long paths keep their head and their tail (the file name is what the reader needs).
    """
    raw = str(text)
    if len(raw) > 4 * limit:
        raw = raw[: 2 * limit] + raw[-2 * limit :]
        total = len(str(text))
    else:
        total = len(raw)
    shown = _escape(raw)
    if len(shown) <= limit and total == len(raw):
        return shown
    half = (limit - 5) // 2
    return f"{shown[:half]}...{shown[-half:]} ({total} chars)"


def bound_line(message: object, limit: int = LINE_LIMIT) -> str:
    """``message`` as one line of at most about ``limit`` characters (whitespace runs collapsed)."""
    raw = str(message)
    total = len(raw)
    if total > 8 * limit:  # never split / escape megabytes of a hostile message
        raw = raw[: 2 * limit] + " " + raw[-limit:]
    line = _escape(" ".join(raw.split()))
    if len(line) <= limit and total == len(str(message)) and total <= 8 * limit:
        return line
    # Keep the head (what and where) and the tail (often the errno text or the expected value).
    cut = f" ...(message cut, {total} chars)... "
    tail = min(80, max(0, len(line) - limit // 2))
    head = max(0, limit - len(cut) - tail)
    return line[:head] + cut + (line[-tail:] if tail else "")


class Q38Error(Exception):
    """A user error: bad flag, unreadable or malformed input, unconvertible package."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # One bounded line, always: newlines in a wrapped library message would break the CLI
        # contract, and a hostile value quoted without quote() must not make it megabytes long.
        super().__init__(bound_line(message))


class FlagError(Q38Error):
    """A command-line flag or its value is invalid."""


class PackageError(Q38Error):
    """A package directory or one of its files cannot be read or is malformed."""


class ConfigError(PackageError):
    """genai_config.json does not match the config surface."""


class PoolError(PackageError):
    """weights_pool.txt is malformed."""


class ProfileError(PackageError):
    """expert-profile.bin (STRP v1) is malformed."""


class GraphError(PackageError):
    """An ONNX graph is unreadable, malformed, or its external data is unsafe."""


class UnsafePathError(PackageError):
    """A path escapes the package directory or crosses an unsafe link."""


class BuildError(Q38Error):
    """``q38 build`` refused its inputs."""


class ExportError(Q38Error):
    """``q38 export-genai`` refused its input."""


class OptimizeError(Q38Error):
    """``q38 optimize`` refused its inputs."""


class OffloadError(Q38Error):
    """``q38 offload`` refused its inputs."""


class InternalError(RuntimeError):
    """A q38 bug: an invariant that should hold regardless of user input."""
