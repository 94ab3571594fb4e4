"""Multi-draft verify graphs and router_weights clearing as onnx-ir functional passes.

Invariants guarded:
- the passes return new models and never mutate their input (serialized bytes unchanged);
- model_sN has N-1 drafts: each chained draft is a copy of /mtp/0/ (same op sequence) plus an
  ArgMax (draft ids) and a Tile (hidden to hyper-connection streams), sharing draft 0's
  initializers (no new external tensors), and one more graph output mtp.{j}.logits;
- chained draft j consumes draft j-1's residual stream and the embedding of its argmax;
- refusals: no /mtp/0/ draft, rows outside 2..4.
"""

from __future__ import annotations

from pathlib import Path

import onnx_ir as ir
import pytest

from q38.errors import GraphError
from q38.offload.multidraft import MultiDraftPass, build_multidraft
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
