"""What the graph rules derive once per model: the node index, opsets, schemas, element types.

Every graph rule reads a model through :func:`model_facts` (one object per ``onnx_ir.Model``,
kept in ``model.meta``): the nodes by (domain, op type) over the main graph and every subgraph, in
graph order; the opset version each domain resolves at; the schema each node resolves to in a
given onnxruntime version's registry; and the element type of every value (declared, or derived
the way ORT's type inference derives it: from the schema's type-parameter bindings). Shapes are
derived on demand by ``contracts.shapes`` and cached here too. Rules see a snapshot: a caller that
edits a model in place calls :func:`forget` before checking it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir

from contracts._dtypes import dtype_of, type_str
from contracts._graph import (
    AttributeKindError,
    ModelLike,
    as_ir_model,
    attr,
    attr_int,
    subgraphs_of,
)
from contracts.schema_registry import OpSchema, Registry

__all__ = ["GraphScope", "ModelFacts", "Typing", "dtype_of", "forget", "model_facts", "nodes_of", "type_str"]

_META_KEY = "contracts.facts"

@dataclass
class GraphScope:
    """One graph of a model (the main graph or a subgraph) and the node that owns it."""

    graph: ir.Graph
    owner: ir.Node | None = None
    parent: GraphScope | None = None

    @property
    def label(self) -> str:
        """Where the scope sits: ``owner/subgraph`` for a subgraph, ``''`` for the main graph."""
        if self.owner is None:
            return ""
        return f"{self.owner.name or self.owner.op_type}/{self.graph.name or 'subgraph'}"


@dataclass
class ModelFacts:
    """The derived facts of one model (see the module docstring)."""

    model: ir.Model
    scopes: list[GraphScope] = field(default_factory=list)
    index: dict[tuple[str, str], list[ir.Node]] = field(default_factory=dict)
    scope_of: dict[int, GraphScope] = field(default_factory=dict)  # id(node) -> its scope
    extra: dict[Any, Any] = field(default_factory=dict)  # per-module caches
    _typing: dict[str, Typing] = field(default_factory=dict)

    def nodes(self, domain: str, op_type: str) -> list[ir.Node]:
        """The nodes of ``domain::op_type`` in every scope (subgraphs included), from the index built once."""
        return self.index.get((domain, op_type), [])

    def all_nodes(self) -> Iterator[ir.Node]:
        """Every node of every scope, main graph first, then subgraphs in discovery order."""
        for scope in self.scopes:
            yield from scope.graph

    def typing(self, registry: Registry) -> Typing:
        """Schemas and element types as onnxruntime ``registry.ort_version`` resolves them."""
        found = self._typing.get(registry.ort_version)
        if found is None:
            found = self._typing[registry.ort_version] = Typing(self, registry)
        return found


class Typing:
    """Per onnxruntime version: the schema of each node and the element type of each value."""

    def __init__(self, facts: ModelFacts, registry: Registry) -> None:
        self.facts = facts
        self.registry = registry
        self._schemas: dict[tuple[str, str], OpSchema | None] = {}
        self._types: dict[int, ir.DataType | None] = {}
        self._typed: set[int] = set()  # id(node) whose outputs are typed
        self._inferred: dict[int, ir.DataType | None] = {}  # what inference alone gave
        self._done = False

    def opset_version(self, domain: str) -> int | None:
        """The version a node of ``domain`` resolves at: the import, else ORT's default."""
        imports = self.facts.model.opset_imports
        if domain == "":
            # ORT maps "ai.onnx" to "" and the later import of the two wins (model.cc)
            onnx = [v for d, v in imports.items() if d in {"", "ai.onnx"}]
            if onnx:
                return int(onnx[-1])
        elif domain in imports:
            return int(imports[domain])
        return self.registry.default_version(domain)

    def schema(self, node: ir.Node) -> OpSchema | None:
        """The schema ``node`` resolves to (None: not registered at its domain's version)."""
        key = (node.domain, node.op_type)
        if key not in self._schemas:
            version = self.opset_version(node.domain)
            self._schemas[key] = None if version is None else self.registry.resolve(node.domain, node.op_type, version)
        return self._schemas[key]

    def elem_type(self, value: ir.Value | None) -> ir.DataType | None:
        """The element type ORT sees for ``value`` (None when neither inferred nor declared).

        Inferred from its producer where the schema determines it, else the declared one (graph
        inputs, initializers, value_info).
        """
        if value is None:
            return None
        if not self._done:
            self._infer_all()
        key = id(value)
        if key in self._types:
            return self._types[key]
        return _declared(value) if value.producer() is None else None

    def declared_mismatch(self, value: ir.Value) -> tuple[ir.DataType, ir.DataType] | None:
        """(declared, inferred) when a produced value's declared type differs from inference."""
        declared = _declared(value)
        if declared is None:
            return None
        if not self._done:
            self._infer_all()
        inferred = self._inferred.get(id(value))
        if inferred is None or inferred == declared:
            return None
        return declared, inferred

    def _infer_all(self) -> None:
        """Type every value of every graph in one forward pass over the nodes in graph order.

        A node whose inputs come from a node not yet typed (an unsorted graph) is typed
        depth-first from its ancestors.
        """
        self._done = True
        for scope in self.facts.scopes:
            for node in scope.graph:
                if id(node) not in self._typed:
                    self._infer_from(node)

    def _infer_node(self, node: ir.Node) -> None:
        inferred = _infer_outputs(node, [self._known(v) for v in node.inputs], self)
        types, only = self._types, self._inferred
        for out, dtype in zip(node.outputs, inferred, strict=False):
            only[id(out)] = dtype
            types[id(out)] = dtype if dtype is not None else _declared(out)
        self._typed.add(id(node))

    def _infer_from(self, start: ir.Node) -> None:
        """Type ``start`` after every ancestor not yet typed (an iterative DFS).

        A cycle, which ORT rejects elsewhere, leaves the node's declared types.
        """
        typed = self._typed
        if all(v is None or (p := v.producer()) is None or id(p) in typed for v in start.inputs):
            self._infer_node(start)
            return
        stack: list[tuple[ir.Node, bool]] = [(start, False)]
        visiting: set[int] = set()
        while stack:
            node, expanded = stack.pop()
            if id(node) in typed:
                continue
            if expanded:
                self._infer_node(node)
                visiting.discard(id(node))
                continue
            if id(node) in visiting:
                continue  # a cycle back to a node on the current path
            visiting.add(id(node))
            stack.append((node, True))
            for value in node.inputs:
                producer = None if value is None else value.producer()
                if producer is not None and id(producer) not in typed and id(producer) not in visiting:
                    stack.append((producer, False))

    def _known(self, value: ir.Value | None) -> ir.DataType | None:
        if value is None:
            return None
        found = self._types.get(id(value), _MISSING)
        if found is _MISSING:
            return _declared(value) if value.producer() is None else None
        return found  # type: ignore[return-value]


_MISSING = object()


def _declared(value: ir.Value) -> ir.DataType | None:
    found = value.type
    return found.dtype if isinstance(found, ir.TensorType) else None


# The element type of a Constant whose first attribute is of this kind (whatever its name: ORT's
# ConstantNodeProtoToTensorProto reads attribute(0) only); TENSOR / SPARSE_TENSOR carry their own.
_CONSTANT_KIND_TYPES = {
    ir.AttributeType.FLOAT: ir.DataType.FLOAT, ir.AttributeType.FLOATS: ir.DataType.FLOAT,
    ir.AttributeType.INT: ir.DataType.INT64, ir.AttributeType.INTS: ir.DataType.INT64,
    ir.AttributeType.STRING: ir.DataType.STRING, ir.AttributeType.STRINGS: ir.DataType.STRING,
}  # fmt: skip


def _standard_special(node: ir.Node, types: list[ir.DataType | None]) -> list[ir.DataType | None] | None:
    """Ops whose output type comes from an attribute or another input, not a type binding."""
    op = node.op_type
    if op == "Cast":
        return [ir.DataType(attr_int(node, "to", 0))] if "to" in node.attributes else [None]
    if op == "CastLike":
        return [types[1] if len(types) > 1 else None]
    if op == "Constant":
        # ORT turns a Constant into an initializer from its FIRST attribute, whatever its name
        # (probed 1.32.0: [value_int, value_float] is int64, a lone 'bogus' FLOAT is float).
        first = next(iter(node.attributes.values()), None)
        if first is None:
            return [None]  # no data attribute: refused by ORT-SCHEMA-007
        if first.type in _CONSTANT_KIND_TYPES:
            return [_CONSTANT_KIND_TYPES[first.type]]
        return [getattr(first.value, "dtype", None)]  # TENSOR, SPARSE_TENSOR (others: refused by ORT)
    if op == "ConstantOfShape":
        tensor = attr(node, "value")
        return [getattr(tensor, "dtype", ir.DataType.FLOAT) if tensor is not None else ir.DataType.FLOAT]
    if op in {"EyeLike", "RandomNormalLike", "RandomUniformLike", "Bernoulli"}:  # Bernoulli: its input's (probed)
        return [ir.DataType(attr_int(node, "dtype", 0)) if "dtype" in node.attributes else (types[0] if types else None)]
    if op in {"RandomNormal", "RandomUniform"}:
        return [ir.DataType(attr_int(node, "dtype", 1))]
    if op == "Multinomial":
        return [ir.DataType(attr_int(node, "dtype", 6))]
    if op in {"If", "Loop", "Scan"}:
        outs: list[ir.DataType | None] = []
        for _owner, sub in subgraphs_of(node):
            outs = [_declared(v) for v in sub.outputs]
            break
        if op == "If":
            return outs
        return [None] * len(node.outputs)
    return None


_SPECIAL_OPS = frozenset({"Cast", "CastLike", "Constant", "ConstantOfShape", "EyeLike", "RandomNormalLike",
                          "RandomUniformLike", "RandomNormal", "RandomUniform", "Bernoulli", "Multinomial",
                          "If", "Loop", "Scan"})  # fmt: skip


def _infer_outputs(node: ir.Node, types: list[ir.DataType | None], typing: Typing) -> list[ir.DataType | None]:
    """Output element types of ``node`` from its input types (None where not determined)."""
    n_out = len(node.outputs)
    try:
        if node.domain == "" and node.op_type in _SPECIAL_OPS:
            special = _standard_special(node, types) or []
            return special + [None] * (n_out - len(special))
        schema = typing.schema(node)
        if schema is None:
            return [None] * n_out
        in_strs, variadic = schema.input_type_strs, schema.variadic_input
        binding: dict[str, ir.DataType] = {}
        for index, dtype in enumerate(types):
            if dtype is None:
                continue
            if index < len(in_strs):
                key = in_strs[index]
            elif variadic:
                key = in_strs[-1]
            else:
                continue
            if key not in binding:
                binding[key] = dtype
        out: list[ir.DataType | None] = []
        out_strs, fixed = schema.output_type_strs, schema.output_fixed
        for index in range(n_out):
            at = index if index < len(out_strs) else (len(out_strs) - 1 if schema.variadic_output else -1)
            if at < 0:
                out.append(None)
                continue
            found = binding.get(out_strs[at])
            out.append(found if found is not None else fixed[at])
        return out
    except (AttributeKindError, ValueError):
        return [None] * n_out


def model_facts(model: ir.Model) -> ModelFacts:
    """The facts of ``model``, derived once and kept in ``model.meta``."""
    found = model.meta.get(_META_KEY)
    if isinstance(found, ModelFacts):
        return found
    facts = ModelFacts(model)
    pending: list[GraphScope] = [GraphScope(model.graph)]
    while pending:
        scope = pending.pop(0)
        facts.scopes.append(scope)
        for node in scope.graph:
            facts.index.setdefault((node.domain, node.op_type), []).append(node)
            facts.scope_of[id(node)] = scope
            for owner, sub in subgraphs_of(node):
                pending.append(GraphScope(sub, owner, scope))
    model.meta[_META_KEY] = facts
    return facts


def forget(model: ir.Model) -> None:
    """Drop the cached facts of ``model`` (after editing it in place)."""
    model.meta.pop(_META_KEY, None)


def nodes_of(model: ModelLike, domain: str, *op_types: str) -> list[ir.Node]:
    """Every node (subgraphs included) of ``domain`` whose op type is one of ``op_types``."""
    facts = model_facts(as_ir_model(model))
    return [node for op in op_types for node in facts.nodes(domain, op)]
