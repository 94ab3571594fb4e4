"""onnxruntime 1.31.1 schema differences that reject graphs 1.32.0 accepts (versioned rules).

Source: ``ort-cpu-capabilities.md`` §7 and the two wheels' registered schemas
(``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``, 1.31.1 vs 1.32.0).
The rules below apply until 1.32.0 and are enforced at CPU session creation (graph resolve,
any EP):

* ``ORT-SCHEMA-002``: GatedDeltaNet ``decay``/``beta`` (inputs 4, 5) are ``TS`` = float only in
  1.31.1 (1.32.0 added ``TG`` = float/float16/bfloat16). The synthetic graphs feed float16 there.
  (1.31.1 also has no GatedDeltaNet CPU kernel: with float decay/beta the session fails with
  NOT_IMPLEMENTED, which, like every missing kernel, is not a contract violation.)
* ``ORT-SCHEMA-003``: attributes 1.31.1 does not know (``Unrecognized attribute: ...``).
* ``ORT-SCHEMA-004``: more inputs/outputs than 1.31.1's schema allows.

And one 1.32.0 rule of the same op (since 1.32.0): ``ORT-SCHEMA-005``, decay and beta bound to
one ``TG`` type.

CausalConvWithState / VarlenCausalConvWithState differences are ``CCONV-SCHEMA-002`` /
``VCCONV-SCHEMA-002`` (contracts.causal_conv); ops 1.31.1 lacks entirely are ``ORT-SCHEMA-001``
(contracts.qsa).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import onnx_ir as ir

from contracts._graph import as_ir_model, infer_elem_types, input_at, node_label
from contracts._rule import OrtVersions, Rule, Violation
from q38._ops import MS_DOMAIN

__all__ = ["RULES", "check_ort_schema"]

_UNTIL_132 = OrtVersions(until="1.32.0")
_GDN = "GatedDeltaNet"
# op -> attributes that 1.32.0 added (schema diff of the two wheels)
NEW_ATTRIBUTES_132: dict[str, tuple[str, ...]] = {
    "QMoE": ("swiglu_limit_after_activation",),
    "MoE": ("swiglu_limit_after_activation",),
    _GDN: ("gate_lower_bound",),
    "DynamicSparseAttention": ("output_bf16",),
    "PackedSparseAttentionIndexer": ("indexshare_state_policy", "max_output_entries"),
    "GroupQueryAttention": ("k_norm_epsilon", "q_norm_epsilon"),
}
# op -> (min_input, max_input, min_output, max_output) in 1.31.1, where 1.32.0 allows more
ARITY_131: dict[str, tuple[int, int, int, int]] = {
    "GatedAdd": (3, 3, 1, 1),
    "DynamicSparseAttention": (11, 17, 1, 3),
    "PackedSparseAttentionIndexer": (16, 18, 6, 7),
    "GroupQueryAttention": (7, 16, 1, 4),
}


def _ms_nodes(model: Any) -> list[tuple[ir.Graph, ir.Node]]:
    graph = as_ir_model(model).graph
    return [(n.graph or graph, n) for n in graph.all_nodes() if n.domain == MS_DOMAIN]


def _gdn_nodes_with_types(model: Any) -> Iterator[tuple[ir.Node, dict[int, ir.DataType]]]:
    """Each GatedDeltaNet node with the element types inferred for its graph."""
    types: dict[int, dict[int, ir.DataType]] = {}
    for graph, node in _ms_nodes(model):
        if node.op_type != _GDN:
            continue
        if id(graph) not in types:  # one forward pass per graph, only where GatedDeltaNet is
            types[id(graph)] = infer_elem_types(graph)
        yield node, types[id(graph)]


def _check_gdn_decay_beta(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found: list[Violation] = []
    for node, known in _gdn_nodes_with_types(model):
        for slot in (4, 5):
            value = input_at(node, slot)
            dtype = None if value is None else known.get(id(value))
            if value is not None and dtype is not None and dtype != ir.DataType.FLOAT:
                found.append(Violation(
                    "ORT-SCHEMA-002",
                    f"Type Error: Type 'tensor({_onnx_type(dtype)})' of input parameter ({value.name}) of "
                    f"operator ({_GDN}) in node ({node_label(node)}) is invalid.",
                    node=node_label(node),
                ))  # fmt: skip
                break  # ORT reports the first offending input
    return found


def _check_gdn_tg_binding(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    """1.32.0: decay and beta share the type parameter TG (probed)."""
    found: list[Violation] = []
    for node, known in _gdn_nodes_with_types(model):
        decay, beta = input_at(node, 4), input_at(node, 5)
        a = None if decay is None else known.get(id(decay))
        b = None if beta is None else known.get(id(beta))
        if a is not None and b is not None and a != b:
            found.append(Violation(
                "ORT-SCHEMA-005",
                f"Type Error: Type parameter (TG) of Optype ({_GDN}) bound to different types "
                f"(tensor({_onnx_type(a)}) and tensor({_onnx_type(b)}) in node ({node_label(node)}).",
                node=node_label(node),
            ))  # fmt: skip
    return found


def _onnx_type(dtype: ir.DataType) -> str:
    """The type name in ORT's ``tensor(<name>)`` texts."""
    names = {ir.DataType.FLOAT: "float", ir.DataType.FLOAT16: "float16", ir.DataType.BFLOAT16: "bfloat16",
             ir.DataType.DOUBLE: "double"}  # fmt: skip
    return names.get(dtype, dtype.name.lower())


def _check_new_attributes(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for _graph, node in _ms_nodes(model):
        for name in NEW_ATTRIBUTES_132.get(node.op_type, ()):
            if name in node.attributes:
                found.append(Violation("ORT-SCHEMA-003", f"Unrecognized attribute: {name} for operator {node.op_type}",
                                       node=node_label(node)))  # fmt: skip
                break
    return found


def _check_arity(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for _graph, node in _ms_nodes(model):
        bounds = ARITY_131.get(node.op_type)
        if bounds is None:
            continue
        lo_in, hi_in, lo_out, hi_out = bounds
        prefix = f"Node({node_label(node)}) with schema(com.microsoft::{node.op_type}:1) has"
        if not lo_in <= len(node.inputs) <= hi_in:
            found.append(Violation("ORT-SCHEMA-004", f"{prefix} input size {len(node.inputs)} not in range "
                                   f"[min={lo_in}, max={hi_in}]", node=node_label(node)))  # fmt: skip
        elif not lo_out <= len(node.outputs) <= hi_out:
            found.append(Violation("ORT-SCHEMA-004", f"{prefix} output size {len(node.outputs)} not in range "
                                   f"[min={lo_out}, max={hi_out}]", node=node_label(node)))  # fmt: skip
    return found


_SRC = "ort-cpu-capabilities.md §7; 1.31.1 vs 1.32.0 get_all_operator_schema()"
RULES: tuple[Rule, ...] = (
    Rule("ORT-SCHEMA-002", "onnxruntime 1.31.1: GatedDeltaNet decay/beta must be float (TS)", _SRC,
         "cpu-session", "graph", _check_gdn_decay_beta, _UNTIL_132),
    Rule("ORT-SCHEMA-005", "GatedDeltaNet decay and beta have one type (TG, 1.32.0)", "probed 1.32.0 CPU",
         "cpu-session", "graph", _check_gdn_tg_binding, OrtVersions(since="1.32.0")),
    Rule("ORT-SCHEMA-003", "onnxruntime 1.31.1 does not know attributes 1.32.0 added", _SRC,
         "cpu-session", "graph", _check_new_attributes, _UNTIL_132),
    Rule("ORT-SCHEMA-004", "onnxruntime 1.31.1 allows fewer inputs/outputs on some ops", _SRC,
         "cpu-session", "graph", _check_arity, _UNTIL_132),
)  # fmt: skip


def check_ort_schema(model: Any, *, ort_version: str = "1.32.0") -> list[Violation]:
    """Every applicable version-difference rule for ``model``."""
    found: list[Violation] = []
    for rule in RULES:
        if rule.applies(ort_version):
            found.extend(rule.check(model, {}))
    return found
