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
from contracts._rule import Violation
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


RULES = (
    *per_version("ORT-KERNEL-001",
                 "a node of a CPU session finds no CPU kernel for its op, since-version and types (NOT_IMPLEMENTED)",
                 _SRC, "cpu-session", "graph", _check_cpu, ep="cpu"),
    *per_version("ORT-KERNEL-002",
                 "a node of a CUDA session finds neither a CUDA nor a CPU kernel (NOT_IMPLEMENTED)",
                 _SRC, "cpu-session", "graph", _check_cuda, ep="cuda"),
)  # fmt: skip
