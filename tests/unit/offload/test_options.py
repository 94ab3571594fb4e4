"""The offload session options q38 emits (:mod:`q38.offload.options`).

Invariants guarded:
- ``--cpu-execution`` is written as ORT's canonical lower-case ``enabled``;
- a negative resident-slot cap is refused naming the node and the cap.
"""

from __future__ import annotations

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import OffloadError
from q38.offload.options import (
    OFFLOAD_PREFIX,
    OffloadOptions,
    format_node_overrides,
    offload_config_entries,
)


def test_cpu_execution_is_written_as_the_lower_case_value_ort_parses() -> None:
    """ORT 1.32.0 parses ``session.moe.offload.cpu_execution`` case-sensitively: q38 writes ``enabled``."""
    entries = offload_config_entries(OffloadOptions(mode="auto", cpu_execution=True), {})
    assert entries == {
        f"{OFFLOAD_PREFIX}cpu_execution": "enabled",
        f"{OFFLOAD_PREFIX}mode": "auto",
        f"{OFFLOAD_PREFIX}placement": "adaptive",
    }


def test_a_negative_resident_slot_cap_is_refused_naming_the_node_and_cap(messages_snapshot: SnapshotAssertion) -> None:
    """A cap below zero cannot be written into node_overrides: the OffloadError names the node and the cap."""
    with pytest.raises(OffloadError) as info:
        format_node_overrides({"/model/layers.0/moe/QMoE": 2, "/model/layers.1/moe/QMoE": -3})
    assert messages_snapshot == str(info.value)
