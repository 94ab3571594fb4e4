"""How onnxruntime's kernel registry matches a node to a kernel registration, for any EP.

``KernelRegistry::VerifyKernelDef`` (``onnxruntime/core/framework/kernel_registry.cc``) accepts a
registration for a node when

* its version range fits the node's schema since_version: the registration starts at it, or
  starts before it and has a closed end at or after it. An open-ended registration
  (``[16, INT_MAX]``) matches only a node whose since_version is its start: RoiAlign(22) finds
  no kernel in ``RoiAlign`` ``[10, 15]`` / ``[16, INT_MAX]``, although 16 <= 22;
* every type constraint of the registration is met by the first argument bound to it that
  exists: the node's inputs first, then its outputs (a constraint such as Cast's ``T2`` binds the
  output only, so ``Cast(to=FLOAT4E2M1)`` finds no kernel when T2 does not list float4e2m1).
  A constraint name is resolved against the schema's formal type strings, then its formal
  parameter names (ORT's ``KernelTypeStrResolver``).

A value whose element type is unknown satisfies the constraint (q38 does not guess). The CPU EP
also takes a float16 argument where the registration lists float: ORT's InsertCastTransformer
casts around such a node (``ort-cpu-capabilities.md`` §0); bfloat16 gets no such fallback.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import onnx_ir as ir

from contracts._facts import Typing, type_str
from contracts.schema_registry import FormalParam, OpSchema

__all__ = ["INT_MAX", "Registration", "matches", "version_fits"]

INT_MAX = 2147483647
# (since, end, allowed type strings per constraint name) of one kernel registration.
Registration = tuple[int, int, Mapping[str, frozenset[str]]]
_FLOAT, _FLOAT16 = "tensor(float)", "tensor(float16)"


def version_fits(start: int, end: int, since: int) -> bool:
    """Whether a registration ``[start, end]`` serves a node whose schema starts at ``since``."""
    return start == since or (start < since and end != INT_MAX and end >= since)


def _bound(params: tuple[FormalParam, ...], values: Sequence[ir.Value | None], name: str) -> Iterator[ir.Value | None]:
    """The values of ``values`` whose formal parameter has type string (or name) ``name``."""
    by_type = any(p.type_str == name for p in params)
    for index, value in enumerate(values):
        param = params[index] if index < len(params) else (params[-1] if params and params[-1].option == "variadic" else None)
        if param is not None and (param.type_str == name if by_type else param.name == name):
            yield value


def _first_existing(schema: OpSchema, node: ir.Node, name: str) -> ir.Value | None:
    """The first argument of ``node`` bound to constraint ``name`` that exists (inputs, then outputs)."""
    for value in _bound(schema.inputs, list(node.inputs), name):
        if value is not None and value.name != "":
            return value
    for value in _bound(schema.outputs, list(node.outputs), name):
        if value is not None and value.name != "":
            return value
    return None


def matches(node: ir.Node, schema: OpSchema, registration: Registration, typing: Typing, *, cast_fallback: bool) -> bool:
    """Whether ``registration`` is a kernel for ``node`` (resolved to ``schema``) as ORT matches it.

    ``cast_fallback``: the EP takes float16 where float is registered (the CPU EP).
    """
    start, end, allowed = registration
    if not version_fits(start, end, schema.since):
        return False
    for name, types in allowed.items():
        value = _first_existing(schema, node, name)
        dtype = None if value is None else typing.elem_type(value)
        if dtype is None:
            continue
        text = type_str(dtype)
        if text not in types and not (cast_fallback and text == _FLOAT16 and _FLOAT in types):
            return False
    return True
