"""A graph builder with the public builder's hygiene.

Value_info for every value, shared Constant nodes, opset 22, producer ``onnxruntime-genai``.

The public builder (onnxruntime_genai/models/builders/base.py) declares a dtype and shape for every
value it makes (``make_value``), saves shape constants as ``Constant`` nodes named
``/model/constant_nodes/{DTYPE}/{value}`` whose one output ``/model/constants/{DTYPE}/{value}`` is
shared by every consumer, and saves every initializer externally (``size_threshold_bytes=0``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper

from q38 import _ops
from q38.synth.graph import AttrValue, GraphBuilder

__all__ = ["BUILDER_PRODUCER", "Dim", "Shape", "TypedGraph", "Value"]

BUILDER_PRODUCER = ("onnxruntime-genai", "0.18.0+q38-synth")
Dim = int | str
Shape = Sequence[Dim]

_CONST_TYPES: dict[str, tuple[int, type]] = {
    "INT64": (TensorProto.INT64, np.int64),
    "INT32": (TensorProto.INT32, np.int32),
    "FLOAT": (TensorProto.FLOAT, np.float32),
    "FLOAT16": (TensorProto.FLOAT16, np.float16),
    "BFLOAT16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
}


@dataclass(frozen=True)
class Value:
    """A value's declared element type and shape (what its value_info says)."""

    elem: int
    shape: tuple[Dim, ...]


def _fmt(value: object) -> str:
    """The builder's spelling of a constant: ``1``, ``[0, 0, 4, 16]``, ``2.0``."""
    return str(list(value)) if isinstance(value, (list, tuple)) else str(value)


@dataclass
class TypedGraph(GraphBuilder):
    """``GraphBuilder`` plus a declared type for every node output (written as value_info)."""

    values: dict[str, Value] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    _node_meta: dict[str, dict[str, str]] = field(default_factory=dict)

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        name: str,
        types: Sequence[tuple[int, Shape] | None],
        *,
        outputs: Sequence[str] | None = None,
        domain: str = "",
        **attrs: AttrValue,
    ) -> list[str]:
        """Add one node and record the declared type of each of its outputs; return the output names.

        ``types[k]`` is output k's (elem, shape); None marks an unused optional output, written as
        the empty name.
        """
        outs = list(outputs) if outputs is not None else [
            f"{name}/output_{k}" if t is not None else "" for k, t in enumerate(types)
        ]
        made = self.op(op_type, list(inputs), name, n_out=len(outs), outputs=outs, domain=domain, **attrs)
        for out, t in zip(made, types):
            if out and t is not None:
                self.values[out] = Value(t[0], tuple(t[1]))
        return made

    def node1(
        self, op_type: str, inputs: Sequence[str], name: str, elem: int, shape: Shape, *, domain: str = "",
        **attrs: AttrValue,
    ) -> str:
        """Add a one-output node whose output is declared (``elem``, ``shape``); return its name."""
        return self.node(op_type, inputs, name, [(elem, shape)], outputs=None, domain=domain, **attrs)[0]

    def annotate(self, node_name: str, key: str, value: str) -> None:
        """A metadata_props entry on one node (e.g. ``layer_ann=cpu_embedding``)."""
        self._node_meta.setdefault(node_name, {})[key] = value

    def constant(self, value: object, dtype: str = "INT64") -> str:
        """The shared ``/model/constants/{dtype}/{value}`` value (one Constant node per graph)."""
        out = f"/model/constants/{dtype}/{_fmt(value)}"
        name = out.replace("/constants/", "/constant_nodes/", 1)
        if out not in self.values:
            elem, np_type = _CONST_TYPES[dtype]
            arr: np.ndarray = np.asarray(value, dtype=np_type)
            self.op("Constant", [], name, outputs=[out],
                    value=onnx.numpy_helper.from_array(arr, out))  # fmt: skip
            self.values[out] = Value(elem, tuple(arr.shape))
        return out

    def value(self, name: str) -> Value:
        """The declared type of value ``name``; KeyError for a value no node or constant declared."""
        return self.values[name]

    def model(self) -> onnx.ModelProto:
        """The ModelProto in the public builder's form: value_info for every intermediate value.

        Node metadata from :meth:`annotate`, opset 22 plus the Microsoft opset for each custom
        domain, producer :data:`BUILDER_PRODUCER` and the graph's ``metadata`` as model props.
        """
        io = {v.name for v in (*self.inputs, *self.outputs)}
        inits = {t.name for t in self.initializers}
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, self.initializers,
            value_info=[
                helper.make_tensor_value_info(n, v.elem, list(v.shape))
                for n, v in self.values.items()
                if n not in io and n not in inits
            ],
        )  # fmt: skip
        for node in graph.node:
            for k, v in sorted(self._node_meta.get(node.name, {}).items()):
                entry = node.metadata_props.add()
                entry.key, entry.value = k, v
        opsets = [helper.make_opsetid(_ops.ONNX_DOMAIN, _ops.BUILDER_ONNX_OPSET)]
        opsets += [helper.make_opsetid(d, _ops.MS_OPSET) for d in sorted(self.domains)]
        m = helper.make_model(graph, opset_imports=opsets, ir_version=_ops.IR_VERSION)
        m.producer_name, m.producer_version = BUILDER_PRODUCER
        for k, v in sorted(self.metadata.items()):
            helper.set_model_props(m, {**{p.key: p.value for p in m.metadata_props}, k: v})
        return m
