"""One declarative config validator: JSON elements as tables, walked to one error line.

onnxruntime-genai parses ``genai_config.json`` with a tree of JSON "elements" (``src/config.cpp``):
each element takes scalars, objects and arrays by key, rejects what it does not know
(``Unknown value "k"``), and checks types (``Expected a string but saw a number``), integer
ranges (``SafeDoubleToInt``) and a few value bounds while it reads. This module is that machinery
-- :class:`Obj` per element, the handlers of each key by JSON kind, the value checks, and
:func:`validate` -- plus the elements both config surfaces share (a graph's ``session_options``
and its providers). Each surface declares its own table of elements with it: GenAI 0.18.0's in
:mod:`q38.package.genai.schema`, v12b's in :mod:`q38.package.v12b.schema`.

The v12b surface is stricter than GenAI's parser and words its refusals its own way; the
engine carries what it needs as options of the same tables: strict integers, required keys,
keys by pattern, the walk order (:data:`Walk`: unknown keys first, then the values in a
declared order), cross-field :class:`Rule` s, and a :class:`Style` for the error lines.

Only the verdict per document matters here: :func:`validate` raises one :class:`ConfigError`
line naming the key path (``model.decoder.session_options.provider_options[0].cuda.x``); it
does not build anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np

from q38.errors import ConfigError, clip, quote
from q38.package.io.jsonio import json_kind

__all__ = [
    "BOOL", "DEVICE_FILTERING", "GRAPH_OPTIMIZATION_LEVELS", "I32", "I64", "NUM", "PATH", "POS", "PROVIDER",
    "RUN_OPTIONS", "SESSION_OPTIONS", "STR", "Arr", "Check", "Obj", "Problem", "Rule", "Scalar", "Style", "Walk",
    "all_of", "at_least", "between", "config_path", "finite", "finite_float32_positive", "fits_int64", "legacy",
    "ngram_size", "non_negative", "one_of", "positive", "unit_interval_open_low", "validate",
]

# A scalar's extra check, called once ``_Walker.scalar`` has checked the value's JSON kind: a
# number check takes a float, a string check a str. ``Any``: the one parameter type all of them accept.
Check = Callable[[Any], "str | None"]
# "integer": a JSON integer (no fraction, no bool), with no range of its own: v12b's strict integers.
ScalarKind = Literal["string", "bool", "int32", "int64", "integer", "number"]
# A cross-field refusal: the path under the element ("" the element itself, "key", "[i].key"), the message.
Problem = tuple[str, str]
# How an object's keys are walked: "document": each key in document order, an unknown one where it
# stands (GenAI); "keys_first": every unknown key refused first, then each value in document order;
# "declared": unknown keys first, then the values in ``Obj.order`` (default: the fields' order).
Walk = Literal["document", "keys_first", "declared"]

_INT32: Final = (-(2**31), 2**31 - 1)
_INT64: Final = (-(2**63), 2**63)  # upper bound exclusive, as GenAI compares doubles


@dataclass(frozen=True)
class Scalar:
    """A JSON scalar GenAI reads with ``JSON::Get<T>``; ``check`` returns an error or None.

    ``name``: how a wrong kind's refusal names the wanted one (default ``a string``, ``a bool``,
    ``an integer``, ``a number``).
    """

    kind: ScalarKind
    check: Check | None = None
    name: str = ""


@dataclass(frozen=True)
class Rule:
    """A cross-field check of an object or array: called with its (checked) value, a Problem or None."""

    check: Callable[[Any], Problem | None]


@dataclass(frozen=True)
class Arr:
    """A JSON array whose elements all go to one handler (a scalar or an object element).

    ``lone``: a value that is not an array is read as the one-element array ``[value]`` (its
    path ``key[0]``); ``each``: called with the array and an index before that element is walked;
    ``rules``: run once every element is checked.
    """

    item: Scalar | Obj
    lone: bool = False
    each: Callable[[Sequence[Any], int], Problem | None] | None = None
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Obj:
    """One GenAI config element: handlers per key, and what it does with any other key.

    ``other_strings``: any other key takes a string (session config entries, provider options,
    run options); ``other_objects``: any other key takes this object (provider names, pipeline
    model ids); ``ignore_scalars``: any other key's scalar is dropped (the document root);
    ``reject``: the element refuses any object with this message (a retired key).

    The strict options (v12b): ``other``: the handlers of any other key that ``other_keys``
    matches (any key when None), a value of another kind refused as for a field; ``walk`` and
    ``order``: see :data:`Walk` -- an ``order`` step is a key, a dotted path into a nested
    object (its parent step then checks only the parent's kind and keys), or a :class:`Rule`;
    ``required``: keys whose absence is refused (``required key is missing``) at their step of
    a ``declared`` walk; ``rules``: run once the object's values are checked.
    """

    fields: Mapping[str, tuple[Scalar | Obj | Arr, ...]] = field(default_factory=dict)
    other_strings: bool = False
    other_objects: Obj | None = None
    ignore_scalars: bool = False
    reject: str = ""
    other: tuple[Scalar | Obj | Arr, ...] = ()
    other_keys: re.Pattern[str] | None = None
    walk: Walk = "document"
    order: tuple[str | Rule, ...] = ()
    required: frozenset[str] = frozenset()
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Style:
    """How a surface words its error lines: ``clip`` long sources and paths; the non-object document line."""

    clip: bool = False
    top: str = "{source}: expected a JSON object at the top level, got {kind}"



# --------------------------------------------------------------------------- value checks
def between(lo: float, hi: float) -> Check:
    """A check: the number lies in ``[lo, hi]`` (GenAI's range error otherwise)."""
    def check(v: float) -> str | None:
        return None if lo <= v <= hi else f"must be between {lo:g} and {hi:g}, got {v:g}"

    return check


def positive(v: float) -> str | None:
    """A check: the number is > 0."""
    return None if v > 0 else f"must be > 0, got {v:g}"


def non_negative(v: float) -> str | None:
    """A check: the number is >= 0."""
    return None if v >= 0 else f"must be >= 0, got {v:g}"


def unit_interval_open_low(v: float) -> str | None:
    """A check: the number lies in ``(0, 1]`` (e.g. top_p)."""
    return None if 0 < v <= 1 else f"must be > 0 and <= 1, got {v:g}"


def finite_float32_positive(v: float) -> str | None:
    """A check: the number is > 0 and stays finite when GenAI stores it as a float32."""
    if not math.isfinite(float(np.float32(v))) or v <= 0:
        return f"must be finite (as float32) and > 0, got {v:g}"
    return None


def one_of(*choices: str, fold_case: bool = False) -> Check:
    """A check: the string is one of ``choices`` (case-folded first when ``fold_case``)."""
    def check(v: str) -> str | None:
        probe = v.lower() if fold_case else v
        return None if probe in choices else f"expected one of {', '.join(choices)}, got {v!r}"

    return check


def at_least(minimum: int) -> Check:
    """A check: the number is >= ``minimum`` (v12b's wording)."""
    def check(v: float) -> str | None:
        return None if v >= minimum else f"must be >= {minimum}, got {quote(v)}"

    return check


def fits_int64(v: float) -> str | None:
    """A check: an integer value fits in int64 (a float passes)."""
    if isinstance(v, int) and not -(2**63) <= v < 2**63:
        return f"value {quote(v)} does not fit in int64"
    return None


def finite(v: float) -> str | None:
    """A check: a float value is finite (an integer passes)."""
    return f"{v!r} is not a finite number" if isinstance(v, float) and not math.isfinite(v) else None


def all_of(*checks: Check) -> Check:
    """A check: each of ``checks`` in turn; the first problem wins."""
    def check(v: object) -> str | None:
        return next((p for p in (c(v) for c in checks) if p), None)

    return check


def ngram_size(v: float) -> str | None:
    """A check: an n-gram size GenAI accepts, 0 (off) or 2 to 16."""
    return None if v == 0 or 2 <= v <= 16 else f"must be 0 or between 2 and 16, got {v:g}"


def config_path(v: str) -> str | None:
    r"""GenAI's ``ValidateConfigPath``: relative, no ``..`` component (``/`` or ``\``)."""
    if not v:
        return None
    if v[0] in "/\\":
        return f"must be a relative path under the model directory, got {v!r}"
    if ".." in v.replace("\\", "/").split("/"):
        return f"must not contain path traversal (..): {v!r}"
    return None


def legacy(message: str) -> Check:
    """A check that always fails with ``message``: a field GenAI 0.18.0 no longer reads."""
    def check(v: object) -> str | None:
        return message

    return check


STR: Final = Scalar("string")
BOOL: Final = Scalar("bool")
I32: Final = Scalar("int32")
I64: Final = Scalar("int64")
NUM: Final = Scalar("number")  # read as a double and cast (float, size_t): any number
PATH: Final = Scalar("string", config_path)
POS: Final = Scalar("int32", positive)
GRAPH_OPTIMIZATION_LEVELS: Final = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")


# --------------------------------------------------------------------------- elements
RUN_OPTIONS: Final = Obj(other_strings=True)
DEVICE_FILTERING: Final = Obj(
    {
        "hardware_device_type": (Scalar("string", one_of("cpu", "gpu", "npu", fold_case=True)),),
        "hardware_device_id": (NUM,),
        "hardware_vendor_id": (NUM,),
    }
)
PROVIDER: Final = Obj({"device_filtering_options": (DEVICE_FILTERING,)}, other_strings=True)
SESSION_OPTIONS: Final = Obj(
    {
        "log_id": (STR,),
        "enable_profiling": (STR,),
        "custom_ops_library": (STR,),
        "intra_op_num_threads": (I32,),
        "inter_op_num_threads": (I32,),
        "log_severity_level": (I32,),
        "log_verbosity_level": (I32,),
        "enable_cpu_mem_arena": (BOOL,),
        "enable_mem_pattern": (BOOL,),
        "graph_optimization_level": (Scalar("string", one_of(*GRAPH_OPTIMIZATION_LEVELS)),),
        "provider_options": (Arr(Obj(other_objects=PROVIDER)),),
    },
    other_strings=True,
)


# --------------------------------------------------------------------------- validation
_NAMES: Final = {"string": "a string", "bool": "a bool", "integer": "an integer"}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _under(path: str, rel: str) -> str:
    return path if not rel else path + rel if rel.startswith("[") else _join(path, rel)


class _Walker:
    def __init__(self, source: str, style: Style) -> None:
        self.source = source
        self.style = style

    def fail(self, path: str, message: str) -> ConfigError:
        if self.style.clip:
            return ConfigError(f"{clip(self.source)}: {clip(path, 200)}: {message}")
        return ConfigError(f"{self.source}: {path}: {message}")

    def problem(self, found: Problem | None, path: str) -> None:
        if found is not None:
            raise self.fail(_under(path, found[0]), found[1])

    def scalar(self, node: Scalar, value: object, path: str) -> None:
        kind = node.kind
        if kind == "string":
            ok = isinstance(value, str)
        elif kind == "bool":
            ok = isinstance(value, bool)
        elif kind == "integer":
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise self.fail(path, f"expected {_scalar_name(node)}, got {json_kind(value)}")
        if kind in ("int32", "int64"):
            assert isinstance(value, (int, float))
            lo, hi = _INT32 if kind == "int32" else _INT64
            if not lo <= value <= hi or (kind == "int64" and value >= hi):
                raise self.fail(path, f"value {value:g} is out of {kind} range")
            if value != math.trunc(value):
                raise self.fail(path, f"value {value:g} is not an integer")
        if node.check is not None:
            problem = node.check(value)
            if problem:
                raise self.fail(path, problem)

    def array(self, node: Arr, value: list[Any], path: str) -> None:
        for i, item in enumerate(value):
            if node.each is not None:
                self.problem(node.each(value, i), path)
            ipath = f"{path}[{i}]"
            if isinstance(node.item, Obj):
                if not isinstance(item, dict):
                    raise self.fail(ipath, f"expected an object, got {json_kind(item)}")
                self.obj(node.item, item, ipath)
            else:
                if isinstance(item, (dict, list)):
                    raise self.fail(ipath, f"expected {_scalar_name(node.item)}, got {json_kind(item)}")
                self.scalar(node.item, item, ipath)
        for rule in node.rules:
            self.problem(rule.check(value), path)

    def handlers(self, node: Obj, key: str) -> tuple[Scalar | Obj | Arr, ...]:
        found = node.fields.get(key)
        if found is None and node.other and (node.other_keys is None or node.other_keys.match(key)):
            return node.other
        return found or ()

    def obj(self, node: Obj, value: Mapping[str, Any], path: str, *, shallow: bool = False) -> None:
        if node.reject:
            raise self.fail(path, node.reject)
        if node.walk != "document":
            for key in value:
                if not self.handlers(node, key):
                    raise self.fail(_join(path, key), "unknown key")
            if shallow:
                return
        if node.walk == "declared":
            steps = node.order or tuple(node.fields)
            for step in steps:
                if isinstance(step, Rule):
                    self.problem(step.check(value), path)
                else:
                    self.step(node, value, path, step, steps)
        else:
            for key, item in value.items():
                self.key(node, key, item, path)
        for rule in node.rules:
            self.problem(rule.check(value), path)

    def step(self, node: Obj, value: Mapping[str, Any], path: str, step: str, steps: tuple[str | Rule, ...]) -> None:
        *parents, key = step.split(".")
        for part in parents:  # each parent was checked by an earlier step
            if part not in value:
                return
            node = next(h for h in node.fields[part] if isinstance(h, Obj))
            value, path = value[part], _join(path, part)
        if key not in value:
            if key in node.required:
                raise self.fail(_join(path, key), "required key is missing")
            return
        deeper = any(isinstance(s, str) and s.startswith(step + ".") for s in steps)
        self.key(node, key, value[key], path, shallow=deeper)

    def key(self, node: Obj, key: str, item: object, path: str, *, shallow: bool = False) -> None:
        kpath = _join(path, key)
        handlers = self.handlers(node, key)
        lone = next((h for h in handlers if isinstance(h, Arr) and h.lone), None)
        if lone is not None:
            self.array(lone, item if isinstance(item, list) else [item], kpath)
        elif isinstance(item, dict):
            sub = next((h for h in handlers if isinstance(h, Obj)), node.other_objects)
            if sub is None:
                raise self.fail(kpath, _unknown_or_kind(handlers, "an object"))
            self.obj(sub, item, kpath, shallow=shallow)
        elif isinstance(item, list):
            arr = next((h for h in handlers if isinstance(h, Arr)), None)
            if arr is None:
                raise self.fail(kpath, _unknown_or_kind(handlers, "an array"))
            self.array(arr, item, kpath)
        else:
            sc = next((h for h in handlers if isinstance(h, Scalar)), None)
            if sc is None and node.other_strings:
                sc = STR
            if sc is None:
                if node.ignore_scalars:
                    return
                raise self.fail(kpath, _unknown_or_kind(handlers, json_kind(item)))
            self.scalar(sc, item, kpath)


def _scalar_name(node: Scalar) -> str:
    return node.name or _NAMES.get(node.kind, "a number")


def _unknown_or_kind(handlers: tuple[Scalar | Obj | Arr, ...], got: str) -> str:
    if not handlers:
        return "unknown key"
    wants = [
        "an object" if isinstance(h, Obj) else "an array" if isinstance(h, Arr) else _scalar_name(h)
        for h in handlers
    ]
    return f"expected {' or '.join(wants)}, got {got}"


_GENAI_STYLE: Final = Style()


def validate(document: object, *, source: str, root: Obj, style: Style = _GENAI_STYLE) -> None:
    """Raise one ConfigError line if the parser whose element table is ``root`` would refuse ``document``.

    ``style``: how the line is worded (default GenAI's; :mod:`q38.package.v12b.schema` has v12b's).
    """
    walker = _Walker(source, style)
    if not isinstance(document, dict):
        shown = clip(source) if style.clip else source
        raise ConfigError(style.top.format(source=shown, kind=json_kind(document)))
    walker.obj(root, document, "")
