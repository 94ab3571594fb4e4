"""A node no EP of its session has a kernel for fails the session: ORT's NOT_IMPLEMENTED, as a rule.

``ORT-KERNEL-001`` (a CPU session): the node finds no CPU kernel for its op, since-version and
bound types, even after ORT inlines its function body (:mod:`contracts.cpu_kernels`); ORT says
``Could not find an implementation for Max(13) node with name ''``. ``ORT-KERNEL-002`` (a CUDA
session, CUDA then CPU): the node finds neither a CUDA kernel (:mod:`contracts.cuda_kernels`,
which also warns ``CUDA-FALLBACK-001`` for a node only the CPU EP serves) nor a CPU kernel. Where
no GPU dump of the CUDA registry exists for the version the CUDA rule says nothing: it does not
guess (source-derived CUDA facts, read at a commit that may not be the release's, only warn).

Where the registry is not enough: a kernel can be registered for a type and still refuse it or
an attribute in its constructor (RNN/GRU/LSTM ``layout=1``, StringNormalizer locales,
MatMulNBits' bits); those are the constructor rules' (``ep="cpu"`` rules that run only when
:func:`~contracts.cpu_kernels.runs_on_cpu`).
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts._graph import ModelLike, as_ir_model, node_label
from contracts._rule import GraphExamples, RuleDoc, Violation
from contracts._versions import per_version
from contracts.cpu_kernels import no_cpu_kernel
from contracts.cuda_kernels import cuda_kernels, fallback_nodes

__all__ = ["RULES"]

_SRC = "onnxruntime/core/framework/graph_partitioner.cc (Could not find an implementation for ...)"


def _check_cpu(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    return [Violation("ORT-KERNEL-001", found.message(), node=node_label(found.node))
            for found in no_cpu_kernel(model, version)]  # fmt: skip


def _check_cuda(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    facts = cuda_kernels(version)
    if facts is None or not facts.probed:
        return []  # the CUDA registry is not probed for this version (source-derived facts warn only): no guess
    ir_model = as_ir_model(model)
    on_cpu = {id(n) for n in fallback_nodes(ir_model, version)}
    return [Violation("ORT-KERNEL-002",
                      f"{found.message()} (no kernel in the CUDA EP [{facts.provenance}] nor the CPU EP)",
                      node=node_label(found.node))
            for found in no_cpu_kernel(ir_model, version) if id(found.node) in on_cpu]  # fmt: skip

# The rule's examples (ONNX text, onnx.parser): Max at opset 21, whose CPU kernel lists int32, not int16.
_EX_MAX = """<ir_version: 10, opset_import: ["" : 21]>
g (int32[2] a, int32[2] b) => (int32[2] y) {
  [max] y = Max (a, b)
}"""

FAMILY = "kernel"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES = (
    *per_version("ORT-KERNEL-001",
                 "a node of a CPU session finds no CPU kernel for its op, since-version and types (NOT_IMPLEMENTED)",
                 _SRC, "cpu-session", "graph", _check_cpu, ep="cpu", family=FAMILY, doc=RuleDoc(
        "A CPU session finds a kernel for every node before it creates any: ORT's kernel registry "
        "matches a registration whose version range serves the node's schema since-version (an "
        "open-ended one only from its own start: RoiAlign [16, INT_MAX] does not serve RoiAlign(22)) "
        "and whose every type constraint lists the type of the first input, else output, bound to it "
        "(Cast's T2 is its output type). A float16 node takes a float kernel (ORT inserts Casts); "
        "bfloat16 does not. A node with no kernel but a function body is inlined and its body's "
        "nodes must find kernels (Bernoulli -> RandomUniformLike(22)). Otherwise the session fails "
        "with NOT_IMPLEMENTED: \"Could not find an implementation for Max(13) node with name ''\". "
        "The registrations are the committed get_all_opkernel_def() dump of each wheel "
        "(contracts/schemas/ort-VERSION.json).",
        "Max(int16 a, int16 b) at opset 13 (the CPU Max kernel lists float, double, float16, int32, "
        "int64, uint32, uint64, int8, uint8)",
        "Cast the node's inputs to a type its CPU kernel registers, or use an op version ORT implements.",
    ), examples=GraphExamples.edited(_EX_MAX, ("int32[2] a, int32[2] b) => (int32[2] y", "int16[2] a, int16[2] b) => (int16[2] y"))),
    *per_version("ORT-KERNEL-002",
                 "a node of a CUDA session finds neither a CUDA nor a CPU kernel (NOT_IMPLEMENTED)",
                 _SRC, "cpu-session", "graph", _check_cuda, ep="cuda", family=FAMILY, doc=RuleDoc(
        "A CUDA session places a node on the CUDA EP when the EP registers a kernel for it, else on "
        "the CPU EP (CUDA-FALLBACK-001 warns); a node neither registers fails the session with "
        "NOT_IMPLEMENTED (\"Could not find an implementation for ...\"). The CUDA kernels are the "
        "GPU suite's dump, or until one exists the facts derived from onnxruntime's source at the "
        "release (their provenance is in the message); without either the rule says nothing.",
        "RoiAlign at opset 22 in a CUDA graph of a version whose CUDA facts register RoiAlign up to 21 only",
        "Use an op version or input type the CUDA or CPU EP registers.",
    )),
)  # fmt: skip
