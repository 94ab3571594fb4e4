"""QMoE schema-inference and CPU kernel-constructor rules (probed on 1.31.1 and 1.32.0 CPU).

* ``QMOE-SCHEMA-001`` (any EP, 1.32.0 inference): INT3 experts need float16/bfloat16 activations,
  ``quant_type='int'`` with an explicit ``weights_prepacked=0``, fused SwiGLU with equal fc bits,
  and the INT3 layout (fc1 ``[E, 2I, 3H/8]``, fc2 ``[E, H, 3I/8]``).
* ``QMOE-CPU-001`` (``ep="cpu"``): what ``MoEBaseCPU`` and ``QMoECPU`` refuse when a CPU session
  creates the kernel, in the constructor's order: ``k >= 1``; the activation spelling;
  ``k == 2`` with the sparse mixer (``use_sparse_mixer == 1``: any other value is off);
  ``expert_weight_bits`` in {2, 3, 4, 8} (1.31.1: {2, 4, 8}); ``block_size`` >= 0, >= 16 when
  set, a power of two; ``weights_prepacked`` in [-1, 1] (1.32.0); no post-activation SwiGLU
  clipping (1.32.0); fused SwiGLU with matching fc1/fc3 bits; interleaved SwiGLU
  (``swiglu_fusion=1``). 1.32.0 then routes int4/int2 ``weights_prepacked=1``, nvfp4 and fp4 to
  the "shared" kernel, which needs block 32/64/128 (int), one bit width for all three projections
  (``fc1/fc2/fc3_expert_weight_bits`` equal to ``expert_weight_bits``), interleaved SwiGLU without
  sparse mixer (``use_sparse_mixer == 1``) and no fc3 / zero point / global or activation scale
  inputs; bfloat16 runs only there.
  Once constructed, the per-expert kernel (1.31.1's only one) prepacks initializer fc1 / fc2
  weights and refuses a rank other than 3 (below 3 onnxruntime aborts the process; probed in a
  child process); the 1.32.0 shared kernel takes any rank.
* ``MOE-CPU-001`` (``ep="cpu"``): the float-expert MoE shares ``MoEBaseCPU``: k >= 1, the
  activation spelling, k == 2 with the sparse mixer.
* ``QMOE-CPU-002`` (``ep="cpu"``, 1.32.0): the session option ``ep.cpu.qmoe_deferred_scale`` is
  ``'0'`` or ``'1'`` (read up to its first NUL), checked by the same constructor, so only on a
  graph with a QMoE node.

Constructor rules apply only where the session reaches kernel creation (``cpu_kernels.runs_on_cpu``):
a node without a CPU kernel fails the session first with ``NOT_IMPLEMENTED``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx_ir as ir

from contracts._facts import model_facts, nodes_of
from contracts._graph import (
    ModelLike,
    as_ir_model,
    attr_int,
    attr_str,
    input_at,
    node_label,
    per_node,
)
from contracts._rule import GraphExample, GraphExamples, RuleDoc, Violation, parse_version
from contracts._versions import per_version
from contracts.cpu_kernels import runs_on_cpu
from contracts.offload_config import shown
from contracts.schema_registry import registry_for
from contracts.schema_rules import schema_clean
from contracts.session_config import effective_entries
from contracts.shapes import Shapes, shapes_of
from q38._ops import MOE, MS_DOMAIN, QMOE

__all__ = ["DEFERRED_SCALE_KEY", "RULES", "cpu_constructor_problems", "int3_problems", "moe_base_problems",
           "prepack_problems"]

DEFERRED_SCALE_KEY = "ep.cpu.qmoe_deferred_scale"
_ACTIVATIONS = frozenset({"relu", "gelu", "silu", "identity", "swiglu"})
_SHARED_FORBIDDEN_SLOTS = (*range(8, 14), *range(15, 21))  # fc3, zero points, global/act scales
_SRC = "probed onnxruntime 1.31.1 / 1.32.0 CPU (moe_base_cpu.h, moe_quantization_cpu.cc)"


def _is_v132(version: str) -> bool:
    return parse_version(registry_for(version).ort_version) >= (1, 32, 0)


def _shared(node: ir.Node) -> str | None:
    """Which 1.32.0 "shared" CPU kernel a node takes (``int``, ``nvfp4``, ``mxfp4``), or None."""
    if attr_int(node, "weights_prepacked", -1) != 1:
        return None
    quant = attr_str(node, "quant_type", "int")
    bits = attr_int(node, "expert_weight_bits", 4)
    if quant == "int" and bits in {2, 4}:
        return "int"
    if quant == "nvfp4":
        return "nvfp4"
    if quant == "fp4":
        return "mxfp4"
    return None


def moe_base_problems(node: ir.Node) -> list[str]:
    """What ``MoEBaseCPU`` (the constructor MoE and QMoE share) refuses, in its order."""
    found = []
    k = attr_int(node, "k", 1)
    if k < 1:
        found.append(f"MoE attribute 'k' must be >= 1, got k={k}")
    activation = attr_str(node, "activation_type", "relu")
    if activation not in _ACTIVATIONS:
        found.append(f"Unsupported MoE activation type: {activation}")
    if attr_int(node, "use_sparse_mixer", 0) == 1 and k != 2:  # only 1 turns it on (probed: 2, -1 load)
        found.append("Sparse mixer only supports k=2")
    return found


def _base_problems(node: ir.Node, v132: bool) -> list[str]:
    found = moe_base_problems(node)
    activation = attr_str(node, "activation_type", "relu")
    bits = attr_int(node, "expert_weight_bits", 4)
    allowed_bits = {2, 3, 4, 8} if v132 else {2, 4, 8}
    if bits not in allowed_bits:
        found.append("Attribute 'expert_weight_bits' must be 2, 3, 4, or 8." if v132
                     else "Attribute 'expert_weight_bits' must be 2, 4, or 8.")  # fmt: skip
    block = attr_int(node, "block_size", 0)
    if block < 0:
        found.append("block_size_ >= 0 was false.")
    elif block:
        if block < 16:
            found.append("block_size must be >= 16 when provided.")
        elif block & (block - 1):
            found.append("block_size must be a power of 2.")
    if v132 and not -1 <= attr_int(node, "weights_prepacked", -1) <= 1:
        found.append("weights_prepacked must be -1, 0, or 1.")
    if v132 and attr_int(node, "swiglu_limit_after_activation", 0) != 0:
        found.append("Post-activation SwiGLU clipping currently requires CUDA.")
    fusion = attr_int(node, "swiglu_fusion", 0)
    fc1 = attr_int(node, "fc1_expert_weight_bits", bits)
    fc3 = attr_int(node, "fc3_expert_weight_bits", bits)
    if fusion != 0 and fc1 != fc3:
        found.append("Fused SwiGLU requires FC1 and FC3 expert weight bits to match.")
    if activation == "swiglu" and fusion != 1:
        found.append("CPU QMoE only supports interleaved SwiGLU format. Please set swiglu_fusion=1.")
    return found


def _shared_problems(node: ir.Node, activation_type: ir.DataType | None) -> list[str]:
    found = []
    kind = _shared(node)
    if kind is None:
        if activation_type == ir.DataType.BFLOAT16:
            found.append("CPU bfloat16 QMoE requires a shared layout.")
        return found
    block = attr_int(node, "block_size", 0)
    bits = attr_int(node, "expert_weight_bits", 4)
    if kind == "int" and block not in {32, 64, 128}:
        found.append("Shared CPU QMoE requires block_size 32, 64, or 128.")
    if kind == "nvfp4" and bits == 8:
        found.append("Shared CPU INT3 QMoE requires weights_prepacked=0.")
    elif kind == "nvfp4" and not (bits == 4 and block == 16):
        found.append("Shared CPU NVFP4 QMoE requires expert_weight_bits=4 and block_size=16.")
    if kind == "mxfp4" and bits == 8:
        found.append("Shared CPU INT3 QMoE requires weights_prepacked=0.")
    elif kind == "mxfp4" and not (bits == 4 and block == 32):
        found.append("Shared CPU MXFP4 QMoE requires expert_weight_bits=4 and block_size=32.")
    if any(attr_int(node, f"fc{i}_expert_weight_bits", bits) != bits for i in (1, 2, 3)):
        found.append("Shared CPU QMoE does not yet support mixed projection bit widths.")
    interleaved = attr_str(node, "activation_type", "relu") == "swiglu" and attr_int(node, "swiglu_fusion", 0) == 1
    if not interleaved or attr_int(node, "use_sparse_mixer", 0) == 1:  # ORT reads it as "== 1"
        found.append("Shared CPU QMoE requires interleaved SwiGLU without sparse mixer.")
    if any(input_at(node, slot) is not None for slot in _SHARED_FORBIDDEN_SLOTS):
        found.append("Shared CPU QMoE does not support FC3, explicit zero points, or auxiliary scales.")
    return found


def cpu_constructor_problems(node: ir.Node, version: str, activation_type: ir.DataType | None) -> list[str]:
    """Everything the CPU kernel constructor of onnxruntime ``version`` refuses on ``node``."""
    v132 = _is_v132(version)
    found = _base_problems(node, v132)
    if v132:
        found.extend(_shared_problems(node, activation_type))
    return found


def _cpu_nodes(model: ModelLike, version: str) -> list[ir.Node]:
    if not runs_on_cpu(model, version):
        return []  # NOT_IMPLEMENTED comes first: no constructor runs
    return [n for n in nodes_of(model, MS_DOMAIN, QMOE) if schema_clean(model, n)]


def prepack_problems(node: ir.Node, version: str) -> list[str]:
    """What the per-expert CPU kernel's PrePack refuses once the constructor accepted ``node``.

    That is an initializer fc1 / fc2 weight (inputs 2 and 5) of a rank other than 3. 1.31.1 has only
    that kernel; 1.32.0's shared kernel (``_shared``) packs any rank (probed). A rank above 3 is
    ORT's error; below 3 the process aborts (``terminate called``), a refusal all the same. A
    weight that is no initializer is not prepacked: it is checked when the model runs.
    """
    if _is_v132(version) and _shared(node) is not None:
        return []
    found = []
    for slot in (2, 5):
        value = input_at(node, slot)
        tensor = value.const_value if value is not None and value.is_initializer() else None
        if tensor is not None and len(tensor.shape) != 3:
            rank = len(tensor.shape)
            aborts = " (onnxruntime aborts the process on a rank below 3)" if rank < 3 else ""
            found.append(f"Expected rank 3 for QMoE weight shape, got {rank}.{aborts}")
            break
    return found


def _check_cpu(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    ir_model = as_ir_model(model)
    typing = model_facts(ir_model).typing(registry_for(version))

    def one(node: ir.Node) -> Iterable[Violation]:
        dtype = typing.elem_type(input_at(node, 0))
        problems = cpu_constructor_problems(node, version, dtype) or prepack_problems(node, version)
        for text in problems:
            yield Violation("QMOE-CPU-001", text, node=node_label(node))

    return per_node(_cpu_nodes(ir_model, version), one)


def _check_moe_cpu(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    ir_model = as_ir_model(model)
    if not runs_on_cpu(ir_model, version):
        return []  # NOT_IMPLEMENTED comes first: no constructor runs
    nodes = [n for n in nodes_of(ir_model, MS_DOMAIN, MOE) if schema_clean(ir_model, n)]
    return per_node(nodes, lambda node: [Violation("MOE-CPU-001", text, node=node_label(node))
                                         for text in moe_base_problems(node)])  # fmt: skip


def _check_deferred_scale(model: ModelLike, entries: Mapping[str, str], version: str) -> list[Violation]:
    value = effective_entries(entries).get(DEFERRED_SCALE_KEY, "0")
    if value in {"0", "1"}:
        return []

    return [Violation("QMOE-CPU-002", f"ep.cpu.qmoe_deferred_scale must be '0' or '1', got '{shown(value)}'.",
                      node=node_label(node)) for node in _cpu_nodes(model, version)][:1]  # fmt: skip


def int3_problems(node: ir.Node, activation_type: ir.DataType | None, shapes: Shapes) -> list[str]:
    """1.32.0 inference of an INT3 QMoE (any fc's effective bits 3), in its order (probed)."""
    bits = attr_int(node, "expert_weight_bits", 4)
    per_fc = [attr_int(node, f"fc{i}_expert_weight_bits", bits) for i in (1, 2, 3)]
    if 3 not in per_fc:
        return []
    if activation_type is not None and activation_type not in {ir.DataType.FLOAT16, ir.DataType.BFLOAT16}:
        return ["QMoE INT3 requires FP16 or BF16 activations."]
    if attr_str(node, "quant_type", "int") != "int" or "weights_prepacked" not in node.attributes or \
            attr_int(node, "weights_prepacked", -1) != 0:  # fmt: skip
        return ["QMoE INT3 requires integer quantization and explicit weights_prepacked=0 (raw weights)."]
    fused = attr_str(node, "activation_type", "relu") == "swiglu" and attr_int(node, "swiglu_fusion", 0) == 1
    if not fused or per_fc[0] != per_fc[2]:  # FC1 and FC3 only: FC2 may have its own width (probed)
        return [("QMoE INT3 requires activation_type='swiglu', swiglu_fusion=1 and equal effective FC1/FC3 widths "
                "after inheritance.")]  # fmt: skip
    hidden = shapes.dim(input_at(node, 0), -1)
    fc1, fc2 = shapes.shape(input_at(node, 2)), shapes.shape(input_at(node, 5))
    if hidden is None or fc1 is None or fc2 is None or len(fc1) != 3 or len(fc2) != 3:
        return []
    d1, d2, e1, e2 = fc1[1], fc1[2], fc2[1], fc2[2]
    bits1, bits2 = per_fc[0], per_fc[1]  # packed bytes per row: each fc's own width (probed 4/3/4)
    wrong = (isinstance(d2, int) and d2 * 8 != bits1 * hidden) or (isinstance(e1, int) and e1 != hidden) or (
        isinstance(d1, int) and isinstance(e2, int) and (d1 % 2 or e2 * 8 != bits2 * (d1 // 2)))
    return ["QMoE INT3 incompatible"] if wrong else []


def _check_int3(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    ir_model = as_ir_model(model)
    typing = model_facts(ir_model).typing(registry_for(version))
    shapes = shapes_of(ir_model)

    def one(node: ir.Node) -> Iterable[Violation]:
        for text in int3_problems(node, typing.elem_type(input_at(node, 0)), shapes):
            yield Violation("QMOE-SCHEMA-001", text, node=node_label(node))

    return per_node([n for n in nodes_of(ir_model, MS_DOMAIN, QMOE) if schema_clean(ir_model, n)], one)

# The rules' examples (ONNX text, onnx.parser): a float MoE, and a QMoE of 4 raw int4 block-32
# experts (hidden 64, inter 32, fp32 scales) whose weights are graph inputs, so no initializer is
# written out (a weight that is no initializer is not prepacked: the constructor rules still run).
_EX_MOE = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[3,16] x, float[3,4] r, float[4,32,16] w1, float[4,16,32] w2) => (float[] y) {
  [moe] y = com.microsoft.MoE <activation_type: string = "relu", k: int = 1> (x, r, w1, "", w2)
}"""
_EX_QMOE = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[2,64] x, float[2,4] router, uint8[4,64,32] fc1_w, float[4,64,2] fc1_s, uint8[4,64,16] fc2_w, float[4,64,1] fc2_s)
  => (float[2,64] y) {
  [moe0] y = com.microsoft.QMoE
      <activation_type: string = "swiglu", block_size: int = 32, expert_weight_bits: int = 4, k: int = 2,
       normalize_routing_weights: int = 1, quant_type: string = "int", swiglu_fusion: int = 1, weights_prepacked: int = 0>
      (x, router, fc1_w, fc1_s, "", fc2_w, fc2_s)
}"""

FAMILY = "qmoe"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES = (
    *per_version("QMOE-SCHEMA-001", "INT3 QMoE inference: float16/bfloat16 activations, quant_type int "
                 "with explicit weights_prepacked=0, fused SwiGLU with equal fc bits, the INT3 weight layout",
                 _SRC, "cpu-session", "graph", _check_int3, since="1.32.0", family=FAMILY, doc=RuleDoc(
        "ORT 1.32.0's INT3 QMoE inference requires float16/bfloat16 activations, an integer "
        "quant_type with weights_prepacked=0 explicit, fused SwiGLU with equal FC1/FC3 bits and "
        "the packed INT3 weight layout (bytes sized by each fc's own width).",
        "QMoE(expert_weight_bits=3, activations float32, ...)",
        "Feed float16/bfloat16 activations and write the INT3 weights in the layout ORT expects.",
    ), examples=GraphExamples.edited(_EX_QMOE, ("expert_weight_bits: int = 4", "expert_weight_bits: int = 3"))),
    *per_version("QMOE-CPU-001", "CPU kernel constructor: k >= 1, activation spelling, expert bits, "
                 "block_size, weights_prepacked, no post-activation clipping, interleaved SwiGLU, the "
                 "1.32.0 shared kernel's block / SwiGLU / optional-input limits, bfloat16 only there",
                 _SRC, "cpu-session", "graph", _check_cpu, ep="cpu", family=FAMILY, doc=RuleDoc(
        "The CPU QMoE constructor requires k >= 1, a known activation spelling, k == 2 with the "
        "sparse mixer (use_sparse_mixer == 1; any other value is off), supported expert bits and "
        "block_size, weights_prepacked as ORT expects, no post-activation clipping, "
        "interleaved SwiGLU, and (1.32.0 shared kernel) its block / SwiGLU / optional-input "
        "limits; bfloat16 only there.",
        "QMoE(k=0, ...) on a CPU graph",
        "Use k >= 1 and the supported activation, bits and block size for CPU nodes.",
    ), examples=GraphExamples.edited(_EX_QMOE, ("k: int = 2", "k: int = 0"))),
    *per_version("MOE-CPU-001", "MoE (float experts) CPU constructor, MoEBaseCPU's checks: k >= 1, the activation "
                 "spelling, k == 2 with the sparse mixer", _SRC, "cpu-session", "graph", _check_moe_cpu, ep="cpu", family=FAMILY, doc=RuleDoc(
        "The CPU MoE (float experts) constructor shares MoEBaseCPU with QMoE: k >= 1, an activation "
        "ORT knows (relu, gelu, silu, identity, swiglu) and k == 2 with the sparse mixer; a CPU "
        "session fails otherwise ('Unsupported MoE activation type: tanh').",
        "MoE(activation_type='tanh', ...) on a CPU graph",
        "Use k >= 1 and one of the supported activation spellings.",
    ), examples=GraphExamples.edited(_EX_MOE, ("\"relu\"", "\"tanh\""))),
    *per_version("QMOE-CPU-002", "ep.cpu.qmoe_deferred_scale is '0' or '1' on a graph whose QMoE runs "
                 "on the CPU EP", _SRC + "; ort-cpu-capabilities.md §4.2", "cpu-session", "graph",
                 _check_deferred_scale, ep="cpu", since="1.32.0", family=FAMILY, doc=RuleDoc(
        "ep.cpu.qmoe_deferred_scale must be '0' or '1' when a QMoE node runs on the CPU EP; ORT "
        "refuses the session otherwise.",
        '"ep.cpu.qmoe_deferred_scale": "yes"',
        "Set ep.cpu.qmoe_deferred_scale to '0' or '1', or remove it.",
    ), examples=GraphExamples(GraphExample(_EX_QMOE, {"ep.cpu.qmoe_deferred_scale": "1"}), GraphExample(_EX_QMOE, {"ep.cpu.qmoe_deferred_scale": "bogus"}))),
)  # fmt: skip
