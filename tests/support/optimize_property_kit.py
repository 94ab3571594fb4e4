"""Helpers of the optimizer property tests: proto mutations, feeds, structure signatures, oracles.

* mutations act on an ``onnx.ModelProto`` built by ``support.optimize_graphs`` (extra consumer,
  graph output, If capture, constant -> graph input, initializer value edits, attribute edits);
* ``feeds_for`` draws inputs for every graph input from its declared type and shape;
* ``signature`` is the node/value structure a declining pass must leave unchanged;
* ``check_rewrite`` is the oracle: a pass either rewrites with numerical parity or declines with
  a reason and leaves the graph unchanged, and never produces an invalid graph.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from support.optimize_helpers import close
from support.optimize_reference_ops import REFERENCE_OPS

from q38._ops import MS_DOMAIN
from q38.optimize import RewritePass
from q38.optimize._common import check_topological
from q38.ort_kernels import cpu_kernels

F32 = np.float32
STATS = {"rewritten": 0, "parity": 0}  # how many rewrites were compared numerically (diagnostics)


# -- numpy references of the unfused hyper-connection ops (partially fused graphs run in numpy) ---
class BranchwiseRMSNorm(OpRun):
    op_domain = MS_DOMAIN

    def _run(self, x, scale=None, **_: Any):  # type: ignore[no-untyped-def]
        c = int(getattr(self, "num_branches", 0) or 0)
        eps = float(getattr(self, "epsilon", 1e-5) if getattr(self, "epsilon", None) is not None else 1e-5)
        xs = x.astype(F32).reshape(*x.shape[:-1], c, -1)
        inv = 1.0 / np.sqrt(np.mean(xs * xs, axis=-1, keepdims=True) + F32(eps))
        y = xs * inv
        if scale is not None:
            y = y * scale.astype(F32).reshape(-1, xs.shape[-1])  # (C*H), (C, H) or (H)
        return (y.reshape(x.shape).astype(x.dtype),)


class ScaledSiLU(OpRun):
    op_domain = MS_DOMAIN

    def _run(self, x, scale=None, **_: Any):  # type: ignore[no-untyped-def]
        t = x.dtype
        a = float(np.asarray(scale).reshape(-1)[0]) if scale is not None else float(getattr(self, "alpha", 1.0) or 1.0)
        z = (F32(a) * x.astype(F32)).astype(t).astype(F32)
        s = (1.0 / (1.0 + np.exp(-z))).astype(t).astype(F32)
        return ((z * s).astype(t),)


class HyperConnectionPreMix(OpRun):
    op_domain = MS_DOMAIN

    def _run(self, streams, pre_mix, **_: Any):  # type: ignore[no-untyped-def]
        c = int(self.num_branches)  # type: ignore[attr-defined]
        rs = float(getattr(self, "reduction_scale", 1.0) or 1.0)
        s = streams.astype(F32).reshape(*streams.shape[:-1], c, -1)
        g = pre_mix.astype(F32).reshape(*streams.shape[:-1], c, -1)
        return ((F32(rs) * np.sum(s * g, axis=-2)).astype(streams.dtype),)


ALL_REFERENCE_OPS = [*REFERENCE_OPS, BranchwiseRMSNorm, ScaledSiLU, HyperConnectionPreMix]


# -- mutations ----------------------------------------------------------------------------------------
def node_by_output(proto: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in proto.graph.node if name in n.output)


def _scalar_probe(value: str, out: str, tag: str) -> list[onnx.NodeProto]:
    """Nodes reading ``value`` into a float scalar ``out`` (a typed, fixed-rank graph output)."""
    red = f"{out}__sum"
    return [helper.make_node("ReduceSum", [value], [red], keepdims=0, name=f"{tag}/ReduceSum"),
            helper.make_node("Cast", [red], [out], to=onnx.TensorProto.FLOAT, name=f"{tag}/Cast")]


def extra_consumer(proto: onnx.ModelProto, value: str) -> None:
    """Another node (feeding a graph output) also reads ``value``."""
    out = f"{value}__extra"
    proto.graph.node.extend(_scalar_probe(value, out, f"extra/{value}"))
    proto.graph.output.append(helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, []))


def as_graph_output(proto: onnx.ModelProto, value: str, elem: int, rank: int) -> None:
    dims: list[str | int | None] = [f"{value}_d{i}" for i in range(rank)]
    proto.graph.output.append(helper.make_tensor_value_info(value, elem, dims))


def if_capture(proto: onnx.ModelProto, value: str) -> None:
    """An If (cond is a new bool input) whose branches read ``value`` from the enclosing graph."""
    inner = f"{value}__in"
    body = helper.make_graph(_scalar_probe(value, inner, f"if/{value}"), "b", [],
                             [helper.make_tensor_value_info(inner, onnx.TensorProto.FLOAT, [])])
    if not any(i.name == "cond" for i in proto.graph.input):
        proto.graph.input.append(helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []))
    proto.graph.node.append(helper.make_node("If", ["cond"], [f"{value}__cap"], name=f"if/{value}",
                                             then_branch=body, else_branch=body))
    proto.graph.output.append(helper.make_tensor_value_info(f"{value}__cap", onnx.TensorProto.FLOAT, []))


def to_input(proto: onnx.ModelProto, name: str) -> None:
    """Turn the initializer ``name`` into a graph input of the same type and shape."""
    init = next(t for t in proto.graph.initializer if t.name == name)
    proto.graph.initializer.remove(init)
    proto.graph.input.append(helper.make_tensor_value_info(name, init.data_type, list(init.dims)))


def set_init(proto: onnx.ModelProto, name: str, arr: np.ndarray) -> None:
    init = next(t for t in proto.graph.initializer if t.name == name)
    init.CopyFrom(numpy_helper.from_array(np.asarray(arr), name))


def set_attr(node: onnx.NodeProto, key: str, value: object) -> None:
    for a in list(node.attribute):
        if a.name == key:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(key, value))


# -- feeds, structure, validity ------------------------------------------------------------------------
def feeds_for(proto: onnx.ModelProto, dims: dict[str, int], seed: int, *, rows: int = 4) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    inits = {t.name for t in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in tt.shape.dim]
        dt = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dt == np.bool_:
            feeds[vi.name] = np.array(bool(r.integers(0, 2)))
        elif np.issubdtype(dt, np.integer):
            feeds[vi.name] = np.asarray(r.integers(0, rows, size=shape)).astype(dt)
        elif not shape:  # a scalar made an input (epsilon, gate divisor): keep it well-conditioned
            feeds[vi.name] = np.asarray(r.uniform(0.25, 1.0)).astype(dt)
        else:
            feeds[vi.name] = np.asarray(0.8 * r.standard_normal(shape)).astype(dt)
    return feeds


def signature(proto: onnx.ModelProto) -> tuple[object, ...]:
    g = proto.graph
    nodes = tuple(
        (n.domain, n.op_type, tuple(n.input), tuple(n.output),
         tuple(sorted((a.name, repr(helper.get_attribute_value(a)) if a.type != onnx.AttributeProto.GRAPH else "g")
                      for a in n.attribute))) for n in g.node
    )
    return (nodes, tuple(i.name for i in g.input), tuple(o.name for o in g.output),
            tuple(sorted(t.name for t in g.initializer)))


def _all_nodes(proto_graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    out = []
    for n in proto_graph.node:
        out.append(n)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out.extend(_all_nodes(a.g))
    return out


def cpu_runnable(proto: onnx.ModelProto) -> bool:
    kernels = cpu_kernels()
    return all(n.domain in ("", "ai.onnx") or (n.domain == MS_DOMAIN and kernels.has(n.op_type))
               for n in _all_nodes(proto.graph))


def session(proto: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run_or_none(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    """The unfused graph's outputs on ORT CPU, or None when a mutation made it unloadable/unrunnable."""
    if not cpu_runnable(proto):
        return None
    try:
        return list(session(proto).run(None, feeds))
    except Exception:  # a guard-breaking mutation may leave a model ORT rejects
        return None


def check_rewrite(
    proto: onnx.ModelProto, pass_cls: type[RewritePass], feeds: dict[str, np.ndarray], *,
    target: str = "cuda", atol: float = 1e-2, rtol: float = 1e-2,
) -> tuple[ir.Model, RewritePass]:
    """The property oracle (see the module docstring); returns the rewritten model and the pass."""
    onnx.checker.check_model(proto)  # the mutated input itself is a well-formed model
    before = signature(proto)
    model = ir.from_proto(copy.deepcopy(proto))
    p = pass_cls(target=target)  # type: ignore[arg-type]
    p(model)
    for o in p.outcomes:
        assert o.applied or o.reason.strip(), f"decline without a reason: {o}"
    assert p.count == sum(o.applied for o in p.outcomes)
    out = ir.to_proto(model)
    onnx.checker.check_model(out)
    assert check_topological(model.graph) is None
    if p.count == 0:
        assert signature(out) == before, "a declining pass changed the graph"
        return model, p
    expected = _run_or_none(proto, feeds)
    STATS["rewritten"] += 1
    STATS["parity"] += expected is not None
    if cpu_runnable(out):
        dst = session(out)  # must load whenever its ops all have CPU kernels
        if expected is not None:
            close(dst.run(None, feeds), expected, atol=atol)
    elif expected is not None:
        with np.errstate(all="ignore"), warnings.catch_warnings():  # inf/nan of a kept unfused part
            warnings.simplefilter("ignore", RuntimeWarning)
            ref = list(ReferenceEvaluator(out, new_ops=ALL_REFERENCE_OPS).run(None, feeds))
        for a, b in zip(ref, expected, strict=True):
            np.testing.assert_allclose(np.asarray(a, F32), np.asarray(b, F32), atol=atol, rtol=rtol)
    return model, p
