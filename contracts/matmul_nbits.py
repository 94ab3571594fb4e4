"""MatMulNBits CPU kernel-constructor and PrePack rules (probed on 1.31.1 and 1.32.0 CPU).

MatMulNBits is what the int4 builder exports are made of; its CPU kernel refuses attributes the
schema accepts, when a CPU session creates the kernel:

* ``MNB-CPU-001`` (``ep="cpu"``): the constructor, in its order: ``K``, ``N``, ``bits`` and
  ``block_size`` are read as unsigned sizes, so a negative one fails with a bare
  ``narrowing_error``; ``bits`` in {2, 4, 8}; on 1.32.0 no 8-bit weights with floating-point zero
  points (input 3 of a type other than uint8); ``block_size`` a power of two >= 16 (1.32.0; at most
  256 with 2 bits) or one of 16, 32, 64, 128, 256 (1.31.1).
* ``MNB-CPU-002`` (``ep="cpu"``): PrePack, once the constructor accepted the node: an initializer
  ``B`` has the shape the attributes imply, ``[N, ceil(K / block_size), ceil(block_size * bits / 8)]``.
  A ``B`` that is no initializer is not prepacked (checked when the model runs).

Both apply only where the session reaches kernel creation (``cpu_kernels.runs_on_cpu``): a node
without a CPU kernel (bfloat16) fails the session first with ``NOT_IMPLEMENTED``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx_ir as ir

from contracts._facts import model_facts, nodes_of
from contracts._graph import ModelLike, as_ir_model, attr_int, input_at, node_label, per_node
from contracts._rule import GraphExamples, RuleDoc, Violation, parse_version
from contracts._versions import per_version
from contracts.cpu_kernels import runs_on_cpu
from contracts.op_kernel_rules import GraphCheck
from contracts.schema_registry import registry_for
from contracts.schema_rules import schema_clean
from q38._ops import MATMUL_NBITS, MS_DOMAIN

__all__ = ["RULES", "constructor_problems", "expected_b_shape", "prepack_problems"]

_SRC = "probed onnxruntime 1.31.1 / 1.32.0 CPU (contrib_ops/cpu/quantization/matmul_nbits.cc)"
_V131_BLOCKS = (16, 32, 64, 128, 256)


def _attrs(node: ir.Node) -> tuple[int, int, int, int]:
    """(K, N, bits, block_size) as the kernel reads them (bits defaults to 4)."""
    return (attr_int(node, "K", 0), attr_int(node, "N", 0), attr_int(node, "bits", 4),
            attr_int(node, "block_size", 0))  # fmt: skip


def constructor_problems(node: ir.Node, version: str, zero_point_type: ir.DataType | None) -> list[str]:
    """The first refusal of the CPU constructor of onnxruntime ``version`` on ``node`` (or none).

    ``zero_point_type`` is the element type of input 3 (None: absent or unknown).
    """
    k, n, bits, block = _attrs(node)
    if min(k, n, bits, block) < 0:
        return ["narrowing_error"]  # ORT's whole text: a negative K, N, bits or block_size read as a size
    if bits not in {2, 4, 8}:
        return ["Only 2b, 4b and 8b quantization is supported for MatMulNBits op, additional bits support is planned."]
    v132 = parse_version(registry_for(version).ort_version) >= (1, 32, 0)
    if v132 and bits == 8 and zero_point_type is not None and zero_point_type != ir.DataType.UINT8:
        return ["MatMulNBits on CPU does not support 8-bit weights with floating-point zero points; use uint8 zero points."]
    if v132 and (block < 16 or block & (block - 1)):
        return [f"Only power-of-two block sizes >= 16 are supported for MatMulNBits op, got: {block}"]
    if v132 and bits == 2 and block > 256:
        return [f"2-bit MatMulNBits block_size must not exceed 256. Got {block}"]
    if not v132 and block not in _V131_BLOCKS:
        return [f"Only block sizes 16, 32, 64, 128, and 256 are supported for MatMulNBits op, got: {block}"]
    return []


def expected_b_shape(node: ir.Node) -> tuple[int, int, int]:
    """``[N, ceil(K / block_size), ceil(block_size * bits / 8)]``: the B the attributes imply."""
    k, n, bits, block = _attrs(node)
    return n, -(-k // block), -(-(block * bits) // 8)


def prepack_problems(node: ir.Node) -> list[str]:
    """PrePack's refusal of an initializer B whose shape is not the attributes' (or none)."""
    value = input_at(node, 1)
    tensor = value.const_value if value is not None and value.is_initializer() else None
    if tensor is None:
        return []
    got = tuple(int(d) if isinstance(d, int) else -1 for d in tensor.shape)
    want = expected_b_shape(node)
    if got == want:
        return []
    k, n, bits, block = _attrs(node)
    shown_got, shown_want = ",".join(map(str, got)), ",".join(map(str, want))
    return [(f"MatMulNBits PrePack: B initializer shape {{{shown_got}}} does not match attribute-derived shape "
             f"[{shown_want}] (N={n}, K={k}, bits={bits}, block_size={block})")]  # fmt: skip


def _cpu_nodes(model: ir.Model, version: str) -> list[ir.Node]:
    if not runs_on_cpu(model, version):
        return []  # NOT_IMPLEMENTED comes first: no constructor runs
    return [n for n in nodes_of(model, MS_DOMAIN, MATMUL_NBITS) if schema_clean(model, n)]


def _check(rule_id: str) -> GraphCheck:
    def check(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
        ir_model = as_ir_model(model)
        typing = model_facts(ir_model).typing(registry_for(version))

        def one(node: ir.Node) -> Iterable[Violation]:
            built = constructor_problems(node, version, typing.elem_type(input_at(node, 3)))
            problems = built if rule_id == "MNB-CPU-001" else ([] if built else prepack_problems(node))
            for text in problems:
                yield Violation(rule_id, text, node=node_label(node))

        return per_node(_cpu_nodes(ir_model, version), one)

    return check

# The rules' examples (ONNX text, onnx.parser): MatMulNBits with K=16, N=1, 4 bits, block 16, so
# the B initializer the attributes imply is [1, 1, 8].
_EX_MNB = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[2,16] A) => (float[] Y)
  <uint8[1,1,8] B = {0, 0, 0, 0, 0, 0, 0, 0}, float[1] S = {1.0}> {
  [mnb] Y = com.microsoft.MatMulNBits <K: int = 16, N: int = 1, bits: int = 4, block_size: int = 16> (A, B, S)
}"""

FAMILY = "matmul-nbits"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES = (
    *per_version("MNB-CPU-001", "MatMulNBits CPU constructor: non-negative K / N / bits / block_size, bits in "
                 "{2, 4, 8}, no 8-bit weights with float zero points (1.32.0), block_size a power of two >= 16 "
                 "(1.31.1: 16 to 256)", _SRC, "cpu-session", "graph", _check("MNB-CPU-001"), ep="cpu", family=FAMILY, doc=RuleDoc(
        "The CPU MatMulNBits constructor reads K, N, bits and block_size as unsigned sizes (a "
        "negative one fails with 'narrowing_error'), takes bits 2, 4 or 8 only, on 1.32.0 refuses "
        "8-bit weights with floating-point zero points, and wants block_size a power of two >= 16 "
        "(1.31.1: 16, 32, 64, 128 or 256); a CPU session fails otherwise.",
        "MatMulNBits(bits=3, block_size=32, ...) on a CPU graph",
        "Quantize to 2, 4 or 8 bits with a supported block size (and uint8 zero points for 8 bits).",
    ), examples=GraphExamples.edited(_EX_MNB, ("bits: int = 4", "bits: int = 3"))),
    *per_version("MNB-CPU-002", "MatMulNBits CPU PrePack: an initializer B has the shape N, K, bits and "
                 "block_size imply", _SRC, "cpu-session", "graph", _check("MNB-CPU-002"), ep="cpu", family=FAMILY, doc=RuleDoc(
        "When the CPU kernel prepacks an initializer B it checks B's shape against the attributes: "
        "[N, ceil(K / block_size), ceil(block_size * bits / 8)]; 'MatMulNBits PrePack: B initializer "
        "shape {...} does not match attribute-derived shape [...]' fails the session otherwise.",
        "MatMulNBits(K=64, N=32, bits=4, block_size=32) with B of shape [33, 2, 16]",
        "Make N and K the weight's real dims (or re-export B with the quantizer that wrote the attributes).",
    ), examples=GraphExamples.edited(_EX_MNB, ("uint8[1,1,8] B = {0, 0, 0, 0, 0, 0, 0, 0}", "uint8[2,1,8] B = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}"))),
)  # fmt: skip
