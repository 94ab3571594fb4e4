"""Which nodes of a CUDA graph would run on the CPU EP, from the CUDA kernel registry a GPU run dumped.

ORT assigns a node to the CUDA EP only when the EP registers a kernel for its op, opset version and
input types; otherwise the node falls back to the CPU EP (a device-host copy per call, and a session
made with ``session.disable_cpu_ep_fallback=1`` fails). The registry is not readable without a GPU
(onnxruntime-gpu crashes in ``get_all_opkernel_def`` when the CUDA libraries cannot load), so its
facts come from a dump the GPU suite writes (``tests/gpu/test_cuda_kernels.py``, same format as the
CPU kernels of ``contracts/schemas/ort-<version>.json``): the committed
``contracts/schemas/cuda-kernels-<version>.json``, or the file ``$Q38_CUDA_KERNELS`` names (a run's
``cuda-kernels-<version>.json``, for that version only). Without either the rule reports nothing:
CUDA kernel coverage is not probed (docs/gpu.md).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import onnx_ir as ir

from contracts._facts import Typing, model_facts, type_str
from contracts._graph import ModelLike, as_ir_model, node_label
from contracts._rule import RuleDoc, Violation
from contracts._versions import per_version
from contracts.schema_registry import registry_for

__all__ = ["RULES", "CudaKernels", "cuda_kernels", "cuda_kernels_document", "fallback_nodes"]

ENV_VAR = "Q38_CUDA_KERNELS"
_SRC = "onnxruntime/core/framework/graph_partitioner.cc (kernel lookup per EP; CPU fallback)"
_Registration = tuple[int, int, Mapping[str, frozenset[str]]]


def _committed(version: str) -> Path | None:
    path = resources.files("contracts") / "schemas" / f"cuda-kernels-{version}.json"
    return Path(str(path)) if path.is_file() else None


def cuda_kernels_document(version: str) -> tuple[dict[str, object], str] | None:
    """(the CUDA kernel dump of onnxruntime ``version``, where it came from), or None when there is none.

    ``$Q38_CUDA_KERNELS`` wins when it names a dump of ``version``; a dump of another version there is
    ignored (its facts would be wrong for this release).
    """
    named = os.environ.get(ENV_VAR)
    candidates = [Path(named)] if named else []
    committed = _committed(version)
    if committed is not None:
        candidates.append(committed)
    for path in candidates:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and doc.get("ort_version") == version and isinstance(doc.get("kernels"), list):
            return doc, str(path)
    return None


@dataclass(frozen=True)
class CudaKernels:
    """The CUDA EP's kernel registrations of one onnxruntime release, by (domain, op)."""

    ort_version: str
    source: str
    ops: Mapping[tuple[str, str], tuple[_Registration, ...]]

    def registrations(self, domain: str, op: str) -> tuple[_Registration, ...]:
        """(since, end, allowed types per parameter) of every CUDA kernel of ``domain::op``."""
        return self.ops.get(("" if domain == "ai.onnx" else domain, op), ())


@functools.lru_cache(maxsize=8)
def _load(version: str, env: str | None) -> CudaKernels | None:
    found = cuda_kernels_document(version)
    if found is None:
        return None
    doc, source = found
    entries: list[dict[str, Any]] = doc["kernels"]  # type: ignore[assignment]  # checked a list on load
    ops: dict[tuple[str, str], tuple[_Registration, ...]] = {}
    for entry in entries:
        ops[("" if entry["domain"] == "ai.onnx" else entry["domain"], entry["name"])] = tuple(
            (int(a), int(b), {k: frozenset(v) for k, v in types.items()}) for a, b, types in entry["kernels"]
        )
    return CudaKernels(version, source, ops)


def cuda_kernels(version: str) -> CudaKernels | None:
    """The CUDA kernel facts of ``version`` (cached per version and ``$Q38_CUDA_KERNELS``); None: not probed."""
    return _load(version, os.environ.get(ENV_VAR))


def _has_cuda_kernel(node: ir.Node, typing: Typing, kernels: CudaKernels) -> bool:
    """Whether a CUDA registration covers the node's opset version and its known input types."""
    schema = typing.schema(node)
    if schema is None:
        return True  # no schema: the schema rules refuse the node before any EP is chosen
    for since, end, allowed in kernels.registrations(node.domain, node.op_type):
        if not since <= schema.since <= end:
            continue
        ok = True
        for index, value in enumerate(node.inputs):
            param = None if value is None else schema.input_param(index)
            dtype = None if value is None else typing.elem_type(value)
            if param is not None and dtype is not None and param.type_str in allowed:
                ok = ok and type_str(dtype) in allowed[param.type_str]
        if ok:
            return True
    return False


def fallback_nodes(model: ModelLike, version: str) -> list[ir.Node]:
    """The nodes (subgraphs included) a CUDA session of ``version`` would place on the CPU EP."""
    kernels = cuda_kernels(version)
    if kernels is None:
        return []
    ir_model = as_ir_model(model)
    facts = model_facts(ir_model)
    typing = facts.typing(registry_for(version))
    return [n for n in facts.all_nodes() if not _has_cuda_kernel(n, typing, kernels)]


def _check(model: ModelLike, entries: Mapping[str, str], version: str) -> list[Violation]:
    kernels = cuda_kernels(version)
    if kernels is None:
        return []
    return [
        Violation("CUDA-FALLBACK-001",
                  f"no CUDA kernel for {node.domain or 'ai.onnx'}::{node.op_type} at its opset and input types in "
                  f"onnxruntime {version} ({Path(kernels.source).name}): the node runs on the CPU EP, a copy "
                  "between device and host per run; session.disable_cpu_ep_fallback=1 fails the session",
                  node=node_label(node), severity="warning")
        for node in fallback_nodes(model, version)
    ]


FAMILY = "cuda-kernel"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES = per_version(
    "CUDA-FALLBACK-001",
    "a node of a CUDA graph with no CUDA kernel (from the GPU run's kernel dump) falls back to the CPU EP",
    _SRC, "cuda-only", "graph", _check, ep="cuda", family=FAMILY, doc=RuleDoc(
    "A node of a graph the CUDA provider runs needs a CUDA kernel for its op, opset version and "
    "input types; without one ORT places it on the CPU EP (a copy between device and host on "
    "every run; with session.disable_cpu_ep_fallback=1 the session fails). The CUDA kernels come "
    "from the GPU suite's dump of the EP's registry (contracts/schemas/cuda-kernels-VERSION.json "
    "or the file Q38_CUDA_KERNELS names); without a dump the rule reports nothing.",
    "Relu on a CUDA graph with a dump that registers no CUDA Relu",
    "Use an op (or input type) the CUDA EP registers, or accept the fallback for that node.",
    "warning",
),
)  # fmt: skip
