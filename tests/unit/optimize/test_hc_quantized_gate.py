"""Hyper-connection anchors of a builder-form int4 graph are declined as already quantized (issue 27, item 3).

The public builder's ``-p int4`` export quantizes every dense projection whose reduction dim is
a multiple of the block (32) into ``com.microsoft::MatMulNBits`` (4 bits, zero point 8, scales
[N, K/32]); the research builder's int4 Qwen3.8 packages hold the hyper-connection gate as
``Sigmoid(MatMulNBits(...))``. Here the tiny ``--exporter builder`` cpu-variant decoder is
quantized the same way (real block-int4 bytes; ORT 1.32.0 creates a CPU session of it and its
logits stay close to the float graph's).

Invariants guarded:
- every ``HyperConnectionPreMix`` whose gate is ``Sigmoid(MatMulNBits(...))`` is declined with a
  reason naming MatMulNBits and saying the projection is already quantized (as the shared-expert
  and fp8-head passes say), not "is not Sigmoid(MatMul(...))";
- the float builder graph's anchors are not declined for that reason (the guard is specific).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from support.synth_builder import feeds_for, zero_state

from q38._ops import HC_PRE_MIX, MATMUL_NBITS, MS_DOMAIN
from q38.optimize import optimize_model
from q38.synth.qmoe import dequantize_int4, quantize_int4

BLOCK = 32
QUANTIZED = "PreMix gate projection is already quantized (MatMulNBits)"


def _int4_like_the_builder(model: onnx.ModelProto) -> int:
    """Replace each MatMul of a constant [K, N] weight (K % 32 == 0) by MatMulNBits, in place."""
    inits = {t.name: t for t in model.graph.initializer}
    count = 0
    for i, node in enumerate(model.graph.node):
        w = inits.get(node.input[1]) if node.op_type == "MatMul" and node.domain == "" else None
        if w is None or len(w.dims) != 2 or w.dims[0] % BLOCK:
            continue
        k, n = w.dims
        weight = numpy_helper.to_array(w)
        raw, scales = quantize_int4(weight.T.astype(np.float32), BLOCK)
        name = node.input[1]
        q = numpy_helper.from_array(raw.reshape(n, k // BLOCK, BLOCK // 2), name + "_Q4")
        s = numpy_helper.from_array(scales.astype(weight.dtype), name + "_scales")
        model.graph.initializer.extend([q, s])
        model.graph.node[i].CopyFrom(onnx.helper.make_node(
            MATMUL_NBITS, [node.input[0], q.name, s.name], list(node.output), name=node.name,
            domain=MS_DOMAIN, K=k, N=n, bits=4, block_size=BLOCK))  # fmt: skip
        count += 1
    used = {x for node in model.graph.node for x in node.input}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    return count


@pytest.fixture(scope="module")
def decoders(tiny_builder_cpu_package: Path) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(float decoder, its int4 quantization), all tensors inline."""
    fp = onnx.load(str(tiny_builder_cpu_package / "model.onnx"))
    q = onnx.ModelProto()
    q.CopyFrom(fp)
    assert _int4_like_the_builder(q) > 0
    return fp, q


def test_the_int4_decoder_is_a_real_graph_ort_runs_close_to_the_float_one(
    decoders: tuple[onnx.ModelProto, onnx.ModelProto],
) -> None:
    fp, q = decoders
    ops = {(n.domain, n.op_type) for n in q.graph.node}
    assert (MS_DOMAIN, MATMUL_NBITS) in ops and (MS_DOMAIN, HC_PRE_MIX) in ops
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    runs = []
    for model in (fp, q):
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        feeds = feeds_for(np.array([[1, 5, 9]]), 0, zero_state(sess))
        runs.append(sess.run(["logits"], feeds)[0].astype(np.float32))
    assert np.isfinite(runs[1]).all()
    assert np.abs(runs[1] - runs[0]).max() < 0.1 * max(1.0, float(np.abs(runs[0]).max()))


def test_quantize_int4_round_trips_within_half_a_step() -> None:
    w = np.random.default_rng(1).normal(size=(8, 64)).astype(np.float32)
    raw, scales = quantize_int4(w, BLOCK)
    back = dequantize_int4(raw, scales, BLOCK)
    step = np.repeat(scales.astype(np.float32), BLOCK, axis=1)
    assert (np.abs(back - w) <= step / 2 + 1e-3).all()


def test_a_premix_gate_of_matmulnbits_is_declined_as_already_quantized(
    decoders: tuple[onnx.ModelProto, onnx.ModelProto],
) -> None:
    _fp, q = decoders
    model = ir.from_proto(q)
    anchors = [n.name for n in model.graph if n.domain == MS_DOMAIN and n.op_type == HC_PRE_MIX]
    gated = [
        n.name for n in q.graph.node if n.op_type == HC_PRE_MIX
        and any(p.op_type == "Sigmoid" and p.output[0] == n.input[1] and any(
            m.op_type == MATMUL_NBITS and m.output[0] == p.input[0] for m in q.graph.node) for p in q.graph.node)
    ]  # fmt: skip
    assert gated and set(gated) <= set(anchors)
    result = optimize_model(model, passes=["hyper_connection"])
    outcomes = {o.anchor: o for o in result.outcomes if o.pass_name == "hyper_connection"}
    assert set(outcomes) == set(anchors)
    for name in gated:
        assert not outcomes[name].applied
        assert outcomes[name].reason.startswith(QUANTIZED), outcomes[name].line()
        assert "Sigmoid(MatMul(...))" not in outcomes[name].reason


def test_the_float_builder_graph_is_not_declined_as_quantized(
    decoders: tuple[onnx.ModelProto, onnx.ModelProto],
) -> None:
    fp, _q = decoders
    result = optimize_model(ir.from_proto(fp), passes=["hyper_connection"])
    reasons = [o.reason for o in result.outcomes if o.pass_name == "hyper_connection"]
    assert reasons and not any(r.startswith(QUANTIZED) for r in reasons)
