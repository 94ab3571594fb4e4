"""The optimizer pipeline: an explicit, ordered tuple of rewrite passes, run by onnx_ir.passes.

Order matters and is pinned by a test: the hyper-connection fusion runs before the head
quantization (which then sees producers that carry no shape), and the carry-state fusion runs
before nothing that reads its Concat/Slice chain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from q38.errors import FlagError
from q38.optimize._common import Outcome, PassRun, RewritePass, Target, TensorReader, default_reader
from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.fp8_head import QuantizeFp8HeadPass
from q38.optimize.graph_checks import NameTable
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass
from q38.optimize.shared_expert import FuseSharedExpertPass

if TYPE_CHECKING:  # imported by --target cpu only (q38.optimize._common)
    from q38.ort_kernels import CpuKernels

__all__ = ["PASS_NAMES", "PIPELINE", "OptimizeResult", "optimize_model", "select_passes"]

PIPELINE: tuple[type[RewritePass[Any]], ...] = (
    FuseRMSNormRotaryPass,
    FuseSharedExpertPass,
    FuseHyperConnectionPass,
    FuseCausalConvStatePass,
    QuantizeFp8HeadPass,
)
PASS_NAMES: tuple[str, ...] = tuple(p.name for p in PIPELINE)


@dataclasses.dataclass
class OptimizeResult:
    """What one optimize run did: counts per pass, every candidate's outcome, weight provenance.

    ``provenance`` maps each tensor a pass created to the names of its source tensors, and
    ``origins`` maps it to the pass that created it.
    """

    rewrites: dict[str, int]
    outcomes: list[Outcome]
    provenance: dict[str, list[str]]
    origins: dict[str, str] = dataclasses.field(default_factory=dict)

    def merge(self, other: OptimizeResult) -> None:
        """Fold ``other`` (another graph of the package) into this result: counts summed, the rest joined."""
        for key, count in other.rewrites.items():
            self.rewrites[key] = self.rewrites.get(key, 0) + count
        self.outcomes.extend(other.outcomes)
        self.provenance.update(other.provenance)
        self.origins.update(other.origins)


def select_passes(passes: Sequence[str] | None = None, skip: Sequence[str] = ()) -> tuple[type[RewritePass[Any]], ...]:
    """The pipeline restricted to ``passes`` (pipeline order kept) minus ``skip``."""
    for name in (*(passes or ()), *skip):
        if name not in PASS_NAMES:
            raise FlagError(f"unknown pass {name!r} (known: {', '.join(PASS_NAMES)})")
    wanted = set(passes) if passes else set(PASS_NAMES)
    return tuple(p for p in PIPELINE if p.name in wanted and p.name not in skip)


def optimize_model(
    model: ir.Model,
    *,
    target: Target = "cuda",
    passes: Sequence[str] | None = None,
    skip: Sequence[str] = (),
    reader: TensorReader | None = None,
    kernels: CpuKernels | None = None,
) -> OptimizeResult:
    """Run the selected passes in pipeline order on ``model`` (in place).

    ``kernels``: the CPU-kernel table ``target="cpu"`` checks every produced node against
    (default: the installed onnxruntime's, :func:`q38.ort_kernels.cpu_kernels`).
    """
    # One name table for all passes; the first pass checks the input's invariants, every pass
    # checks its output's, which are the next pass's input (one check per pass boundary).
    run = PassRun(target=target, reader=reader or default_reader, names=NameTable(model), kernels=kernels)
    instances = [cls(run, check_requires=i == 0) for i, cls in enumerate(select_passes(passes, skip))]
    if instances:
        ir.passes.Sequential(*instances)(model)
    return OptimizeResult({p.name: p.count for p in instances}, run.outcomes, run.provenance, run.origins)
