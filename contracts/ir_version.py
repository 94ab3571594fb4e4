"""``ORT-IR-001`` (model load): the model's IR version is one the onnxruntime release reads.

onnxruntime's ``Model::Model`` refuses a newer IR version before anything else ("Unsupported model
IR version: 14, max supported IR version: 13" from 1.31.1; onnx 1.23.2's ``helper.make_model``
writes IR 14 unless told otherwise). The per-release limit lives in one table,
:data:`q38.ort_targets.ORT_TARGETS` (probed with each release's CPU wheel); a release the table
does not list is not judged here. Opsets beyond the release are ``ORT-OPSET-001``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contracts._rule import Rule, Violation
from contracts._versions import per_version
from q38.ort_targets import ORT_TARGETS

__all__ = ["RULES", "ir_version_problems"]

_SOURCE = "onnxruntime/core/graph/model.cc Model::Model (probed 1.31.1: IR <= 13, 1.32.0: IR <= 14)"


def ir_version_problems(ir_version: int, version: str) -> list[str]:
    """ORT's refusal text for a model of ``ir_version`` in onnxruntime ``version`` (empty: it loads)."""
    target = ORT_TARGETS.get(version)
    if target is None or ir_version <= target.max_ir_version:
        return []
    text = f"Unsupported model IR version: {ir_version}, max supported IR version: {target.max_ir_version}"
    return [f"{text} (onnxruntime {version})"]


def _check(model: Any, _entries: Mapping[str, str], version: str) -> list[Violation]:
    ir_version = int(getattr(model, "ir_version", 0) or 0)
    return [Violation("ORT-IR-001", text) for text in ir_version_problems(ir_version, version)]


RULES: tuple[Rule, ...] = per_version(
    "ORT-IR-001", "the model's IR version is at most what onnxruntime reads", _SOURCE, "cpu-session", "graph",
    _check,
)
