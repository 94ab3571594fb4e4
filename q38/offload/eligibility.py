"""Which QMoE nodes ORT would offload: a thin adapter over ``contracts`` (never a second copy).

The rules (ort-contract-rules.md §1B-§1E, mirrored in ``contracts/``) answer, per candidate node,
``None`` (offloaded) or ORT's reason string. The converter only asks through
:data:`Eligibility`, so tests can inject a checker and the contracts module stays the one source.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir

from q38.errors import InternalError

__all__ = ["Eligibility", "Verdict", "contracts_eligibility", "resolve_eligibility"]

Verdict = tuple[ir.Node, str | None]
Eligibility = Callable[[ir.Model, str], Sequence[Verdict]]


def contracts_eligibility(model: ir.Model, mode: str) -> list[Verdict]:
    """Verdicts from ``contracts.offload_nodes`` for every candidate node of ``model``."""
    try:
        module: Any = importlib.import_module("contracts.offload_nodes")
    except ModuleNotFoundError as exc:
        if exc.name not in ("contracts", "contracts.offload_nodes"):
            raise
        raise InternalError(
            "contracts.offload_nodes is not installed: q38 offload needs the QMoE node rules"
        ) from None
    for name in ("offload_eligibility", "node_eligibility", "eligibility"):
        fn = getattr(module, name, None)
        if callable(fn):
            return _normalize(fn(model, mode), model)
    raise InternalError("contracts.offload_nodes has no eligibility(model, mode) function")


def _normalize(result: object, model: ir.Model) -> list[Verdict]:
    """Accept [(node, reason)] or [(node_name, reason)] or objects with .node/.reason."""
    by_name = {n.name: n for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    out: list[Verdict] = []
    for item in result:  # type: ignore[attr-defined]
        if isinstance(item, tuple):
            node, reason = item
        else:
            node, reason = getattr(item, "node"), getattr(item, "reason", None)  # noqa: B009
        if isinstance(node, str):
            node = by_name[node]
        out.append((node, reason))
    return out


def resolve_eligibility(custom: Eligibility | None) -> Eligibility:
    return custom if custom is not None else contracts_eligibility
