"""What each onnxruntime release q38 can target reads and runs: one table, probed, not guessed.

``q38 synth --target-ort V``, ``q38 optimize --target-ort V`` and ``q38 check --ort-version V``
read this table. Every figure was probed with the released CPU wheel of that version (one
Identity graph per IR version 8..14 and ai.onnx opset 21..28; one-node sessions of the contrib
ops): onnxruntime 1.31.1 loads IR version <= 13 and ai.onnx opset <= 26, 1.32.0 IR <= 14 and
opset <= 28. 1.31.1's GatedDeltaNet types its ``decay`` / ``beta`` inputs float32 only (``TS``;
1.32.0 widened them to ``TG``: float16 / bfloat16 / float), has no CPU GatedDeltaNet kernel, and
has no schema for RMSNormRotary or HyperConnectionLowRankMix (contracts/schemas/ort-1.31.1.json).

The CUDA execution provider's kernel coverage is not in this table: it comes from the fact file
a GPU run dumps (``contracts/schemas/cuda-kernels-<version>.json``, see docs/gpu.md) where one
has been produced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from q38._ops import GATED_DELTA_NET, HC_LOW_RANK_MIX, MS_DOMAIN, ONNX_DOMAIN, RMS_NORM_ROTARY
from q38.errors import FlagError

__all__ = ["ORT_TARGETS", "OrtTarget", "ort_target", "target_versions"]


@dataclass(frozen=True)
class OrtTarget:
    """One onnxruntime release's loading limits and the contrib-op facts q38's emitters depend on.

    ``max_ir_version`` / ``max_opsets``: the newest model IR version and opset per domain its
    model loader accepts (newer: the session is refused at load). ``gdn_gate_float16``: whether
    GatedDeltaNet's decay / beta inputs may be float16 (else they must be float32).
    ``missing_contrib_ops``: com.microsoft ops the release has no schema for at all.
    ``no_cpu_kernel``: com.microsoft ops with a schema but no CPU kernel.
    """

    version: str
    max_ir_version: int
    max_opsets: Mapping[str, int]
    gdn_gate_float16: bool
    missing_contrib_ops: frozenset[str] = field(default_factory=frozenset)
    no_cpu_kernel: frozenset[str] = field(default_factory=frozenset)

    def opset_limit(self, domain: str) -> int | None:
        """The newest opset of ``domain`` this release loads (None: not limited by this table)."""
        return self.max_opsets.get(ONNX_DOMAIN if domain == "ai.onnx" else domain)

    def has_schema(self, op: str, domain: str = MS_DOMAIN) -> bool:
        """Whether this release knows ``domain::op`` at all (ONNX-domain ops: always)."""
        return not (domain == MS_DOMAIN and op in self.missing_contrib_ops)

    def has_cpu_kernel(self, op: str, domain: str = MS_DOMAIN) -> bool:
        """Whether this release can run ``domain::op`` on the CPU EP (by this table's facts)."""
        return self.has_schema(op, domain) and not (domain == MS_DOMAIN and op in self.no_cpu_kernel)


ORT_TARGETS: Final[Mapping[str, OrtTarget]] = {
    "1.31.1": OrtTarget(
        "1.31.1", 13, {ONNX_DOMAIN: 26, MS_DOMAIN: 1}, gdn_gate_float16=False,
        missing_contrib_ops=frozenset({RMS_NORM_ROTARY, HC_LOW_RANK_MIX}),
        no_cpu_kernel=frozenset({GATED_DELTA_NET}),
    ),
    "1.32.0": OrtTarget("1.32.0", 14, {ONNX_DOMAIN: 28, MS_DOMAIN: 1}, gdn_gate_float16=True),
}


def target_versions() -> tuple[str, ...]:
    """The onnxruntime versions q38 can target, oldest first."""
    return tuple(sorted(ORT_TARGETS, key=lambda v: tuple(int(x) for x in v.split("."))))


def ort_target(version: str, *, flag: str = "--target-ort") -> OrtTarget:
    """The table row of ``version``; a one-line :class:`FlagError` naming the known ones otherwise."""
    try:
        return ORT_TARGETS[version]
    except KeyError:
        raise FlagError(f"{flag} {version}: unknown onnxruntime version "
                        f"(known: {', '.join(target_versions())})") from None
