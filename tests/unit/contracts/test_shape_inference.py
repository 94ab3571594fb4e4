"""contracts.shapes infers the shapes a real onnxruntime session infers, value by value.

Invariants guarded:
- On the synthetic cpu-variant graphs (target, prefill, head: no value_info at all) every node
  output's inferred shape equals the one a real CPU session reports for it (each value exposed as
  a graph output without a declared shape; ``session.get_outputs()``).
- On the real builder exports with their value_info stripped, no inferred shape is ever more
  precise than ORT's or contradicts it (a contract may only check what ORT checks); ops without
  a handler may stay unknown.
- Constant inputs are only inline initializers and Constant nodes (an initializer in an external
  data file fails the session, as onnx's ParseData refuses it; ORT's load-time resolve propagates no
  data: a Shape -> Slice -> Concat target leaves the dims unknown).
- A graph listed consumer-first (ORT sorts it) gets the shapes and the ORT-SHAPE-001 of its
  sorted self, as a real session does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from support.contracts_testkit import MS, ORT_VERSION, _model, _vi, graph_violations, ort_error

from contracts._graph import as_ir_model
from contracts.shapes import broadcast, shapes_of

_REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"


def _ort_shapes(path: Path) -> dict[str, list[object] | None] | None:
    """Every node output's shape as a real session infers it (None: the session cannot be made)."""
    model = onnx.load(path, load_external_data=False)
    existing = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for out in node.output:
            if out and out not in existing:
                info = onnx.ValueInfoProto()
                info.name = out
                model.graph.output.append(info)
                existing.add(out)
    probe = path.with_name("_shape_probe.onnx")
    onnx.save(model, probe)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(str(probe), options, providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime refuses or lacks a kernel: nothing to compare with
        return None
    finally:
        probe.unlink()
    return {o.name: o.shape for o in session.get_outputs()}


def _compare(path: Path) -> tuple[int, list[tuple[str, object, object]], list[tuple[str, object, object]]]:
    """(values compared, values where ours is less precise, values where ours is more or wrong)."""
    want = _ort_shapes(path)
    if want is None:
        pytest.skip(f"onnxruntime {ORT_VERSION} does not create a session of {path.name}")
    model = as_ir_model(onnx.load(path, load_external_data=False))
    shapes = shapes_of(model)
    less, worse, total = [], [], 0
    for node in model.graph.all_nodes():
        for out in node.outputs:
            if not out.name or out.name not in want:
                continue
            total += 1
            raw = want[out.name]
            theirs = None if raw is None else tuple(None if isinstance(d, str) and d.startswith("unk__") else d for d in raw)
            ours = shapes.shape(out)
            if ours == theirs:
                continue
            weaker = ours is None or (theirs is not None and len(ours) == len(theirs)
                                      and all(a == b or a is None for a, b in zip(ours, theirs, strict=True)))  # fmt: skip
            (less if weaker else worse).append((out.name, ours, theirs))
    return total, less, worse


@pytest.mark.parametrize("graph", ["model.onnx", "prefill.onnx", "head_r2.onnx"])
def test_every_synthetic_value_has_the_shape_onnxruntime_infers(graph: str, tiny_cpu_package: Path, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    total, less, worse = _compare(pkg / graph)
    assert total > 10
    assert (less, worse) == ([], [])


@pytest.mark.parametrize("export", ["int4-cpu", "int4-cpu-mtp"])
def test_real_exports_without_value_info_are_never_inferred_beyond_onnxruntime(export: str, tmp_path: Path) -> None:
    source = _REAL / export
    if not source.is_dir():
        pytest.skip(f"no real fixture {export}")
    pkg = tmp_path / export
    shutil.copytree(source, pkg)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".onnx"):
            model = onnx.load(pkg / name, load_external_data=False)
            del model.graph.value_info[:]
            onnx.save(model, pkg / name)
            total, less, worse = _compare(pkg / name)
            assert total > 20 and worse == [], worse
            assert len(less) < total // 4, less  # most values still get ORT's shape


def test_constant_inputs_are_only_initializers_and_constants() -> None:
    """A Shape -> Slice -> Concat target is data ORT's resolve does not propagate: rank only."""
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Slice", ["s", "a", "b"], ["p"]),
             oh.make_node("Concat", ["p", "c"], ["t"], axis=0), oh.make_node("Reshape", ["x", "t"], ["y"]),
             oh.make_node("Reshape", ["x", "k"], ["z"])]  # fmt: skip
    inits = [nh.from_array(np.array(v, np.int64), n) for n, v in (("a", [0]), ("b", [2]), ("c", [32]), ("k", [1, 3, 32]))]
    model = as_ir_model(_model(nodes, [_vi("x", TP.FLOAT, [1, 3, 4, 8])], [_vi("y", TP.FLOAT, None), _vi("z", TP.FLOAT, None)], inits, ms=False))
    shapes = shapes_of(model)
    y, z = model.graph.outputs
    assert shapes.shape(y) == (None, None, None)  # ORT: rank from the target's length, dims unknown
    assert shapes.shape(z) == (1, 3, 32)  # an initializer target is data ORT reads


@pytest.mark.parametrize("attr", ["value", "value_ints"])
def test_a_constant_nodes_data_is_read_whatever_attribute_holds_it(
    attr: str, tmp_path: Path
) -> None:
    target = [1, 3, 32]
    data = nh.from_array(np.array(target, np.int64)) if attr == "value" else target
    nodes = [
        oh.make_node("Constant", [], ["k"], **{attr: data}),
        oh.make_node("Reshape", ["x", "k"], ["y"]),
    ]
    proto = _model(nodes, [_vi("x", TP.FLOAT, [1, 3, 4, 8])], [_vi("y", TP.FLOAT, None)], ms=False)
    onnx.save(proto, tmp_path / "m.onnx")
    model = as_ir_model(proto)
    inferred = shapes_of(model).shape(model.graph.outputs[0])
    assert inferred == (1, 3, 32)
    found = _ort_shapes(tmp_path / "m.onnx")
    assert found is not None and found["y"] == list(inferred)


def test_a_range_over_float_constants_counts_the_float32_values(tmp_path: Path) -> None:
    """0.3f / 0.1f is just above 3 (0.1 in double is not): ORT's Range output has 4 elements."""
    nodes = [
        oh.make_node("Constant", [], ["a"], value_float=0.0),
        oh.make_node("Constant", [], ["b"], value_float=0.3),
        oh.make_node("Constant", [], ["c"], value_float=0.1),
        oh.make_node("Range", ["a", "b", "c"], ["y"]),
    ]
    proto = _model(nodes, [], [_vi("y", TP.FLOAT, None)], ms=False)
    onnx.save(proto, tmp_path / "m.onnx")
    model = as_ir_model(proto)
    inferred = shapes_of(model).shape(model.graph.outputs[0])
    found = _ort_shapes(tmp_path / "m.onnx")
    assert found is not None and found["y"] == list(inferred or ()) == [4]


def test_broadcasting_keeps_onnx_symbol_rules() -> None:
    assert broadcast(("b", 1, 8), (3, 7, 1)) == (3, 7, 8)
    assert broadcast(("b", 1, 8), ("c", 7, 1)) == (None, 7, 8)
    assert broadcast(("b", 1, 8), ("b", 7, 1)) == ("b", 7, 8)
    assert broadcast((None, 1), (1, 5)) == (None, 5)
    assert broadcast(None, (1,)) is None



@pytest.mark.parametrize(("op", "inputs"), [
    ("Reshape", {"s": [3, 2]}), ("Reshape", {"s": [-1, -1]}), ("Expand", {"s": [2, 3]}), ("Tile", {"s": [1, 2]}),
    ("Unsqueeze", {"s": [0]}), ("Slice", {"a": [0], "b": [1]}), ("ReduceSum", {"s": [1]}),
])  # fmt: skip
def test_an_external_initializer_is_no_data_for_inference(tmp_path: Path, op: str, inputs: dict[str, list[int]]) -> None:
    """onnx's inference (ParseData) never reads an external data file: a session of a graph whose
    Reshape target (Slice starts, axes, ...) lives in the data file fails, naming the first such
    tensor; the contract says so (ORT-SHAPE-001) on the graph as the package reader loads it."""
    from contracts.runner import check_graph
    from q38.package import load_graph

    blob, tensors = b"\0" * 16, []
    for name, values in inputs.items():
        data = np.array(values, np.int64)
        tensor = onnx.TensorProto(name=name, data_type=TP.INT64, dims=[len(values)], data_location=onnx.TensorProto.EXTERNAL)
        for key, value in (("location", "model.onnx.data"), ("offset", str(len(blob))), ("length", str(data.nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        blob += data.tobytes()
        tensors.append(tensor)
    (tmp_path / "model.onnx.data").write_bytes(blob)
    node = oh.make_node(op, ["x", *inputs], ["y"], name="n")
    path = tmp_path / "model.onnx"
    path.write_bytes(_model([node], [_vi("x", TP.FLOAT, [2, 3])], [onnx.ValueInfoProto(name="y")], tensors, ms=False).SerializeToString())
    with pytest.raises(Exception) as refused:  # onnxruntime raises several pybind exception types
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    first = next(iter(inputs))
    text = f"Node (n) Op ({op}) [ShapeInferenceError] Cannot parse data from external tensors. Please load external data into raw data for tensor: {first}"
    assert text in str(refused.value)
    violations = check_graph(load_graph(path, root=tmp_path), ort_version=ORT_VERSION)
    assert [(v.rule_id, v.node, v.message) for v in violations] == [("ORT-SHAPE-001", "n", text)]


@pytest.mark.parametrize("op", ["Reshape", "ConstantOfShape", "Expand"])
@pytest.mark.parametrize("length", [0, 3, 1024, 1025, 2**63 - 1])
def test_a_rank_from_a_shape_inputs_declared_length_is_built_as_onnxruntime_builds_it(
    op: str, length: int, tmp_path: Path
) -> None:
    """A non-constant shape input whose declared length is huge (an int64-max value_info dim) gives
    the same output rank as in a real session, never a crash: up to 1,024 dims the rank is the
    length (a length of 0: rank 0, a scalar); beyond that it is unknown (and the session still loads)."""
    if length > 1024 and ORT_VERSION < "1.32":  # measured on 1.31.1
        pytest.skip(f"onnxruntime {ORT_VERSION} has no 1,024-dim cap: it builds a rank-1025 shape, and a session "
                    "of an int64-max declared length kills the process (q38 mirrors 1.32.0's cap)")  # fmt: skip
    inputs = ["s"] if op == "ConstantOfShape" else ["x", "s"]
    graph = oh.make_graph(
        [oh.make_node("Shape", ["s_in"], ["s"], name="shape"), oh.make_node(op, inputs, ["y"], name="op")],
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3]), oh.make_tensor_value_info("s_in", TP.FLOAT, None)],
        [onnx.ValueInfoProto(name="y")],  # undeclared: the session reports the shape it inferred
        value_info=[oh.make_tensor_value_info("s", TP.INT64, [length])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    ort_shapes = _ort_shapes(path)
    assert ort_shapes is not None, "onnxruntime refused the model"
    ort_y = ort_shapes["y"]
    ir_model = as_ir_model(model)
    shapes = shapes_of(ir_model)
    ours = shapes.shape(next(v for v in ir_model.graph.outputs if v.name == "y"))
    assert shapes.problems == []
    if length <= 1024:
        assert ours is not None and len(ours) == (max(2, length) if op == "Expand" else length)
        assert ort_y is not None and len(ort_y) == len(ours)
    else:
        assert ours is None
        assert not ort_y  # onnxruntime reports no shape (unknown rank) either


def _chain(*, consumer_first: bool, w_rows: int) -> onnx.ModelProto:
    """x [2, 3] -> Transpose 'tr' -> Reshape 'rs' (to [1, 6]) -> Relu 'rl' -> MatMul 'mm' with a
    [w_rows, 4] weight, listed in graph order or consumer-first (ORT sorts the graph itself)."""
    chain = [oh.make_node("Transpose", ["x"], ["t"], name="tr"), oh.make_node("Reshape", ["t", "k"], ["r"], name="rs"),
             oh.make_node("Relu", ["r"], ["a"], name="rl"), oh.make_node("MatMul", ["a", "w"], ["y"], name="mm")]  # fmt: skip
    inits = [nh.from_array(np.array([1, 6], np.int64), "k"), nh.from_array(np.zeros((w_rows, 4), np.float32), "w")]
    nodes = chain[::-1] if consumer_first else chain
    return _model(nodes, [_vi("x", TP.FLOAT, [2, 3])], [onnx.ValueInfoProto(name="y")], inits, ms=False)


@pytest.mark.parametrize("consumer_first", [False, True], ids=["graph-order", "consumer-first"])
def test_a_graph_listed_consumer_first_is_inferred_as_onnxruntime_infers_it(consumer_first: bool, tmp_path: Path) -> None:
    """Nodes listed before their producers (a valid model: ORT sorts it) get every shape a real
    session infers, and a shape refused three nodes down the chain is the same ORT-SHAPE-001."""
    path = tmp_path / "model.onnx"
    onnx.save(_chain(consumer_first=consumer_first, w_rows=6), path)
    total, less, worse = _compare(path)
    assert total == 4 and (less, worse) == ([], [])
    model = as_ir_model(onnx.load(path))
    assert shapes_of(model).shape(model.graph.outputs[0]) == (1, 4)
    refused = _chain(consumer_first=consumer_first, w_rows=5)
    text = "Node (mm) Op (MatMul) [ShapeInferenceError] Incompatible dimensions for matrix multiplication"
    assert [(v.rule_id, v.node, v.message) for v in graph_violations(refused)] == [("ORT-SHAPE-001", "mm", text)]
    assert text in (ort_error(refused) or "")


def _if_model(then_n: int, else_n: int, node_n: int, *, nested: bool) -> onnx.ModelProto:
    """If(c) with ``then_n`` / ``else_n`` branch outputs and ``node_n`` node outputs (Identity of x);
    ``nested``: that If is the then-branch's only node of an outer, well-formed If."""
    def branch(n: int, tag: str) -> onnx.GraphProto:
        outs = [f"{tag}_o{i}" for i in range(n)]
        return oh.make_graph([oh.make_node("Identity", ["x"], [o]) for o in outs], tag, [],
                             [_vi(o, TP.FLOAT, [1]) for o in outs])  # fmt: skip

    inner = oh.make_node("If", ["c"], [f"y{i}" for i in range(node_n)], name="inner",
                         then_branch=branch(then_n, "t"), else_branch=branch(else_n, "e"))  # fmt: skip
    if nested:
        wrap = oh.make_graph([inner], "outer_then", [], [_vi("y0", TP.FLOAT, [1])])
        node = oh.make_node("If", ["c"], ["z"], name="outer", then_branch=wrap, else_branch=branch(1, "oe"))
        return _model([node], [_vi("c", TP.BOOL, []), _vi("x", TP.FLOAT, [1])], [_vi("z", TP.FLOAT, [1])], ms=False)
    outs = [_vi(f"y{i}", TP.FLOAT, [1]) for i in range(node_n)]
    return _model([inner], [_vi("c", TP.BOOL, []), _vi("x", TP.FLOAT, [1])], outs, ms=False)


_IF_COUNTS = [(1, 1, 1), (2, 2, 2), (2, 1, 1), (1, 2, 2), (1, 1, 2), (2, 2, 1)]


@pytest.mark.parametrize(("then_n", "else_n", "node_n", "nested"), [
    *[(*counts, False) for counts in _IF_COUNTS],
    *[(*counts, True) for counts in _IF_COUNTS if counts[2] == 1],  # the outer branch returns the inner If's one output
])  # fmt: skip
def test_an_if_whose_branches_and_node_disagree_on_outputs_is_refused_as_onnxruntime_refuses_it(
        then_n: int, else_n: int, node_n: int, nested: bool) -> None:  # fmt: skip
    """onnx's If inference, run by ORT while it resolves the graph: the branches must produce as many
    outputs as each other, then as many as the node has; the contract gives ORT's text (or nothing
    when the session is created), in the main graph and inside a branch alike."""
    model = _if_model(then_n, else_n, node_n, nested=nested)
    refused = ort_error(model)
    found = [(v.rule_id, v.node, v.message) for v in graph_violations(model)]
    if then_n == else_n == node_n:
        assert (refused, found) == (None, [])
        return
    detail = (f"then_branch and else_branch produce different number of outputs. {then_n} != {else_n}" if then_n != else_n
              else f"If node has {node_n} but subgraphs produce {then_n}")  # fmt: skip
    text = f"Node (inner) Op (If) [TypeInferenceError] {detail}"
    assert refused is not None and text in refused
    assert found == [("ORT-SHAPE-001", "inner", text)]


def test_a_symbolic_flattened_stream_width_leaves_the_hyper_connection_hidden_dim_unknown() -> None:
    """Flattened PreMix streams of a symbolic width (``w``): ORT infers (1, 3, ?) and creates the
    session; the contract infers the same and does not try to divide the symbol."""
    node = oh.make_node("HyperConnectionPreMix", ["s", "g"], ["y"], name="hc", domain=MS, num_branches=4)
    proto = _model([node], [_vi("s", TP.FLOAT, [1, 3, "w"]), _vi("g", TP.FLOAT, [1, 3, 4])], [_vi("y", TP.FLOAT, None)])
    assert ort_error(proto) is None
    assert graph_violations(proto) == []
    model = as_ir_model(proto)
    assert shapes_of(model).shape(model.graph.outputs[0]) == (1, 3, None)


@pytest.mark.parametrize(("rank", "axis"), [(2, -2), (2, -1), (3, -3), (3, -1), (4, -4), (2, 2), (2, 0)])
def test_flatten_takes_a_negative_axis_against_the_rank_as_onnx_does(rank: int, axis: int) -> None:
    """Flatten(x, axis) accepts axis in [-rank, rank] and adds rank to a negative one: axis -2 of a
    [3, 4] input is 0, so the output is [1, 12] and a Mul with a [1, 12] operand loads (it was taken
    against rank + 1, giving [3, 4], and refused: the expanded LayerNormalization node tests)."""
    dims = [3, 4, 2, 5][:rank]
    at = axis + rank if axis < 0 else axis
    out = [int(np.prod(dims[:at])), int(np.prod(dims[at:]))]
    nodes = [oh.make_node("Flatten", ["x"], ["f"], name="fl", axis=axis), oh.make_node("Mul", ["f", "w"], ["y"], name="mul")]
    proto = _model(nodes, [_vi("x", TP.FLOAT, dims), _vi("w", TP.FLOAT, out)], [_vi("y", TP.FLOAT, None)], ms=False)
    assert ort_error(proto) is None
    assert graph_violations(proto) == []
    model = as_ir_model(proto)
    assert shapes_of(model).shape(model.graph.outputs[0]) == tuple(out)


@pytest.mark.parametrize(("axis", "shown"), [(-3, -1), (3, 3)])
def test_a_flatten_axis_beyond_the_rank_is_refused_as_onnxruntime_refuses_it(axis: int, shown: int) -> None:
    """Out of [-rank, rank]: ORT's text names the axis after rank is added to a negative one."""
    node = oh.make_node("Flatten", ["x"], ["y"], name="fl", axis=axis)
    proto = _model([node], [_vi("x", TP.FLOAT, [3, 4])], [_vi("y", TP.FLOAT, None)], ms=False)
    text = f"Node (fl) Op (Flatten) [ShapeInferenceError] Invalid value({shown}) for attribute 'axis'"
    assert text in (ort_error(proto) or "")
    assert [(v.rule_id, v.message) for v in graph_violations(proto)] == [("ORT-SHAPE-001", text)]


@pytest.mark.parametrize(("total", "n", "sizes"), [(5, 4, [2, 2, 2, None]), (5, 3, [2, 2, 1]), (5, 2, [3, 2]), (8, 4, [2, 2, 2, 2])])
def test_split_into_num_outputs_uneven_chunks_loads_as_in_onnxruntime(total: int, n: int, sizes: list[int | None]) -> None:
    """Split(num_outputs=n) of a dim n does not divide: onnx's inference gives ceil(total / n) to each
    output but the last, which gets what is left (5 into 4: 2, 2, 2, -1) and never checks the sum;
    ORT loads such a graph (the expanded AffineGrid node tests split a [5] size into 4 in the branch
    they do not take), so the contract must not refuse it."""
    outs = [f"o{i}" for i in range(n)]
    node = oh.make_node("Split", ["x"], outs, name="sp", num_outputs=n)
    proto = _model([node], [_vi("x", TP.FLOAT, [total])], [_vi(o, TP.FLOAT, None) for o in outs], ms=False)
    assert ort_error(proto) is None  # even the -1 chunk: it fails only in Compute
    assert [v for v in graph_violations(proto) if v.rule_id == "ORT-SHAPE-001"] == []
    model = as_ir_model(proto)
    assert [shapes_of(model).shape(o) for o in model.graph.outputs] == [(s,) for s in sizes]


def _onnx_node_cases() -> list[tuple[str, bytes]]:
    """onnx's own node tests (``onnx.backend.test.case.node``, the installed onnx's): every model."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [(case.name, case.model.SerializeToString()) for case in collect_testcases() if case.model is not None]


@pytest.mark.slow
def test_no_standard_op_handler_refuses_what_onnx_strict_inference_accepts() -> None:
    """The differential of every standard-op handler against onnx's own inference (which ORT runs
    while it resolves a graph), on the installed onnx's whole node-test corpus (~1,900 models, their
    ``*_expanded`` function bodies included): a model onnx's strict shape inference accepts has no
    ORT-SHAPE-001 problem in q38 (zero false refusals)."""
    false_refusals, compared = [], 0
    for name, data in _onnx_node_cases():
        proto = onnx.load_from_string(data)
        try:
            onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
        except Exception:  # onnx refuses it: a miss at worst, never a false refusal
            continue
        compared += 1
        problems = shapes_of(as_ir_model(proto)).problems
        if problems:
            false_refusals.append((name, problems[0][1]))
    assert compared > 1500
    assert false_refusals == []


@pytest.mark.parametrize(("op", "axis", "text"), [
    ("LayerNormalization", 3, "Unexpected axis value (3) rank of first input is 3 in ."),
    ("LayerNormalization", -4, "Unexpected axis value (-1) rank of first input is 3 in ."),  # the axis + rank
    ("LayerNormalization", -3, None),
    ("SimplifiedLayerNormalization", 3, "axis 3 is not in valid range [-3,2]"),
    ("SimplifiedLayerNormalization", -3, None),
])  # fmt: skip
def test_a_layer_norm_axis_out_of_range_is_refused_as_onnxruntime_refuses_it(op: str, axis: int, text: str | None) -> None:
    """LayerNormalization (onnx's function inference) and ORT's SimplifiedLayerNormalization refuse an axis
    outside [-rank, rank) while resolving the graph, each with its own text (the ORT layer-norm op tests)."""
    node = oh.make_node(op, ["x", "g"], ["y"], name="ln", axis=axis)
    proto = _model([node], [_vi("x", TP.FLOAT, [2, 3, 8]), _vi("g", TP.FLOAT, [8])], [_vi("y", TP.FLOAT, None)], ms=False)
    found = [(v.rule_id, v.message) for v in graph_violations(proto)]
    if text is None:
        assert (ort_error(proto), found) == (None, [])
        return
    full = f"Node (ln) Op ({op}) [ShapeInferenceError] {text}"
    assert full in (ort_error(proto) or "")
    assert found == [("ORT-SHAPE-001", full)]
