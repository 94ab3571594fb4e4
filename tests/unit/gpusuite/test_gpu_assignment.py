"""Which nodes ran where (tests/gpu/q38gpu_assign.py, q38gpu_run.session / placement) on real sessions.

Invariants guarded (issue 41 items 1 and 5):
* a package session records ORT's EP assignment (session.record_ep_graph_assignment_info) and is
  created without session.disable_cpu_ep_fallback and with enable_fallback off;
* the shape subgraph (Shape -> Cast -> Squeeze feeding total_sequence_length, the attention mask's
  ReduceSum -> Sub -> Cast) is not a compute node; anything else on the CPU EP of a CUDA session is,
  and is named -- the dry run (CPU EP as the device) has none;
* a strict one-node probe still refuses a node its EP has no kernel for.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))
import q38gpu_assign as gassign
import q38gpu_env as genv
import q38gpu_run as grun


def _model() -> bytes:
    """x -> Shape -> Gather -> Cast (a shape chain) and x @ w (compute), with a small and a large initializer."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="dim", axis=0),
             helper.make_node("Cast", ["n"], ["n32"], name="cast", to=TensorProto.INT32),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 128]),
                               helper.make_tensor_value_info("n32", TensorProto.INT32, [])],
                              [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
                               helper.make_tensor("w", TensorProto.FLOAT, [128, 128], [0.0] * 128 * 128)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_the_shape_subgraph_is_what_computes_only_from_shapes() -> None:
    model = _model()
    assert gassign.shape_subgraph(model) == {"shape", "dim", "cast"}
    nodes = [gassign.Assigned(genv.CPU_EP, n, op, "") for n, op in
             [("shape", "Shape"), ("dim", "Gather"), ("cast", "Cast"), ("matmul", "MatMul"),
              ("ort_made_Unsqueeze", "Unsqueeze"), ("ort_made_fused", "FusedMatMul")]]
    nodes.append(gassign.Assigned(genv.CUDA_EP, "elsewhere", "MatMul", ""))
    names = gassign.model_node_names(model)
    bad = gassign.cpu_compute_nodes(nodes, device_ep=genv.CUDA_EP, shape_nodes=gassign.shape_subgraph(model),
                                    model_nodes=names)
    assert bad == ["matmul (MatMul)", "ort_made_fused (FusedMatMul)"]
    assert gassign.cpu_compute_nodes(nodes, device_ep=genv.CPU_EP, shape_nodes=frozenset(), model_nodes=names) == []


def test_a_package_session_records_its_assignment(tiny_cpu_package: Path) -> None:
    model = grun.target_graph(tiny_cpu_package)
    sess = grun.session(ort, model, providers=grun.CPU_PROVIDERS)
    assert sess._enable_fallback is False  # the binding's CPU-retry switch (enable_fallback=0)
    placed = grun.placement(sess, model, ep=genv.CPU_EP)
    assert placed["recorded"] and set(placed["nodes_per_ep"]) == {genv.CPU_EP}
    assert placed["cpu_compute_nodes"] == []  # the device is the CPU EP (dry run): nothing fell back
    assert "/model/attn_mask/total_seq_len/Squeeze (Squeeze)" in placed["cpu_nodes"]
    # Judged as a CUDA session, the same assignment names its compute nodes but not the shape chain.
    as_cuda = grun.placement(sess, model, ep=genv.CUDA_EP)["cpu_compute_nodes"]
    assert "/model/layers.0/linear_attn/GatedDeltaNet (com.microsoft::GatedDeltaNet)" in as_cuda
    assert not any("total_seq_len" in n or "/attn_mask/" in n for n in as_cuda)


def test_strict_probes_still_refuse_a_node_without_a_kernel() -> None:
    status, why = genv.op_session(ort, "HyperConnectionLowRankMix", ep=genv.CPU_EP)
    assert status == genv.ABSENT and "NOT_IMPLEMENTED" in why


def test_the_real_error_is_named_with_its_cause() -> None:
    try:
        try:
            raise RuntimeError("libcublasLt.so.13: cannot open shared object file")
        except RuntimeError as inner:
            raise RuntimeError("Conflicting session configuration") from inner
    except RuntimeError as exc:
        text = grun.error_text(exc)
    assert text == ("RuntimeError: Conflicting session configuration <- caused by RuntimeError: "
                    "libcublasLt.so.13: cannot open shared object file")
