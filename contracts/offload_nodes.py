"""QMoE offload node rules: which MoE nodes ORT 1.32.0 can offload, and the subgraph rule.

Source: ``ort-contract-rules.md`` §1B-1F (``core/framework/session_state.cc``, decoded from the
1.32.0 wheel). Only the subgraph rule (1B.2) is enforced by the CPU wheel; every other check runs
only for nodes assigned to ``CUDAExecutionProvider`` (``cuda-only``), on SM80 or newer.

In ``mode=required`` the first ineligible candidate makes session creation fail with
``MoE offload mode='required' rejected node '<n>' (<op>): <reason>.``; in ``mode=auto`` the node is
left on the GPU. :func:`offload_eligibility` is the API ``q38 offload`` uses: per candidate node,
the first failing reason (checks in ORT's order) or None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from contracts._graph import (
    AttributeKindError,
    ModelLike,
    as_ir_model,
    attr_int,
    attr_str,
    input_at,
    is_constant_initializer,
    iter_subgraph_owners,
    node_label,
    static_dims,
)
from contracts._rule import (
    REFERENCE_ORT_VERSION,
    GraphExample,
    GraphExamples,
    ModelCheck,
    OrtVersions,
    Rule,
    RuleDoc,
    Violation,
)
from contracts.float32 import parse_from_chars
from contracts.offload_config import OFFLOAD_PREFIX, offload_mode
from contracts.session_config import effective
from q38._ops import MOE, MOE_PACKED, MS_DOMAIN, QMOE

__all__ = [
    "CHECK_RULES",
    "NODE_CHECKS",
    "PLANNER_RULES",
    "RULES",
    "check_offload_nodes",
    "offload_eligibility",
    "required_rejection_message",
]

_SINCE = OrtVersions(since="1.32.0")
_SRC = "ort-contract-rules.md §1C (core/framework/session_state.cc, 1.32.0 machine code)"
_INT_MAX = 2**31 - 1
_CANDIDATE_OPS = frozenset({QMOE, MOE, MOE_PACKED})
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
_F16, _BF16 = ir.DataType.FLOAT16, ir.DataType.BFLOAT16
_QMOE_EXPERT_SLOTS = frozenset({*range(2, 14), 15, 16})
_EXPERT_SLOTS = {QMOE: _QMOE_EXPERT_SLOTS, MOE: frozenset(range(2, 8)), MOE_PACKED: frozenset({2, 3, 4})}


@dataclass(frozen=True)
class _QMoE:
    """The attributes the offload checker reads, with the checker's own fallbacks (§1C)."""

    node: ir.Node
    quant_type: str
    bits: int
    uniform: bool
    prepacked: int
    block_size: int
    activation: str
    swiglu_fusion: int
    sparse_mixer: int
    k: int

    @classmethod
    def of(cls, node: ir.Node) -> _QMoE:
        bits = attr_int(node, "expert_weight_bits", 8)
        per_fc = [attr_int(node, f"fc{i}_expert_weight_bits", bits) for i in (1, 2, 3)]
        return cls(
            node=node,
            quant_type=attr_str(node, "quant_type", "int"),
            bits=bits,
            uniform=all(b == bits for b in per_fc),
            prepacked=attr_int(node, "weights_prepacked", -1),
            block_size=attr_int(node, "block_size", -1),
            activation=attr_str(node, "activation_type", "relu"),
            swiglu_fusion=attr_int(node, "swiglu_fusion", 0),
            sparse_mixer=attr_int(node, "use_sparse_mixer", 0),
            k=attr_int(node, "k", 0),
        )

    @property
    def is_int3(self) -> bool:
        return self.quant_type == "int" and self.bits == 3

    def dims(self, slot: int) -> tuple[int, ...]:
        found = static_dims(input_at(self.node, slot))
        return found if found is not None else ()

    def activation_dtype(self) -> ir.DataType | None:
        for slot in (0, 1):  # router_probs shares T with the input
            value = input_at(self.node, slot)
            if value is not None and value.dtype is not None:
                return value.dtype
        return None

    def layout(self) -> tuple[int, int] | None:
        """(H, I) for int4/int2/nvfp4 when fc1/fc2 match the standard or transposed layout."""
        p = 4 if (self.quant_type == "int" and self.bits == 2) else 2
        w1, w2 = self.dims(2), self.dims(5)
        if len(w1) != 3 or len(w2) != 3:
            return None
        # standard: fc1 [E, 2I, H/p], fc2 [E, H, I/p]
        if w1[1] % 2 == 0 and w1[2] * p == w2[1] and w2[2] * p == w1[1] // 2:
            return w2[1], w1[1] // 2
        # transposed: fc1 [E, H, 2I/p], fc2 [E, I, H/p]
        if w1[2] * p == 2 * w2[1] and w2[2] * p == w1[1]:
            return w1[1], w2[1]
        return None

    def hidden_inter(self) -> tuple[int, int] | None:
        if self.is_int3:
            w1, w2 = self.dims(2), self.dims(5)
            if len(w1) == 3 and len(w2) == 3 and w1[1] % 2 == 0:
                return w2[1], w1[1] // 2
            return None
        return self.layout()

    def scale_block(self) -> int:
        if self.quant_type == "nvfp4":
            return 16
        return 32 if self.bits == 4 else self.block_size


# --- the 1C checks, in ORT's order; each returns the reason text or None ----------------------

_INT_COMBOS = "quant_type='int' offload requires (bits=4, weights_prepacked=1, block_size=32), (bits=3, weights_prepacked=0, block_size in {32,64,128}), or (bits=2, weights_prepacked=1, block_size in {32,64,128})"


def _c1_quant_type(q: _QMoE) -> str | None:
    if q.quant_type in {"int", "nvfp4"}:
        return None
    return f"unsupported quant_type='{q.quant_type}' (expected 'nvfp4' or 'int')"


def _c2_int_combination(q: _QMoE) -> str | None:
    if q.quant_type != "int":
        return None
    ok = q.uniform and (
        (q.bits == 4 and q.prepacked == 1 and q.block_size == 32)
        or (q.bits == 3 and q.prepacked == 0 and q.block_size in {32, 64, 128})
        or (q.bits == 2 and q.prepacked == 1 and q.block_size in {32, 64, 128})
    )
    return None if ok else _INT_COMBOS


def _c3_nvfp4(q: _QMoE) -> str | None:
    if q.quant_type != "nvfp4":
        return None
    if not q.uniform or q.bits != 4:
        return f"unsupported expert_weight_bits={q.bits} (expected 4)"
    if q.prepacked != 1:
        return "requires weights_prepacked=1 (offline K-packed row-major FP4)"
    if q.block_size not in {-1, 16}:
        return f"invalid block_size={q.block_size} for quant_type='nvfp4' (expected 16)"
    return None


def _c4_activation(q: _QMoE) -> str | None:
    if q.activation == "swiglu":
        return None
    return f"unsupported activation_type='{q.activation}' (expected 'swiglu')"


def _c5_swiglu_fusion(q: _QMoE) -> str | None:
    allowed = {1} if q.is_int3 else {0, 1}
    if q.swiglu_fusion in allowed:
        return None
    return f"unsupported swiglu_fusion={q.swiglu_fusion} (expected interleaved SwiGLU)"


def _c6_sparse_mixer(q: _QMoE) -> str | None:
    if q.sparse_mixer == 0:
        return None
    return "use_sparse_mixer=1 is not supported by the QMoE offload backend"


def _c7_k(q: _QMoE) -> str | None:
    return None if q.k > 0 else "attribute k must be positive"


def _c8_forbidden_inputs(q: _QMoE) -> str | None:
    for slot in (*range(8, 15), *range(17, 21)):
        if input_at(q.node, slot) is not None:
            return f"unsupported optional input slot {slot} is present"
    return None


def _c9_expert_inputs(q: _QMoE) -> str | None:
    for slot in (2, 3, 5, 6):
        value = input_at(q.node, slot)
        if value is None:
            return f"missing required expert weight/scale input at slot {slot}"
        where = f"expert input slot {slot} ('{value.name}')"
        if not is_constant_initializer(value):
            return f"{where} must be a constant initializer"
        dims = static_dims(value)
        if dims is None or len(dims) != 3:
            return f"{where} must be 3D"
        if any(d <= 0 for d in dims):
            return f"{where} must have positive dimensions"
        if value.is_graph_output():
            return f"expert initializer '{value.name}' is also a graph output"
    return None


def _c10_activation_dtype(q: _QMoE) -> str | None:
    dtype = q.activation_dtype()
    if dtype is None or dtype in {_F16, _BF16}:
        return None
    return "unsupported activation dtype for QMoE offload (expected FLOAT16 or BFLOAT16)"


def _c11_weight_dtype(q: _QMoE) -> str | None:
    for slot in (2, 5):
        value = input_at(q.node, slot)
        if value is not None and value.dtype != ir.DataType.UINT8:
            return "expert weight banks must be UINT8"
    return None


def _c12_scale_dtype(q: _QMoE) -> str | None:
    expected = ir.DataType.FLOAT8E4M3FN if q.quant_type == "nvfp4" else q.activation_dtype()
    if expected is None:
        return None
    for slot in (3, 6):
        value = input_at(q.node, slot)
        if value is not None and value.dtype != expected:
            return "expert scale bank dtype does not match expected offload scale type"
    return None


def _c13_expert_count(q: _QMoE) -> str | None:
    w1, w2, s1, s2 = q.dims(2), q.dims(5), q.dims(3), q.dims(6)
    e = w1[0]
    ok = (
        1 <= e <= _INT_MAX
        and e >= q.k
        and w2[0] == e
        and s1[0] == e
        and s2[0] == e
        and all(d <= 4294967294 for d in (*w1[1:], *w2[1:]))
    )
    return None if ok else "invalid expert count or weight dimensions for QMoE offload"


def _c14_int3_layout(q: _QMoE) -> str | None:
    if not q.is_int3:
        return None
    w1, w2 = q.dims(2), q.dims(5)
    if w1[1] % 2:
        return "INT3 fc1_experts_weights dim 1 must be even"
    i, h = w1[1] // 2, w2[1]
    ok = (
        0 < h <= _INT_MAX
        and 0 < i <= _INT_MAX
        and h % 32 == 0
        and i % 32 == 0
        and h % q.block_size == 0
        and i % q.block_size == 0
        and w1[2] == 3 * h // 8
        and w2[2] == 3 * i // 8
    )
    return None if ok else "invalid INT3 expert weight dimensions for QMoE offload"


def _c15_layout(q: _QMoE) -> str | None:
    if q.is_int3:
        return None
    found = q.layout()
    if found is None:
        return "expert weight shapes do not match a supported QMoE offload layout"
    h, i = found
    align = 32 if q.quant_type == "nvfp4" else 64
    for n in (align, q.scale_block()):
        if not (0 < h <= _INT_MAX and 0 < i <= 2**30 - 1 and h % n == 0 and i % n == 0):
            return f"expert hidden_size and inter_size must be positive and divisible by {n}"
    return None


def _c16_scale_shapes(q: _QMoE) -> str | None:
    found = q.hidden_inter()
    if found is None:
        return None
    h, i = found
    e, block = q.dims(2)[0], q.scale_block()
    if q.dims(3) == (e, 2 * i, h // block) and q.dims(6) == (e, h, i // block):
        return None
    return "expert scale dimensions do not match [E, 2*I, H/block_size] and [E, H, I/block_size]"


def _optional_initializer(slot: int, value: ir.Value) -> str | None:
    if not is_constant_initializer(value):
        return f"optional expert slot {slot} ('{value.name}') must be a constant initializer"
    if value.is_graph_output():
        return f"expert initializer '{value.name}' is also a graph output"
    return None


def _c17_biases(q: _QMoE) -> str | None:
    found = q.hidden_inter()
    if found is None:
        return None
    h, i = found
    e = q.dims(2)[0]
    for slot, n in ((4, 2 * i), (7, h)):
        value = input_at(q.node, slot)
        if value is None:
            continue
        reason = _optional_initializer(slot, value)
        if reason is not None:
            return reason
        if value.dtype != q.activation_dtype() or static_dims(value) != (e, n):
            return f"optional bias slot {slot} ('{value.name}') must match activation dtype and shape [E, {n}]"
    return None


def _c18_global_scales(q: _QMoE) -> str | None:
    e = q.dims(2)[0]
    for slot in (15, 16):
        value = input_at(q.node, slot)
        if value is None:
            if q.quant_type == "nvfp4":
                return f"NVFP4 requires constant global scale at slot {slot}"
            continue
        reason = _optional_initializer(slot, value)
        if reason is not None:
            return reason
        if q.quant_type == "nvfp4":
            dims = static_dims(value)
            count = 1
            for d in dims or (0,):
                count *= d
            if value.dtype != ir.DataType.FLOAT or count < e:
                return f"NVFP4 global scale slot {slot} ('{value.name}') must be FLOAT with at least E elements"
    return None


FAMILY = "offload"
"""The rule family of this module's rules (``q38 rules --family``)."""

_DOC_INT_COMBOS = "(bits=4, weights_prepacked=1, block_size=32), (bits=3, weights_prepacked=0, block_size in {32,64,128}), or (bits=2, weights_prepacked=1, block_size in {32,64,128})"


def _node_check(rule: str, what: str, reason: str, example: str, fix: str) -> RuleDoc:
    """The RuleDoc of one id OFFLOAD-NODE-001 reports (ORT's offload planner).

    Built from the ort-contract-rules.md section ``rule``, what the check requires, ORT's reason
    text, a violating node and the fix.
    """
    return RuleDoc(
        f"ORT 1.32.0's offload planner (ort-contract-rules.md §{rule}) examines every MoE candidate "
        f"assigned to the CUDA EP when session.moe.offload.mode is auto or required: {what} "
        "In mode=required the first ineligible node fails the session with \"MoE offload "
        f"mode='required' rejected node 'NAME' (OP): {reason}.\"; in mode=auto it stays on the GPU, "
        "which q38 reports as a warning. Reported by OFFLOAD-NODE-001's check.",
        f"{example}, with session.moe.offload.mode=required, on CUDA",
        f"{fix} Or set session.moe.offload.mode=auto to keep the node resident on the GPU.",
    )


# (rule id, ORT rule number, summary, check, documentation); the order is ORT's.
NODE_CHECKS: tuple[tuple[str, str, str, Callable[[_QMoE], str | None], RuleDoc], ...] = (
    ("OFFLOAD-NODE-C01", "1C.1", "quant_type is 'int' or 'nvfp4'", _c1_quant_type, _node_check("1C.1", "quant_type is 'int' or 'nvfp4'.", "unsupported quant_type='fp8' (expected 'nvfp4' or 'int')",
    "QMoE(quant_type='fp8', ...)", "Quantize the experts as int (4/3/2-bit) or nvfp4.")),
    ("OFFLOAD-NODE-C02", "1C.2", "int: (4,prepacked=1,bs=32) | (3,0,{32,64,128}) | (2,1,{32,64,128}), uniform bits", _c2_int_combination, _node_check("1C.2", f"an int node is one of {_DOC_INT_COMBOS}, with the same bits for fc1 and fc2.",
    f"quant_type='int' offload requires {_DOC_INT_COMBOS}",
    "QMoE(quant_type='int', expert_weight_bits=4, weights_prepacked=0, block_size=32)",
    "Re-quantize to a supported combination (q38 offload writes int4 prepacked, block 32).")),
    ("OFFLOAD-NODE-C03", "1C.3", "nvfp4: bits 4, weights_prepacked=1, block_size absent or 16", _c3_nvfp4, _node_check("1C.3", "an nvfp4 node has expert_weight_bits=4, weights_prepacked=1 and block_size absent or 16.",
    "unsupported expert_weight_bits=8 (expected 4)", "QMoE(quant_type='nvfp4', expert_weight_bits=8, ...)",
    "Give nvfp4 nodes expert_weight_bits=4, weights_prepacked=1, block_size 16 or absent.")),
    ("OFFLOAD-NODE-C04", "1C.4", "activation_type is 'swiglu'", _c4_activation, _node_check("1C.4", "activation_type is 'swiglu'.", "unsupported activation_type='silu' (expected 'swiglu')",
    "QMoE(activation_type='silu', ...)", "Export the experts with a SwiGLU activation (activation_type='swiglu').")),
    ("OFFLOAD-NODE-C05", "1C.5", "swiglu_fusion 1 (INT3) or 0/1", _c5_swiglu_fusion, _node_check("1C.5", "swiglu_fusion is 1 (interleaved) for INT3 and 0 or 1 otherwise.",
    "unsupported swiglu_fusion=2 (expected interleaved SwiGLU)", "QMoE(swiglu_fusion=2, ...)",
    "Write the fc1 gate/up halves interleaved (swiglu_fusion=1) or unfused (0).")),
    ("OFFLOAD-NODE-C06", "1C.6", "use_sparse_mixer is 0", _c6_sparse_mixer, _node_check("1C.6", "use_sparse_mixer is 0.", "use_sparse_mixer=1 is not supported by the QMoE offload backend",
    "QMoE(use_sparse_mixer=1, ...)", "Route with top-k softmax (use_sparse_mixer=0).")),
    ("OFFLOAD-NODE-C07", "1C.7", "k is positive", _c7_k, _node_check("1C.7", "attribute k is positive.", "attribute k must be positive", "QMoE(k=0, ...)",
    "Set k to the number of experts each token is routed to (>= 1).")),
    ("OFFLOAD-NODE-C08", "1C.8", "fc3, zero points, router_weights and activation scales absent", _c8_forbidden_inputs, _node_check("1C.8", "fc3 weights/scales, zero points, router_weights and activation scales are absent.",
    "unsupported optional input slot 8 is present", "QMoE with fc3_experts_weights (input slot 8) wired",
    "Leave the unsupported optional inputs empty (fuse fc3 into fc1 for SwiGLU).")),
    ("OFFLOAD-NODE-C09", "1C.9", "fc1/fc2 weights and scales: constant 3-D initializers, positive dims, not graph outputs", _c9_expert_inputs, _node_check("1C.9", "fc1/fc2 weights and scales are constant 3-D initializers with positive dims, not graph outputs.",
    "missing required expert weight/scale input at slot 6", "QMoE whose fc2_scales (slot 6) is empty or a graph input",
    "Store every expert weight and scale bank as a constant initializer.")),
    ("OFFLOAD-NODE-C10", "1C.10", "activations are FLOAT16 or BFLOAT16", _c10_activation_dtype, _node_check("1C.10", "the activations are FLOAT16 or BFLOAT16.",
    "unsupported activation dtype for QMoE offload (expected FLOAT16 or BFLOAT16)", "QMoE on FLOAT activations",
    "Run the MoE block in float16 or bfloat16 (q38 build --dtype fp16).")),
    ("OFFLOAD-NODE-C11", "1C.11", "expert weights are UINT8", _c11_weight_dtype, _node_check("1C.11", "the expert weight banks are UINT8.", "expert weight banks must be UINT8",
    "QMoE whose fc1_experts_weights is INT8", "Pack the quantized expert weights as UINT8.")),
    ("OFFLOAD-NODE-C12", "1C.12", "scales: FLOAT8E4M3FN (nvfp4) or the activation dtype (int)", _c12_scale_dtype, _node_check("1C.12", "the scales are FLOAT8E4M3FN (nvfp4) or the activation dtype (int).",
    "expert scale bank dtype does not match expected offload scale type", "QMoE(int) with FLOAT scales and FLOAT16 activations",
    "Cast the scale banks to the activation dtype (int) or FLOAT8E4M3FN (nvfp4).")),
    ("OFFLOAD-NODE-C13", "1C.13", "expert count 1..INT_MAX, >= k, consistent across banks", _c13_expert_count, _node_check("1C.13", "the expert count is 1..INT_MAX, at least k, and the same in every bank.",
    "invalid expert count or weight dimensions for QMoE offload", "QMoE(k=5) with 4 experts",
    "Give every bank the same expert count E with k <= E.")),
    ("OFFLOAD-NODE-C14", "1C.14", "INT3 weight layout", _c14_int3_layout, _node_check("1C.14", "INT3 weights use the INT3 packed layout (even fc1 rows, 3-bit packing of the columns).",
    "INT3 fc1_experts_weights dim 1 must be even", "QMoE(expert_weight_bits=3) with fc1 weights [4, 127, 24]",
    "Re-pack the INT3 experts with q38 offload (it writes the layout the backend reads).")),
    ("OFFLOAD-NODE-C15", "1C.15", "int4/int2/nvfp4 standard or transposed layout, aligned H and I", _c15_layout, _node_check("1C.15", "int4/int2/nvfp4 weights are in the standard or transposed layout, with aligned H and I.",
    "expert weight shapes do not match a supported QMoE offload layout", "QMoE(int4) with fc2 weights [4, 64, 16] for I=64",
    "Re-pack the experts in the standard [E, N, K/pack] layout with H and I aligned.")),
    ("OFFLOAD-NODE-C16", "1C.16", "scale shapes [E,2I,H/block] and [E,H,I/block]", _c16_scale_shapes, _node_check("1C.16", "the scale banks are [E, 2*I, H/block_size] and [E, H, I/block_size].",
    "expert scale dimensions do not match [E, 2*I, H/block_size] and [E, H, I/block_size]",
    "QMoE(block_size=32) with fc1 scales [4, 128, 4] for H=64", "Write one scale per block_size weights of each row.")),
    ("OFFLOAD-NODE-C17", "1C.17", "optional biases: constant, activation dtype, [E,2I] / [E,H]", _c17_biases, _node_check("1C.17", "optional biases are constant, in the activation dtype, [E, 2*I] (fc1) and [E, H] (fc2).",
    "optional bias slot 7 ('fc2_b') must match activation dtype and shape [E, 64]", "QMoE with an fc2 bias of shape [4, 128] for H=64",
    "Give the biases the activation dtype and shapes [E, 2*I] / [E, H], or drop them.")),
    ("OFFLOAD-NODE-C18", "1C.18", "global scales: required FLOAT [>=E] for nvfp4, constant when present", _c18_global_scales, _node_check("1C.18", "nvfp4 nodes have constant FLOAT global scales of at least E elements (required); int nodes' are constant when present.",
    "NVFP4 requires constant global scale at slot 16", "QMoE(quant_type='nvfp4') without fc2 global scale (slot 16)",
    "Store both nvfp4 global scales as FLOAT initializers of E elements.")),
)  # fmt: skip


def _moe_packed_reason(node: ir.Node) -> str | None:
    """§1F (lower confidence): MoEPacked offload eligibility."""
    if attr_str(node, "activation_type", "swiglu") != "swiglu":
        return f"unsupported activation_type='{attr_str(node, 'activation_type', 'swiglu')}' (expected 'swiglu')"
    k = attr_int(node, "k", 1)
    if not 1 <= k <= 16:
        return "MoEPacked offload requires attribute k in 1..16"
    bad = "MoEPacked expert weight dimensions are invalid for offload"
    if len(node.inputs) < 5 or input_at(node, 0) is None or input_at(node, 1) is None:
        return bad
    experts = set()
    for slot in (2, 3, 4):
        value = input_at(node, slot)
        if value is None or not is_constant_initializer(value) or value.is_graph_output():
            return bad
        dims = static_dims(value)
        if dims is None or len(dims) != 3 or value.dtype != ir.DataType.UINT8:
            return bad
        experts.add(dims[0])
    if len(experts) != 1 or not (1 <= next(iter(experts)) <= 512) or next(iter(experts)) < k:
        return bad
    return None


def _candidate_reason(
    node: ir.Node, *, compute_capability: tuple[int, int] | None
) -> tuple[str, str | None]:
    """(rule id, first failing reason) for one candidate node; reason None when eligible."""
    if compute_capability is not None and compute_capability < (8, 0):
        return "OFFLOAD-NODE-SM80", "CUDA execution provider requires SM80 or later for QMoE offload"
    if node.op_type == MOE:
        return "OFFLOAD-NODE-MOE", "operator 'MoE' does not support the QMoE offload backend"
    if node.op_type == MOE_PACKED:
        return "OFFLOAD-NODE-PACKED", _moe_packed_reason(node)
    q = _QMoE.of(node)
    for rule_id, _number, _summary, check, _doc in NODE_CHECKS:
        reason = check(q)
        if reason is not None:
            return rule_id, reason
    return NODE_CHECKS[-1][0], None


def _candidates(graph: ir.Graph) -> list[ir.Node]:
    return [n for n in graph if n.domain == MS_DOMAIN and n.op_type in _CANDIDATE_OPS]


def _shared_initializer(graph: ir.Graph, node: ir.Node, offloaded: set[int]) -> str | None:
    """The first expert initializer of ``node`` with a consumer outside the offloaded experts."""
    slots = _EXPERT_SLOTS[node.op_type]
    for slot in sorted(slots):
        value = input_at(node, slot)
        if value is None or not value.is_initializer():
            continue
        for consumer, index in value.uses():
            ok = (
                id(consumer) in offloaded
                and consumer.domain == MS_DOMAIN
                and index in _EXPERT_SLOTS.get(consumer.op_type, frozenset())
            )
            if not ok:
                return value.name
    return None


def _evaluate(
    model: ModelLike, *, compute_capability: tuple[int, int] | None
) -> list[tuple[ir.Node, str, str | None, str]]:
    """Per candidate: (node, rule id, reason, kind) with kind 'node' or 'shared' (§1D)."""
    graph = as_ir_model(model).graph
    results: list[list[Any]] = []
    for node in _candidates(graph):
        try:
            rule_id, reason = _candidate_reason(node, compute_capability=compute_capability)
        except AttributeKindError as exc:  # ORT's schema layer refuses the node first
            results.append([node, "ORT-SCHEMA-006", f"attribute {exc.name} is {exc.actual}, not {exc.expected}", "schema"])
            continue
        results.append([node, rule_id, reason, "node"])
    # 1D: drop nodes whose expert initializers have other consumers, until nothing changes.
    changed = True
    while changed:
        changed = False
        offloaded = {id(r[0]) for r in results if r[2] is None}
        for r in results:
            if r[2] is not None:
                continue
            shared = _shared_initializer(graph, r[0], offloaded)
            if shared is not None:
                r[1], r[2], r[3] = "OFFLOAD-NODE-SHARED", shared, "shared"
                changed = True
                break
    return [(r[0], str(r[1]), r[2], str(r[3])) for r in results]


def offload_eligibility(
    model: ModelLike, mode: str = "auto", *, compute_capability: tuple[int, int] | None = None
) -> list[tuple[str, str | None]]:
    """Per QMoE/MoE/MoEPacked node of the main graph: (node name, first failing reason or None).

    Mirrors ORT 1.32.0 on CUDA (§1B.3-1D), assuming every candidate is assigned to the CUDA EP of
    an SM80+ GPU unless ``compute_capability`` says otherwise. A reason is ORT's text for the node
    checks, or ``expert initializer '<i>' is shared with a non-offload consumer`` (§1D).

    Args:
        model: an ``onnx_ir.Model`` or ``onnx.ModelProto`` (external data need not be loaded).
        mode: ``auto``/``required`` (any spelling ORT accepts); ``disabled`` examines nothing.
        compute_capability: the GPU's (major, minor), if known.

    Returns:
        One entry per candidate in graph order; empty when mode is disabled.

    """
    if offload_mode({OFFLOAD_PREFIX + "mode": mode}) in {None, "disabled"}:
        return []
    out: list[tuple[str, str | None]] = []
    for node, _rule_id, reason, kind in _evaluate(model, compute_capability=compute_capability):
        if kind == "shared" and reason is not None:
            reason = f"expert initializer '{reason}' is shared with a non-offload consumer"
        out.append((node_label(node), reason))
    return out


def required_rejection_message(node_name: str, op_type: str, reason: str) -> str:
    """ORT's ``mode=required`` session error for a node-check failure."""
    return f"MoE offload mode='required' rejected node '{node_name}' ({op_type}): {reason}."


# --- graph rules ----------------------------------------------------------------------------


def _moe_owners(graph: ir.Graph) -> Iterator[ir.Node]:
    """The If / Loop / Scan nodes, at any depth, one of whose subgraphs holds a candidate node.

    The candidate must be in the subgraph itself: ORT names the node whose subgraph holds the MoE,
    not an enclosing one (probed).
    """
    for owner, sub in iter_subgraph_owners(graph):
        if owner.op_type in _CONTROL_FLOW and any(n.domain == MS_DOMAIN and n.op_type in _CANDIDATE_OPS for n in sub):
            yield owner
        yield from _moe_owners(sub)


def _check_subgraphs(model: ModelLike, entries: Mapping[str, str]) -> list[Violation]:
    if offload_mode(entries) != "required":
        return []
    found = []
    seen: set[int] = set()
    for owner in _moe_owners(as_ir_model(model).graph):
        if id(owner) in seen:
            continue
        seen.add(id(owner))
        found.append(Violation("OFFLOAD-SUBGRAPH-001", "MoE offload mode='required' does not support MoE/QMoE "
                               f"nodes inside subgraph node '{node_label(owner)}'.", node=node_label(owner)))  # fmt: skip
    return found


def _check_nodes(model: ModelLike, entries: Mapping[str, str]) -> list[Violation]:
    mode = offload_mode(entries)
    if mode not in {"auto", "required"}:
        return []
    found = []
    for node, rule_id, reason, kind in _evaluate(model, compute_capability=None):
        if reason is None or kind == "schema":  # the generic schema rules report a schema fault
            continue
        name = node_label(node)
        if mode == "required":
            if kind == "shared":
                text = (
                    f"MoE offload mode='required' rejected node '{name}': expert initializer "
                    f"'{reason}' is shared with a non-offload consumer."
                )
            else:
                text = required_rejection_message(name, node.op_type, reason)
            return [Violation(rule_id, text, node=name)]  # ORT stops at the first
        if kind == "shared":
            reason = f"expert initializer '{reason}' is shared with a non-offload consumer"
        found.append(
            Violation(rule_id, f"stays on the GPU (not offloaded): {reason}", node=name, severity="warning")
        )
    return found


def _threshold_enabled(entries: Mapping[str, str]) -> bool:
    text = entries.get(OFFLOAD_PREFIX + "tail_substitution_threshold")
    value = None if text is None else parse_from_chars(text)
    return value is not None and value > 0.0


def _check_tail_rank(model: ModelLike, entries: Mapping[str, str]) -> list[Violation]:
    if offload_mode(entries) not in {"auto", "required"} or not _threshold_enabled(entries):
        return []
    try:
        rank = int(entries.get(OFFLOAD_PREFIX + "tail_substitution_min_rank", "0"))
    except ValueError:
        return []
    for node, _rule_id, reason, _kind in _evaluate(model, compute_capability=None):
        if reason is not None:
            continue
        k = attr_int(node, "k", 1)  # an eligible node passed every typed read
        if not 0 <= rank < k:
            name = node_label(node)
            return [
                Violation(
                    "OFFLOAD-TAIL-001",
                    f"Invalid session.moe.offload.tail_substitution_min_rank for node '{name}': "
                    f"expected 0 <= min_rank < k={k}.",
                    node=name,
                )
            ]
    return []


# OFFLOAD-SUBGRAPH-001's examples (ONNX text, onnx.parser): a float MoE in both branches of an If
# (its weights graph inputs: the rule looks at where the node sits, not at its experts), checked
# with mode auto and with mode required.
_EX_MOE_IN_IF = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (bool cond, float[3,16] x, float[3,4] r, float[4,32,16] w1, float[4,16,32] w2) => (float[] y) {
  [branch] y = If (cond) <
    then_branch = then () => (float[] y_then) {
      [moe_then] y_then = com.microsoft.MoE <activation_type: string = "relu", k: int = 1> (x, r, w1, "", w2)
    },
    else_branch = else () => (float[] y_else) {
      [moe_else] y_else = com.microsoft.MoE <activation_type: string = "relu", k: int = 1> (x, r, w1, "", w2)
    }>
}"""


PLANNER_RULES: tuple[Rule, ...] = (
    Rule("OFFLOAD-SUBGRAPH-001", "mode=required: no MoE/QMoE/MoEPacked inside If/Loop/Scan subgraphs",
         "ort-contract-rules.md §1B.2; ort-cpu-capabilities.md §4.4", "cpu-session", "graph",
         effective(_check_subgraphs), _SINCE, family=FAMILY, doc=RuleDoc(
        "With session.moe.offload.mode=required ORT refuses a session whose MoE, QMoE or MoEPacked "
        "node sits inside an If/Loop/Scan body: the offload planner only handles main-graph nodes "
        "(checked on the CPU wheel too).",
        "Loop(...) with body { QMoE(...) }  and  session.moe.offload.mode=required",
        "Move the MoE node into the main graph, or use mode=auto (such nodes then stay resident).",
    ), examples=GraphExamples(GraphExample(_EX_MOE_IN_IF, {OFFLOAD_PREFIX + "mode": "auto"}), GraphExample(_EX_MOE_IN_IF, {OFFLOAD_PREFIX + "mode": "required"}))),
    Rule("OFFLOAD-NODE-001", "mode=required rejects the first ineligible MoE candidate; auto keeps "
         "it on the GPU (warning)", _SRC + "; §1B.4-1B.6, §1D, §1F", "cuda-only", "graph",
         effective(_check_nodes), _SINCE, ep="cuda", family=FAMILY, doc=RuleDoc(
        "When the session is created on CUDA, ORT's offload planner examines every MoE candidate: "
        "in mode=required the first ineligible one (unsupported expert_weight_bits, quant layout, "
        "activation, missing shapes, router_weights wired, ...) fails the session naming the node "
        "and reason; in mode=auto it stays on the GPU, which q38 reports as a warning.",
        "QMoE(expert_weight_bits=2, ...) with session.moe.offload.mode=required",
        "Make the node eligible (the message names the reason: e.g. 4- or 8-bit experts, clear "
        "router_weights with q38 offload), or use mode=auto to keep it resident.",
    )),
    Rule("OFFLOAD-TAIL-001", "tail_substitution_threshold > 0 needs min_rank < k on every eligible "
         "node", "ort-contract-rules.md §1E", "cuda-only", "graph", effective(_check_tail_rank), _SINCE,
         ep="cuda", family=FAMILY, doc=RuleDoc(
        "session.moe.offload.tail_substitution_threshold > 0 substitutes low-ranked experts; ORT "
        "requires min_rank < k on every eligible node, otherwise no expert could be substituted "
        "and the session is refused on CUDA.",
        "tail_substitution_threshold=0.1, min_rank=2 on a QMoE node with k=2",
        "Lower session.moe.offload.min_rank below the node's k, or set tail_substitution_threshold=0.",
    )),
)  # fmt: skip


def _reported(rule_id: str) -> ModelCheck:
    """OFFLOAD-NODE-001's results of one per-check id (the check behind that id's record)."""

    def check(model: ModelLike, entries: Mapping[str, str]) -> list[Violation]:
        return [v for v in _check_nodes(model, entries) if v.rule_id == rule_id]

    return effective(check)


_NODE_SRC = "ort-contract-rules.md §"
# (id, ORT rule, summary, documentation) of the ids OFFLOAD-NODE-001 reports besides the 1C node checks
_CANDIDATE_IDS: tuple[tuple[str, str, str, RuleDoc], ...] = (
    ("OFFLOAD-NODE-MOE", "1B.6", "a plain MoE node has no QMoE offload backend", _node_check("1B.6", "a plain com.microsoft MoE node (unquantized experts) has no offload backend.",
    "operator 'MoE' does not support the QMoE offload backend", "MoE(...) (not QMoE)",
    "Quantize the experts into a QMoE node (q38 build / offload), or keep the MoE resident.")),
    ("OFFLOAD-NODE-PACKED", "1F", "MoEPacked: swiglu, k in 1..16, constant 3-D UINT8 expert banks of 1..512 experts", _node_check("1F", "a MoEPacked node has activation_type swiglu, k in 1..16 and constant 3-D UINT8 expert banks (inputs 2-4) of one expert count in 1..512, >= k.",
    "MoEPacked expert weight dimensions are invalid for offload", "MoEPacked(k=0, ...) or with FLOAT16 expert banks",
    "Pack the experts as constant UINT8 [E, ., .] banks, 1 <= k <= 16, swiglu.")),
    ("OFFLOAD-NODE-SHARED", "1D", "an offloaded node's expert initializers have no other consumer", _node_check("1D", "an offloaded node's expert initializers are consumed by no other node (ORT drops such a node from the offload set, repeatedly, until none is left).",
    "expert initializer 'fc1_w' is shared with a non-offload consumer", "QMoE whose fc1_experts_weights also feeds an Identity",
    "Give the other consumer its own copy of the initializer, or remove it.")),
)  # fmt: skip
CHECK_RULES: tuple[Rule, ...] = tuple(
    Rule(rule_id, summary, _NODE_SRC + number, "cuda-only", "graph", _reported(rule_id), _SINCE, ep="cuda",
         part_of="OFFLOAD-NODE-001", family=FAMILY, doc=doc)
    for rule_id, number, summary, doc in (*((r, n, s, d) for r, n, s, _, d in NODE_CHECKS), *_CANDIDATE_IDS)
)  # fmt: skip
"""One record per id OFFLOAD-NODE-001 reports (its 1C node checks, MoE, MoEPacked, shared
experts): documentation for the catalogue; the runner runs OFFLOAD-NODE-001 only."""
RULES: tuple[Rule, ...] = (*PLANNER_RULES, *CHECK_RULES)
"""Every rule of this family: the planner's rules, then the ids OFFLOAD-NODE-001 reports."""


def check_offload_nodes(
    model: ModelLike, entries: Mapping[str, str], *, ort_version: str = REFERENCE_ORT_VERSION, cuda: bool = False
) -> list[Violation]:
    """The offload graph rules for ``model`` under session config ``entries``.

    ``cuda=False`` runs only what the CPU wheel enforces (the subgraph rule); ``cuda=True`` adds the
    CUDA-only node rules, as if every candidate were assigned to the CUDA EP.
    """
    found: list[Violation] = []
    for rule in PLANNER_RULES:
        if rule.applies(ort_version) and (cuda or rule.ep != "cuda"):
            found.extend(rule.check_graph(model, entries))
    return found
