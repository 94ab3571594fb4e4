"""Whether a graph reaches the CPU kernel constructors at all, from ORT's own kernel registry.

A CPU session creates kernels only after every node found one: a node without a CPU kernel fails
the session with ``NOT_IMPLEMENTED`` first (a missing kernel, not a contract violation), and no
constructor check runs. So the ``ep="cpu"`` kernel-constructor rules apply to a graph only when
:func:`runs_on_cpu` says every node has a CPU kernel. The registrations are the committed dump's
(``get_all_opkernel_def()`` of each wheel), so this holds for 1.31.1 and 1.32.0 alike without
importing onnxruntime. A float16 node whose op has only a float kernel still runs: ORT inserts
Casts around it (``ort-cpu-capabilities.md`` §0); bfloat16 gets no such fallback.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx_ir as ir

from contracts._facts import Typing, model_facts, type_str
from contracts._graph import ModelLike, as_ir_model
from contracts.schema_registry import registry_for

__all__ = ["has_cpu_kernel", "missing_cpu_kernels", "runs_on_cpu"]

_FLOAT, _FLOAT16 = "tensor(float)", "tensor(float16)"


def has_cpu_kernel(node: ir.Node, typing: Typing) -> bool:
    """Whether some CPU registration of the node's op covers its opset version and input types."""
    schema = typing.schema(node)
    if schema is None:
        return False
    for since, end, allowed in typing.registry.cpu_kernels(node.domain, node.op_type):
        if not since <= schema.since <= end:  # kernels match the schema's since_version
            continue
        if all(_covered(node, index, allowed, typing) for index in range(len(node.inputs))):
            return True
    return False


def _covered(node: ir.Node, index: int, allowed: Mapping[str, frozenset[str]], typing: Typing) -> bool:
    """Whether input ``index``'s element type is one the kernel lists for its type parameter.

    Only a known element type the registration does not list rules it out (float16 passes where
    float is listed: ORT inserts Casts); an unconstrained parameter or an unknown type is covered.
    """
    value = node.inputs[index]
    schema = typing.schema(node)
    param = None if schema is None or value is None else schema.input_param(index)
    if param is None or param.type_str not in allowed:
        return True
    dtype = typing.elem_type(value)
    if dtype is None:
        return True
    text = type_str(dtype)
    return text in allowed[param.type_str] or (text == _FLOAT16 and _FLOAT in allowed[param.type_str])


def missing_cpu_kernels(model: ModelLike, ort_version: str) -> list[ir.Node]:
    """The nodes (subgraphs included) with no CPU kernel in onnxruntime ``ort_version``."""
    ir_model = as_ir_model(model)
    facts = model_facts(ir_model)
    registry = registry_for(ort_version)
    key = ("missing_cpu_kernels", registry.ort_version)
    if key not in facts.extra:
        typing = facts.typing(registry)
        facts.extra[key] = [n for n in facts.all_nodes() if not has_cpu_kernel(n, typing)]
    found: list[ir.Node] = facts.extra[key]
    return found


def runs_on_cpu(model: ModelLike, ort_version: str) -> bool:
    """Whether a CPU session of ``model`` gets as far as creating its kernels."""
    return not missing_cpu_kernels(model, ort_version)
