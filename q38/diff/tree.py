"""Differences between two JSON documents (configs, manifests), by key path."""

from __future__ import annotations

import json
from collections.abc import Iterator

from q38.diff.model import Difference

__all__ = ["diff_tree", "key_path", "same"]


def same(a: object, b: object) -> bool:
    """Equality as JSON means it: ``true`` is not ``1``, ``1`` is not ``1.0``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):  # b is one too: the types are the same
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def key_path(parent: str, key: str | int) -> str:
    """``model.decoder`` + ``filename``; list indices as ``[0]``; odd keys quoted."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    simple = key.replace("_", "").replace("-", "").isalnum()
    part = key if simple else json.dumps(key, ensure_ascii=False)
    if not parent:
        return part if simple else f"[{part}]"
    return f"{parent}.{part}" if simple else f"{parent}[{part}]"


def diff_tree(file: str, a: object, b: object, *, path: str = "") -> Iterator[Difference]:
    """Every difference between ``a`` and ``b``: keys added / removed, values changed.

    Objects are compared key by key; arrays of equal length element by element (an array
    whose length changed is one change of the whole array); anything else by value.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys(), key=str):
            where = key_path(path, key)
            if key not in b:
                yield Difference(file, "removed", where, a=a[key], facts={"key_path": where})
            elif key not in a:
                yield Difference(file, "added", where, b=b[key], facts={"key_path": where})
            elif not same(a[key], b[key]):
                yield from diff_tree(file, a[key], b[key], path=where)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if not same(x, y):
                yield from diff_tree(file, x, y, path=key_path(path, i))
        return
    if not same(a, b):
        yield Difference(file, "changed", path or "(document)", a=a, b=b, facts={"key_path": path})
