"""Differences between two canonical graphs: nodes, initializers, inputs/outputs, opsets.

Nodes are matched by name where a name is unique in its graph, else by their first output
(value names are unique in ONNX), so a changed attribute is one difference naming the node and
the attribute, not a removed and an added node. Node inputs and outputs are compared as ONNX
reads them: trailing empty names are absent (a QMoE whose optional tail was dropped is the same
node), and a changed list is shown by position (``input[3]: "a" -> "b"``), never as two lists. Initializers and inputs / outputs / value_info
are matched by name. Subgraph attributes (If / Loop / Scan bodies) are compared recursively,
their differences prefixed by the node and attribute that hold them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from q38.diff.model import ABSENT, Difference, short_value
from q38.diff.tree import diff_tree, same

__all__ = ["diff_graph", "node_keys", "node_label", "present_names"]

_HEADER_FIELDS: Final = ("ir_version", "producer_name", "producer_version", "name")
_IO_SECTIONS: Final = (("inputs", "input"), ("outputs", "output"), ("value_info", "value_info"))


def node_label(node: Mapping[str, Any]) -> str:
    """``node "/layers.0/attn/RMSNormRotary" (com.microsoft::RMSNormRotary)``."""
    op = f"{node['domain']}::{node['op']}" if node.get("domain") else str(node["op"])
    if node.get("name"):
        return f"node {short_value(node['name'])} ({op})"
    outs = node.get("outputs") or []
    return f"node ({op}) -> {short_value(outs[0])}" if outs else f"node ({op})"


def node_keys(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """A key per node that identifies it across two versions of a graph."""
    names = Counter(n["name"] for n in nodes if n.get("name"))
    keys = []
    for i, n in enumerate(nodes):
        if n.get("name") and names[n["name"]] == 1:
            keys.append("name:" + n["name"])
        elif n.get("outputs") and n["outputs"][0]:
            keys.append("out:" + n["outputs"][0])
        else:
            keys.append(f"pos:{i}")
    return keys


def _node_summary(node: Mapping[str, Any]) -> str:
    return f"{short_value(node.get('inputs', []))} -> {short_value(node.get('outputs', []))}"


def present_names(names: Sequence[str]) -> list[str]:
    """``names`` without its trailing empty names.

    ONNX defines a trailing optional input or output given as ``''`` to be the same as one left
    out (the list may simply stop).
    """
    end = len(names)
    while end and not names[end - 1]:
        end -= 1
    return list(names[:end])


def _semantic(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` as ONNX reads it: trailing empty inputs / outputs dropped."""
    return {**node, "inputs": present_names(node.get("inputs", [])), "outputs": present_names(node.get("outputs", []))}


def _diff_names(file: str, where: str, what: str, a: Sequence[str], b: Sequence[str], facts: dict[str, Any]) -> Iterator[Difference]:
    """One difference per position whose name differs, ``''`` and past-the-end alike meaning left out.

    Each side shows its own spelling at that position: the name, ``""``, or ``absent`` (the list
    ended before it), so ``input[14]: "router_probs" -> absent`` reads as what changed.
    """
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else ""
        y = b[i] if i < len(b) else ""
        if x != y:
            x_shown = x if i < len(a) else ABSENT
            y_shown = y if i < len(b) else ABSENT
            yield Difference(file, "changed", f"{where} {what}[{i}]", a=x_shown, b=y_shown, facts={**facts, "field": what, "index": i})


def _diff_mapping(
    file: str,
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    where_of: Callable[[str], str],
    facts_of: Callable[[str], dict[str, Any]],
    changed: Callable[[str, object, object], Iterator[Difference]],
) -> Iterator[Difference]:
    """Keys of ``a`` / ``b`` removed, added, or (where the values differ) what ``changed`` says."""
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            yield Difference(file, "removed", where_of(key), a=a[key], facts=facts_of(key))
        elif key not in a:
            yield Difference(file, "added", where_of(key), b=b[key], facts=facts_of(key))
        elif not same(a[key], b[key]):
            yield from changed(key, a[key], b[key])


def _diff_attribute(file: str, where: str, name: str, a: object, b: object, facts: dict[str, Any]) -> Iterator[Difference]:
    at = f"{where} attribute {name}"
    f = {**facts, "field": "attribute", "attribute": name}
    if isinstance(a, dict) and isinstance(b, dict) and "graph" in a and "graph" in b:
        yield from diff_graph(file, a["graph"], b["graph"], prefix=f"{at} > ", facts=f)
        return
    if isinstance(a, dict) and isinstance(b, dict) and "graphs" in a and "graphs" in b and len(a["graphs"]) == len(b["graphs"]):
        for i, (ga, gb) in enumerate(zip(a["graphs"], b["graphs"])):
            yield from diff_graph(file, ga, gb, prefix=f"{at}[{i}] > ", facts=f)
        return
    yield Difference(file, "changed", at, a=a, b=b, facts=f)


def _diff_node(file: str, prefix: str, a: Mapping[str, Any], b: Mapping[str, Any], facts: dict[str, Any]) -> Iterator[Difference]:
    where = prefix + node_label(a)
    f = {**facts, "section": "node", "node": a.get("name") or None, "op": a["op"], "domain": a["domain"]}
    for key in ("domain", "op"):
        if a[key] != b[key]:
            yield Difference(file, "changed", f"{where} {key}", a=a[key], b=b[key], facts={**f, "field": key})
    yield from _diff_mapping(
        file, a.get("attributes", {}), b.get("attributes", {}),
        lambda name: f"{where} attribute {name}",
        lambda name: {**f, "field": "attribute", "attribute": name},
        lambda name, x, y: _diff_attribute(file, where, name, x, y, f),
    )
    yield from _diff_names(file, where, "input", a["inputs"], b["inputs"], f)
    yield from _diff_names(file, where, "output", a["outputs"], b["outputs"], f)


def _diff_nodes(file: str, prefix: str, a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], facts: dict[str, Any]) -> Iterator[Difference]:
    keys_a, keys_b = node_keys(a), node_keys(b)
    by_a, by_b = dict(zip(keys_a, a)), dict(zip(keys_b, b))
    f = {**facts, "section": "node"}
    for key, node in zip(keys_a, a):
        other = by_b.get(key)
        if other is None:
            yield Difference(file, "removed", prefix + node_label(node), a=node,
                             facts={**f, "node": node.get("name") or None, "summary": _node_summary(node)})
        elif _semantic(other) != _semantic(node):
            yield from _diff_node(file, prefix, node, other, facts)
    for key, node in zip(keys_b, b):
        if key not in by_a:
            yield Difference(file, "added", prefix + node_label(node), b=node,
                             facts={**f, "node": node.get("name") or None, "summary": _node_summary(node)})
    common_a = [k for k in keys_a if k in by_b]
    common_b = [k for k in keys_b if k in by_a]
    if common_a != common_b:
        first = next(i for i, (x, y) in enumerate(zip(common_a, common_b)) if x != y)
        yield Difference(file, "changed", f"{prefix}node order", a=f"{node_label(by_a[common_a[first]])} at {first}",
                         b=f"{node_label(by_b[common_b[first]])} at {first}", facts={**f, "field": "order"})


def _diff_named(file: str, prefix: str, what: str, a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]],
                facts: dict[str, Any], *, ordered: bool) -> Iterator[Difference]:
    by_a, by_b = {r["name"]: r for r in a}, {r["name"]: r for r in b}
    f = {**facts, "section": what}
    for name, rec in by_a.items():
        where = f"{prefix}{what} {short_value(name)}"
        if name not in by_b:
            yield Difference(file, "removed", where, a=rec, facts={**f, "name": name})
            continue
        other = by_b[name]
        if other == rec:
            continue
        for key in sorted((rec.keys() | other.keys()) - {"name"}):
            if key not in other:
                yield Difference(file, "removed", f"{where} {key}", a=rec[key], facts={**f, "name": name, "field": key})
            elif key not in rec:
                yield Difference(file, "added", f"{where} {key}", b=other[key], facts={**f, "name": name, "field": key})
            elif rec[key] != other[key]:
                yield Difference(file, "changed", f"{where} {key}", a=rec[key], b=other[key], facts={**f, "name": name, "field": key})
    for name, rec in by_b.items():
        if name not in by_a:
            yield Difference(file, "added", f"{prefix}{what} {short_value(name)}", b=rec, facts={**f, "name": name})
    if ordered:
        order_a = [r["name"] for r in a if r["name"] in by_b]
        order_b = [r["name"] for r in b if r["name"] in by_a]
        if order_a != order_b:
            yield Difference(file, "changed", f"{prefix}{what} order", a=order_a, b=order_b, facts={**f, "field": "order"})


def diff_graph(file: str, a: Mapping[str, Any], b: Mapping[str, Any], *, prefix: str = "",
               facts: dict[str, Any] | None = None) -> Iterator[Difference]:
    """Every difference between two canonical graphs (see the module docstring)."""
    facts = dict(facts or {})
    for key in _HEADER_FIELDS:
        if a.get(key) != b.get(key):
            yield Difference(file, "changed", prefix + key, a=a.get(key), b=b.get(key), facts={**facts, "section": key})

    def opset_where(domain: str) -> str:
        return f"{prefix}opset_import {short_value(domain)}"

    def opset_facts(domain: str) -> dict[str, Any]:
        return {**facts, "section": "opset_import", "domain": domain}

    yield from _diff_mapping(
        file, a.get("opset_imports", {}), b.get("opset_imports", {}), opset_where, opset_facts,
        lambda d, x, y: iter([Difference(file, "changed", opset_where(d), a=x, b=y, facts=opset_facts(d))]),
    )
    if a.get("metadata") != b.get("metadata"):
        for d in diff_tree(file, a.get("metadata") or {}, b.get("metadata") or {}, path="metadata"):
            yield Difference(d.file, d.change, prefix + d.where, a=d.a, b=d.b, facts={**facts, "section": "metadata", **d.facts})
    for section, what in _IO_SECTIONS:
        if a.get(section) != b.get(section):
            yield from _diff_named(file, prefix, what, a.get(section) or [], b.get(section) or [], facts,
                                   ordered=section != "value_info")
    if a.get("nodes") != b.get("nodes"):
        yield from _diff_nodes(file, prefix, a.get("nodes") or [], b.get("nodes") or [], facts)
    if a.get("initializers") != b.get("initializers"):
        yield from _diff_named(file, prefix, "initializer", a.get("initializers") or [], b.get("initializers") or [],
                               facts, ordered=False)
    for section in ("sparse_initializers", "functions"):
        if a.get(section) != b.get(section):
            for d in diff_tree(file, a.get(section), b.get(section), path=section):
                yield Difference(d.file, d.change, prefix + d.where, a=d.a, b=d.b, facts={**facts, "section": section, **d.facts})
