"""The matching helpers a pass's guards read the graph with (q38/optimize/matching.py), on graphs in ONNX text.

Invariants guarded:
* a constant is read from an initializer or from any form of ``Constant`` node (a ``value`` tensor,
  ``value_int(s)``, ``value_float(s)``); a graph input is no constant, and ``const_ints`` refuses a
  float constant while ``const_scalar`` refuses more than one element;
* ``slice_args`` reads omitted ``axes`` as the leading axes and omitted ``steps`` as 1, as ONNX
  does, and answers None for a step other than 1, several axes or a dynamic bound;
* ``producer_of`` matches the op type and the domain: a ``com.microsoft`` op of the same name is no match;
* ``check_private`` declines an intermediate read outside the matched nodes (naming the reader), one
  that is a graph output, and one a subgraph captures;
* ``attr_int`` returns the default only when the attribute is not set.
"""

from __future__ import annotations

import onnx_ir as ir
import pytest

from q38.optimize.matching import (
    Decline,
    attr_int,
    check_private,
    const_array,
    const_ints,
    const_scalar,
    default_reader,
    producer_of,
    slice_args,
)

_CONSTANTS = """
<ir_version: 10, opset_import: ["" : 21]>
constants (float[4] x) => (float[4] y)
<int64[2] init_ints = {3, 4}, float[1] init_scale = {0.5}>
{
    tensor = Constant <value = float[2] {1.5, 2.5}> ()
    one_int = Constant <value_int = 7> ()
    some_ints = Constant <value_ints = [1, 2, 3]> ()
    one_float = Constant <value_float = 0.25> ()
    some_floats = Constant <value_floats = [0.5, 1.0]> ()
    y = Identity (x)
}
"""


def _values(model: ir.Model) -> dict[str, ir.Value]:
    graph = model.graph
    values = {v.name: v for v in graph.inputs if v.name}
    values.update(graph.initializers.items())
    values.update({v.name: v for node in graph for v in node.outputs if v.name})
    return values


@pytest.mark.parametrize(("name", "expected"), [
    ("init_ints", [3, 4]),
    ("init_scale", [0.5]),
    ("tensor", [1.5, 2.5]),
    ("one_int", [7]),
    ("some_ints", [1, 2, 3]),
    ("one_float", [0.25]),
    ("some_floats", [0.5, 1.0]),
])
def test_a_constant_is_read_from_an_initializer_or_any_form_of_constant_node(name: str, expected: list[float]) -> None:
    value = _values(ir.from_onnx_text(_CONSTANTS))[name]
    array = const_array(value, default_reader)
    assert array is not None and array.reshape(-1).tolist() == expected


def test_a_graph_input_is_no_constant_and_the_typed_readers_refuse_the_wrong_kind() -> None:
    values = _values(ir.from_onnx_text(_CONSTANTS))
    assert const_array(values["x"], default_reader) is None and const_array(None, default_reader) is None
    assert const_ints(values["some_ints"], default_reader) == [1, 2, 3]
    assert const_ints(values["some_floats"], default_reader) is None  # a float tensor is no index
    assert const_scalar(values["one_float"], default_reader) == 0.25
    assert const_scalar(values["init_ints"], default_reader) is None  # two elements


_SLICES = """
<ir_version: 10, opset_import: ["" : 21]>
slices (float[8, 6] x, int64[1] dyn) => (float[2, 6] a, float[2, 6] b, float[1, 6] c, float[2, 2] d, float[2, 6] e)
<int64[1] start = {1}, int64[1] stop = {3}, int64[1] axis0 = {0}, int64[1] two = {2},
 int64[2] starts2 = {1, 1}, int64[2] stops2 = {3, 3}, int64[2] axes2 = {0, 1}>
{
    a = Slice (x, start, stop)
    b = Slice (x, start, stop, axis0)
    c = Slice (x, start, stop, axis0, two)
    d = Slice (x, starts2, stops2, axes2)
    e = Slice (x, dyn, stop)
}
"""


def test_slice_args_reads_omitted_axes_and_steps_as_onnx_does_and_refuses_the_rest() -> None:
    model = ir.from_onnx_text(_SLICES)
    by_output = {node.outputs[0].name: node for node in model.graph}
    got = {name: slice_args(node, default_reader) for name, node in by_output.items()}
    assert got == {"a": (1, 3, 0), "b": (1, 3, 0), "c": None, "d": None, "e": None}


_PRODUCERS = """
<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
producers (float[2, 4] x, float[4] w) => (float[2, 4] y, float[2, 4] z, float[2, 4] t)
{
    n = SimplifiedLayerNormalization <axis = -1, epsilon = 0.001> (x, w)
    ["/other_norm"] m = com.microsoft.SimplifiedLayerNormalization (x, w)
    y = Tanh (n)
    z = Tanh (m)
    t = Relu (y)
}
"""


def test_producer_of_matches_the_op_type_in_its_domain_only() -> None:
    model = ir.from_onnx_text(_PRODUCERS)
    values = _values(model)
    std = producer_of(values["n"], "SimplifiedLayerNormalization")
    assert std is not None and std.domain == ""
    assert producer_of(values["m"], "SimplifiedLayerNormalization") is None
    assert producer_of(values["m"], "SimplifiedLayerNormalization", domain="com.microsoft") is not None
    assert producer_of(values["n"], "LayerNormalization", "RMSNormalization") is None
    assert producer_of(None, "Tanh") is None
    norm = values["n"].producer()
    assert norm is not None and attr_int(norm, "axis", 0) == -1 and attr_int(norm, "stash_type", 1) == 1
    assert attr_int(norm, "stash_type") is None


def test_check_private_declines_an_intermediate_read_outside_the_match_or_published() -> None:
    model = ir.from_onnx_text(_PRODUCERS)
    graph, values = model.graph, _values(model)
    norm, tanh_y = values["n"].producer(), values["y"].producer()
    assert norm is not None and tanh_y is not None
    # n is read only by Tanh(n): private to the pair.
    assert check_private([values["n"]], [norm, tanh_y], graph) is None
    # y is a graph output (and read by Relu): never private.
    assert check_private([values["y"]], [tanh_y], graph) == Decline("intermediate 'y' is a graph output")
    # x is read by both norms: the other one is named.
    outside = check_private([values["x"]], [norm], graph)
    assert outside == Decline("intermediate 'x' has another consumer (SimplifiedLayerNormalization '/other_norm')")


_CAPTURED = """
<ir_version: 10, opset_import: ["" : 21]>
captured (bool cond, float[2] x) => (float[2] y)
{
    h = Tanh (x)
    y = If (cond) <then_branch = then_g () => (float[2] t) { t = Relu (h) },
                   else_branch = else_g () => (float[2] e) { e = Identity (h) }>
}
"""


def test_check_private_declines_an_intermediate_a_subgraph_captures() -> None:
    model = ir.from_onnx_text(_CAPTURED)
    h = _values(model)["h"]
    producer = h.producer()
    assert producer is not None
    assert check_private([h], [producer], model.graph) == Decline("intermediate 'h' is captured by a subgraph")


def test_a_value_holding_a_tensor_outside_the_initializers_is_read_through_the_reader() -> None:
    """A value that carries a constant tensor without being an initializer (as a folding step
    may leave it) is a constant: its array is what the reader gives for it."""
    import numpy as np

    value = ir.Value(name="folded", const_value=ir.tensor(np.asarray([2.0], np.float32)))
    read: list[ir.Value] = []

    def reader(v: ir.Value) -> np.ndarray:
        read.append(v)
        return np.asarray([4.0], np.float32)

    assert const_scalar(value, reader) == 4.0
    assert read == [value]
