"""Every test of the FP8 head pass (q38/optimize/fp8_head.py): fusions with parity, each guard's
declines with their reasons, the regressions mutation testing and the property tests found,
its exporter forms and its parity self-test (tests/support/optimize_parity.py).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
from onnx import helper
from support.optimize_helpers import apply, close, ops, outcome_lines, reasons, run_ort, run_ref
from support.optimize_parity import (
    parity_tests,
)

from q38.optimize.fp8_head import QuantizeFp8HeadPass

MS = "com.microsoft"


# -- FP8 head ---------------------------------------------------------------------------------------
def _head(H: int = 200, V: int = 16, captured: bool = False) -> onnx.ModelProto:
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", H])
    w = g.init("lm_head.weight", (0.1 * G.rng(0).standard_normal((H, V))).astype(np.float16))
    g.op("MatMul", [n, w], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", V])
    if captured:
        body = helper.make_graph([helper.make_node("Identity", ["logits"], ["c"])], "b", [],
                                 [helper.make_tensor_value_info("c", G.F16, None)])
        g.inp("cond", onnx.TensorProto.BOOL, [])
        g.op("If", ["cond"], outs=["cap"], then_branch=body, else_branch=body)
        g.out("cap", G.F16, None)
    return g.model(ms=False)


# -- FP8 head: one quantized weight per source weight, a typed output --------------------------------
def _two_heads(same_weight: bool) -> onnx.ModelProto:
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 64])
    r = G.rng(5)
    w0 = g.init("lm_head.weight", (0.1 * r.standard_normal((64, 8))).astype(np.float16))
    w1 = w0 if same_weight else g.init("mtp.0.lm_head.weight", (0.1 * r.standard_normal((64, 8))).astype(np.float16))
    g.op("MatMul", [n, w0], outs=["logits"], name="/lm_head/MatMul")
    g.op("MatMul", [n, w1], outs=["mtp.0.logits"], name="/mtp/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 8])
    g.out("mtp.0.logits", G.F16, ["B", "S", 8])
    return g.model(ms=False)


def test_fp8_head_quantizes_with_fp32_block_scales() -> None:
    proto = _head()
    model, p = apply(QuantizeFp8HeadPass, proto)
    assert ops(model) == {(MS, "MatMulBlockQuantizedFp8Weight"): 1}
    node = next(iter(model.graph))
    assert node.inputs[1].dtype == ir.DataType.FLOAT8E4M3FN and node.inputs[1].shape == ir.Shape([16, 200])
    assert node.inputs[2].dtype == ir.DataType.FLOAT and node.inputs[2].shape == ir.Shape([16, 2])
    assert model.opset_imports[MS] == 1 and p.count == 1
    n = np.random.default_rng(6).standard_normal((1, 2, 200)).astype(np.float16)
    # FP8 (3 mantissa bits) against the fp16 original: a quantization-sized tolerance.
    close(run_ref(model, {"n": n}), run_ort(proto, {"n": n}), atol=0.15)



@pytest.mark.parametrize("shape,reason", [
    (["B", "S", 199], "activation width 199 != weight rows 200"),
    ([199], "activation width 199 != weight rows 200"),
    (["B", "S", "H"], None),
])
def test_fp8_head_activation_of_another_width_is_declined(shape: list[object], reason: str | None) -> None:
    """An activation whose declared last dimension (at any rank) is not the weight's row count
    cannot feed the head: declined with both numbers; a symbolic width is not provably wrong."""
    proto = _head()
    act = next(i for i in proto.graph.input if i.name == "n")
    act.CopyFrom(helper.make_tensor_value_info("n", G.F16, shape))
    _, p = apply(QuantizeFp8HeadPass, proto)
    assert reasons(p) == ([reason] if reason else [])
    assert p.count == (0 if reason else 1)

def test_fp8_head_refuses_captured_head_output() -> None:
    _, p = apply(QuantizeFp8HeadPass, _head(captured=True))
    assert reasons(p) == ["head output 'logits' is captured by a subgraph"]


def test_fp8_head_skips_fused_projection_with_non_fp32_scales() -> None:
    g = G.G()
    n = g.inp("n", G.F16, ["B", 128])
    b = g.init("b", np.zeros((4, 128), np.uint8))
    s = g.init("s", np.ones((4, 1), np.float16))
    g.op("MatMulBlockQuantizedFp8Weight", [n, b, s], outs=["logits"], domain=MS)
    g.out("logits", G.F16, None)
    _, p = apply(QuantizeFp8HeadPass, g.model())
    assert reasons(p) == ["fused FP8 projection has FLOAT16 scales, FP32 required; skipped"]


def test_fp8_head_handles_producer_without_shape() -> None:
    g = G.G()
    x = g.inp("x", G.F16, ["B", 128])
    n = g.o("Relu", [x])  # no value_info: the producer carries no type or shape
    g.op("MatMul", [n, g.init("w", np.ones((128, 8), np.float16))], outs=["logits"])
    g.out("logits", G.F16, None)
    model, p = apply(QuantizeFp8HeadPass, g.model())
    assert p.count == 1 and ops(model) == {("", "Relu"): 1, (MS, "MatMulBlockQuantizedFp8Weight"): 1}


def test_fp8_head_keeps_non_logits_projections_in_precision() -> None:
    g = G.G()
    n = g.inp("n", G.F16, ["B", 128])
    g.op("MatMul", [n, g.init("fold.proj.weight", np.ones((128, 8), np.float16))], outs=["next_embeds"])
    g.out("next_embeds", G.F16, ["B", 8])
    model, p = apply(QuantizeFp8HeadPass, g.model())
    assert p.count == 0 and ops(model) == {("", "MatMul"): 1}
    assert reasons(p) == ["graph output 'next_embeds' is not a logits projection"]


# -- FP8 head --------------------------------------------------------------------------------------------
def test_fp8_head_with_an_untyped_weight_behind_untyped_values_is_declined() -> None:
    """A graph built in onnx_ir may give an initializer a shape and no type (``ir.Value`` does not
    take the type from its tensor); with the activation behind an Identity and the output untyped
    nothing says the compute dtype: declined with that reason, never a crash."""
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 64])
    a = g.o("Identity", [n], name="/norm/Identity")
    w = g.init("lm_head.weight", np.ones((64, 8), np.float16))
    g.op("MatMul", [a, w], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 8])
    model = ir.from_proto(g.model(ms=False))
    model.graph.initializers[w].type = None
    model.graph.outputs[0].type = None
    p = QuantizeFp8HeadPass()
    p(model)
    assert outcome_lines(p) == ["fp8_head: /lm_head/MatMul: declined: activation dtype None is not float16/bfloat16"]
    assert [n.op_type for n in model.graph] == ["Identity", "MatMul"]
    assert list(model.graph.initializers) == [w]


@pytest.mark.parametrize("folded", [False, True])
def test_fp8_head_weight_from_a_constant_node_is_declined(folded: bool) -> None:
    """W from a Constant node is no initializer, even when onnx-ir knows its value (``folded``:
    ``const_value`` set on the node's output, as constant folding in onnx-ir/onnxscript leaves
    it): the pattern is W a constant initializer (the FP8 copies record it as their source), so it
    is declined and the graph left unchanged."""
    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 64])
    arr = (0.1 * G.rng(1).standard_normal((64, 8))).astype(np.float16)
    g.op("Constant", [], outs=["lm_head.weight"], name="/lm_head/Constant", value=onnx.numpy_helper.from_array(arr))
    g.op("MatMul", [n, "lm_head.weight"], outs=["logits"], name="/lm_head/MatMul")
    g.out("logits", G.F16, ["B", "S", 8])
    proto = g.model(ms=False)
    proto.graph.value_info.append(helper.make_tensor_value_info("lm_head.weight", G.F16, [64, 8]))
    model = ir.from_proto(proto)
    if folded:
        model.graph.node(0).outputs[0].const_value = ir.Tensor(arr, name="lm_head.weight")
    p = QuantizeFp8HeadPass()
    p(model)
    assert outcome_lines(p) == ["fp8_head: /lm_head/MatMul: declined: head weight is not a constant initializer"]
    assert [n.op_type for n in model.graph] == ["Constant", "MatMul"] and not model.graph.initializers


def test_fp8_head_matmul_with_an_omitted_activation_is_declined_without_a_crash() -> None:
    """A logits MatMul whose activation input is left empty (""): nothing to quantize against,
    declined with the weight guard's reason and the graph left as it was -- never a crash."""
    proto = _head()
    proto.graph.node[0].input[0] = ""
    model, p = apply(QuantizeFp8HeadPass, proto)
    assert outcome_lines(p) == ["fp8_head: /lm_head/MatMul: declined: head weight is not a constant initializer"]
    assert ops(model) == {("", "MatMul"): 1} and list(model.graph.initializers) == ["lm_head.weight"]


def test_fp8_head_is_chosen_by_the_last_component_of_the_output_name() -> None:
    """"logits" in a directory of the output name does not make a projection a vocabulary head."""
    from q38.optimize.fp8_head import QuantizeFp8HeadPass

    g = G.G()
    n = g.inp("n", G.F16, ["B", "S", 64])
    w = g.init("proj.weight", np.ones((64, 8), np.float16))
    g.op("MatMul", [n, w], outs=["logits/next_embeds"], name="/proj/MatMul")
    g.out("logits/next_embeds", G.F16, ["B", "S", 8])
    _, p = apply(QuantizeFp8HeadPass, g.model(ms=False))
    assert p.count == 0
    assert reasons(p) == ["graph output 'logits/next_embeds' is not a logits projection"]


@pytest.mark.parametrize("same_weight", [False, True])
def test_fp8_heads_quantize_each_source_weight_once_and_read_their_own(same_weight: bool) -> None:
    """Two vocabulary projections: with two weights each fused node reads its own FP8 copy (and
    keeps the parity of its own head); with one shared weight both read the one copy."""
    from q38.optimize.fp8_head import QuantizeFp8HeadPass

    proto = _two_heads(same_weight)
    model, p = apply(QuantizeFp8HeadPass, proto)
    assert p.count == 2
    fused = [n for n in model.graph if n.op_type == "MatMulBlockQuantizedFp8Weight"]
    read = [(n.inputs[1].name, n.inputs[2].name) for n in fused]
    if same_weight:
        assert read == [("lm_head.weight.fp8", "lm_head.weight.fp8_scale")] * 2
    else:
        assert read == [("lm_head.weight.fp8", "lm_head.weight.fp8_scale"),
                        ("mtp.0.lm_head.weight.fp8", "mtp.0.lm_head.weight.fp8_scale")]
    assert sorted(model.graph.initializers) == sorted({name for pair in read for name in pair})
    feeds = {"n": np.random.default_rng(2).standard_normal((1, 2, 64)).astype(np.float16)}
    close(run_ref(model, feeds), run_ort(proto, feeds), atol=0.05)


@pytest.mark.parametrize("weight_dtype", [np.float16, np.float32])
def test_fp8_head_output_declared_without_a_type_gets_the_activation_dtype(weight_dtype: type) -> None:
    """An untyped head output: the compute dtype is the activation's (float16), whatever the
    weight's (an fp32 weight is quantized too)."""
    import onnx_ir as ir

    from q38.optimize.fp8_head import QuantizeFp8HeadPass

    proto = _two_heads(same_weight=True)
    init = proto.graph.initializer[0]
    init.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init).astype(weight_dtype), init.name))
    model = ir.from_proto(proto)
    for out in model.graph.outputs:
        out.type = None
    p = QuantizeFp8HeadPass()
    p(model)
    assert p.count == 2
    assert [(o.name, o.dtype) for o in model.graph.outputs] == [
        ("logits", ir.DataType.FLOAT16), ("mtp.0.logits", ir.DataType.FLOAT16)]


def test_fp8_block_of_zeros_gets_scale_one_and_zero_codes() -> None:
    """An all-zero block (a pruned vocabulary row) has no absmax to divide by: its scale is 1 and
    its FP8 codes are zeros, never 0/0 NaNs; the other blocks scale by their absmax / 448."""
    import ml_dtypes

    from q38.optimize.fp8_head import BLOCK_SIZE, quantize_fp8_blockwise

    w = np.zeros((2 * BLOCK_SIZE, 3), np.float16)  # [K, N]: column 1 all zero
    w[:, 0] = 1.0
    w[BLOCK_SIZE:, 2] = -2.0
    q, scale = quantize_fp8_blockwise(w)
    assert q.dtype == ml_dtypes.float8_e4m3fn and q.shape == (3, 2 * BLOCK_SIZE)
    np.testing.assert_array_equal(scale, np.array([[1 / 448, 1 / 448], [1, 1], [1, 2 / 448]], np.float32))
    deq = q.astype(np.float32) * np.repeat(scale, BLOCK_SIZE, axis=1)
    assert not np.isnan(deq).any()
    np.testing.assert_allclose(deq, w.T.astype(np.float32), rtol=1e-6)


# -- parity that can fail (tests/support/optimize_parity.py) ---------------------------------------
test_real_rewrite_passes_parity, test_every_fused_weight_broken_fails_parity = parity_tests("fp8_head")
