"""The function body onnxruntime inlines for a node no EP has a kernel for.

When no execution provider claims a node and its op has a function body (a schema function or a
context-dependent one), ORT's partitioner inlines the body and partitions its nodes instead
(``graph_partitioner.cc``, ``InlineFunctionsAOT`` / ``Graph::InlineFunction``); only a node
without a kernel *and* without a body fails the session. So ``Bernoulli`` on the CPU EP, which has
no Bernoulli kernel, becomes ``RandomUniformLike`` + ``Greater`` + ``Cast`` at the model's opset,
and the refusal names ``RandomUniformLike(22)``.

The bodies come from onnx's own schemas (the ONNX domains; ORT builds them with the same onnx
functions). A contrib op's body is ORT's alone and not readable here, so a ``com.microsoft`` node
without a kernel gets no inlined body (:func:`body_model` returns None).
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx_ir as ir
from onnx import defs, helper

from contracts._graph import as_ir_model

__all__ = ["body_model", "has_body"]

_ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})


# onnx's OpSchema binding: its function accessors are missing from onnx's type stubs.
_Schema = Any


def _schema(node: ir.Node, opset: int) -> _Schema | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in _ONNX_DOMAINS:
        return None
    try:
        return defs.get_schema(node.op_type, opset, domain)
    except defs.SchemaError:
        return None


def has_body(node: ir.Node, opset: int) -> bool:
    """Whether onnx gives ``node``'s op a function body at ``opset`` (plain or context-dependent)."""
    schema = _schema(node, opset)
    if schema is None:
        return False
    if schema.has_context_dependent_function:
        return any(v <= opset for v in schema.context_dependent_function_opset_versions)
    return bool(schema.has_function) and _plain_body(schema, opset) is not None


def _plain_body(schema: _Schema, opset: int) -> onnx.FunctionProto | None:
    """The schema function ORT takes at ``opset``: onnx's ``GetFunction(opset, validate=true)``.

    The body of the newest function version at or below ``opset``, and only when none of the
    ONNX ops it uses changed between that version and ``opset`` (``ValidateReferencedOpsInFuncton``):
    Relu-14's body is written for opset 18, so a Relu at opset 14 has none, and at opset 21 its
    Constant changed (19, 21), so it has none either; ORT then reports Relu itself.
    """
    versions = [v for v in schema.function_opset_versions if v <= opset]
    if not versions:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(schema.get_function_with_opset_version(max(versions)))
    if max(versions) != opset:
        for inner in body.node:
            if inner.domain in ("", "ai.onnx") and _since(inner.op_type, opset) != _since(inner.op_type, max(versions)):
                return None
    return body


def _since(op: str, opset: int) -> int | None:
    try:
        return int(defs.get_schema(op, opset, "").since_version)
    except defs.SchemaError:
        return None


def _function(node: ir.Node, opset: int, input_types: list[ir.DataType | None]) -> onnx.FunctionProto | None:
    """The function body onnx gives ``node`` at ``opset`` (None: the op has none onnx knows).

    A context-dependent body is built only when every input's element type is known.
    """
    schema = _schema(node, opset)
    if schema is None:
        return None
    try:
        if schema.has_context_dependent_function:
            versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
            if not versions or any(t is None for t in input_types) or len(input_types) != len(node.inputs):
                # the body depends on types q38 does not know (onnx's builder crashes without them)
                return None
            types = [helper.make_tensor_type_proto(int(t), None).SerializeToString() for t in input_types if t is not None]
            proto = ir.serde.serialize_node(node)
            raw = schema.get_context_dependent_function_with_opset_version(max(versions), proto.SerializeToString(), types)
            return onnx.FunctionProto.FromString(raw) if raw else None
        return _plain_body(schema, opset) if schema.has_function else None
    except Exception:  # onnx refuses to build this body (bad attributes): the schema rules report the node
        return None


def _substitute(body: onnx.FunctionProto, node: ir.Node) -> None:
    """Replace attribute references (``ref_attr_name``) by the node's own values; drop the unset."""
    own = {name: ir.serde.serialize_attribute(value) for name, value in node.attributes.items()
           if isinstance(value, ir.Attr)}  # fmt: skip
    for inner in body.node:
        kept = []
        for attribute in inner.attribute:
            if attribute.ref_attr_name:
                if attribute.ref_attr_name in own:
                    copy = onnx.AttributeProto()
                    copy.CopyFrom(own[attribute.ref_attr_name])
                    copy.name = attribute.name
                    kept.append(copy)
                continue
            kept.append(attribute)
        del inner.attribute[:]
        inner.attribute.extend(kept)


def body_model(node: ir.Node, opset: int, input_types: list[ir.DataType | None]) -> ir.Model | None:
    """A model of the body ORT inlines for ``node`` at ``opset``, its inputs typed as the node's.

    None: the op has no body onnx knows (then ORT has nothing to inline either for an ONNX op),
    or it cannot be built here (:func:`has_body` tells the two apart).
    """
    body = _function(node, opset, input_types)
    if body is None:
        return None
    _substitute(body, node)
    inputs = []
    for index, name in enumerate(body.input):
        dtype = input_types[index] if index < len(input_types) else None
        if dtype is None:
            inputs.append(helper.make_value_info(name, onnx.TypeProto()))
        else:
            inputs.append(helper.make_tensor_value_info(name, int(dtype), None))
    made = {name for inner in body.node for name in inner.output} | set(body.input)
    # an optional output the body leaves unset at these attributes is not a graph output here
    outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in body.output if name in made]
    graph = helper.make_graph(list(body.node), f"{node.op_type}_body", inputs, outputs)
    # ORT resolves the inlined nodes at the model's opset (onnx's UpdateFunctionProtoOpsetImportVersion)
    imports = [i for i in body.opset_import if i.domain not in ("", "ai.onnx")] + [helper.make_opsetid("", opset)]
    try:
        return as_ir_model(helper.make_model(graph, opset_imports=imports, ir_version=10))
    except Exception:  # a body onnx-ir cannot read: nothing to judge
        return None
