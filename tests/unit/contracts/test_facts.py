"""contracts._facts: the facts the graph rules derive once per model.

Invariants guarded:
- Element types are a snapshot of the model as it was when first asked: a node added in place
  afterwards is not typed by the same facts (no re-derivation per query); :func:`forget` drops
  them, and the facts derived anew type it.
- A cycle (ORT refuses such a graph; ``q38 check`` reports it from the reader) is typed once, not
  followed round forever: the value fed back keeps its declared type, the rest is inferred.
"""

from __future__ import annotations

import signal
from types import FrameType

import onnx
import onnx_ir as ir
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import ORT_VERSION, _model, _vi

from contracts._facts import forget, model_facts
from contracts._graph import as_ir_model
from contracts.schema_registry import registry_for


def test_element_types_are_a_snapshot_until_forget() -> None:
    cast = oh.make_node("Cast", ["x"], ["c"], name="ca", to=TP.INT64)
    model = as_ir_model(_model([cast], [_vi("x", TP.FLOAT, [2])], [onnx.ValueInfoProto(name="c")], ms=False))
    registry = registry_for(ORT_VERSION)
    typing = model_facts(model).typing(registry)
    [c] = model.graph.outputs
    assert typing.elem_type(c) == ir.DataType.INT64
    half = ir.node("Cast", [c], attributes={"to": int(ir.DataType.FLOAT16)}, name="half")
    model.graph.append(half)
    assert typing.elem_type(half.outputs[0]) is None  # the edit is not part of the snapshot
    assert model_facts(model).typing(registry) is typing
    forget(model)
    fresh = model_facts(model).typing(registry)
    assert fresh is not typing
    assert (fresh.elem_type(c), fresh.elem_type(half.outputs[0])) == (ir.DataType.INT64, ir.DataType.FLOAT16)


def test_a_cycle_is_typed_once_and_keeps_its_declared_types() -> None:
    add = oh.make_node("Add", ["x", "b"], ["a"], name="ad")
    relu = oh.make_node("Relu", ["a"], ["b"], name="r")  # feeds the Add that feeds it
    proto = _model([add, relu], [_vi("x", TP.FLOAT, [2])], [onnx.ValueInfoProto(name="a")], ms=False)
    proto.graph.value_info.append(_vi("b", TP.FLOAT16, [2]))
    model = as_ir_model(proto)
    typing = model_facts(model).typing(registry_for(ORT_VERSION))
    assert all(typing.schema(node) is not None for node in model.graph)  # the schemas, loaded before the clock

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise TimeoutError

    [a] = model.graph.outputs
    b = next(iter(model.graph)).inputs[1]
    found = None
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        found = (typing.elem_type(a), typing.elem_type(b))
    except TimeoutError:
        pass  # reported below, outside the handler's traceback
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert found is not None, "typing a two-node cycle did not finish within 2 s"
    assert found == (ir.DataType.FLOAT, ir.DataType.FLOAT16)
