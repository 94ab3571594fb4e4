"""Strict JSON: the one reader and writer of every JSON document q38 touches.

Python's ``json`` accepts what no JSON consumer of a package should: ``NaN`` / ``Infinity``
literals, ``1e400`` (read as ``inf``), duplicate keys (the last one silently wins, so a config can
show ``"filename": "model.onnx"`` to a reviewer and hide ``"../../etc/passwd"`` before it),
integers of any length (``int()`` of 5,000 digits raises a bare ``ValueError``), NUL characters
and unpaired surrogates in strings (``os.stat`` raises on both). :func:`loads_strict` refuses each
with one line naming the key path; :func:`dumps_json` refuses to write any of them, so whatever
q38 writes it can read back. One exception on reading: a string (or key) holding a NUL is read up
to its first NUL, with a warning naming the key path, because that is what onnxruntime and
onnxruntime-genai read (their config strings are C strings): the document stays readable.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from q38.errors import PackageError, Q38Error, clip, quote
from q38.package.io.files import CONFIG_LIMIT, format_size, read_bounded

__all__ = ["INT_MAX", "INT_MIN", "MAX_DEPTH", "dumps_json", "loads_strict", "read_json"]

# Integers JSON documents may hold: int64 and uint64 together (ORT sizes are size_t / uint64).
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**64 - 1
# Real configs nest about 8 levels deep; 64 bounds the walk and the messages' key paths.
MAX_DEPTH: Final = 64
_MAX_INT_DIGITS: Final = 20  # len(str(2**64 - 1))
_BAD_CHARS: Final = re.compile("[\x00\ud800-\udfff]")
_PLAIN_KEY: Final = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_LOG = logging.getLogger(__name__)


class _Bad:
    """A literal the parser met that a strict document must not hold (reported with its path)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class _Obj(dict):  # type: ignore[type-arg]
    """An object as parsed, remembering its first duplicate key."""

    __slots__ = ("dup",)

    def __init__(self) -> None:
        super().__init__()
        self.dup: str | None = None


def _pairs(pairs: list[tuple[str, Any]]) -> _Obj:
    obj = _Obj()
    for key, value in pairs:
        if key in obj and obj.dup is None:
            obj.dup = key
        obj.setdefault(key, value)
    return obj


def _constant(name: str) -> _Bad:
    return _Bad(f"{name} is not valid JSON (JSON has no NaN or Infinity; write a finite number)")


def _float(text: str) -> float | _Bad:
    value = float(text)
    if not math.isfinite(value):
        return _Bad(f"number {quote(text)} is out of range for a double")
    return value


def _int(text: str) -> int | _Bad:
    digits = text.lstrip("-")
    if len(digits) > _MAX_INT_DIGITS or not INT_MIN <= int(text) <= INT_MAX:
        return _Bad(f"integer {quote(text)} does not fit in 64 bits (int64 / uint64)")
    return int(text)


def _join(path: str, key: str) -> str:
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{quote(key)}]"


def _string_problem(text: str) -> str | None:
    found = _BAD_CHARS.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character"
    return "contains an unpaired UTF-16 surrogate (not valid Unicode)"


def _c_string(text: str, path: str, label: str, what: str = "string") -> str:
    """``text`` up to its first NUL, as a C string reads it; a warning names the key path."""
    if "\x00" not in text:
        return text
    cut = text.split("\x00", 1)[0]
    _LOG.warning("%s: %s: %s contains a NUL character; read up to it as onnxruntime does: %s",
                 label, clip(path or "(top level)", 200), what, quote(cut))  # fmt: skip
    return cut


def _finish(root: Any, fail: Callable[[str, str], Q38Error], label: str = "") -> Any:
    """Check the parsed tree (document order) and turn every ``_Obj`` into a plain dict."""
    holder: list[Any] = [root]
    stack: list[tuple[Any, Any, str, int]] = [(holder, 0, "", 0)]
    while stack:
        parent, slot, path, depth = stack.pop()
        value = parent[slot]
        if isinstance(value, _Bad):
            raise fail(path, value.message)
        if isinstance(value, str):
            value = parent[slot] = _c_string(value, path, label)
            problem = _string_problem(value)
            if problem is not None:
                raise fail(path, f"string {problem}")
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth >= MAX_DEPTH:
            raise fail(path, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, list):
            stack.extend((value, i, f"{path}[{i}]", depth + 1) for i in reversed(range(len(value))))
            continue
        if isinstance(value, _Obj) and value.dup is not None:
            raise fail(_join(path, value.dup), f"duplicate key {quote(value.dup)} (JSON keys must be unique)")
        plain: dict[str, Any] = {}
        for raw_key, item in value.items():
            key = _c_string(raw_key, path, label, f"key {quote(raw_key)}")
            problem = _string_problem(key)
            if problem is not None:
                raise fail(path, f"key {quote(key)} {problem}")
            if key in plain:
                raise fail(_join(path, key), f"duplicate key {quote(key)} (JSON keys must be unique, read up to a NUL)")
            plain[key] = item
        parent[slot] = plain
        stack.extend((plain, key, _join(path, key), depth + 1) for key in reversed(list(plain)))
    return holder[0]


def loads_strict(
    data: bytes | str,
    *,
    what: str,
    limit: int = CONFIG_LIMIT,
    error: type[Q38Error] = PackageError,
) -> Any:
    """Parse one strict JSON document.

    Args:
        data: the document (bytes are decoded as UTF-8).
        what: what the document is, usually its path; it starts every message.
        limit: the largest document accepted, in bytes (characters for ``str``).
        error: the :class:`Q38Error` subclass to raise (default :class:`PackageError`).

    Raises:
        error: one line: invalid JSON (line and column), over ``limit``, not UTF-8, nested too
            deeply, or - naming the key path - NaN / Infinity, a number out of double range, an
            integer beyond 64 bits, a duplicate key, an unpaired surrogate in a string. A string
            with a NUL is read up to it (a warning names the key path), as onnxruntime reads it.

    """
    label = clip(what)

    def fail(path: str, message: str) -> Q38Error:
        return error(f"{label}: {clip(path or '(top level)', 200)}: {message}")

    if len(data) > limit:
        raise error(f"{label}: {len(data)} bytes is larger than the {format_size(limit)} limit for this document")
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{label}: not UTF-8 text (byte {exc.start})") from None
    else:
        text = data
    try:
        parsed = json.loads(
            text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float, parse_int=_int
        )
    except json.JSONDecodeError as exc:
        raise error(f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise error(f"{label}: invalid JSON: nested too deeply (arrays / objects)") from None
    return _finish(parsed, fail, label)


def read_json(
    path: str | os.PathLike[str],
    *,
    what: str,
    limit: int = CONFIG_LIMIT,
    error: type[Q38Error] = PackageError,
) -> Any:
    """Read ``path`` (a regular file, at most ``limit`` bytes) as one strict JSON document.

    ``what`` names the file's role in file-level errors ("config", "manifest"); JSON errors
    start with the path.
    """
    data = read_bounded(path, what=what, limit=limit, error=error)
    return loads_strict(data, what=os.fspath(path) if isinstance(path, (str, Path)) else str(path), limit=limit, error=error)


def _check_writable(obj: Any, fail: Callable[[str, str], Q38Error]) -> None:
    stack: list[tuple[Any, str, int]] = [(obj, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise fail(path, f"{value!r} cannot be written as JSON (not a finite number)")
        elif isinstance(value, int):
            if not INT_MIN <= value <= INT_MAX:
                raise fail(path, f"integer {quote(value)} does not fit in 64 bits (int64 / uint64)")
        elif isinstance(value, str):
            problem = _string_problem(value)
            if problem is not None:
                raise fail(path, f"string {quote(value)} {problem}")
        elif isinstance(value, (list, tuple)):
            if depth >= MAX_DEPTH:
                raise fail(path, f"nested deeper than {MAX_DEPTH} levels")
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in reversed(list(enumerate(value))))
        elif isinstance(value, dict):
            if depth >= MAX_DEPTH:
                raise fail(path, f"nested deeper than {MAX_DEPTH} levels")
            for key in value:
                if not isinstance(key, str):
                    raise fail(path, f"key {quote(key)} is not a string")
                problem = _string_problem(key)
                if problem is not None:
                    raise fail(path, f"key {quote(key)} {problem}")
            stack.extend((item, _join(path, key), depth + 1) for key, item in reversed(list(value.items())))
        else:
            raise fail(path, f"a {type(value).__name__} cannot be written as JSON")


def dumps_json(obj: Any, *, what: str = "JSON output", error: type[Q38Error] = PackageError) -> str:
    """Deterministic JSON text of ``obj``: sorted keys, indent 2, ASCII, trailing newline.

    Raises:
        error: ``obj`` holds a value strict JSON cannot carry (NaN, an infinity, an integer
            beyond 64 bits, a NUL or unpaired surrogate, a non-string key), naming its key path,
            so the value is refused where it was produced instead of written.

    """

    def fail(path: str, message: str) -> Q38Error:
        return error(f"{what}: {path or '(top level)'}: {message}")

    _check_writable(obj, fail)
    return json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"

def json_kind(value: object) -> str:
    """How GenAI (and the v12b parser, in the same words) names the JSON kind of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
