"""Multi-draft verify graphs and router_weights clearing as onnx-ir functional passes.

Invariants guarded:
- the passes return new models and never mutate their input (serialized bytes unchanged);
- model_sN has N-1 drafts: each chained draft is a copy of /mtp/0/ (same op sequence) plus an
  ArgMax (draft ids) and a Tile (hidden to hyper-connection streams), sharing draft 0's
  initializers (no new external tensors), and one more graph output mtp.{j}.logits;
- chained draft j consumes draft j-1's residual stream and the embedding of its argmax;
- refusals: no /mtp/0/ draft, rows outside 2..4;
- parity that can fail: model_s3 / model_s4 fed the same first tokens give model_s2's first rows
  of logits within 1e-3 of their magnitude, and a rolled first-layer weight fails that check.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import numpy_helper
from support.offload_synthpkg import (
    ParityError,
    cpu_session,
    dims_of,
    edit_graph,
    feeds_for,
    logits_of,
    logits_parity,
)
from syrupy.assertion import SnapshotAssertion

from q38.errors import GraphError
from q38.offload.build import emit_multidraft_graphs
from q38.offload.convert import convert_package
from q38.offload.multidraft import (
    MultiDraftPass,
    build_multidraft,
    find_draft,
    grow_multidraft,
    sequence_symbol,
    verify_graph,
)
from q38.offload.options import OffloadOptions
from q38.offload.router import ClearRouterWeightsPass
from q38.package import external_refs, open_package


@pytest.fixture(scope="module")
def target(tiny_cpu_package: Path) -> ir.Model:
    return open_package(tiny_cpu_package).load("target")


def _ops(model: ir.Model, prefix: str) -> list[str]:
    return [n.op_type for n in model.graph if (n.name or "").startswith(prefix)]


def test_clear_router_weights_pass_is_functional(target: ir.Model) -> None:
    before = ir.serde.serialize_model(target).SerializeToString()
    p = ClearRouterWeightsPass()
    result = p(target)
    assert result.model is not target and result.modified
    assert p.cleared == 9
    assert ir.serde.serialize_model(target).SerializeToString() == before
    assert all(len(n.inputs) == 7 for n in result.model.graph if n.op_type == "QMoE")
    assert len(result.model.graph) == len(target.graph) - 9  # the router Softmax nodes are gone


def test_chained_drafts(target: ir.Model) -> None:
    before = ir.serde.serialize_model(target).SerializeToString()
    prepared = ClearRouterWeightsPass()(target).model
    s4 = MultiDraftPass(4)(prepared).model
    assert ir.serde.serialize_model(target).SerializeToString() == before
    draft0 = _ops(s4, "/mtp/0/")
    for j in (1, 2):
        assert _ops(s4, f"/mtp/{j}/") == ["ArgMax", "Tile", *draft0]
    assert len(s4.graph) == len(prepared.graph) + 2 * (len(draft0) + 2)
    outs = [v.name for v in s4.graph.outputs]
    i = outs.index("mtp.0.logits")
    assert outs[i:i + 3] == ["mtp.0.logits", "mtp.1.logits", "mtp.2.logits"]
    assert len(outs) == len(prepared.graph.outputs) + 2
    assert {r.name for r in external_refs(s4)} == {r.name for r in external_refs(prepared)}
    nodes = {n.name: n for n in s4.graph}
    gather = nodes["/mtp/1/embed/Gather"]
    assert gather.inputs[1] is nodes["/mtp/1/ArgMax"].outputs[0]
    assert nodes["/mtp/1/ArgMax"].inputs[0] is nodes["/mtp/0/lm_head/MatMul"].outputs[0]
    tile = nodes["/mtp/2/Tile"] if "/mtp/2/Tile" in nodes else nodes["/mtp/2/streams/Tile"]
    assert tile.inputs[0] is nodes["/mtp/1/Add_2"].outputs[0]
    for j in (1, 2):
        qmoe = nodes[f"/mtp/{j}/moe/QMoE"]
        assert qmoe.inputs[2] is nodes["/mtp/0/moe/QMoE"].inputs[2]  # shared expert bank


def test_s2_is_the_prepared_target(target: ir.Model) -> None:
    prepared = ClearRouterWeightsPass()(target).model
    s2 = build_multidraft(prepared, 2, lineage="contrib")
    assert [n.name for n in s2.graph] == [n.name for n in prepared.graph]
    assert s2.metadata_props["q38.verify_rows"] == "2"


def test_refusals(target: ir.Model) -> None:
    with pytest.raises(GraphError, match=r"verify rows must be one of \(2, 3, 4\), got 5"):
        build_multidraft(target, 5, lineage="contrib")
    stripped = target.clone()
    stripped.graph.remove([n for n in stripped.graph if (n.name or "").startswith("/mtp/0/")], safe=False)
    with pytest.raises(GraphError, match=r"no MTP draft \(no node named /mtp/0/\.\.\.\)"):
        build_multidraft(stripped, 3, lineage="contrib")


S_GRAPHS = ("model_s2.onnx", "model_s3.onnx", "model_s4.onnx")


def _slot14(path: Path) -> int:
    nodes = onnx.load(path, load_external_data=False).graph.node
    return sum(1 for n in nodes if n.op_type == "QMoE" and len(n.input) > 14 and n.input[14])


def test_mrope_position_ids_keep_their_layout(tiny_cpu_package: Path, editable_copy: Callable[[Path], Path],
                                              tmp_path: Path) -> None:
    src = editable_copy(tiny_cpu_package)

    def mrope(model: onnx.ModelProto) -> None:
        pos = next(v for v in model.graph.input if v.name == "position_ids")
        dims = pos.type.tensor_type.shape.dim
        dims.insert(0, onnx.TensorShapeProto.Dimension(dim_value=3))

    edit_graph(src / "model.onnx", mrope)
    convert_package(src, tmp_path / "out", OffloadOptions(mode="auto"))
    for rows, name in zip((2, 3, 4), S_GRAPHS):
        model = onnx.load(tmp_path / "out" / name, load_external_data=False)
        inputs = {v.name: dims_of(v) for v in model.graph.input}
        outputs = {v.name: dims_of(v) for v in model.graph.output}
        assert inputs["position_ids"] == [3, "batch_size", rows]
        assert inputs["input_ids"] == ["batch_size", rows]
        assert inputs["attention_mask"] == ["batch_size", "total_sequence_length"]
        assert outputs["logits"] == ["batch_size", rows, 512]
        assert [outputs[f"mtp.{j}.logits"] for j in range(rows - 1)] == [["batch_size", rows, 512]] * (rows - 1)
        assert inputs["past.0.conv"] == ["batch_size", 128, 3]  # state shapes untouched


def test_router_weights_cleared_is_what_the_source_held(tiny_cpu_package: Path, tmp_path: Path) -> None:
    held = _slot14(tiny_cpu_package / "model.onnx") + _slot14(tiny_cpu_package / "prefill.onnx")
    assert held > 0
    out = tmp_path / "out"
    report = convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto"))
    manifest = json.loads((out / "package_manifest.json").read_text())
    assert report.router_weights_cleared == manifest["router_weights_cleared"] == held
    assert manifest["rewrites"]["router_weights_cleared"] == held
    assert manifest["rewrites"]["multidraft_graphs"] == 3
    for graph in (*S_GRAPHS, "model.onnx", "prefill.onnx"):
        assert _slot14(out / graph) == 0
    assert os.stat(out / "model.onnx").st_ino != os.stat(out / "model_s4.onnx").st_ino


# -- parity that can fail: a verify graph's first rows are the 2-row graph's ------------------------
# The target is causal (attention, the conv carry and the linear-attention state only look back),
# so model_s3.onnx / model_s4.onnx fed 3 / 4 tokens must give, for the first 2 rows, the logits
# (target and draft 0) that model_s2.onnx gives for those 2 tokens -- the chained drafts (rows of
# their own outputs mtp.1.logits ...) are added beside the shared computation and must not disturb
# it. logits_parity(first_rows=True) compares them within MULTIDRAFT_REL x max |s2 logits| (1e-3:
# the same kernels on the same values; only the row count differs). The self-test breaks the
# verify graph alone: a weight of the first decoder layer that both graphs read from the shared
# data file is given, in a copy of s3 / s4 only, its values rolled by one (an inline initializer
# replacing the external reference), and parity must fail.
MULTIDRAFT_REL = 1e-3


def _verify_logits(path: Path, entries: dict[str, str], rows: int) -> dict[str, np.ndarray]:
    session = cpu_session(path, entries)
    return logits_of(session, feeds_for(session, rows=rows, seed=11))  # the same seed: the first 2 tokens are the same


def _first_rows_fed_alike(rows: int) -> None:
    a = np.random.default_rng(11).integers(0, 512, size=(1, 2), dtype=np.int64)
    b = np.random.default_rng(11).integers(0, 512, size=(1, rows), dtype=np.int64)
    assert np.array_equal(a, b[:, :2])  # numpy draws a prefix: feeds_for's tokens agree row by row


def _want(out: Path, entries: dict[str, str]) -> dict[str, np.ndarray]:
    want = _verify_logits(out / "model_s2.onnx", entries, 2)
    assert {"logits", "mtp.0.logits"} <= set(want)
    for w in want.values():
        assert 0.1 < np.abs(w).max() < 1e3 and np.asarray(w, np.float64).std() > 1e-3
    return want


@pytest.mark.parametrize("rows", [3, 4])
def test_verify_graph_first_rows_match_s2(converted_auto: tuple[Path, dict[str, str]], rows: int) -> None:
    out, entries = converted_auto
    _first_rows_fed_alike(rows)
    got = _verify_logits(out / f"model_s{rows}.onnx", entries, rows)
    assert {f"mtp.{j}.logits" for j in range(rows - 1)} <= set(got)
    logits_parity(got, _want(out, entries), MULTIDRAFT_REL, first_rows=True)


@pytest.mark.parametrize("rows", [3, 4])
def test_verify_graph_with_a_rolled_weight_fails_parity(converted_auto: tuple[Path, dict[str, str]], tmp_path: Path,
                                                        rows: int) -> None:
    out, entries = converted_auto
    copy = tmp_path / "broken"
    shutil.copytree(out, copy, symlinks=True)
    path = copy / f"model_s{rows}.onnx"
    model = onnx.load(path, load_external_data=False)
    used = {i for n in model.graph.node if n.name.startswith("/model/layers.0/") for i in n.input}
    init = next(t for t in model.graph.initializer if t.name in used and t.data_type == onnx.TensorProto.FLOAT16
                and t.data_location == onnx.TensorProto.EXTERNAL and len(t.dims) == 2)
    arr = numpy_helper.to_array(init, base_dir=str(copy))
    init.CopyFrom(numpy_helper.from_array(np.roll(arr, 1, axis=-1), init.name))
    path.unlink()
    onnx.save(model, path)
    with pytest.raises(ParityError):
        logits_parity(_verify_logits(path, entries, rows), _want(out, entries), MULTIDRAFT_REL, first_rows=True)


def test_width_of_a_shapeless_value_is_the_k_of_the_matmul_it_feeds() -> None:
    from q38.offload.multidraft import _width

    hidden = ir.Value(name="hidden")  # no declared shape, no producer
    weight = ir.Value(name="w", shape=ir.Shape([16, 32]), type=ir.TensorType(ir.DataType.FLOAT))
    ir.Node("", "MatMul", [hidden, weight], name="/mtp/0/proj/MatMul", num_outputs=1)
    assert _width(hidden) == 16  # K of the [16, 32] weight, not its N
    identity = ir.Value(name="h0")
    ir.Node("", "Identity", [identity], name="keep", num_outputs=1).outputs[0].name = "h1"
    assert _width(identity) is None  # nothing declares a width


def _moved_outside_draft(target: ir.Model, node: str, to: str, domain: str = "") -> ir.Model:
    """A copy of ``target`` whose draft node ``node`` is renamed ``to`` (out of /mtp/0/), in ``domain``."""
    model = ir.serde.deserialize_model(ir.serde.serialize_model(target))
    moved = next(n for n in model.graph if n.name == node)
    moved.name = to
    moved.outputs[0].name = f"{to}/output_0"
    moved.domain = domain
    return model


def _with_embed_outside_draft(target: ir.Model, domain: str) -> ir.Model:
    """The draft's token-embedding Gather moved out of /mtp/0/ (a shared embedding), in ``domain``."""
    return _moved_outside_draft(target, "/mtp/0/embed/Gather", "/model/mtp_embed/Gather", domain)


def test_token_gather_outside_the_draft_is_cloned_per_draft_for_standard_domains(target: ir.Model) -> None:
    prepared = ClearRouterWeightsPass()(target).model
    for domain in ("", "ai.onnx"):  # "ai.onnx" is the default ONNX domain spelled out
        s3 = build_multidraft(_with_embed_outside_draft(prepared, domain), 3, lineage="contrib")
        nodes = {n.name: n for n in s3.graph}
        gather = nodes["/mtp/1/embed/Gather"]
        assert gather.inputs[1] is nodes["/mtp/1/ArgMax"].outputs[0]
        assert gather.inputs[0] is nodes["/model/mtp_embed/Gather"].inputs[0]  # one shared table


def test_gather_in_a_custom_domain_is_not_a_token_embedding(target: ir.Model) -> None:
    # ONNX domains are case-sensitive: "AI.ONNX" is a custom domain, so its Gather is an
    # unknown op feeding the draft, not the token embedding; the draft then has two inputs.
    prepared = ClearRouterWeightsPass()(target).model
    with pytest.raises(GraphError, match=r"must consume exactly one decoder hidden value, found .*"
                                         r"'/model/mtp_embed/Gather/output_0'"):
        build_multidraft(_with_embed_outside_draft(prepared, "AI.ONNX"), 3, lineage="contrib")


def test_build_multidraft_binds_the_sequence_symbol_to_the_rows(target: ir.Model) -> None:
    prepared = ClearRouterWeightsPass()(target).model
    s3 = build_multidraft(prepared, 3, lineage="contrib")
    inputs = {v.name: list(v.shape.dims) for v in s3.graph.inputs if v.shape is not None}
    outputs = {v.name: list(v.shape.dims) for v in s3.graph.outputs if v.shape is not None}
    assert [str(d) for d in inputs["input_ids"]] == ["batch_size", "3"]
    assert [str(d) for d in outputs["mtp.1.logits"]] == ["batch_size", "3", "512"]
    symbol, _, places = s3.metadata_props["q38.verify_dims"].partition("=")
    assert symbol == "sequence_length"
    assert "input_ids:1" in places.split(";")


def _ids_graph(shape: list[int | str | None] | None) -> ir.Graph:
    inputs = [] if shape is None else [ir.Value(name="input_ids", shape=ir.Shape(shape),
                                                type=ir.TensorType(ir.DataType.INT64))]
    return ir.Graph(inputs, [], nodes=[], name="g")


def test_sequence_symbol_refuses_a_packed_or_missing_input_ids(messages_snapshot: SnapshotAssertion) -> None:
    with pytest.raises(GraphError) as info:
        sequence_symbol(_ids_graph(["total_tokens"]), where="model.onnx")
    assert messages_snapshot == str(info.value)
    with pytest.raises(GraphError) as info:
        sequence_symbol(_ids_graph(None), where="model.onnx")
    assert messages_snapshot == str(info.value)
    assert sequence_symbol(_ids_graph(["batch_size", "sequence_length"]), where="model.onnx") == "sequence_length"


def test_pre_norm_hidden_skips_an_add_of_a_constant_operand() -> None:
    from q38.offload.multidraft import _pre_norm_hidden

    x, y = ir.Value(name="x"), ir.Value(name="y")
    residual = ir.Node("", "Add", [x, y], name="/mtp/0/residual/Add", num_outputs=1)
    bias = ir.Value(name="bias", const_value=ir.tensor(np.zeros(4, dtype=np.float32)))  # folded, not an initializer
    biased = ir.Node("", "Add", [residual.outputs[0], bias], name="/mtp/0/bias/Add", num_outputs=1)
    weight = ir.Value(name="w", const_value=ir.tensor(np.zeros((4, 8), dtype=np.float32)))
    head = ir.Node("", "MatMul", [biased.outputs[0], weight], name="/mtp/0/head/MatMul", num_outputs=1)
    head.outputs[0].name = "mtp.0.logits"
    # the bias Add is not the residual stream: the Add of two data values before it is
    assert _pre_norm_hidden(head.outputs[0], {residual, biased, head}) is residual.outputs[0]


def _qmoe(x: ir.Value, router: ir.Value, name: str) -> ir.Node:
    inputs: list[ir.Value | None] = [x, *([None] * 13), router]
    return ir.Node("com.microsoft", "QMoE", inputs, name=name, num_outputs=1)


def test_clear_router_weights_removes_dead_producers_and_keeps_inputs_and_initializers() -> None:
    from q38.offload.router import clear_router_weights

    scores = ir.Value(name="scores", shape=ir.Shape([2, 8]), type=ir.TensorType(ir.DataType.FLOAT))
    cast = ir.Node("", "Cast", [scores], attributes=[ir.AttrInt64("to", 1)], name="/router/Cast", num_outputs=1)
    soft = ir.Node("", "Softmax", [cast.outputs[0]], name="/router/Softmax", num_outputs=1)
    fed = ir.Value(name="router_in", shape=ir.Shape([2, 8]), type=ir.TensorType(ir.DataType.FLOAT))
    init = ir.Value(name="router_init", const_value=ir.tensor(np.ones((2, 8), dtype=np.float32)))
    moes = [_qmoe(scores, soft.outputs[0], "/a/QMoE"), _qmoe(scores, fed, "/b/QMoE"), _qmoe(scores, init, "/c/QMoE")]
    graph = ir.Graph([scores, fed], [m.outputs[0] for m in moes], nodes=[cast, soft, *moes],
                     initializers=[init], opset_imports={"": 21, "com.microsoft": 1}, name="g")
    model = ir.Model(graph, ir_version=10)
    out, count = clear_router_weights(model)
    assert count == 3
    assert [n.name for n in out.graph] == ["/a/QMoE", "/b/QMoE", "/c/QMoE"]  # the Softmax chain is gone
    assert [len(n.inputs) for n in out.graph] == [1, 1, 1]
    assert [v.name for v in out.graph.inputs] == ["scores", "router_in"]
    assert list(out.graph.initializers) == ["router_init"]
    assert [n.name for n in model.graph] == ["/router/Cast", "/router/Softmax", "/a/QMoE", "/b/QMoE", "/c/QMoE"]


def test_a_gather_on_another_graph_input_outside_the_draft_is_not_a_token_embedding(target: ir.Model) -> None:
    """A shared rotary-cache Gather on position_ids feeding the draft is not re-fed with draft ids: it is
    a second decoder input, refused by name (only a Gather on input_ids is a token embedding)."""
    prepared = ClearRouterWeightsPass()(target).model
    moved = _moved_outside_draft(prepared, "/mtp/0/attn/q_norm/rotary/cos/Gather", "/model/mtp_rotary/cos/Gather")
    with pytest.raises(GraphError, match=r"model\.onnx: MTP draft /mtp/0/ must consume exactly one decoder hidden "
                                         r"value, found .*'/model/mtp_rotary/cos/Gather/output_0'"):
        build_multidraft(moved, 3, lineage="contrib")


def test_emit_multidraft_graphs_gives_the_three_verify_graphs_with_router_weights_cleared(target: ir.Model) -> None:
    """``q38 build --multidraft``'s hook returns model_s2/s3/s4 (2/3/4 verify rows) of the cleared target
    and the router_weights count, leaving the target untouched; without clearing they keep them."""
    before = ir.serde.serialize_model(target).SerializeToString()
    graphs, cleared = emit_multidraft_graphs(target, lineage="contrib")
    assert cleared == 9
    assert list(graphs) == ["model_s2.onnx", "model_s3.onnx", "model_s4.onnx"]
    for rows, model in zip((2, 3, 4), graphs.values()):
        assert model.metadata_props["q38.verify_rows"] == str(rows)
        assert [v.name for v in model.graph.outputs if (v.name or "").startswith("mtp.")] == [
            f"mtp.{j}.logits" for j in range(rows - 1)
        ]
        assert all(len(n.inputs) <= 14 for n in model.graph if n.op_type == "QMoE")
    assert ir.serde.serialize_model(target).SerializeToString() == before
    kept, none = emit_multidraft_graphs(target, lineage="contrib", clear_router=False)
    assert none == 0 and list(kept) == list(graphs)
    assert sum(1 for n in kept["model_s2.onnx"].graph if n.op_type == "QMoE" and len(n.inputs) > 14) == 9


def _mini_target(anchor_width: int, hidden_width: int) -> ir.Model:
    """A minimal single-draft target: the draft's residual Add has no declared shape (as after an
    optimizer's fusion), its width is the token embedding's; the lm_head is a MatMulNBits (no K to read)
    and the final LayerNormalization omits its optional Mean / InvStdDev outputs."""
    b, s = "batch_size", "sequence_length"

    def typed(value: ir.Value, dims: list[int | str], dtype: ir.DataType = ir.DataType.FLOAT) -> ir.Value:
        value.shape, value.type = ir.Shape(dims), ir.TensorType(dtype)
        return value

    def init(name: str, array: np.ndarray) -> ir.Value:
        return ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                        const_value=ir.tensor(array, name=name))

    ids = typed(ir.Value(name="input_ids"), [b, s], ir.DataType.INT64)
    x = typed(ir.Value(name="x"), [b, s, anchor_width])
    table = init("embed.weight", np.zeros((8, hidden_width), np.float32))
    proj = init("mtp.0.fc.weight", np.zeros((anchor_width, hidden_width), np.float32))
    gamma = init("mtp.0.norm.weight", np.ones(hidden_width, np.float32))
    head = init("lm_head.qweight", np.zeros((8, 1, 16), np.uint8))
    final = ir.Node("", "Identity", [x], name="/model/final/Identity", num_outputs=1)
    typed(final.outputs[0], [b, s, anchor_width]).name = "/model/final/output_0"
    embed = ir.Node("", "Gather", [table, ids], name="/mtp/0/embed/Gather", num_outputs=1)
    typed(embed.outputs[0], [b, s, hidden_width]).name = "/mtp/0/embed/output_0"
    fc = ir.Node("", "MatMul", [final.outputs[0], proj], name="/mtp/0/fc/MatMul", num_outputs=1)
    fc.outputs[0].name = "/mtp/0/fc/output_0"
    residual = ir.Node("", "Add", [fc.outputs[0], embed.outputs[0]], name="/mtp/0/Add", num_outputs=1)
    residual.outputs[0].name = "/mtp/0/Add/output_0"
    norm = ir.Node("", "LayerNormalization", [residual.outputs[0], gamma], name="/mtp/0/norm/LayerNormalization",
                   num_outputs=3)
    for value, name in zip(norm.outputs, ["/mtp/0/norm/output_0", "", ""]):
        value.name = name
    lm = ir.Node("com.microsoft", "MatMulNBits", [norm.outputs[0], head], name="/mtp/0/lm_head/MatMulNBits",
                 num_outputs=1)
    typed(lm.outputs[0], [b, s, 8]).name = "mtp.0.logits"
    graph = ir.Graph([ids, x], [lm.outputs[0]], nodes=[final, embed, fc, residual, norm, lm],
                     initializers=[table, proj, gamma, head], opset_imports={"": 21, "com.microsoft": 1}, name="mini")
    return ir.Model(graph, ir_version=10)


def test_a_draft_hidden_two_wide_is_read_from_its_residual_operand() -> None:
    """A shapeless draft hidden takes the width of its residual Add's declared operand, even when that is
    2 (only width-1 broadcast operands are skipped): a 4-wide decoder hidden is 2 streams of it."""
    draft = find_draft(_mini_target(4, 2).graph, lineage="contrib", where="model.onnx")
    assert draft.hidden_out.name == "/mtp/0/Add/output_0"
    assert draft.repeats == 2


def test_a_draft_hidden_that_does_not_tile_the_decoder_hidden_is_refused_naming_the_graph(messages_snapshot: SnapshotAssertion) -> None:
    """Widths that do not divide (decoder 3, draft 2) are refused before cloning, the message naming the
    graph (``where``) and both values with their widths."""
    with pytest.raises(GraphError) as info:
        build_multidraft(_mini_target(3, 2), 3, lineage="contrib", where="target/model.onnx")
    assert messages_snapshot == str(info.value)


def test_chained_drafts_of_a_node_with_omitted_optional_outputs_stay_valid_onnx() -> None:
    """Draft 0's omitted optional outputs (empty names) must not give each clone two outputs of one name:
    the written model_s4 passes the ONNX checker (single static assignment)."""
    s4 = build_multidraft(_mini_target(4, 2), 4, lineage="contrib")
    proto = ir.serde.serialize_model(s4)
    onnx.checker.check_model(proto)
    names = [o for n in proto.graph.node for o in n.output if o]
    assert len(names) == len(set(names))
    assert [n.output[0] for n in proto.graph.node if n.op_type == "LayerNormalization"] == [
        "/mtp/0/norm/output_0", "/mtp/1/norm/output_0", "/mtp/2/norm/output_0"
    ]
    # Each copy omits what draft 0 omits: no clone computes (and keeps) the Mean / InvStdDev outputs.
    assert [[o for o in n.output if o] for n in proto.graph.node if n.op_type == "LayerNormalization"] == [
        [f"/mtp/{j}/norm/output_0"] for j in range(3)
    ]


def test_the_stream_tile_repeats_of_a_chained_draft_is_a_named_tensor() -> None:
    """The Tile repeats initializer added per chained draft holds [1, 1, streams] in a tensor named as
    its value, so a caller reading the returned model's tensors (not only its serialization) finds it."""
    s3 = build_multidraft(_mini_target(4, 2), 3, lineage="contrib")
    repeats = s3.graph.initializers["/mtp/1/streams/Tile/repeats"].const_value
    assert repeats is not None
    assert repeats.name == "/mtp/1/streams/Tile/repeats"
    assert repeats.numpy().tolist() == [1, 1, 2]


def test_a_graph_emitted_before_verify_dims_is_rebound_to_new_rows() -> None:
    """A verify graph written before q38.verify_dims existed (only q38.verify_rows) gets its input_ids /
    position_ids rows restored to sequence_length, then bound to the new row count."""
    ids = ir.Value(name="input_ids", shape=ir.Shape(["batch_size", 2]), type=ir.TensorType(ir.DataType.INT64))
    pos = ir.Value(name="position_ids", shape=ir.Shape(["batch_size", 2]), type=ir.TensorType(ir.DataType.INT64))
    model = ir.Model(ir.Graph([ids, pos], [], nodes=[], name="g"), ir_version=10)
    model.metadata_props["q38.verify_rows"] = "2"
    verify_graph(model, 4, where="model_s2.onnx")
    assert {v.name: [str(d) for d in v.shape.dims] for v in model.graph.inputs if v.shape is not None} == {
        "input_ids": ["batch_size", "4"], "position_ids": ["batch_size", "4"]
    }
    assert model.metadata_props["q38.verify_rows"] == "4"
    assert model.metadata_props["q38.verify_dims"] == "sequence_length=input_ids:1;position_ids:1"


def test_sequence_symbol_refuses_a_fixed_or_unnamed_sequence_dim(messages_snapshot: SnapshotAssertion) -> None:
    """The last dim of input_ids must be a named symbol: a fixed size or an unnamed dim is a GraphError
    naming the graph and the dim (never a crash, never the symbol 'None')."""
    with pytest.raises(GraphError) as info:
        sequence_symbol(_ids_graph(["batch_size", 4]), where="model.onnx")
    assert messages_snapshot == str(info.value)
    with pytest.raises(GraphError, match=r"^model\.onnx: the sequence dim of input_ids is SymbolicDim\(None\), "):
        sequence_symbol(_ids_graph(["batch_size", None]), where="model.onnx")


def test_find_draft_reports_the_token_embedding_inside_the_draft(target: ir.Model) -> None:
    """find_draft's embed_gathers names draft 0's own Gather on input_ids (inside /mtp/0/), not only
    embeddings outside it: callers read from it which node embeds the draft's tokens."""
    draft = find_draft(target.graph, lineage="contrib", where="model.onnx")
    assert [n.name for n in draft.embed_gathers] == ["/mtp/0/embed/Gather"]


def test_a_graph_with_chained_drafts_is_refused_as_a_source(target: ir.Model, messages_snapshot: SnapshotAssertion) -> None:
    """An s3 graph (drafts /mtp/0/ and /mtp/1/, no /mtp/2/) is not chained again: building from it is a
    GraphError naming the graph, so a converted verify graph never gets drafts copied from a copy."""
    s3 = build_multidraft(ClearRouterWeightsPass()(target).model, 3, lineage="contrib")
    with pytest.raises(GraphError) as info:
        build_multidraft(s3, 4, lineage="contrib", where="model_s3.onnx")
    assert messages_snapshot == str(info.value)


def test_every_node_of_a_verify_graph_is_in_an_imported_domain(target: ir.Model) -> None:
    """The draft-id ArgMax added per chained draft is a standard ONNX op (domain ""): every node of the
    returned model names a domain its opset_imports declare, as ONNX requires of a graph."""
    s4 = build_multidraft(ClearRouterWeightsPass()(target).model, 4, lineage="contrib")
    argmaxes = [n for n in s4.graph if n.op_type == "ArgMax"]
    assert [n.name for n in argmaxes] == ["/mtp/1/ArgMax", "/mtp/2/ArgMax"]
    assert [n.domain for n in argmaxes] == ["", ""]
    assert {n.domain for n in s4.graph} <= set(s4.opset_imports)


def test_chained_draft_copies_keep_draft_zeros_node_opset_version() -> None:
    """A draft node pinned to an opset version (onnx-ir's node.version) keeps it in every copy, so a
    pass dispatching on it treats the chained drafts as it treats draft 0."""
    model = _mini_target(4, 2)
    norm = next(n for n in model.graph if n.name == "/mtp/0/norm/LayerNormalization")
    norm.version = 17
    s4 = build_multidraft(model, 4, lineage="contrib")
    assert {n.name: n.version for n in s4.graph if n.op_type == "LayerNormalization"} == {
        f"/mtp/{j}/norm/LayerNormalization": 17 for j in range(3)
    }


def test_a_draft_value_named_mtp_0_is_renamed_per_draft() -> None:
    """A draft 0 value named with an ``mtp.0`` token (``mtp.0.pre_norm``) is ``mtp.{j}.pre_norm`` in
    draft j (not ``mtp.0.pre_norm__d{j}``): each copy's names say which draft they belong to."""
    model = _mini_target(4, 2)
    residual = next(n for n in model.graph if n.name == "/mtp/0/Add")
    residual.outputs[0].name = "mtp.0.pre_norm"
    s4 = build_multidraft(model, 4, lineage="contrib")
    assert [n.outputs[0].name for n in s4.graph if n.op_type == "Add"] == [
        "mtp.0.pre_norm", "mtp.1.pre_norm", "mtp.2.pre_norm"
    ]


def test_a_verify_dims_record_naming_a_missing_or_shapeless_value_is_skipped() -> None:
    """A q38.verify_dims record naming a value the graph no longer has, or one with no shape, is skipped
    when the graph is rebound to new rows: the named input_ids is restored and rebound, no crash."""
    ids = ir.Value(name="input_ids", shape=ir.Shape(["batch_size", 2]), type=ir.TensorType(ir.DataType.INT64))
    bare = ir.Value(name="attention_mask", type=ir.TensorType(ir.DataType.INT64))  # no shape
    model = ir.Model(ir.Graph([ids, bare], [], nodes=[], name="g"), ir_version=10)
    model.metadata_props["q38.verify_rows"] = "2"
    model.metadata_props["q38.verify_dims"] = "sequence_length=input_ids:1;attention_mask:1;logits:1"
    verify_graph(model, 3, where="model_s2.onnx")
    assert ids.shape is not None and [str(d) for d in ids.shape.dims] == ["batch_size", "3"]
    assert bare.shape is None
    assert model.metadata_props["q38.verify_dims"] == "sequence_length=input_ids:1"


def test_a_draft_target_without_a_sequence_symbol_is_refused_naming_the_graph(messages_snapshot: SnapshotAssertion) -> None:
    """A target whose draft is found but whose input_ids has a fixed sequence dim is refused by
    build_multidraft with a GraphError naming the graph the caller gave (``where``), not 'None'."""
    model = _mini_target(4, 2)
    ids = next(v for v in model.graph.inputs if v.name == "input_ids")
    ids.shape = ir.Shape(["batch_size", 7])
    with pytest.raises(GraphError) as info:
        build_multidraft(model, 3, lineage="contrib", where="target/model.onnx")
    assert messages_snapshot == str(info.value)


def test_grow_multidraft_names_model_onnx_when_no_graph_is_given() -> None:
    """grow_multidraft's refusals name ``model.onnx`` (the target's file name) when the caller passes no
    ``where``: a draft that cannot be chained is reported against that file."""
    with pytest.raises(GraphError) as info:
        next(grow_multidraft(_mini_target(3, 2), lineage="contrib"))
    assert str(info.value).startswith("model.onnx: cannot chain MTP drafts: draft hidden '/mtp/0/Add/output_0'")


def test_emit_multidraft_graphs_refusals_name_the_graph_given() -> None:
    """``q38 build --multidraft``'s hook passes its ``where`` to every verify graph it builds: a draft that
    cannot be chained is refused naming that graph, not 'None'."""
    with pytest.raises(GraphError) as info:
        emit_multidraft_graphs(_mini_target(3, 2), lineage="contrib", clear_router=False, where="pkg/model.onnx")
    assert str(info.value).startswith("pkg/model.onnx: cannot chain MTP drafts: ")


def test_a_draft_hidden_behind_a_norm_without_its_optional_scale_is_chained() -> None:
    """A shapeless draft residual whose first operand comes from a shape-keeping op with an omitted
    optional input ('' in the ONNX node: a hyper-connection BranchwiseRMSNorm without a scale), ahead of a
    GatedRMSNorm final norm, still takes the embedding's width: the omitted input is skipped, never
    dereferenced, and the draft chains as 2 streams of the 4-wide decoder hidden."""
    model = _mini_target(4, 2)
    nodes = {n.name: n for n in model.graph}
    fc, residual, norm = nodes["/mtp/0/fc/MatMul"], nodes["/mtp/0/Add"], nodes["/mtp/0/norm/LayerNormalization"]
    streams = ir.Node("com.microsoft", "BranchwiseRMSNorm", [fc.outputs[0], None],
                      name="/mtp/0/streams/BranchwiseRMSNorm", num_outputs=1)
    streams.outputs[0].name = "/mtp/0/streams/output_0"
    model.graph.insert_after(fc, streams)
    residual.replace_input_with(0, streams.outputs[0])
    norm.op_type, norm.domain = "GatedRMSNorm", "com.microsoft"
    draft = find_draft(model.graph, lineage="contrib", where="model.onnx")
    assert (draft.hidden_out.name, draft.repeats) == ("/mtp/0/Add/output_0", 2)
    s3 = build_multidraft(model, 3, lineage="contrib")
    tile = next(n for n in s3.graph if n.name == "/mtp/1/streams/Tile")
    assert tile.inputs[0] is not None and tile.inputs[0].name == "/mtp/0/Add/output_0"
