"""Differential tests: ORT-KERNEL-001, a node no CPU kernel serves, against real CPU sessions.

Invariants guarded (on the installed onnxruntime, 1.32.0 or 1.31.1 by venv):
- A node whose op, since-version and bound types no CPU registration fits fails the session
  with NOT_IMPLEMENTED, and ORT-KERNEL-001 says so in ORT's words; a node one fits passes.
- An open-ended registration serves only its own start version (RoiAlign(22) has no kernel
  although RoiAlign [16, INT_MAX] is registered; RoiAlign at opset 16 has one).
- A type constraint binds its first existing argument, inputs then outputs: Cast's T2 is the
  output, so Cast to FLOAT4E2M1 finds no kernel, Cast to float16 does.
- A node without a kernel but with an onnx function body is judged as ORT inlines it
  (Bernoulli -> RandomUniformLike(22)); a body onnx will not give at the model's opset is not
  inlined (a bfloat16 Relu at opset 14 or 21 is reported as Relu(14)).
- A node with a float16 input reaches kernel creation (InsertCastTransformer) and fails there,
  in the session state's words.
- ``missing_cpu_kernels`` lists exactly the nodes ORT finds no kernel for, and ``runs_on_cpu``
  is false exactly then.
- A graph an earlier stage refuses (a schema error) gets that verdict only: the kernel lookup
  never runs.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import ORT_VERSION, assert_agrees, graph_violations, ort_error

from contracts.cpu_kernels import missing_cpu_kernels, runs_on_cpu


def _one(op: str, inputs: list[tuple[str, int]], output: int, opset: int = 21, **attrs: object) -> onnx.ModelProto:
    """One ``op`` node named ``n`` over typed graph inputs, one output ``y`` of type ``output``."""
    node = oh.make_node(op, [name for name, _ in inputs], ["y"], name="n", **attrs)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info(n, t, None) for n, t in inputs],
                          [oh.make_tensor_value_info("y", output, None)])  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def _roialign(opset: int) -> onnx.ModelProto:
    node = oh.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], name="n")
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TP.FLOAT, [1, 1, 4, 4]),
                                        oh.make_tensor_value_info("rois", TP.FLOAT, [1, 4]),
                                        oh.make_tensor_value_info("idx", TP.INT64, [1])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, None)])  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


_NAMED = "Could not find an implementation for {} node with name 'n'"
CASES: list[tuple[str, Callable[[], onnx.ModelProto], str | None]] = [
    ("Max int16", lambda: _one("Max", [("a", TP.INT16), ("b", TP.INT16)], TP.INT16), _NAMED.format("Max(13)")),
    ("Max int32", lambda: _one("Max", [("a", TP.INT32), ("b", TP.INT32)], TP.INT32), None),
    ("Pow float ^ uint32", lambda: _one("Pow", [("a", TP.FLOAT), ("b", TP.UINT32)], TP.FLOAT), _NAMED.format("Pow(15)")),
    ("Pow float ^ int32", lambda: _one("Pow", [("a", TP.FLOAT), ("b", TP.INT32)], TP.FLOAT), None),
    ("RoiAlign at opset 22", lambda: _roialign(22), _NAMED.format("RoiAlign(22)")),
    ("RoiAlign at opset 16", lambda: _roialign(16), None),
    ("Cast float to FLOAT4E2M1", lambda: _one("Cast", [("a", TP.FLOAT)], TP.FLOAT4E2M1, 25, to=TP.FLOAT4E2M1),
     _NAMED.format("Cast(25)")),
    ("Cast FLOAT4E2M1 to float", lambda: _one("Cast", [("a", TP.FLOAT4E2M1)], TP.FLOAT, 25, to=TP.FLOAT),
     _NAMED.format("Cast(25)")),
    ("Cast float to float16", lambda: _one("Cast", [("a", TP.FLOAT)], TP.FLOAT16, 25, to=TP.FLOAT16), None),
    ("Cast float16 to FLOAT4E2M1", lambda: _one("Cast", [("a", TP.FLOAT16)], TP.FLOAT4E2M1, 25, to=TP.FLOAT4E2M1),
     "Failed to find kernel for Cast(25) (node:'n' ep:'CPUExecutionProvider')."),
    ("Bernoulli (inlined)", lambda: _one("Bernoulli", [("a", TP.FLOAT)], TP.FLOAT, 22),
     "Could not find an implementation for RandomUniformLike(22) node with name ''"),
    ("Relu bfloat16 at opset 14 (no body)", lambda: _one("Relu", [("a", TP.BFLOAT16)], TP.BFLOAT16, 14), _NAMED.format("Relu(14)")),
    ("Relu bfloat16 at opset 21 (body's ops changed)", lambda: _one("Relu", [("a", TP.BFLOAT16)], TP.BFLOAT16, 21),
     _NAMED.format("Relu(14)")),
    ("Relu float16 (Casts inserted)", lambda: _one("Relu", [("a", TP.FLOAT16)], TP.FLOAT16, 21), None),
    ("Softplus bfloat16 (inlined, then Exp)", lambda: _one("Softplus", [("a", TP.BFLOAT16)], TP.BFLOAT16, 22), "ORT"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "build", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_node_no_cpu_kernel_serves_is_refused_in_onnxruntimes_words(case: str, build: Callable[[], onnx.ModelProto],
                                                                       message: str | None) -> None:  # fmt: skip
    model = build()
    violations = graph_violations(model)
    kernel = [v for v in violations if v.rule_id == "ORT-KERNEL-001"]
    error = ort_error(model)
    if message is None:
        assert kernel == [], kernel
        assert error is None, error
    else:
        assert len(kernel) == 1, violations
        assert error is not None and "NOT_IMPLEMENTED" in error, error
        if message != "ORT":
            assert kernel[0].message.startswith(message), kernel[0].message
        assert kernel[0].node == "n"
    missing = missing_cpu_kernels(model, ORT_VERSION)
    assert [n.name for n in missing] == ([] if message is None else ["n"])
    assert runs_on_cpu(model, ORT_VERSION) is (message is None)
    assert_agrees(violations, error, context=case)


def test_a_graph_refused_before_the_kernel_lookup_gets_only_that_verdict() -> None:
    """A schema error (an unknown attribute) beside a node without a kernel: ORT stops at the schema."""
    model = _one("Max", [("a", TP.INT16), ("b", TP.INT16)], TP.INT16)
    model.graph.node[0].attribute.append(oh.make_attribute("bogus", 1))
    violations = graph_violations(model)
    assert violations and all(not v.rule_id.startswith("ORT-KERNEL-") for v in violations), violations
    error = ort_error(model)
    assert error is not None and "NOT_IMPLEMENTED" not in error
    assert_agrees(violations, error, context="schema error and no kernel")
