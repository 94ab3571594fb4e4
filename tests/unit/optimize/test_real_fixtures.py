"""The passes on the real builder's packages (tests/fixtures/real, onnxruntime-genai 0.18.0's builder).

For every committed real graph and both targets: every anchor of every pass gets exactly one
outcome, counted from the graph itself (not from the pass); ``--target cpu`` adds no node the
installed ORT cannot run on CPU; and where ORT's CPU session runs the graph (the ``-e cpu``
exports), its outputs before and after optimize agree (ORT_DISABLE_ALL, same feeds). The fp16
exports carry ops with no CPU kernel (GatedDeltaNet, PagedAttention), so there the fused region
itself -- the shared expert, cut out of the real graph by ``onnx.utils.Extractor`` at the same
value names before and after -- is run on CPU and compared.

Package-level ``q38 optimize`` of these folders is the genai surface's package I/O (not here).
"""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from q38._ops import CAUSAL_CONV_WITH_STATE, M_ROTARY_EMBEDDING, MATMUL_NBITS, MS_DOMAIN
from q38.optimize import optimize_model
from q38.optimize._common import UNRECOGNISED_REASON
from q38.ort_kernels import cpu_kernels

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
GRAPHS = sorted(
    (fx.name, g.name) for fx in REAL.iterdir() if fx.is_dir() for g in fx.glob("*.onnx")
)
CPU_RUNNABLE = [(fx, g) for fx, g in GRAPHS if "-cpu" in fx]
FP16 = [(fx, g) for fx, g in GRAPHS if fx.startswith("fp16-")]
DIMS = {"batch_size": 1, "sequence_length": 5, "total_sequence_length": 5, "past_sequence_length": 0}


def _load(fixture: str, graph: str, tmp_path: Path) -> tuple[Path, ir.Model]:
    src = tmp_path / "src"
    shutil.copytree(REAL / fixture, src)  # the committed files are never opened for writing
    return src, ir.load(src / graph)


def _silu_gates(model: ir.Model) -> int:
    """Projections (MatMul / MatMulNBits) whose output feeds Mul(g, Sigmoid(g)): shared-expert gates."""
    count = 0
    for node in model.graph:
        if node.op_type not in ("MatMul", MATMUL_NBITS):
            continue
        g = node.outputs[0]
        sigs = [u.node for u in g.uses() if u.node.op_type == "Sigmoid"]
        if any(u.node.op_type == "Mul" and g in u.node.inputs for s in sigs for u in s.outputs[0].uses()):
            count += 1
    return count


def _expected_anchors(model: ir.Model) -> dict[str, int]:
    ops = collections.Counter((n.domain, n.op_type) for n in model.graph)
    heads = sum(1 for o in model.graph.outputs if o.name.split("/")[-1].endswith("logits"))
    return {
        "causal_conv_state": ops[(MS_DOMAIN, CAUSAL_CONV_WITH_STATE)],
        "rms_norm_rotary": ops[(MS_DOMAIN, M_ROTARY_EMBEDDING)],
        "shared_expert": _silu_gates(model),
        "fp8_head": heads,
        "hyper_connection": ops[(MS_DOMAIN, "HyperConnectionPreMix")],
    }


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("fixture,graph", GRAPHS)
def test_every_anchor_of_a_real_graph_gets_one_outcome(fixture: str, graph: str, target: str, tmp_path: Path) -> None:
    _, model = _load(fixture, graph, tmp_path)
    expected = _expected_anchors(model)
    kernels = cpu_kernels()
    missing_before = {(m.op, m.dtype) for m in kernels.missing(model.graph)}
    result = optimize_model(model, target=target)
    got = collections.Counter(o.pass_name for o in result.outcomes)
    assert {name: got[name] for name in expected} == expected
    assert not [o for o in result.outcomes if o.reason == UNRECOGNISED_REASON]
    # What each pass fused is what it says it fused, and int4 exports keep their quantized forms.
    assert sum(o.applied for o in result.outcomes if o.pass_name == "shared_expert") == result.rewrites["shared_expert"]
    if "int4" in fixture:
        assert result.rewrites == dict.fromkeys(result.rewrites, 0)
    else:  # fp16: every shared expert fuses; the FP8 head only where it has a kernel (cuda)
        assert result.rewrites["shared_expert"] == expected["shared_expert"] > 0
        assert result.rewrites["fp8_head"] == (1 if target == "cuda" else 0)
    if target == "cpu":
        assert {(m.op, m.dtype) for m in kernels.missing(model.graph)} <= missing_before


def _feeds(sess: ort.InferenceSession, seed: int = 0, scale: float = 0.5) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    types = {"tensor(int64)": np.int64, "tensor(float16)": np.float16, "tensor(float)": np.float32}
    feeds = {}
    for i in sess.get_inputs():
        shape = [DIMS.get(d, 16) if isinstance(d, str) else d for d in i.shape]
        if i.name == "input_ids":
            feeds[i.name] = r.integers(0, 500, shape).astype(np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.broadcast_to(np.arange(shape[-1], dtype=np.int64), shape).copy()
        elif i.type == "tensor(int64)":
            feeds[i.name] = np.ones(shape, np.int64)
        else:
            feeds[i.name] = (scale * r.standard_normal(shape)).astype(types[i.type])
    return feeds


def _session(path: Path | bytes) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path if isinstance(path, bytes) else str(path), so, providers=["CPUExecutionProvider"])


def _assert_same(names: list[str], want: list[np.ndarray], got: list[np.ndarray], tol: float) -> None:
    """Equal within ``tol`` relative to each output's own magnitude (tiny random weights give tiny values)."""
    for name, a, b in zip(names, want, got, strict=True):
        assert a.shape == b.shape, name
        a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert np.isfinite(a32).all() and np.abs(a32).max() > 0, name
        np.testing.assert_allclose(b32, a32, rtol=tol, atol=tol * float(np.abs(a32).max()), err_msg=name)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("fixture,graph", CPU_RUNNABLE)
def test_real_cpu_export_keeps_ort_cpu_parity_after_optimize(fixture: str, graph: str, target: str,
                                                              tmp_path: Path) -> None:
    src, model = _load(fixture, graph, tmp_path)
    optimize_model(model, target=target)
    out = tmp_path / "out"
    out.mkdir()
    ir.save(model, out / graph, external_data=f"{graph}.data")
    before, after = _session(src / graph), _session(out / graph)
    names = [o.name for o in before.get_outputs()]
    assert names == [o.name for o in after.get_outputs()]
    assert [(i.name, i.shape, i.type) for i in before.get_inputs()] == [
        (i.name, i.shape, i.type) for i in after.get_inputs()]
    for seed in (0, 1):
        feeds = _feeds(before, seed)
        _assert_same(names, before.run(None, feeds), after.run(None, feeds), 1e-4)


def _shared_expert_region(proto: onnx.ModelProto, gate: str) -> tuple[list[str], list[str]]:
    """Inputs / outputs of the shared expert whose gate MatMul is ``gate`` (names that survive the fusion)."""
    nodes = {n.name: n for n in proto.graph.node}
    h = nodes[gate].input[0]
    prefix = gate.rsplit("/", 3)[0]  # /model/layers.N
    down = nodes[f"{prefix}/mlp/down_proj/MatMul"].output[0]
    sg = nodes[f"{prefix}/shared_expert_gate/Sigmoid"].output[0]
    return [h], [down, sg]


@pytest.mark.parametrize("fixture,graph", FP16)
def test_real_fp16_shared_expert_fusion_keeps_ort_cpu_parity(fixture: str, graph: str, tmp_path: Path) -> None:
    src, model = _load(fixture, graph, tmp_path)
    original = onnx.load(str(src / graph))
    gates = [n.name for n in original.graph.node if n.op_type == "MatMul" and n.name.endswith("/mlp/gate_proj/MatMul")]
    assert gates
    result = optimize_model(model, target="cpu", passes=["shared_expert"])
    assert result.rewrites["shared_expert"] == len(gates)
    out = tmp_path / "out"
    out.mkdir()
    ir.save(model, out / graph, external_data=f"{graph}.data")
    fused = onnx.load(str(out / graph))  # weights read back into memory
    assert not [n for n in fused.graph.node if n.name in gates]  # each gate MatMul was fused away
    for gate in gates:
        inputs, outputs = _shared_expert_region(original, gate)
        cut_before = onnx.utils.Extractor(original).extract_model(inputs, outputs)
        cut_after = onnx.utils.Extractor(fused).extract_model(inputs, outputs)
        assert {n.op_type for n in cut_after.graph.node} >= {"Split"}
        a, b = _session(cut_before.SerializeToString()), _session(cut_after.SerializeToString())
        # Activations large enough that SiLU is far from x/2 (with the checkpoint's tiny weights,
        # silu(g)*u and silu(u)*g would agree to fp16 precision at unit scale).
        feeds = _feeds(a, seed=len(gate), scale=30.0)
        _assert_same(outputs, a.run(None, feeds), b.run(None, feeds), 1e-2)


@pytest.mark.parametrize("fixture", sorted({fx for fx, _ in CPU_RUNNABLE}))
def test_q38_optimize_of_a_real_cpu_package_keeps_every_graphs_ort_cpu_outputs(fixture: str, tmp_path: Path) -> None:
    """The package command (genai surface I/O): each graph of the output runs as its source does."""
    from q38.cli import main

    src = tmp_path / "src"
    shutil.copytree(REAL / fixture, src)
    out = tmp_path / "out"
    assert main(["optimize", str(src), str(out), "--target", "cpu"]) == 0
    for graph in sorted(p.name for p in src.glob("*.onnx")):
        before, after = _session(src / graph), _session(out / graph)
        names = [o.name for o in before.get_outputs()]
        assert names == [o.name for o in after.get_outputs()], graph
        feeds = _feeds(before, 2)
        _assert_same(names, before.run(None, feeds), after.run(None, feeds), 1e-4)
