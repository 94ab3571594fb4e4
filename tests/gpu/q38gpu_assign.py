"""Which nodes ran where: ORT's own EP assignment of a package session, and the CPU nodes that matter.

Package sessions run without ``session.disable_cpu_ep_fallback``: the CUDA EP deliberately leaves
shape computations on the CPU EP (onnxruntime/core/framework/fallback_cpu_capability.h: the
Shape -> Gather -> Cast -> Squeeze chains that feed CPU inputs such as GroupQueryAttention's
``total_sequence_length`` or Reshape's shape), and the strict flag refuses the whole session for
them without naming a node. Instead every device session records ORT's assignment
(``session.record_ep_graph_assignment_info=1``, read back with
``InferenceSession.get_provider_graph_assignment_info()``, in onnxruntime 1.31.1 and 1.32.0), the
figures carry the list, and a test fails naming the nodes when a compute node -- anything outside
the graph's shape subgraph -- lands on the CPU EP. One-node probes keep the strict flag.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

CPU_EP: Final = "CPUExecutionProvider"
RECORD_KEY: Final = "session.record_ep_graph_assignment_info"
# Ops of a shape computation, for nodes ORT made itself (fusions, memcpy) whose names are not in the
# model: on the CPU EP they are judged by op type alone.
SHAPE_OPS: Final = frozenset({
    "Shape", "Size", "Gather", "Cast", "Squeeze", "Unsqueeze", "Concat", "Slice", "ConstantOfShape", "Range",
    "Equal", "Where", "Expand", "Add", "Sub", "Mul", "Div", "Max", "Min", "ReduceSum", "ReduceMax", "Identity",
    "Constant", "Less", "Greater", "Not", "And", "Or", "Reshape", "Neg", "Floor", "Ceil",
})
_INTEGER_INPUTS: Final = frozenset({6, 7, 9, 12, 13})  # int32, int64, bool, uint32, uint64 (TensorProto)
SMALL_INITIALIZER: Final = 100  # elements; ORT's kSmallInitializerThreshold


@dataclasses.dataclass(frozen=True)
class Assigned:
    """One node of ORT's assignment: the EP that runs it, its name, op type and domain."""

    ep: str
    name: str
    op: str
    domain: str

    def label(self) -> str:
        op = f"{self.domain}::{self.op}" if self.domain else self.op
        return f"{self.name or '(unnamed)'} ({op})"


def record_entries() -> dict[str, str]:
    """The session config entry that makes ORT keep its assignment."""
    return {RECORD_KEY: "1"}


def assignment(sess: Any) -> list[Assigned]:
    """ORT's assignment of ``sess`` (created with :func:`record_entries`); [] when the build cannot
    say (no ``get_provider_graph_assignment_info``)."""
    getter = getattr(sess, "get_provider_graph_assignment_info", None)
    if getter is None:
        return []
    out: list[Assigned] = []
    for subgraph in getter():
        for node in subgraph.get_nodes():
            out.append(Assigned(str(subgraph.ep_name), str(node.name), str(node.op_type), str(node.domain)))
    return out


def summary(nodes: Sequence[Assigned]) -> dict[str, Any]:
    """The figures' form: node counts per EP and the CPU EP's nodes by name and op."""
    per_ep: dict[str, int] = {}
    for n in nodes:
        per_ep[n.ep] = per_ep.get(n.ep, 0) + 1
    return {"nodes_per_ep": dict(sorted(per_ep.items())),
            "cpu_nodes": [n.label() for n in nodes if n.ep == CPU_EP]}


def shape_subgraph(model: Path | Any) -> frozenset[str]:
    """Names of the nodes of ``model`` (a path, read without weights, or a ModelProto) that compute
    only from shapes: every input is a Shape/Size output, a Constant, a small initializer, an
    integer graph input or the output of another such node (the nodes ORT's fallback_cpu_capability
    prefers on the CPU). Subgraphs of control-flow nodes are not entered."""
    import onnx

    proto = onnx.load(os.fspath(model), load_external_data=False) if isinstance(model, (str, Path)) else model
    graph = proto.graph
    shaped: set[str] = {""}
    for init in graph.initializer:
        size = 1
        for d in init.dims:
            size *= d
        if size <= SMALL_INITIALIZER:
            shaped.add(init.name)
    for inp in graph.input:
        if inp.type.tensor_type.elem_type in _INTEGER_INPUTS:
            shaped.add(inp.name)
    names: set[str] = set()
    for node in graph.node:
        if node.op_type in {"Shape", "Size", "Constant"} or all(i in shaped for i in node.input):
            names.add(node.name)
            shaped.update(node.output)
    return frozenset(names)


def cpu_compute_nodes(nodes: Iterable[Assigned], *, device_ep: str, shape_nodes: frozenset[str],
                      model_nodes: frozenset[str]) -> list[str]:
    """The CPU-EP nodes of a ``device_ep`` session that are not shape computation (empty when the
    device EP is the CPU EP itself, as in the dry run). A node named in the model is judged by
    :func:`shape_subgraph`; one ORT made is judged by its op type (:data:`SHAPE_OPS`)."""
    if device_ep == CPU_EP:
        return []
    bad = []
    for n in nodes:
        if n.ep != CPU_EP or n.op.startswith("Memcpy"):
            continue
        known = n.name in model_nodes
        if (known and n.name in shape_nodes) or (not known and not n.domain and n.op in SHAPE_OPS):
            continue
        bad.append(n.label())
    return bad


def model_node_names(model: Path | Any) -> frozenset[str]:
    """Every node name of the main graph of ``model`` (read without weights)."""
    import onnx

    proto = onnx.load(os.fspath(model), load_external_data=False) if isinstance(model, (str, Path)) else model
    return frozenset(n.name for n in proto.graph.node)
