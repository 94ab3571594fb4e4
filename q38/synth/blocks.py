"""The exporter patterns of docs/synthetic-model.md, emitted as ONNX nodes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt
from onnx import TensorProto

from q38 import _ops
from q38.ort_targets import ort_target
from q38.synth.graph import AttrValue, GraphBuilder
from q38.synth.qmoe import pack_sm80_int4
from q38.synth.spec import Spec
from q38.synth.weights import Weights

__all__ = ["Ctx"]

MS = _ops.MS_DOMAIN
INT64_MAX = np.iinfo(np.int64).max
F16 = TensorProto.FLOAT16


class Ctx:
    """One graph under construction: builder, weights, spec and variant switches."""

    def __init__(
        self, g: GraphBuilder, w: Weights, spec: Spec, *, variant: str, experts: str
    ) -> None:
        self.g, self.w, self.s = g, w, spec
        self.variant, self.experts = variant, experts

    # -- small helpers -------------------------------------------------------------------
    def c64(self, name: str, value: npt.ArrayLike) -> str:
        """An int64 inline initializer (shapes, axes, split sizes); returns its name."""
        return self.g.const(name, value, np.int64)

    def f16(self, name: str, value: float) -> str:
        """A float16 scalar inline initializer (epsilons, scales, exponents); returns its name."""
        return self.g.const(name, value, np.float16)

    # -- pattern: plain RMSNorm over the last axis (final norms; no rotary) ----------------
    def rms_norm(self, x: str, p: str, wname: str, dim: int) -> str:
        """Unfused RMSNorm of ``x`` over its last axis (Mul, ReduceMean, Add eps, Sqrt, Div, Mul weight).

        The form the exporter writes for the final norms; node names start with ``p``.
        """
        g = self.g
        sq = g.op1("Mul", [x, x], f"{p}/Mul")
        ms = g.op1(
            "ReduceMean",
            [sq, self.c64(f"{p}/ReduceMean/axes", [-1])],
            f"{p}/ReduceMean",
            keepdims=1,
        )
        ve = g.op1("Add", [ms, self.f16(f"{p}/Add/eps", self.s.eps)], f"{p}/Add")
        rs = g.op1("Sqrt", [ve], f"{p}/Sqrt")
        n = g.op1("Div", [x, rs], f"{p}/Div")
        return g.op1("Mul", [n, self.w.norm(g, wname, (dim,))], f"{p}/Mul_1")

    # -- pattern 1: RMSNorm + rotary --------------------------------------------------------
    def rms_norm_rotary(
        self, x: str, p: str, wname: str, heads: int, *, alternate: bool = False
    ) -> str:
        """Per-head RMSNorm followed by non-interleaved rotary embedding at ``position_ids`` (pattern 1).

        ``alternate`` writes the other exporter spelling (Pow 2 and Reciprocal instead of Mul and
        Div), which fusions must recognise too. Returns ``[B, S, heads * head_size]``.
        """
        g, s = self.g, self.s
        d = s.head_size
        r = g.op1("Reshape", [x, self.c64(f"{p}/Reshape/shape", [0, 0, heads, d])], f"{p}/Reshape")
        if alternate:
            sq = g.op1("Pow", [r, self.f16(f"{p}/Pow/exponent", 2.0)], f"{p}/Pow")
        else:
            sq = g.op1("Mul", [r, r], f"{p}/Mul")
        ms = g.op1(
            "ReduceMean",
            [sq, self.c64(f"{p}/ReduceMean/axes", [-1])],
            f"{p}/ReduceMean",
            keepdims=1,
        )
        ve = g.op1("Add", [ms, self.f16(f"{p}/Add/eps", s.eps)], f"{p}/Add")
        rs = g.op1("Sqrt", [ve], f"{p}/Sqrt")
        if alternate:
            rec = g.op1("Reciprocal", [rs], f"{p}/Reciprocal")
            n = g.op1("Mul", [r, rec], f"{p}/Mul_rsqrt")
        else:
            n = g.op1("Div", [r, rs], f"{p}/Div")
        nw = g.op1("Mul", [n, self.w.norm(g, wname, (d,))], f"{p}/Mul_1")
        cos, sin = self.rotary_caches()
        ax2 = self.c64(f"{p}/rotary/axes", [2])
        c = g.op1(
            "Unsqueeze",
            [g.op1("Gather", [cos, "position_ids"], f"{p}/rotary/cos/Gather"), ax2],
            f"{p}/rotary/cos/Unsqueeze",
        )
        sn = g.op1(
            "Unsqueeze",
            [g.op1("Gather", [sin, "position_ids"], f"{p}/rotary/sin/Gather"), ax2],
            f"{p}/rotary/sin/Unsqueeze",
        )
        half = d // 2
        lastax = self.c64(f"{p}/rotary/slice_axes", [-1])
        x1 = g.op1(
            "Slice",
            [
                nw,
                self.c64(f"{p}/rotary/x1/starts", [0]),
                self.c64(f"{p}/rotary/x1/ends", [half]),
                lastax,
            ],
            f"{p}/rotary/x1/Slice",
        )
        x2 = g.op1(
            "Slice",
            [
                nw,
                self.c64(f"{p}/rotary/x2/starts", [half]),
                self.c64(f"{p}/rotary/x2/ends", [d]),
                lastax,
            ],
            f"{p}/rotary/x2/Slice",
        )
        o1 = g.op1(
            "Sub",
            [g.op1("Mul", [x1, c], f"{p}/rotary/Mul"), g.op1("Mul", [x2, sn], f"{p}/rotary/Mul_1")],
            f"{p}/rotary/Sub",
        )
        o2 = g.op1(
            "Add",
            [
                g.op1("Mul", [x2, c], f"{p}/rotary/Mul_2"),
                g.op1("Mul", [x1, sn], f"{p}/rotary/Mul_3"),
            ],
            f"{p}/rotary/Add",
        )
        y = g.op1("Concat", [o1, o2], f"{p}/rotary/Concat", axis=-1)
        return g.op1(
            "Reshape", [y, self.c64(f"{p}/Reshape_1/shape", [0, 0, heads * d])], f"{p}/Reshape_1"
        )

    def rotary_caches(self) -> tuple[str, str]:
        """The float16 cos / sin caches ``[context, head_size / 2]`` (base 10000), added once per graph."""
        s = self.s
        half = s.head_size // 2
        inv = 1.0 / (10000.0 ** (np.arange(half, dtype=np.float64) * 2 / s.head_size))
        ang = np.arange(s.context, dtype=np.float64)[:, None] * inv[None, :]
        cos = self.w.add(
            self.g, "model.rotary_emb.cos_cache", lambda: np.cos(ang).astype(np.float16)
        )
        sin = self.w.add(
            self.g, "model.rotary_emb.sin_cache", lambda: np.sin(ang).astype(np.float16)
        )
        return cos, sin

    # -- pattern 3: hyper-connection mix -----------------------------------------------------
    def hc_mix(self, x: str, p: str, wp: str) -> tuple[str, str]:
        """Hyper-connection pre-mix of the ``hc`` residual streams (pattern 3).

        Returns the block input (HyperConnectionPreMix of the normed streams) and the post-mix
        gate (2 x sigmoid), which :meth:`hc_post` takes.
        """
        g, s, w = self.g, self.s, self.w
        ch = s.streams
        hn = g.op1(
            _ops.BRANCHWISE_RMS_NORM,
            [x, w.norm(g, f"{wp}.norm_scale", (ch,))],
            f"{p}/BranchwiseRMSNorm",
            domain=MS,
            num_branches=s.hc,
            epsilon=s.eps,
        )
        d = g.op1(
            "MatMul", [hn, w.normal(g, f"{wp}.down.weight", (ch, s.hc_rank))], f"{p}/down/MatMul"
        )
        z = g.op1(_ops.SCALED_SILU, [d], f"{p}/ScaledSiLU", domain=MS, alpha=1.0 / s.hc)
        up = g.op1("MatMul", [z, w.normal(g, f"{wp}.up.weight", (s.hc_rank, ch))], f"{p}/up/MatMul")
        gt = g.op1("Sigmoid", [up], f"{p}/Sigmoid")
        pre = g.op1(
            _ops.HC_PRE_MIX,
            [hn, gt],
            f"{p}/HyperConnectionPreMix",
            domain=MS,
            num_branches=s.hc,
            reduction_scale=1.0 / s.hc,
        )
        inj = g.op1(
            "MatMul", [hn, w.normal(g, f"{wp}.inject.weight", (ch, s.hc))], f"{p}/inject/MatMul"
        )
        dv = g.op1("Div", [inj, self.f16(f"{p}/gate/Div/divisor", float(s.hc))], f"{p}/gate/Div")
        sg = g.op1("Sigmoid", [dv], f"{p}/gate/Sigmoid")
        pg = g.op1("Mul", [sg, self.f16(f"{p}/gate/Mul/scale", 2.0)], f"{p}/gate/Mul")
        return pre, pg

    def hc_post(self, x: str, block_out: str, pg: str, p: str) -> str:
        """Write ``block_out`` back into the residual streams ``x`` with the gate ``pg`` of :meth:`hc_mix`."""
        return self.g.op1(
            _ops.HC_POST_MIX,
            [x, block_out, pg],
            f"{p}/HyperConnectionPostMix",
            domain=MS,
            num_branches=self.s.hc,
        )

    # -- GatedDeltaNet layer with pattern 4 ------------------------------------------------------
    def gdn(self, x: str, i: int, *, prefill: bool) -> str:
        """GatedDeltaNet layer ``i``: projections, causal conv with carried state, recurrence, gated norm.

        Reads ``past.{i}.conv`` / ``past.{i}.recurrent`` and writes the ``present`` pair; the
        prefill graph transposes the conv state around the conv. For a ``--target-ort`` release
        without a CPU GatedDeltaNet kernel the cpu variant uses LinearAttention instead.
        """
        g, s, w = self.g, self.s, self.w
        p, wp = f"/model/layers.{i}/linear_attn", f"model.layers.{i}.linear_attn"
        cd, zd = s.conv_dim, s.gdn_hv * s.gdn_dv
        qkvz = g.op1(
            "MatMul",
            [x, w.normal(g, f"{wp}.qkv_z_proj.weight", (s.hidden, cd + zd))],
            f"{p}/qkv_z_proj/MatMul",
        )
        xb, z = g.op(
            "Split",
            [qkvz, self.c64(f"{p}/qkv_z/split", [cd, zd])],
            f"{p}/qkv_z/Split",
            n_out=2,
            axis=-1,
        )
        ab = g.op1(
            "MatMul",
            [x, w.normal(g, f"{wp}.a_b_proj.weight", (s.hidden, 2 * s.gdn_hv))],
            f"{p}/a_b_proj/MatMul",
        )
        a, b = g.op(
            "Split",
            [ab, self.c64(f"{p}/a_b/split", [s.gdn_hv, s.gdn_hv])],
            f"{p}/a_b/Split",
            n_out=2,
            axis=-1,
        )
        cp = f"{p}/conv"
        xT = g.op1("Transpose", [xb], f"{cp}/Transpose", perm=[0, 2, 1])
        cw = w.normal(g, f"{wp}.conv1d.weight", (cd, 1, s.conv_k), scale=0.3)
        cb = w.normal(g, f"{wp}.conv1d.bias", (cd,), scale=0.1)
        past = f"past.{i}.conv"
        st_len = s.conv_k - 1
        carry = [
            self.c64(f"{cp}/carry/starts", [-st_len]),
            self.c64(f"{cp}/carry/ends", [INT64_MAX]),
            self.c64(f"{cp}/carry/axes", [-1]),
        ]
        if prefill:
            pT = g.op1("Transpose", [past], f"{cp}/past/Transpose", perm=[0, 2, 1])
        else:
            pT = past
        y, _st = g.op(
            _ops.CAUSAL_CONV_WITH_STATE,
            [xT, cw, cb, pT],
            f"{cp}/CausalConvWithState",
            n_out=2,
            domain=MS,
            activation="silu",
        )
        yT = g.op1("Transpose", [y], f"{cp}/Transpose_1", perm=[0, 2, 1])
        hist = g.op1("Concat", [pT, xT], f"{cp}/carry/Concat", axis=-1)
        if prefill:
            sl = g.op1("Slice", [hist, *carry], f"{cp}/carry/Slice")
            g.op(
                "Transpose",
                [sl],
                f"{cp}/carry/Transpose",
                outputs=[f"present.{i}.conv"],
                perm=[0, 2, 1],
            )
        else:
            g.op("Slice", [hist, *carry], f"{cp}/carry/Slice", outputs=[f"present.{i}.conv"])
        a_log = w.add(
            g, f"{wp}.A_log", lambda: np.log(np.linspace(1.0, 4.0, s.gdn_hv)).astype(np.float32)
        )
        dt_b = w.add(
            g, f"{wp}.dt_bias", lambda: np.linspace(-0.5, 0.5, s.gdn_hv).astype(np.float32)
        )
        target = ort_target(s.ort_target) if s.ort_target else None
        if target is not None and self.variant == "cpu" and not target.has_cpu_kernel(_ops.GATED_DELTA_NET):
            o3 = self._linear_attention(yT, a, b, a_log, dt_b, p, i)
            return self._gdn_tail(o3, z, p, wp)
        if target is not None and not target.gdn_gate_float16:  # 1.31.1: decay / beta are float32
            a = g.op1("Cast", [a], f"{p}/a/Cast", to=TensorProto.FLOAT)
            b = g.op1("Cast", [b], f"{p}/b/Cast", to=TensorProto.FLOAT)
        o = g.op(
            _ops.GATED_DELTA_NET,
            [yT, "", "", "", a, b, f"past.{i}.recurrent", a_log, dt_b],
            f"{p}/GatedDeltaNet",
            outputs=[f"{p}/GatedDeltaNet/output_0", f"present.{i}.recurrent"],
            domain=MS,
            gate_activation="softplus",
            beta_activation="sigmoid",
            qk_l2_norm=1,
            update_rule="gated_delta",
            scale=0.0,
        )[0]
        o3 = g.op1("Reshape", [o, self.c64(f"{p}/Reshape/shape", [0, 0, zd])], f"{p}/Reshape")
        return self._gdn_tail(o3, z, p, wp)

    def _gdn_tail(self, o3: str, z: str, p: str, wp: str) -> str:
        g, s, w = self.g, self.s, self.w
        zd = s.gdn_hv * s.gdn_dv
        n = g.op1(
            _ops.GATED_RMS_NORM,
            [o3, w.norm(g, f"{wp}.norm.weight", (s.gdn_dv,)), z],
            f"{p}/norm/GatedRMSNorm",
            domain=MS,
            activation="silu",
            epsilon=s.eps,
        )
        return g.op1(
            "MatMul",
            [n, w.normal(g, f"{wp}.out_proj.weight", (zd, s.hidden))],
            f"{p}/out_proj/MatMul",
        )

    def _linear_attention(self, yT: str, a: str, b: str, a_log: str, dt_b: str, p: str, i: int) -> str:
        """The GatedDeltaNet recurrence as LinearAttentionGate + LinearAttention{gated_delta}.

        The 0.18.0 builder's form, for a target release with no CPU GatedDeltaNet kernel (1.31.1).
        Same state (``past.{i}.recurrent``, float32 [B, Hv, Dk, Dv]) and the same maths: q / k
        L2-normalised per head (q also scaled by Dk^-0.5), decay = -exp(A_log) * softplus(a + dt_bias),
        beta = sigmoid(b). Returns the [B, S, Hv*Dv] output.
        """
        g, s = self.g, self.s
        kd, vd, hk = s.gdn_hk * s.gdn_dk, s.gdn_hv * s.gdn_dv, s.gdn_hk
        q, k, v = g.op("Split", [yT, self.c64(f"{p}/qkv/split", [kd, kd, vd])], f"{p}/qkv/Split", n_out=3, axis=-1)

        def l2(t: str, tag: str) -> str:
            r = g.op1("Reshape", [t, self.c64(f"{p}/{tag}_l2norm/shape", [0, 0, hk, s.gdn_dk])],
                      f"{p}/{tag}_l2norm/Reshape")
            n = g.op1("LpNormalization", [r], f"{p}/{tag}_l2norm/LpNormalization", axis=-1, p=2)
            return g.op1("Reshape", [n, self.c64(f"{p}/{tag}_l2norm/flat", [0, 0, kd])],
                         f"{p}/{tag}_l2norm/Reshape_1")

        qs = g.op1("Mul", [l2(q, "q"), self.f16(f"{p}/q_scale", float(s.gdn_dk) ** -0.5)], f"{p}/q_scaled/Mul")
        neg = g.op1("Neg", [g.op1("Exp", [a_log], f"{p}/A/Exp")], f"{p}/A/Neg")
        decay, beta = g.op(_ops.LINEAR_ATTENTION_GATE, [a, dt_b, neg, b], f"{p}/LinearAttentionGate", n_out=2,
                           domain=MS)
        return g.op(_ops.LINEAR_ATTENTION, [qs, l2(k, "k"), v, f"past.{i}.recurrent", decay, beta],
                    f"{p}/LinearAttention", outputs=[f"{p}/LinearAttention/output_0", f"present.{i}.recurrent"],
                    domain=MS, q_num_heads=hk, kv_num_heads=s.gdn_hv, update_rule="gated_delta", scale=1.0)[0]

    # -- QSA layer ------------------------------------------------------------------------------
    def attention(
        self, x: str, p: str, wp: str, *, layer: int | None, seqlens: str, total: str
    ) -> str:
        """QSA attention of layer ``layer``; ``layer=None`` is the MTP head's attention.

        The MTP form is stateless (GQA, no past) and uses the alternate RMSNorm spelling.
        """
        g, s, w = self.g, self.s, self.w
        qd, kd = s.heads * s.head_size, s.kv_heads * s.head_size
        qkv = g.op1(
            "MatMul",
            [x, w.normal(g, f"{wp}.qkv_proj.weight", (s.hidden, qd + 2 * kd))],
            f"{p}/qkv_proj/MatMul",
        )
        q, k, v = g.op(
            "Split",
            [qkv, self.c64(f"{p}/qkv/split", [qd, kd, kd])],
            f"{p}/qkv/Split",
            n_out=3,
            axis=-1,
        )
        alt = layer is None
        qn = self.rms_norm_rotary(q, f"{p}/q_norm", f"{wp}.q_norm.weight", s.heads, alternate=alt)
        kn = self.rms_norm_rotary(
            k, f"{p}/k_norm", f"{wp}.k_norm.weight", s.kv_heads, alternate=alt
        )
        gate = g.op1(
            "MatMul",
            [x, w.normal(g, f"{wp}.gate_proj.weight", (s.hidden, qd))],
            f"{p}/gate_proj/MatMul",
        )
        if layer is None:
            o = g.op(
                _ops.GROUP_QUERY_ATTENTION,
                [qn, kn, v, "", "", seqlens, total],
                f"{p}/GroupQueryAttention",
                domain=MS,
                num_heads=s.heads,
                kv_num_heads=s.kv_heads,
            )[0]
        elif self.variant == "cpu":
            o = g.op(
                _ops.GROUP_QUERY_ATTENTION,
                [
                    qn,
                    kn,
                    v,
                    f"past_key_values.{layer}.key",
                    f"past_key_values.{layer}.value",
                    seqlens,
                    total,
                ],
                f"{p}/GroupQueryAttention",
                outputs=[
                    f"{p}/GroupQueryAttention/output_0",
                    f"present.{layer}.key",
                    f"present.{layer}.value",
                ],
                domain=MS,
                num_heads=s.heads,
                kv_num_heads=s.kv_heads,
            )[0]
        else:
            o = self._sparse(x, qn, kn, v, p, wp, layer, seqlens, total)
        sg = g.op1("Sigmoid", [gate], f"{p}/gate/Sigmoid")
        gated = g.op1("Mul", [o, sg], f"{p}/gate/Mul")
        return g.op1(
            "MatMul",
            [gated, w.normal(g, f"{wp}.o_proj.weight", (qd, s.hidden))],
            f"{p}/o_proj/MatMul",
        )

    def _sparse(
        self,
        x: str,
        qn: str,
        kn: str,
        v: str,
        p: str,
        wp: str,
        layer: int,
        seqlens: str,
        total: str,
    ) -> str:
        g, s, w = self.g, self.s, self.w
        ip = f"{p}/indexer"
        di = s.idx_dim
        iqk = g.op1(
            "MatMul",
            [
                x,
                w.normal(
                    g, f"{wp}.indexer.index_qk_proj.weight", (s.hidden, (s.idx_heads + 1) * di)
                ),
            ],
            f"{ip}/index_qk_proj/MatMul",
        )
        cos, sin = self.rotary_caches()
        sel = g.op(
            _ops.SPARSE_ATTENTION_INDEXER,
            [
                iqk,
                "",
                w.norm(g, f"{wp}.indexer.q_norm.weight", (di,)),
                w.norm(g, f"{wp}.indexer.k_norm.weight", (di,)),
                cos,
                sin,
                "attention_mask",
                f"past.{layer}.indexer_key",
            ],
            f"{ip}/SparseAttentionIndexer",
            outputs=[f"{ip}/SparseAttentionIndexer/output_0", f"present.{layer}.indexer_key"],
            domain=MS,
            policy_mode="qsa",
            compress_ratio=s.compress_ratio,
            token_budget=s.token_budget,
            epsilon=s.eps,
            scale=float(di) ** -0.5,
        )[0]
        cap = s.token_budget + s.compress_ratio - 1
        ge = g.op1(
            "GreaterOrEqual",
            [sel, g.const(f"{ip}/counts/zero", 0, np.int32)],
            f"{ip}/counts/GreaterOrEqual",
        )
        wh = g.op1(
            "Where",
            [
                ge,
                g.const(f"{ip}/counts/one", 1, np.int32),
                g.const(f"{ip}/counts/zero_1", 0, np.int32),
            ],
            f"{ip}/counts/Where",
        )
        rsum = g.op1(
            "ReduceSum",
            [wh, self.c64(f"{ip}/counts/axes", [-1])],
            f"{ip}/counts/ReduceSum",
            keepdims=0,
        )
        cnt = g.op1(
            "Reshape", [rsum, self.c64(f"{ip}/counts/Reshape/shape", [-1])], f"{ip}/counts/Reshape"
        )
        sel2 = g.op1(
            "Reshape",
            [sel, self.c64(f"{ip}/selected/Reshape/shape", [-1, cap])],
            f"{ip}/selected/Reshape",
        )
        qkv = g.op1("Concat", [qn, kn, v], f"{p}/qkv_rot/Concat", axis=-1)
        return g.op(
            _ops.DYNAMIC_SPARSE_ATTENTION,
            [
                qkv,
                "",
                "",
                f"past_key_values.{layer}.key",
                f"past_key_values.{layer}.value",
                "",
                "",
                sel2,
                cnt,
                seqlens,
                total,
            ],
            f"{p}/DynamicSparseAttention",
            outputs=[
                f"{p}/DynamicSparseAttention/output_0",
                f"present.{layer}.key",
                f"present.{layer}.value",
            ],
            domain=MS,
            num_heads=s.heads,
            kv_num_heads=s.kv_heads,
            scale=float(s.head_size) ** -0.5,
            is_causal=1,
            attention_mode="selected_only",
            selected_kv_source="main",
            do_rotary=0,
            rotary_interleaved=0,
        )[0]

    # -- MoE + pattern 2 ----------------------------------------------------------------------------
    def moe(self, x: str, p: str, wp: str, *, misalign: int = 0) -> str:
        """Routed experts (QMoE, int4 or nvfp4 per ``experts``) plus the gated shared expert (pattern 2).

        ``misalign`` > 0 places the expert weights that many bytes off the 64-byte alignment
        (deliberately unaligned external data); the two paths join in GatedAdd.
        """
        g, s, w = self.g, self.s, self.w
        h, e, i = s.hidden, s.experts, s.moe_inter
        mp = f"{p}/moe"
        x2 = g.op1("Reshape", [x, self.c64(f"{mp}/Reshape/shape", [-1, h])], f"{mp}/Reshape")
        lg = g.op1(
            "MatMul", [x2, w.normal(g, f"{wp}.mlp.router.weight", (h, e))], f"{mp}/router/MatMul"
        )
        lg2 = g.op1(
            "Reshape", [lg, self.c64(f"{mp}/router/Reshape/shape", [-1, e])], f"{mp}/router/Reshape"
        )
        rw = g.op1("Softmax", [lg2], f"{mp}/router/Softmax", axis=-1)
        ep = f"{wp}.mlp.experts"
        if self.experts == "int4":
            fc1w = w.codes(
                g,
                f"{ep}.fc1.weight",
                (e, 2 * i, h // 2),
                misalign=misalign,
                transform=lambda raw: pack_sm80_int4(raw, 2 * i, h),
            )
            fc1s = w.uniform(
                g, f"{ep}.fc1.scales", (e, 2 * i, h // s.block), 0.01, 0.03, misalign=misalign
            )
            fc2w = w.codes(
                g,
                f"{ep}.fc2.weight",
                (e, h, i // 2),
                misalign=misalign,
                transform=lambda raw: pack_sm80_int4(raw, h, i),
            )
            fc2s = w.uniform(
                g, f"{ep}.fc2.scales", (e, h, i // s.block), 0.01, 0.03, misalign=misalign
            )
            ins = [x2, lg2, fc1w, fc1s, "", fc2w, fc2s, "", "", "", "", "", "", "", rw]
            attrs: dict[str, AttrValue] = {"quant_type": "int", "expert_weight_bits": 4, "block_size": s.block}
        else:
            f8 = ml_dtypes.float8_e4m3fn
            fc1w = w.codes(g, f"{ep}.fc1.weight", (e, h, i), misalign=misalign)
            fc1s = w.uniform(
                g, f"{ep}.fc1.scales", (e, 2 * i, h // 16), 0.5, 2.0, dtype=f8, misalign=misalign
            )
            fc2w = w.codes(g, f"{ep}.fc2.weight", (e, i, h // 2), misalign=misalign)
            fc2s = w.uniform(
                g, f"{ep}.fc2.scales", (e, h, i // 16), 0.5, 2.0, dtype=f8, misalign=misalign
            )
            gs1 = w.uniform(g, f"{ep}.fc1.global_scale", (e,), 0.001, 0.002, dtype=np.float32)
            gs2 = w.uniform(g, f"{ep}.fc2.global_scale", (e,), 0.001, 0.002, dtype=np.float32)
            ins = [x2, lg2, fc1w, fc1s, "", fc2w, fc2s, "", "", "", "", "", "", "", rw, gs1, gs2]
            attrs = {"quant_type": "nvfp4", "expert_weight_bits": 4, "block_size": 16}
        moe = g.op1(
            _ops.QMOE,
            ins,
            f"{mp}/QMoE",
            domain=MS,
            weights_prepacked=1,
            activation_type="swiglu",
            swiglu_fusion=1,
            k=s.top_k,
            normalize_routing_weights=1,
            use_sparse_mixer=0,
            **attrs,
        )
        sp, swp = f"{p}/shared_expert", f"{wp}.mlp.shared_expert"
        si = s.shared_inter
        gm = g.op1(
            "MatMul",
            [x2, w.normal(g, f"{swp}.gate_proj.weight", (h, si))],
            f"{sp}/gate_proj/MatMul",
        )
        um = g.op1(
            "MatMul", [x2, w.normal(g, f"{swp}.up_proj.weight", (h, si))], f"{sp}/up_proj/MatMul"
        )
        sgm = g.op1(
            "MatMul",
            [x2, w.normal(g, f"{wp}.mlp.shared_expert_gate.weight", (h, 1))],
            f"{p}/shared_expert_gate/MatMul",
        )
        act = g.op1("Mul", [gm, g.op1("Sigmoid", [gm], f"{sp}/act/Sigmoid")], f"{sp}/act/Mul")
        a = g.op1("Mul", [act, um], f"{sp}/Mul")
        d = g.op1(
            "MatMul", [a, w.normal(g, f"{swp}.down_proj.weight", (si, h))], f"{sp}/down_proj/MatMul"
        )
        gate = g.op1("Sigmoid", [sgm], f"{p}/shared_expert_gate/Sigmoid")
        out = g.op1(_ops.GATED_ADD, [moe, d, gate], f"{mp}/GatedAdd", domain=MS)
        shp = g.op1("Shape", [x], f"{mp}/Shape")
        return g.op1("Reshape", [out, shp], f"{mp}/Reshape_1")
