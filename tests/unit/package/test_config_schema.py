"""The declarative config validator's strict options, the ones the v12b table uses.

Invariants: a ``keys_first`` / ``declared`` object refuses its unknown keys before any value; a
``declared`` walk checks values in its ``order`` (dotted steps check a parent's kind and keys
first), a required key is refused at its step; ``other`` keys by pattern; a ``lone`` array reads
a single value as ``key[0]``; rules run where they stand and name their own path. Each refusal is
pinned by the key path it names: that path says which check ran first.
"""

from __future__ import annotations

import re

import pytest

from q38.errors import ConfigError
from q38.package.config_schema import STR, Arr, Obj, Rule, Scalar, Style, at_least, validate

INT = Scalar("integer", at_least(1))


def _path(document: object, root: Obj) -> str:
    with pytest.raises(ConfigError) as info:
        validate(document, source="s", root=root, style=Style(clip=True))
    return str(info.value).split(": ")[1]


def test_unknown_keys_are_refused_before_any_value_unless_the_walk_is_document_order() -> None:
    fields = {"a": (INT,)}
    assert _path({"a": 0, "zz": 1}, Obj(fields)) == "a"
    assert _path({"a": 0, "zz": 1}, Obj(fields, walk="keys_first")) == "zz"
    assert _path({"a": 0, "zz": 1}, Obj(fields, walk="declared")) == "zz"


def test_a_declared_walk_follows_its_order_and_refuses_a_required_key_at_its_step() -> None:
    inner = Obj({"x": (STR,), "y": (INT,)}, walk="declared", required=frozenset({"x"}))
    root = Obj({"a": (INT,), "b": (inner,)}, walk="declared", required=frozenset({"b"}),
               order=("b", "a", "b.y", "b.x"))  # fmt: skip
    assert _path({"a": 0, "b": {"x": 1, "y": 0}}, root) == "a"  # the order, not the document's
    assert _path({"a": 1, "b": {"x": 1, "y": 0}}, root) == "b.y"  # a dotted step, after "a"
    assert _path({"a": 0, "b": {"zz": 1}}, root) == "b.zz"  # step "b" checks b's keys only
    assert _path({"a": 1, "b": {"y": 1}}, root) == "b.x"
    assert _path({"a": 0}, root) == "b"


def test_other_keys_take_their_handlers_by_pattern() -> None:
    root = Obj({"a": (STR,)}, other=(STR,), other_keys=re.compile(r"^[a-z]+\.[a-z]+$"))
    validate({"a": "1", "x.y": "2"}, source="s", root=root)
    assert _path({"x.y": 2}, root) == "x.y"
    assert _path({"xy": "2"}, root) == "xy"


def test_a_lone_array_reads_a_single_value_as_its_first_element() -> None:
    root = Obj({"ids": (Arr(INT, lone=True),)})
    validate({"ids": 3}, source="s", root=root)
    assert _path({"ids": 0}, root) == "ids[0]"
    assert _path({"ids": [1, 0]}, root) == "ids[1]"


def test_rules_run_where_they_stand_and_name_their_own_path() -> None:
    def small(d: dict[str, int]) -> tuple[str, str] | None:
        return ("a", "too big") if d["a"] > 5 else None

    def each(items: list[object], i: int) -> tuple[str, str] | None:
        return (f"[{i}]", "a repeat") if items[i] in items[:i] else None

    root = Obj({"a": (INT,), "b": (INT,), "c": (Arr(INT, each=each),)}, walk="declared",
               order=("a", Rule(small), "b", "c"))  # fmt: skip
    assert _path({"a": 6, "b": 0}, root) == "a"
    assert _path({"a": 1, "b": 0}, root) == "b"
    assert _path({"a": 1, "b": 1, "c": [1, 2, 1]}, root) == "c[2]"


def test_the_style_words_a_non_object_document() -> None:
    with pytest.raises(ConfigError, match=r"^s: : expected an object, got an array$"):
        validate([], source="s", root=Obj(), style=Style(top="{source}: : expected an object, got {kind}"))
