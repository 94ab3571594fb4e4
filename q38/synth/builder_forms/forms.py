"""The context every builder-form block is emitted in: graph, weights, dims, dtypes, switches."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from onnx import TensorProto

from q38.synth.builder_forms.typed import Shape, TypedGraph
from q38.synth.graph import AttrValue
from q38.synth.spec import Spec
from q38.synth.weights import Weights, cast_generated

__all__ = ["BF16", "FP16", "TOKENS", "B", "Forms", "IoType", "P", "S", "T"]

# The builder's symbolic dims.
B, S, T, P = "batch_size", "sequence_length", "total_sequence_length", "past_sequence_length"
TOKENS = "num_tokens"  # batch_size * sequence_length (flattened rows)
KV_DIM = "kv_cache_dim"  # last KV dim: head_size, or a compressed width for quantized caches


@dataclass(frozen=True)
class IoType:
    """Activation / weight dtype of a graph (the builder's ``io_dtype``)."""

    np_type: type
    elem: int
    const: str  # the dtype spelling in ``/model/constants/{const}/...``


FP16 = IoType(np.float16, TensorProto.FLOAT16, "FLOAT16")
BF16 = IoType(ml_dtypes.bfloat16, TensorProto.BFLOAT16, "BFLOAT16")


class Forms:
    """One graph under construction in the builder's forms.

    ``variant`` "faithful" emits the real QSA ops and external PLE state; "cpu" substitutes what
    ORT 1.32.0 CPU and onnxruntime-genai 0.18.0 run (docs/synthetic-model.md). ``prepacked`` writes
    ``weights_prepacked=1`` with CUTLASS SM80 expert bytes instead of omitting the attribute.
    """

    def __init__(
        self,
        g: TypedGraph,
        w: Weights,
        spec: Spec,
        *,
        io: IoType,
        variant: str,
        prepacked: bool,
        shared: Weights | None = None,
        linear_attn: str = "gated_delta_net",
    ) -> None:
        self.g, self.w, self.s, self.io = g, w, spec, io
        self.linear_attn = linear_attn  # "gated_delta_net" (Qwen3.8) or "linear_attention" (0.18.0 default)
        self.variant, self.prepacked = variant, prepacked
        self.shared = shared if shared is not None else w  # where shared tensors' bytes live
        self._mask: tuple[str, str] | None = None
        self._pos0: str | None = None
        self._rotary: tuple[str, str] | None = None

    @property
    def faithful(self) -> bool:
        """Whether the real QSA ops and external PLE state are emitted (else the cpu substitutes)."""
        return self.variant == "faithful"

    # -- weights -------------------------------------------------------------------------------
    def weight(self, name: str, shape: tuple[int, ...], scale: float = 0.05) -> str:
        """A normal-drawn weight in the io dtype (seeded by name, see :meth:`Weights.normal`)."""
        return self.w.normal(self.g, name, shape, scale=scale, dtype=self.io.np_type)

    def norm_weight(self, name: str, shape: tuple[int, ...]) -> str:
        """A norm weight near 1 in the io dtype."""
        return self.w.norm(self.g, name, shape, dtype=self.io.np_type)

    def zeros(self, name: str, shape: tuple[int, ...]) -> str:
        """An all-zero initializer in the io dtype (the QMoE biases the builder writes as zeros)."""
        return self.w.add(self.g, name, lambda: np.zeros(shape, self.io.np_type))

    # -- common nodes ----------------------------------------------------------------------------
    def c(self, value: object, dtype: str = "INT64") -> str:
        """The shared Constant output holding ``value`` (see :meth:`TypedGraph.constant`)."""
        return self.g.constant(value, dtype)

    def cf(self, value: float) -> str:
        """A scalar constant in the graph's io dtype."""
        return self.g.constant(value, self.io.const)

    def matmul(self, x: str, name: str, k: int, n: int, lead: Shape = (B, S), *,
               weights: Weights | None = None, wname: str | None = None) -> str:  # fmt: skip
        """``MatMul(x, W[k, n])`` named ``name``, with a fresh normal weight W in the io dtype.

        W is named ``{name[1:] with dots}.weight`` (the builder's rule) unless ``wname`` is given.
        """
        wn = wname or name[1:].replace("/", ".") + ".weight"
        src = weights if weights is not None else self.w
        w = src.normal(self.g, wn, (k, n), dtype=self.io.np_type)
        return self.g.node1("MatMul", [x, w], name, self.io.elem, [*lead, n])

    def act(self, op: str, x: str, name: str, shape: Shape, *, domain: str = "", **attrs: AttrValue) -> str:
        """A one-input node (an activation such as Sigmoid) with an io-dtype output of ``shape``."""
        return self.g.node1(op, [x], name, self.io.elem, shape, domain=domain, **attrs)

    def binary(self, op: str, a: str, b: str, name: str, shape: Shape) -> str:
        """An elementwise two-input node (Add, Mul ...) with an io-dtype output of ``shape``."""
        return self.g.node1(op, [a, b], name, self.io.elem, shape)

    def reshape(self, x: str, to: list[int], name: str, shape: Shape, elem: int | None = None) -> str:
        """Reshape ``x`` by the shared constant ``to``; the output is declared ``shape`` (io dtype unless ``elem``)."""
        return self.g.node1(
            "Reshape", [x, self.c(to)], name, self.io.elem if elem is None else elem, shape
        )

    def mask(self) -> tuple[str, str]:
        """``seqlens_k`` (int32 [B]) and ``total_sequence_length`` (int32 scalar) from the 2D mask.

        Spelled as the builder's ``make_attention_mask_reformatting_for_gqa`` spells them.
        """
        if self._mask is None:
            g, p = self.g, "/model/attn_mask_reformat/attn_mask_subgraph"
            i64, i32 = TensorProto.INT64, TensorProto.INT32
            rs = g.node1("ReduceSum", ["attention_mask", self.c([1])], f"{p}/ReduceSum", i64, [B],
                         keepdims=0)  # fmt: skip
            sub = g.node1("Sub", [rs, self.c([1])], f"{p}/Sub", i64, [B])
            seqlens = g.node1("Cast", [sub], f"{p}/Sub/Cast", i32, [B], to=i32)
            shp = g.node1("Shape", ["attention_mask"], f"{p}/Shape", i64, [2])
            gat = g.node1("Gather", [shp, self.c(1)], f"{p}/Gather", i64, [], axis=0)
            total = g.node1("Cast", [gat], f"{p}/Gather/Cast", i32, [], to=i32)
            self._mask = (seqlens, total)
        return self._mask

    def pos0(self) -> str:
        """``Gather(position_ids, 0)``: the text position stream [B, S] of MRoPE ids [3, B, S]."""
        if self._pos0 is None:
            self._pos0 = self.g.node1("Gather", ["position_ids", self.c(0)],
                                      "/model/position_ids/Gather", TensorProto.INT64, [B, S],
                                      axis=0)  # fmt: skip
        return self._pos0

    def rotary_caches(self, fp32: bool = False) -> tuple[str, str]:
        """``cos_cache`` / ``sin_cache`` [context, rotary_dim / 2] in the io dtype, or float with ``fp32``.

        ``fp32`` is how the builder writes them when MRoPE runs in float32.

        Kept inline (32 KiB each in float16 at the default context): the one place where these
        packages hold initializers over 1 KiB inside the graph file, as some hand-made exports do.
        """
        if self._rotary is None:
            s = self.s
            half = s.rotary_dim // 2
            inv = 1.0 / (10000000.0 ** (np.arange(half, dtype=np.float64) * 2 / s.rotary_dim))
            ang = np.arange(s.context, dtype=np.float64)[:, None] * inv[None, :]
            dtype = np.float32 if fp32 else self.io.np_type
            cos = self.g.inline("cos_cache", cast_generated(np.cos(ang), dtype))
            sin = self.g.inline("sin_cache", cast_generated(np.sin(ang), dtype))
            self._rotary = (cos, sin)
        return self._rotary
