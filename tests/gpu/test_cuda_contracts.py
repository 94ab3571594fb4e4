"""The CUDA-only contract rules against a real CUDA session (issue 7 item 3).

Invariants: for every one-change negative node case of the contract tests (support/
offload_node_cases.py), a CUDA session with ``session.moe.offload.mode=required`` is refused
with exactly the message the contract predicts, and with ``mode=auto`` it is created (the node
stays on the GPU); a valid base node of each format is accepted under ``required``. A
disagreement is a failing test: the contract mirrors ORT, not the other way round.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.offload_node_cases import NEGATIVES
from support.offload_node_kit import FORMATS, offload_model

from contracts.offload_nodes import check_offload_nodes

_MODE = "session.moe.offload.mode"


def _session(ort: Any, model_bytes: bytes, mode: str) -> Any:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry(_MODE, mode)
    return ort.InferenceSession(model_bytes, so, providers=["CUDAExecutionProvider"], enable_fallback=0)


@pytest.mark.parametrize(("case", "fmt", "kwargs", "rule_id", "reason"), NEGATIVES, ids=[n[0] for n in NEGATIVES])
def test_cuda_refuses_each_negative_case_with_the_contracts_message(
    ort_module: Any, require_offload: Any, case: str, fmt: str, kwargs: dict[str, Any], rule_id: str, reason: str
) -> None:
    require_offload()
    model = offload_model(fmt, **kwargs)
    (expected,) = check_offload_nodes(model, {_MODE: "required"}, cuda=True)
    with pytest.raises(Exception) as info:
        _session(ort_module, model.SerializeToString(), "required")
    assert expected.message in str(info.value), f"{case}: ORT said {info.value}"
    try:  # auto keeps the node on the GPU; the build may still lack a kernel for the variant
        _session(ort_module, model.SerializeToString(), "auto")
    except Exception as exc:
        assert "MoE offload" not in str(exc), f"{case}: auto mode was refused: {exc}"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_cuda_accepts_a_valid_node_of_each_format_under_required(ort_module: Any, require_offload: Any, fmt: str) -> None:
    require_offload()
    model = offload_model(fmt)
    assert check_offload_nodes(model, {_MODE: "required"}, cuda=True) == []
    try:
        _session(ort_module, model.SerializeToString(), "required")
    except Exception as exc:  # a kernel limit of this build is fine; an offload rejection is not
        assert "MoE offload mode='required' rejected" not in str(exc), str(exc)
