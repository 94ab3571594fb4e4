"""QMoE offload session-config rules: every ``session.moe.offload.*`` key and its value grammar.

Source: ``ort-contract-rules.md`` §1A and the acceptance matrix of ``ort-cpu-capabilities.md`` §4
(onnxruntime 1.32.0, ``core/framework/session_options.cc``). Every rule here is enforced by the CPU
wheel at session creation (``INVALID_ARGUMENT``), whatever the graph holds and whatever ``mode`` is.
onnxruntime 1.31.1 has no offload validation at all: every rule is ``since="1.32.0"``.

Grammars (probed, not guessed):

* unsigned bytes: ``[0-9]+`` up to 2^64-1 (leading zeros fine; no sign, space, hex, unit suffix);
* counts: ``-?[0-9]+`` whose value is in the range (so ``-0`` is 0 and accepted, ``+1`` is not);
* ``min_expert_weight``: C ``strtof`` (leading/trailing whitespace, ``+``, hex floats; underflow
  to zero is fine) rounded to float32, then ``0 <= x <= 1``;
* ``tail_substitution_threshold``: ``std::from_chars<float>`` (decimal only, no ``+`` and no
  whitespace; float32 overflow or underflow to zero is an error), finite and ``>= 0``;
* ``ep.cuda.moe_packed_gpu_experts``: empty (unset) or whitespace-trimmed ``-?[0-9]+`` in
  [0, 2^31-1].

The two floats are parsed from the text straight to float32 with one rounding (``contracts.float32``),
as ``strtof`` / ``from_chars<float>`` do: ``min_expert_weight=1.0000000596046448`` is refused (it
rounds up past 1.0) and ``tail_substitution_threshold=3.40282356779733661637539395458142568447e38``
is accepted (it rounds down to FLT_MAX). Keys and values are read up to the first NUL, as ORT
does (``contracts.session_config``). A value is echoed whole, as ORT does, unless it is over 120
characters or holds a line break (then cut and escaped: a message stays one bounded line).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

from contracts._rule import REFERENCE_ORT_VERSION, Examples, OrtVersions, Rule, RuleDoc, Violation
from contracts.float32 import parse_from_chars, parse_strtof
from contracts.session_config import effective, effective_entries
from q38.errors import clip

__all__ = [
    "ENV_RULES",
    "LEGACY_PREFIX",
    "OFFLOAD_KEYS",
    "OFFLOAD_PREFIX",
    "PACKED_GPU_EXPERTS_KEY",
    "RULES",
    "SESSION_RULES",
    "check_offload_config",
    "check_offload_environment",
    "offload_mode",
]

OFFLOAD_PREFIX = "session.moe.offload."
LEGACY_PREFIX = "moe.cpu_offload."
PACKED_GPU_EXPERTS_KEY = "ep.cuda.moe_packed_gpu_experts"
_SINCE = OrtVersions(since="1.32.0")
_SRC = "ort-contract-rules.md §1A; ort-cpu-capabilities.md §4 (core/framework/session_options.cc)"

_SHOWN_LIMIT = 120
_U64_MAX = 2**64 - 1
_I32_MAX = 2**31 - 1
_C_SPACE = " \t\n\v\f\r"
_UNSIGNED = re.compile(r"[0-9]+\Z")
_SIGNED = re.compile(r"-?[0-9]+\Z")


# --- value parsers: return the parsed value, or None when ORT rejects the text -------------------


def _unsigned(text: str, *, lo: int = 0, hi: int = _U64_MAX) -> int | None:
    if not _UNSIGNED.match(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def _signed_in(text: str, *, lo: int, hi: int) -> int | None:
    if not _SIGNED.match(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def _strtof(text: str) -> float | None:
    """C ``strtof`` over the whole text, rounded once to float32 (contracts.float32)."""
    return parse_strtof(text)


def _from_chars_float(text: str) -> float | None:
    """``std::from_chars<float>`` consuming the whole text (None: no parse or out of range)."""
    return parse_from_chars(text)


# --- per-key validators: text -> ok? ------------------------------------------------------------

_MODES = {"disabled": "disabled", "0": "disabled", "off": "disabled", "auto": "auto",
          "required": "required", "1": "required", "on": "required"}  # fmt: skip


def _budget(text: str) -> bool:
    return text.lower() == "auto" or _unsigned(text) is not None


def _min_expert_weight(text: str) -> bool:
    value = _strtof(text)
    return value is not None and not math.isnan(value) and 0.0 <= value <= 1.0


def _threshold(text: str) -> bool:
    value = _from_chars_float(text)
    return value is not None and math.isfinite(value) and value >= 0.0


def _node_overrides(text: str) -> bool:
    for raw in text.split(";"):
        entry = raw.strip(_C_SPACE)
        if not entry:
            continue
        name, colon, body = entry.partition(":")
        if not colon or not name.strip(_C_SPACE):
            return False
        items = body.split(",")
        if len(items) > 1 and not items[-1].strip(_C_SPACE):
            items.pop()  # one trailing comma is tolerated
        for item in items:
            key, eq, value = item.partition("=")
            key, value = key.strip(_C_SPACE), value.strip(_C_SPACE)
            if not eq:
                return False
            if key == "max_resident_slots":
                if _signed_in(value, lo=0, hi=_I32_MAX) is None:
                    return False
            elif key == "device_expert_bytes":
                if _unsigned(value) is None:
                    return False
            else:
                return False
    return True


_EXPECT_BUDGET = "expected 'auto' or non-negative integer bytes."
_EXPECT_NONNEG = "expected non-negative integer."
_EXPECT_BOOL = "expected '0' or '1'."
_EXPECT_POS_BYTES = "expected positive integer bytes."
_FREE = (lambda _text: True, "")

# key -> (validator, expectation text of ORT's message)
_KEYS: dict[str, tuple[Callable[[str], bool], str]] = {
    "mode": (lambda t: t.lower() in _MODES, "expected 'disabled', 'auto', or 'required'."),
    "placement": (
        lambda t: t.lower() in {"static", "adaptive"},
        "expected 'static' or 'adaptive' (prototype 'basic'/'layered' are not supported).",
    ),
    "cpu_execution": (
        lambda t: t.lower() in {"auto", "enabled", "disabled", "0", "1"},
        "expected 'auto', 'enabled', or 'disabled'.",
    ),
    "device_expert_bytes": (_budget, _EXPECT_BUDGET),
    "gpu_budget_bytes": (_budget, _EXPECT_BUDGET),
    "host_expert_bytes": (_budget, _EXPECT_BUDGET),
    "pinned_bytes": (_budget, _EXPECT_BUDGET),
    "reserve_device_bytes": (_budget, _EXPECT_BUDGET),
    "device_working_bytes": (lambda t: _unsigned(t, lo=1) is not None, _EXPECT_POS_BYTES),
    "host_working_bytes": (lambda t: _unsigned(t, lo=1) is not None, _EXPECT_POS_BYTES),
    "gpu_device_mem_limit": (
        lambda t: _unsigned(t) is not None,
        "expected non-negative integer bytes (0 = no limit).",
    ),
    "budget_group": _FREE,
    "allow_file_backing": (lambda t: t in {"0", "1"} or t.lower() in {"true", "false"}, _EXPECT_BOOL),
    "cpu_threads": (lambda t: _signed_in(t, lo=0, hi=_I32_MAX) is not None, _EXPECT_NONNEG),
    "async_max_tokens": (lambda t: _signed_in(t, lo=0, hi=_I32_MAX) is not None, _EXPECT_NONNEG),
    "prefill_wave_experts": (
        lambda t: _signed_in(t, lo=1, hi=_I32_MAX) is not None,
        "expected positive integer.",
    ),
    "popularity_file": _FREE,
    "source_root": _FREE,
    "derived_cache_dir": _FREE,
    "node_overrides": (
        _node_overrides,
        "expected semicolon-separated 'node_name:max_resident_slots=<N>,device_expert_bytes=<B>'.",
    ),
    "skip_zero_cold_doorbell": (lambda t: t in {"0", "1"}, _EXPECT_BOOL),
    "min_expert_weight": (_min_expert_weight, "expected a float in [0, 1]."),
    "skip_tail_cold_only": (lambda t: t in {"0", "1"}, _EXPECT_BOOL),
    "tail_substitution_threshold": (_threshold, "expected a finite non-negative float."),
    "tail_substitution_min_rank": (
        lambda t: _signed_in(t, lo=0, hi=_I32_MAX) is not None,
        "expected a non-negative integer less than k when enabled.",
    ),
}
OFFLOAD_KEYS: frozenset[str] = frozenset(_KEYS)


def shown(value: str) -> str:
    """A session-config value as ORT's message shows it (whole), cut when it is long."""
    if len(value) <= _SHOWN_LIMIT and "\n" not in value and "\r" not in value:
        return value  # ORT's own text, byte for byte

    return clip(value)


def _value_message(key: str, value: str) -> str:
    return f"Invalid {OFFLOAD_PREFIX}{key} value '{shown(value)}'; {_KEYS[key][1]}"


def offload_mode(entries: Mapping[str, str]) -> str | None:
    """The normalized offload mode (``disabled``/``auto``/``required``), or None if absent/invalid."""
    text = effective_entries(entries).get(OFFLOAD_PREFIX + "mode")
    return None if text is None else _MODES.get(text.lower())


# --- rules ----------------------------------------------------------------------------------


def _check_unknown_keys(entries: Mapping[str, str]) -> list[Violation]:
    return [
        Violation("OFFLOAD-CFG-001", f"Unknown session.moe.offload.* configuration key: {shown(key)}")
        for key in sorted(entries)
        if key.startswith(OFFLOAD_PREFIX) and key[len(OFFLOAD_PREFIX) :] not in _KEYS
    ]


def _check_legacy_keys(entries: Mapping[str, str]) -> list[Violation]:
    return [
        Violation(
            "OFFLOAD-CFG-002",
            f"Prototype configuration key '{shown(key)}' is discarded and not supported in QMoE "
            "Offload v4; use 'session.moe.offload.*'.",
        )
        for key in sorted(entries)
        if key.startswith(LEGACY_PREFIX)
    ]


def _check_values(entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for key in sorted(entries):
        if not key.startswith(OFFLOAD_PREFIX):
            continue
        short = key[len(OFFLOAD_PREFIX) :]
        spec = _KEYS.get(short)
        if spec is not None and not spec[0](entries[key]):
            found.append(Violation("OFFLOAD-CFG-003", _value_message(short, entries[key])))
    return found


def _budget_value(text: str) -> int | str | None:
    if text.lower() == "auto":
        return "auto"
    return _unsigned(text)


def _check_alias_conflict(entries: Mapping[str, str]) -> list[Violation]:
    a = entries.get(OFFLOAD_PREFIX + "device_expert_bytes")
    b = entries.get(OFFLOAD_PREFIX + "gpu_budget_bytes")
    if a is None or b is None:
        return []
    va, vb = _budget_value(a), _budget_value(b)
    if va is None or vb is None or va == vb:
        return []
    return [
        Violation(
            "OFFLOAD-CFG-004",
            "Conflicting values for session.moe.offload.device_expert_bytes and "
            "session.moe.offload.gpu_budget_bytes.",
        )
    ]


def _packed_gpu_experts_ok(text: str) -> bool:
    if text == "":
        return True
    return _signed_in(text.strip(_C_SPACE), lo=0, hi=_I32_MAX) is not None


def _packed_message(value: str) -> str:
    return (
        f"Invalid ep.cuda.moe_packed_gpu_experts / ORT_MOE_PACKED_GPU_EXPERTS value '{shown(value)}'; "
        "expected a non-negative 32-bit integer."
    )


def _check_packed_gpu_experts(entries: Mapping[str, str]) -> list[Violation]:
    value = entries.get(PACKED_GPU_EXPERTS_KEY)
    if value is None or _packed_gpu_experts_ok(value):
        return []
    return [Violation("OFFLOAD-CFG-005", _packed_message(value))]


FAMILY = "offload"
"""The rule family of this module's rules (``q38 rules --family``)."""

# Every check reads the entries ORT ends up with (cut at NUL, last write wins: session_config).
SESSION_RULES: tuple[Rule, ...] = (
    Rule("OFFLOAD-CFG-001", "session.moe.offload.* keys must be one of the 25 known keys "
         "(case-sensitive)", _SRC + " rule 1", "cpu-session", "session-config",
         effective(_check_unknown_keys), _SINCE, examples=Examples({OFFLOAD_PREFIX + "mode": "auto"},
                  {OFFLOAD_PREFIX + "bogus": "1"}),
         family=FAMILY, doc=RuleDoc(
        "ORT 1.32.0 validates every session.moe.offload.* entry when the session is created; a key "
        "that is not one of its 25 known keys (case-sensitive) is refused with 'Unknown "
        "session.moe.offload.* configuration key: KEY'.",
        '"session.moe.offload.Mode": "auto"  (capital M)',
        "Spell the key exactly as ORT documents it (session.moe.offload.mode), or remove it.",
    )),
    Rule("OFFLOAD-CFG-002", "legacy moe.cpu_offload.* prototype keys are refused",
         _SRC + " rule 2", "cpu-session", "session-config", effective(_check_legacy_keys), _SINCE, examples=Examples({"moe.offload.x": "1"},
                  {"moe.cpu_offload.enable": "1"}),
         family=FAMILY, doc=RuleDoc(
        "The prototype keys moe.cpu_offload.* of the early offload branch are refused by ORT 1.32.0: "
        "'Prototype configuration key KEY is discarded and not supported in QMoE offload'.",
        '"moe.cpu_offload.enable": "1"',
        "Use the session.moe.offload.* keys (q38 offload writes them), e.g. session.moe.offload.mode=auto.",
    )),
    Rule("OFFLOAD-CFG-003", "every session.moe.offload.* value matches its key's grammar",
         _SRC + " rules 3-17", "cpu-session", "session-config", effective(_check_values), _SINCE, examples=Examples({OFFLOAD_PREFIX + "placement": "static"},
                  {OFFLOAD_PREFIX + "placement": "basic"}),
         family=FAMILY, doc=RuleDoc(
        "Each session.moe.offload.* value has a grammar ORT checks at session creation (modes "
        "disabled/auto/required, placements, byte budgets as decimal integers, 0/1 flags, paths, "
        "node_overrides lists); a value outside it fails with 'Invalid session.moe.offload.KEY "
        "value 'V'; ...' naming the accepted form.",
        '"session.moe.offload.mode": "yes"',
        "Use a value of the key's grammar (the message states it), e.g. mode=required or auto.",
    )),
    Rule("OFFLOAD-CFG-004", "device_expert_bytes and gpu_budget_bytes, when both set, agree",
         _SRC + " rule 7", "cpu-session", "session-config", effective(_check_alias_conflict), _SINCE, examples=Examples({OFFLOAD_PREFIX + "device_expert_bytes": "1024", OFFLOAD_PREFIX + "gpu_budget_bytes": "1024"},
                  {OFFLOAD_PREFIX + "device_expert_bytes": "1024", OFFLOAD_PREFIX + "gpu_budget_bytes": "2048"}),
         family=FAMILY, doc=RuleDoc(
        "device_expert_bytes and its older alias gpu_budget_bytes are one budget: when both are set "
        "ORT 1.32.0 requires them to be equal and refuses the session otherwise.",
        '"session.moe.offload.device_expert_bytes": "1000", "session.moe.offload.gpu_budget_bytes": "2000"',
        "Set only session.moe.offload.device_expert_bytes (or give both the same value).",
    )),
    Rule("OFFLOAD-CFG-005", "ep.cuda.moe_packed_gpu_experts is a non-negative 32-bit integer",
         _SRC + " rule 18", "cpu-session", "session-config", effective(_check_packed_gpu_experts), _SINCE, examples=Examples({"ep.cuda.moe_packed_gpu_experts": "8"},
                  {"ep.cuda.moe_packed_gpu_experts": "x"}),
         family=FAMILY, doc=RuleDoc(
        "ep.cuda.moe_packed_gpu_experts (environment ORT_MOE_PACKED_GPU_EXPERTS) is parsed as a "
        "non-negative 32-bit integer; anything else fails with 'Invalid "
        "ep.cuda.moe_packed_gpu_experts / ORT_MOE_PACKED_GPU_EXPERTS value ...'.",
        '"ep.cuda.moe_packed_gpu_experts": "-1"',
        "Give a decimal integer from 0 to 2147483647, or drop the entry.",
    )),
)  # fmt: skip


def check_offload_config(entries: Mapping[str, str], *, ort_version: str = REFERENCE_ORT_VERSION) -> list[Violation]:
    """Every offload session-config violation ORT ``ort_version`` reports for ``entries``.

    Args:
        entries: session config entries (``SessionOptions.add_session_config_entry`` key/values).
        ort_version: the onnxruntime version to mirror; 1.31.1 validates nothing.

    Returns:
        All violations (ORT itself stops at the first; which one comes first is its map order).

    """
    found: list[Violation] = []
    for rule in SESSION_RULES:
        if rule.applies(ort_version):
            found.extend(rule.check_session(entries))
    return found


_ENV_MIN_EXPERT_WEIGHT = "ORT_QMOE_MIN_EXPERT_WEIGHT"
_ENV_PACKED = "ORT_MOE_PACKED_GPU_EXPERTS"
_ENV_SRC = "ort-contract-rules.md §1A rule 18; ort-cpu-capabilities.md §4.3 (core/framework/session_options.cc)"


def _check_env_min_expert_weight(env: Mapping[str, str], entries: Mapping[str, str]) -> list[Violation]:
    weight = env.get(_ENV_MIN_EXPERT_WEIGHT)
    # an empty variable counts as unset (probed: ORT_QMOE_MIN_EXPERT_WEIGHT= is accepted)
    if weight and OFFLOAD_PREFIX + "min_expert_weight" not in entries and not _min_expert_weight(weight):
        return [Violation("OFFLOAD-ENV-001", _value_message("min_expert_weight", weight))]
    return []


def _check_env_packed_gpu_experts(env: Mapping[str, str], entries: Mapping[str, str]) -> list[Violation]:
    packed = env.get(_ENV_PACKED)
    if packed is not None and PACKED_GPU_EXPERTS_KEY not in entries and not _packed_gpu_experts_ok(packed):
        return [Violation("OFFLOAD-ENV-002", _packed_message(packed))]
    return []


# The process environment ORT reads at session creation, next to a session's entries: rules of
# the ``environment`` surface (``contracts.runner.check_environment``); a package holds no
# environment, so ``check_package`` does not run them.
ENV_RULES: tuple[Rule, ...] = (
    Rule("OFFLOAD-ENV-001", "ORT_QMOE_MIN_EXPERT_WEIGHT, read when session.moe.offload.min_expert_weight "
         "is absent, is a float in [0, 1]", _ENV_SRC, "cpu-session", "environment",
         effective(_check_env_min_expert_weight), _SINCE, examples=Examples(({"ORT_QMOE_MIN_EXPERT_WEIGHT": "abc"}, {OFFLOAD_PREFIX + "min_expert_weight": "0.1"}),
                  ({"ORT_QMOE_MIN_EXPERT_WEIGHT": "abc"}, {})),
         family=FAMILY, doc=RuleDoc(
        "When session.moe.offload.min_expert_weight is absent from the session's config entries, "
        "ORT 1.32.0 reads the environment variable ORT_QMOE_MIN_EXPERT_WEIGHT at session creation "
        "and parses it with the key's grammar (a float in [0, 1]); anything else fails the session "
        "with 'Invalid session.moe.offload.min_expert_weight value '<v>'; expected a float in "
        "[0, 1].'. An empty variable counts as unset, and a set session key (any value) wins: the "
        "variable is then not read. q38 check does not read the environment (a package has none); "
        "contracts.runner.check_environment checks one.",
        "ORT_QMOE_MIN_EXPERT_WEIGHT=abc in the environment of a process creating a session without "
        "session.moe.offload.min_expert_weight",
        "Set the variable to a float in [0, 1] (e.g. 0.1) or unset it, or set "
        "session.moe.offload.min_expert_weight in the session options (it takes precedence).",
    )),
    Rule("OFFLOAD-ENV-002", "ORT_MOE_PACKED_GPU_EXPERTS, read when ep.cuda.moe_packed_gpu_experts is "
         "absent, is a non-negative 32-bit integer", _ENV_SRC, "cpu-session", "environment",
         effective(_check_env_packed_gpu_experts), _SINCE, examples=Examples(({"ORT_MOE_PACKED_GPU_EXPERTS": "4"}, {}),
                  ({"ORT_MOE_PACKED_GPU_EXPERTS": "-1"}, {})),
         family=FAMILY, doc=RuleDoc(
        "When ep.cuda.moe_packed_gpu_experts is absent from the session's config entries, ORT 1.32.0 "
        "reads the environment variable ORT_MOE_PACKED_GPU_EXPERTS at session creation (on the CPU "
        "wheel too) and parses it as a non-negative 32-bit integer; anything else, an empty value "
        "included, fails the session with 'Invalid ep.cuda.moe_packed_gpu_experts / "
        "ORT_MOE_PACKED_GPU_EXPERTS value '<v>'; expected a non-negative 32-bit integer.'. A set "
        "session key wins. q38 check does not read the environment (a package has none); "
        "contracts.runner.check_environment checks one.",
        "ORT_MOE_PACKED_GPU_EXPERTS=abc (or -1, or 2147483648) in the environment of a process "
        "creating a session without ep.cuda.moe_packed_gpu_experts",
        "Set the variable to a decimal integer from 0 to 2147483647 or unset it, or set "
        "ep.cuda.moe_packed_gpu_experts in the session options (it takes precedence).",
    )),
)  # fmt: skip
"""The environment-variable fallbacks of the offload settings (check ``(env, entries)``)."""
RULES: tuple[Rule, ...] = (*SESSION_RULES, *ENV_RULES)
"""Every rule of this family: the session-config rules, then the environment rules."""


def check_offload_environment(
    env: Mapping[str, str], *, entries: Mapping[str, str] | None = None, ort_version: str = REFERENCE_ORT_VERSION
) -> list[Violation]:
    """Environment fallbacks ORT parses at session creation (§1A.18, capabilities §4.3).

    ``ORT_QMOE_MIN_EXPERT_WEIGHT`` and ``ORT_MOE_PACKED_GPU_EXPERTS`` follow the grammar of their
    session keys, and each is read only when its session key is absent from ``entries`` (probed
    on 1.32.0: a bad variable next to a set key, even an empty one, is accepted).
    """
    found: list[Violation] = []
    for rule in ENV_RULES:
        if rule.applies(ort_version):
            found.extend(rule.check_environment(env, entries or {}))
    return found
