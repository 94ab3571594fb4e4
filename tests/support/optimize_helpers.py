"""Shared helpers: run one pass, count ops by (domain, op), run ORT (ORT_DISABLE_ALL) or the reference."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator
from support.optimize_reference_ops import REFERENCE_OPS

from q38.optimize import RewritePass


def apply(cls: type[RewritePass], proto: onnx.ModelProto, **kw: object) -> tuple[ir.Model, RewritePass]:
    model = ir.from_proto(proto)
    p = cls(**kw)  # type: ignore[arg-type]
    p(model)
    return model, p


def ops(model: ir.Model) -> dict[tuple[str, str], int]:
    return dict(collections.Counter((n.domain, n.op_type) for n in model.graph))


def reasons(p: RewritePass) -> list[str]:
    return [o.reason for o in p.outcomes if not o.applied]


def run_ort(model: onnx.ModelProto | ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    proto = ir.to_proto(model) if isinstance(model, ir.Model) else model
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def run_ref(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(ReferenceEvaluator(ir.to_proto(model), new_ops=REFERENCE_OPS).run(None, feeds))


def close(a: list[np.ndarray], b: list[np.ndarray], atol: float = 1e-2) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), atol=atol, rtol=1e-2)


def nth_node(proto: onnx.ModelProto, op: str, k: int = 0) -> onnx.NodeProto:
    """The ``k``-th node of type ``op`` in ``proto``'s main graph."""
    return [n for n in proto.graph.node if n.op_type == op][k]


def outcome_lines(p: object) -> list[str]:
    """What ``--explain`` prints for each of a pass's outcomes."""
    return [o.line() for o in p.outcomes]  # type: ignore[attr-defined]


def set_init(proto: onnx.ModelProto, name: str, arr: np.ndarray) -> None:
    """Replace the initializer ``name`` of ``proto`` by ``arr``."""
    init = next(t for t in proto.graph.initializer if t.name == name)
    init.CopyFrom(onnx.numpy_helper.from_array(arr, name))


def package_reader(path):  # type: ignore[no-untyped-def]
    """q38's own reader of the external data of the graph at ``path``."""
    from q38.package import read_tensor

    return lambda v: read_tensor(v, graph_path=path, root=path.parent)
