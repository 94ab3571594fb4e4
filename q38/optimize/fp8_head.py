"""FP8 output-head quantization -> ``com.microsoft::MatMulBlockQuantizedFp8Weight``.

Matched subgraph (docs/synthetic-model.md, pattern 5)::

    logits = MatMul(n, W[H, V])          W a constant fp16/bf16 initializer, logits a graph output
    ──► logits = MatMulBlockQuantizedFp8Weight(n, Bq[V, H] fp8e4m3, b_scale fp32 [V, ceil(H/128)],
                                               block_size=128)

Existing fused FP8 projections are recognised: they are left alone, and reported with a reason
when their scales are not FP32 (the op requires FP32 ``b_scale``). The activation dtype comes
from the producer's type, or from the weight/output when an optimized producer left no shape or
type. A head output captured by a subgraph is refused before any weight is read.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import onnx_ir as ir

from q38._ops import MATMUL_FP8, MATMUL_NBITS, MS_DOMAIN
from q38.optimize._common import Produced, RewriteContext, RewritePass, copy_type, replace_value
from q38.optimize.matching import Decline, captured_by_subgraph

__all__ = ["BLOCK_SIZE", "QuantizeFp8HeadPass", "quantize_fp8_blockwise"]

BLOCK_SIZE = 128
_FP8_MAX = 448.0
_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def quantize_fp8_blockwise(w_kn: np.ndarray, block: int = BLOCK_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """[K, N] weight -> (B fp8e4m3 [N, K], b_scale fp32 [N, ceil(K/block)]), absmax per block."""
    b = np.ascontiguousarray(w_kn.astype(np.float32).T)
    n, k = b.shape
    nblocks = -(-k // block)
    padded = np.zeros((n, nblocks * block), np.float32)
    padded[:, :k] = b
    amax = np.abs(padded.reshape(n, nblocks, block)).max(axis=-1)
    scale = np.where(amax > 0, amax / _FP8_MAX, 1.0).astype(np.float32)
    q = (b / np.repeat(scale, block, axis=1)[:, :k]).astype(ml_dtypes.float8_e4m3fn)
    return q, scale


@dataclasses.dataclass
class _Match:
    node: ir.Node
    dtype: ir.DataType


class QuantizeFp8HeadPass(RewritePass[_Match]):
    """Quantize the head projection that produces a graph output to block-scaled FP8."""

    name = "fp8_head"
    contrib_op = MATMUL_FP8

    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        """Float MatMuls producing a graph output, and FP8 / NBits head projections (declined, with why)."""
        return [
            n for n in graph
            if (n.op_type == "MatMul" and n.domain == "" and n.outputs[0].is_graph_output())
            or (n.op_type == MATMUL_FP8 and n.domain == MS_DOMAIN)
            or (n.op_type == MATMUL_NBITS and n.domain == MS_DOMAIN and n.outputs[0].is_graph_output())
        ]

    def match(self, ctx: RewriteContext, node: ir.Node) -> _Match | Decline:
        """A logits projection: a constant static [H, V] weight, a float16/bfloat16 activation; else a Decline.

        Only outputs named ``*logits`` qualify: other head outputs (``next_embeds``) keep precision.
        """
        if node.op_type == MATMUL_NBITS:
            return Decline("head projection is already quantized (MatMulNBits); FP8 needs a float weight")
        if node.op_type == MATMUL_FP8:
            scale = node.inputs[2] if len(node.inputs) > 2 else None
            if scale is not None and scale.dtype not in (None, ir.DataType.FLOAT):
                return Decline(f"fused FP8 projection has {scale.dtype.name} scales, FP32 required; skipped")
            return Decline("already a fused FP8 projection")
        out = node.outputs[0]
        # Only the vocabulary projections (logits, mtp.N.logits) are FP8 candidates; other
        # projections that happen to produce a graph output (the head's next_embeds) keep precision.
        if "logits" not in (out.name or "").split("/")[-1]:
            return Decline(f"graph output {out.name!r} is not a logits projection")
        if captured_by_subgraph(out):
            return Decline(f"head output {out.name!r} is captured by a subgraph")
        a, w = node.inputs[0], node.inputs[1]
        if a is None or w is None or w.const_value is None or not w.is_initializer() or w.is_graph_input():
            return Decline("head weight is not a constant initializer")
        if w.shape is None or len(w.shape) != 2 or not all(isinstance(d, int) for d in w.shape):
            return Decline(f"head weight shape {w.shape} is not a static [H, V]")
        dtype = a.dtype or out.dtype or w.dtype  # producers rewritten earlier may carry no type
        if dtype not in _HALF:
            return Decline(f"activation dtype {getattr(dtype, 'name', None)} is not float16/bfloat16")
        if w.dtype not in (*_HALF, ir.DataType.FLOAT):
            return Decline(f"head weight dtype {w.dtype} cannot be quantized")
        if a.shape is not None and len(a.shape) > 0 and isinstance(a.shape[-1], int) and a.shape[-1] != w.shape[0]:
            return Decline(f"activation width {a.shape[-1]} != weight rows {w.shape[0]}")
        return _Match(node, dtype)

    def produces(self, match: _Match) -> tuple[Produced, ...]:
        """The fused FP8 MatMul, at the activation dtype (float16 / bfloat16)."""
        return (Produced(MATMUL_FP8, MS_DOMAIN, match.dtype),)

    def rewrite(self, ctx: RewriteContext, match: _Match) -> None:
        """Replace the MatMul by the FP8 op on a block-quantized weight and FP32 scales.

        The quantized weight is made once per source weight (cached), so heads reading one weight share it.
        """
        node = match.node
        w = node.inputs[1]
        assert w is not None
        key = ("fp8", id(w))
        if key not in ctx.cache:
            q, scale = quantize_fp8_blockwise(ctx.reader(w))
            qv = ctx.add_initializer(f"{w.name}.fp8", q, [w])
            sv = ctx.add_initializer(f"{w.name}.fp8_scale", scale, [w])
            ctx.cache[key] = qv
            ctx.cache[("fp8_scale", id(w))] = sv
        qv, sv = ctx.cache[key], ctx.cache[("fp8_scale", id(w))]
        new = ir.Node(
            MS_DOMAIN, MATMUL_FP8, [node.inputs[0], qv, sv], attributes=[ir.AttrInt64("block_size", BLOCK_SIZE)],
            name=ctx.node_name(f"{node.name or '/lm_head'}_fp8"),
        )
        out = node.outputs[0]
        new.outputs[0].name = ctx.value_name(f"{out.name}_fp8")
        copy_type(new.outputs[0], out)
        if new.outputs[0].dtype is None:
            new.outputs[0].type = ir.TensorType(match.dtype)
        ctx.insert([new], inputs=new.inputs, matched=[node])
        replace_value(out, new.outputs[0], ctx.graph)
        ctx.remove_dead([node])
