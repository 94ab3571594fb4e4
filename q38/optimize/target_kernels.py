"""``q38 optimize --target-ort VERSION``: the kernels of that onnxruntime release on the target EP.

A rewrite is declined (with the reason) when a node it would produce has no kernel in the targeted
release: for ``--target cpu`` from that release's committed CPU-kernel dump
(``contracts/schemas/ort-<version>.json``); for ``--target cuda`` from the CUDA kernel fact file a
GPU run dumped (``contracts/schemas/cuda-kernels-<version>.json`` where one is committed, or the dump
``$Q38_CUDA_KERNELS`` names: :mod:`contracts.cuda_kernels`), else from
the release's operator schemas (an op the release has no schema for -- RMSNormRotary and
HyperConnectionLowRankMix in 1.31.1 -- is never emitted; CUDA coverage beyond that is not yet
probed, docs/gpu.md). The table is active for one optimize call (a context variable), so the
passes need no new parameter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

from contracts.cuda_kernels import cuda_kernels_document
from q38.errors import FlagError
from q38.ort_kernels import dtype_name
from q38.ort_targets import ort_target

__all__ = ["TargetKernels", "active", "active_kernels", "for_target"]

_ACTIVE: Final[ContextVar[TargetKernels | None]] = ContextVar("q38_target_kernels", default=None)


@dataclass(frozen=True)
class TargetKernels:
    """Which (domain, op) a release runs on one EP, with the tensor types per kernel (None: op-level facts)."""

    ort_version: str
    ep: str  # "cpu" | "cuda"
    ops: Mapping[tuple[str, str], tuple[frozenset[str], ...] | None]
    source: str

    def has(self, op: str, domain: str = "com.microsoft", dtype: str | int | None = None) -> bool:
        """Whether the release has a kernel for ``domain::op`` (taking ``dtype`` when given)."""
        key = ("" if domain == "ai.onnx" else domain or "", op)
        if key[0] == "" and self.ep == "cuda" and self.source.startswith("schemas"):
            return True  # standard ops: CUDA coverage is the fact file's to say, not the schemas'
        if key not in self.ops:
            return False
        kernels = self.ops[key]
        name = dtype_name(dtype)
        if name is None or kernels is None:
            return True
        wanted = {f"tensor({name})"} | ({"tensor(float)"} if name == "float16" and self.ep == "cpu" else set())
        return any(not types or types & wanted for types in kernels)


def _document(name: str) -> dict[str, Any] | None:
    path = resources.files("contracts") / "schemas" / name
    if not path.is_file():
        return None
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def _kernel_ops(entries: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[frozenset[str], ...] | None]:
    return {(e["domain"], e["name"]): tuple(frozenset(t for types in k[2].values() for t in types)
                                            for k in e["kernels"]) for e in entries}


def for_target(version: str, target: str) -> TargetKernels:
    """The kernel facts of onnxruntime ``version`` on ``target`` (cpu | cuda); FlagError if unknown."""
    ort_target(version)
    dump = _document(f"ort-{version}.json")
    if dump is None:
        raise FlagError(f"--target-ort {version}: no committed schema dump contracts/schemas/ort-{version}.json")
    if target == "cpu":
        return TargetKernels(version, "cpu", _kernel_ops(dump["cpu_kernels"]), f"ort-{version}.json cpu_kernels")
    cuda = cuda_kernels_document(version)  # the committed GPU dump, or the one $Q38_CUDA_KERNELS names
    if cuda is not None:
        doc, source = cuda
        kernels: list[dict[str, Any]] = doc["kernels"]  # type: ignore[assignment]  # checked a list on load
        return TargetKernels(version, "cuda", _kernel_ops(kernels), Path(source).name)
    ops: dict[tuple[str, str], tuple[frozenset[str], ...] | None] = {
        (s["domain"], s["name"]): None for s in dump["schemas"]}
    return TargetKernels(version, "cuda", ops, f"schemas of ort-{version}.json (CUDA kernels not yet probed)")


@contextmanager
def active(kernels: TargetKernels | None) -> Iterator[None]:
    """Make ``kernels`` the table the passes check produced nodes against, for the block."""
    token = _ACTIVE.set(kernels)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_kernels() -> TargetKernels | None:
    """The table of the optimize call in progress (None: no --target-ort)."""
    return _ACTIVE.get()
