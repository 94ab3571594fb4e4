"""Which nodes of a CUDA graph would run on the CPU EP, from the CUDA kernel registry a GPU run dumped.

ORT assigns a node to the CUDA EP only when the EP registers a kernel for its op, opset version and
input types; otherwise the node falls back to the CPU EP (a device-host copy per call, and a session
made with ``session.disable_cpu_ep_fallback=1`` fails). The registry is not readable without a GPU
(onnxruntime-gpu crashes in ``get_all_opkernel_def`` when the CUDA libraries cannot load), so its
facts come from a dump the GPU suite writes (``tests/gpu/test_cuda_kernels.py``, same format as the
CPU kernels of ``contracts/schemas/ort-<version>.json``): the committed
``contracts/schemas/cuda-kernels-<version>.json``, or the file ``$Q38_CUDA_KERNELS`` names (a run's
``cuda-kernels-<version>.json``, for that version only). Until a GPU dump exists the facts derived
from onnxruntime's source at the release (``contracts/schemas/cuda-kernels-<version>.source.json``,
written by ``tools/cuda_kernel_facts.py`` from the CUDA EP's ``ONNX_OPERATOR_*KERNEL_CLASS_NAME``
registrations; labelled ``source-derived`` with repo, paths and commit, ``#ifdef``'d registrations
marked build-dependent) stand in; a GPU dump replaces them. Without any the rule reports nothing:
CUDA kernel coverage is not probed (docs/gpu.md). Registrations are matched to nodes as ORT's
kernel registry matches them (:mod:`contracts.kernel_match`; the CUDA EP inserts no float16 Casts).
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

from contracts._facts import Typing, model_facts
from contracts._graph import ModelLike, as_ir_model, node_label
from contracts._rule import GraphExamples, RuleDoc, Violation
from contracts._versions import per_version
from contracts.kernel_match import matches
from contracts.schema_registry import registry_for

__all__ = ["RULES", "CudaKernels", "cuda_kernels", "cuda_kernels_document", "fallback_nodes"]

ENV_VAR = "Q38_CUDA_KERNELS"
_SRC = "onnxruntime/core/framework/graph_partitioner.cc (kernel lookup per EP; CPU fallback)"
_Registration = tuple[int, int, Mapping[str, frozenset[str]]]


def _committed(version: str, suffix: str = ".json") -> Path | None:
    path = resources.files("contracts") / "schemas" / f"cuda-kernels-{version}{suffix}"
    return Path(str(path)) if path.is_file() else None


def cuda_kernels_document(version: str, *, source_derived: bool = False) -> tuple[dict[str, object], str] | None:
    """(the CUDA kernel dump of onnxruntime ``version``, where it came from), or None when there is none.

    ``$Q38_CUDA_KERNELS`` wins when it names a dump of ``version``; a dump of another version there is
    ignored (its facts would be wrong for this release). ``source_derived``: without a GPU dump, the
    source-derived facts (which list only the com.microsoft ops they were read for: not a whole
    registry, so a consumer that needs one, like optimize's target table, leaves them out).
    """
    named = os.environ.get(ENV_VAR)
    candidates = [Path(named)] if named else []
    for suffix in (".json", ".source.json") if source_derived else (".json",):  # a GPU dump first
        committed = _committed(version, suffix)
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
    provenance: str = "GPU registry dump"
    probed: bool = True  # a GPU run's dump of the registry; False: derived from source

    def registrations(self, domain: str, op: str) -> tuple[_Registration, ...]:
        """(since, end, allowed types per parameter) of every CUDA kernel of ``domain::op``."""
        return self.ops.get(("" if domain == "ai.onnx" else domain, op), ())

    def judges(self, domain: str, op: str) -> bool:
        """Whether these facts say anything about ``domain::op``.

        A GPU dump is the whole registry; source-derived facts speak only of the ops they list
        (the source read may be another commit than the release's: an op it lacks is unknown).
        """
        return self.probed or bool(self.registrations(domain, op))


@functools.lru_cache(maxsize=8)
def _load(version: str, env: str | None) -> CudaKernels | None:
    found = cuda_kernels_document(version, source_derived=True)
    if found is None:
        return None
    doc, source = found
    entries: list[dict[str, Any]] = doc["kernels"]  # type: ignore[assignment]  # checked a list on load
    ops: dict[tuple[str, str], tuple[_Registration, ...]] = {}
    for entry in entries:
        ops[("" if entry["domain"] == "ai.onnx" else entry["domain"], entry["name"])] = tuple(
            (int(a), int(b), {k: frozenset(v) for k, v in types.items()}) for a, b, types in entry["kernels"]
        )
    origin = doc.get("provenance")
    return CudaKernels(version, source, ops, _provenance(doc, source), probed=not isinstance(origin, Mapping))


def _provenance(doc: Mapping[str, Any], source: str) -> str:
    """Where the facts come from, in one line: a GPU dump, or source-derived with repo and commit."""
    origin = doc.get("provenance")
    if not isinstance(origin, Mapping):
        return f"GPU registry dump {Path(source).name}"
    return (f"source-derived from {origin.get('repo', '?')}@{origin.get('ref', '?')} "
            f"({', '.join(str(p) for p in origin.get('paths', []))}), not probed on a GPU")  # fmt: skip


def cuda_kernels(version: str) -> CudaKernels | None:
    """The CUDA kernel facts of ``version`` (cached per version and ``$Q38_CUDA_KERNELS``); None: not probed."""
    return _load(version, os.environ.get(ENV_VAR))


def _has_cuda_kernel(node: ir.Node, typing: Typing, kernels: CudaKernels) -> bool:
    """Whether a CUDA registration covers the node's opset version and its known input types."""
    schema = typing.schema(node)
    if schema is None or not kernels.judges(node.domain, node.op_type):
        return True  # no schema: the schema rules refuse it first; an op the facts do not know: no guess
    return any(matches(node, schema, reg, typing, cast_fallback=False)
               for reg in kernels.registrations(node.domain, node.op_type))  # fmt: skip


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
                  f"onnxruntime {version} ({kernels.provenance}): the node runs on the CPU EP, a copy "
                  "between device and host per run; session.disable_cpu_ep_fallback=1 fails the session",
                  node=node_label(node), severity="warning")
        for node in fallback_nodes(model, version)
    ]

# The rule's examples (ONNX text, onnx.parser): GroupQueryAttention, whose CUDA kernel registers
# float16 and bfloat16 only (a float node falls back to the CPU EP).
_EX_GQA = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float16[1,3,32] q, float16[1,3,16] k, float16[1,3,16] v, int32[1] sk, int32[1] tsl)
  => (float16[] o, float16[] pk, float16[] pv) {
  [gqa] o, pk, pv = com.microsoft.GroupQueryAttention <kv_num_heads: int = 1, num_heads: int = 2>
      (q, k, v, "", "", sk, tsl)
}"""

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
), examples=GraphExamples.edited(
    _EX_GQA, ("float16[1,3,32] q, float16[1,3,16] k, float16[1,3,16] v", "float[1,3,32] q, float[1,3,16] k, float[1,3,16] v"),
    ("(float16[] o, float16[] pk, float16[] pv)", "(float[] o, float[] pk, float[] pv)")),
)  # fmt: skip
