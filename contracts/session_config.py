r"""Session config entries as onnxruntime stores them, and the limits it puts on them.

``SessionOptions.add_session_config_entry(key, value)`` hands ORT C strings: ORT reads each up to
its first NUL (``"session.moe.offload.mode\0x"`` is the key ``session.moe.offload.mode``,
``"auto\0junk"`` the value ``auto``), a later entry of the same key overwrites an earlier one, and
``ConfigOptions::AddConfigEntry`` refuses an empty key, a key over 1024 bytes and a value over
8192 bytes (UTF-8, after the NUL cut; probed on 1.31.1 and 1.32.0). A key or value that is not
valid Unicode (an unpaired surrogate, anywhere, even after a NUL: a near-miss spelling of a key such
as ``"ep.cpu.qmoe_deferred_scale\udcff"``) never reaches ORT: its Python binding refuses the entry
(``incompatible function arguments``), so no session is created. :func:`effective_entries` is
what every other session-config rule reads; ``SESSION-CFG-001`` reports the refused entries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from contracts._rule import (
    EnvironmentCheck,
    Examples,
    ModelCheck,
    Rule,
    RuleDoc,
    SessionCheck,
    Violation,
)

__all__ = ["KEY_MAX_BYTES", "RULES", "VALUE_MAX_BYTES", "effective", "effective_entries"]

KEY_MAX_BYTES = 1024
VALUE_MAX_BYTES = 8192


def _c_string(text: str) -> str:
    return text.split("\0", 1)[0]


def _refusal(key: str, value: str) -> str | None:
    if not key or len(key.encode("utf-8", "surrogatepass")) > KEY_MAX_BYTES:
        return f"Config key is empty or longer than maximum length {KEY_MAX_BYTES}"
    if len(value.encode("utf-8", "surrogatepass")) > VALUE_MAX_BYTES:
        return f"Config value is longer than maximum length: {VALUE_MAX_BYTES}"
    return None


def effective_entries(entries: Mapping[str, str]) -> dict[str, str]:
    """The entries ORT ends up with, after its own normalisation of ``entries``.

    Keys and values are cut at the first NUL, later entries of the same key win, and refused
    entries (empty or over-long) are absent.
    """
    out: dict[str, str] = {}
    for raw_key, raw_value in entries.items():
        key, value = _c_string(str(raw_key)), _c_string(str(raw_value))
        if _refusal(key, value) is None:
            out.pop(key, None)  # a re-added key moves to the end, as the last write wins
            out[key] = value
    return out


# A check whose last argument is a session's config entries (session-config, environment, graph).
_EntriesCheck = TypeVar("_EntriesCheck", SessionCheck, EnvironmentCheck, ModelCheck)


def effective(check: _EntriesCheck) -> _EntriesCheck:
    """``check`` reading the effective entries (its last argument) instead of the raw ones."""
    call = cast(Callable[..., list[Violation]], check)

    def wrapped(*args: object) -> list[Violation]:
        *head, entries = args
        return call(*head, effective_entries(cast(Mapping[str, str], entries)))

    return cast(_EntriesCheck, wrapped)


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_BINDING_REFUSAL = ("add_session_config_entry(): incompatible function arguments (config {what} {text!r} is not "
                    "valid Unicode: an unpaired surrogate)")  # fmt: skip


def _check_limits(entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for raw_key, raw_value in entries.items():
        bad = next(((what, text) for what, text in (("key", str(raw_key)), ("value", str(raw_value))) if _unencodable(text)), None)
        if bad is not None:
            found.append(Violation("SESSION-CFG-001", _BINDING_REFUSAL.format(what=bad[0], text=bad[1])))
            continue
        problem = _refusal(_c_string(str(raw_key)), _c_string(str(raw_value)))
        if problem is not None:
            found.append(Violation("SESSION-CFG-001", problem))  # ORT's text; the key may be empty or huge
    return found


FAMILY = "session-config"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES: tuple[Rule, ...] = (
    Rule("SESSION-CFG-001", "config keys are 1-1024 bytes and values at most 8192 bytes, up to the "
         "first NUL (ConfigOptions::AddConfigEntry); keys and values are valid Unicode (the binding)", "probed 1.31.1 and 1.32.0 (config_options.cc)",
         "cpu-session", "session-config", _check_limits, examples=Examples({"session.k": "v"},
                  {"\0k": "v"}),
         family=FAMILY, doc=RuleDoc(
        "SessionOptions.add_session_config_entry hands ORT C strings: ORT cuts key and value at the "
        "first NUL, and ConfigOptions::AddConfigEntry refuses an empty key or one over 1024 bytes "
        "('Config key is empty or longer than maximum length 1024') and a value over 8192 bytes "
        "('Config value is longer than maximum length: 8192'); session creation fails.",
        '"session_options": {"config_entries": {"": "1"}}  (or a 9000-byte value)',
        "Remove the empty key; keep keys within 1024 and values within 8192 UTF-8 bytes.",
    )),
)  # fmt: skip
