"""Which nodes find a CPU kernel, from ORT's own kernel registry, as ORT's partitioner decides.

A CPU session creates kernels only after every node found one: a node without a CPU kernel fails
the session with ``NOT_IMPLEMENTED`` first, and no constructor check runs. So the ``ep="cpu"``
kernel-constructor rules apply to a graph only when :func:`runs_on_cpu` says every node has a CPU
kernel, and ``ORT-KERNEL-001`` (:mod:`contracts.kernel_rules`) reports the first node that has
none. The registrations are the committed dump's (``get_all_opkernel_def()`` of each wheel), so
this holds for 1.31.1 and 1.32.0 alike without importing onnxruntime; a registration is matched to
a node the way ORT's kernel registry matches it (:mod:`contracts.kernel_match`: since-version
range, every type constraint on its first bound argument, float16 taken where float is listed).
A node with no kernel whose op has a function body is inlined by ORT (:mod:`contracts.function_bodies`):
then the body's nodes must find kernels, and the first that does not is the one ORT names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import onnx_ir as ir

from contracts._facts import Typing, model_facts
from contracts._graph import ModelLike, as_ir_model
from contracts.function_bodies import body_model, has_body
from contracts.kernel_match import matches
from contracts.schema_registry import registry_for

__all__ = ["NoKernel", "has_cpu_kernel", "missing_cpu_kernels", "no_cpu_kernel", "runs_on_cpu"]

_ONNX = frozenset({"", "ai.onnx"})
_MAX_DEPTH = 4  # function bodies inside function bodies: onnx's nest at most twice


@dataclass(frozen=True)
class NoKernel:
    """A node of the graph whose session fails for want of a kernel, and the op ORT names.

    ``node`` is the graph's node; ``op`` and ``since`` name the node ORT reports, which is a node
    of the inlined function body when ``node``'s op has one (Bernoulli -> RandomUniformLike(22)),
    and ``name`` that node's name.
    """

    node: ir.Node
    op: str
    since: int
    name: str
    domain: str = ""
    float16_input: bool = False
    registered: bool = True  # the op has CPU registrations, none of which fits

    def message(self) -> str:
        """ORT's NOT_IMPLEMENTED text for the node.

        The partitioner's (``graph_partitioner.cc``), or, for a node whose first input is a
        float16 graph input (the CPU EP takes it for InsertCastTransformer and fails when it
        creates the kernel), the session state's (``kernel_registry_manager.cc``).
        """
        if self.float16_input:
            qualified = f"{self.domain}.{self.op}" if self.domain not in ("", "ai.onnx") else self.op
            head = f"Failed to find kernel for {qualified}({self.since}) (node:'{self.name}' ep:'CPUExecutionProvider')."
            if not self.registered:
                return f"{head} Kernel not found"
            return (f"{head} Op with name ({self.name}) domain ({self.domain}) and type ({self.op}) kernel is not "
                    "supported in CPUExecutionProvider.")  # fmt: skip
        return f"Could not find an implementation for {self.op}({self.since}) node with name '{self.name}'"


def has_cpu_kernel(node: ir.Node, typing: Typing) -> bool:
    """Whether some CPU registration of the node's op covers its since-version and bound types."""
    schema = typing.schema(node)
    if schema is None:
        return False
    return any(matches(node, schema, reg, typing, cast_fallback=True)
               for reg in typing.registry.cpu_kernels(node.domain, node.op_type))  # fmt: skip


def _unserved(node: ir.Node, typing: Typing, depth: int) -> NoKernel | None:
    """The node ORT names (``node`` or one of its body) when ``node`` finds no CPU kernel, even inlined."""
    schema = typing.schema(node)
    if schema is None:
        return None  # no schema: the schema rules refuse the node before any kernel lookup
    if node.domain in _ONNX and node.op_type == "Constant":
        return None  # ORT turns a Constant into an initializer when it loads the graph: no kernel
    if has_cpu_kernel(node, typing):
        return None
    opset = typing.opset_version(node.domain)
    if opset is not None and has_body(node, opset):
        body = body_model(node, opset, [typing.elem_type(v) for v in node.inputs]) if depth < _MAX_DEPTH else None
        if body is None:
            return None  # ORT inlines a body q38 cannot build here (unknown types): not judged
        inner = model_facts(body).typing(typing.registry)
        for child in model_facts(body).all_nodes():
            found = _unserved(child, inner, depth + 1)
            if found is not None:
                return found
        return None
    first = node.inputs[0] if node.inputs else None
    # Which wording ORT uses, as observed on 1.31.1 and 1.32.0: the session state's when the first
    # input is a float16 graph input (Cast, CastLike, PackedSparseAttentionIndexer), the
    # partitioner's otherwise (a fp16 PagedAttention fed by MRotaryEmbedding, a float16 output).
    # Not exact (1.31.1 words a fed fp16 GatedDeltaNet the session state's way); the op, its
    # since-version and the node name are what both wordings carry.
    float16 = first is not None and first.producer() is None and typing.elem_type(first) == ir.DataType.FLOAT16
    registered = bool(typing.registry.cpu_kernels(node.domain, node.op_type))
    return NoKernel(node, node.op_type, schema.since, node.name or "", node.domain, float16, registered)


def no_cpu_kernel(model: ModelLike, ort_version: str) -> list[NoKernel]:
    """Every node (subgraphs included) that finds no CPU kernel in onnxruntime ``ort_version``."""
    ir_model = as_ir_model(model)
    facts = model_facts(ir_model)
    registry = registry_for(ort_version)
    key = ("no_cpu_kernel", registry.ort_version)
    if key not in facts.extra:
        typing = facts.typing(registry)
        found: list[NoKernel] = []
        for node in facts.all_nodes():
            named = _unserved(node, typing, 0)
            if named is not None:  # reported at the graph's node, named as ORT names it
                found.append(dataclasses.replace(named, node=node))
        facts.extra[key] = found
    result: list[NoKernel] = facts.extra[key]
    return result


def missing_cpu_kernels(model: ModelLike, ort_version: str) -> list[ir.Node]:
    """The nodes (subgraphs included) with no CPU kernel in onnxruntime ``ort_version``, even inlined."""
    return [found.node for found in no_cpu_kernel(model, ort_version)]


def runs_on_cpu(model: ModelLike, ort_version: str) -> bool:
    """Whether a CPU session of ``model`` gets as far as creating its kernels.

    A node without a schema at its opset never gets there either (the schema rules report it).
    """
    ir_model = as_ir_model(model)
    if no_cpu_kernel(ir_model, ort_version):
        return False
    facts = model_facts(ir_model)
    typing = facts.typing(registry_for(ort_version))
    return all(typing.schema(node) is not None for node in facts.all_nodes())
