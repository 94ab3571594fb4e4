"""PKG-FIT-001's text: how many resident slots to drop, which context tier still fits, sizes in GiB."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.contracts_testkit import needs_fp16_gates
from syrupy.assertion import SnapshotAssertion

from contracts.profile_fit import profile_fit_violations
from q38.cli import main
from q38.fit import fit_package

pytestmark = needs_fp16_gates  # offloads q38's synthetic package, which checks clean only with fp16 GatedDeltaNet gates


@pytest.fixture(scope="module")
def offloaded(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fit_remedy") / "off"
    assert main(["offload", str(out), "--from-package", str(tiny_cpu_package), "--target-resident-slots", "2"]) == 0
    return out


def _with_budget(src: Path, dst: Path, budget: int) -> Path:
    """A copy of ``src`` whose first runtime profile admits devices from ``budget`` bytes (arena capped there)."""
    shutil.copytree(src, dst, symlinks=True)
    path = dst / "genai_config.json"
    doc = json.loads(path.read_text())
    profile = doc["runtime_profiles"][0]
    profile["eligibility"]["minimum_total_device_memory_bytes"] = budget
    for p in profile["overlay"]["model"]["decoder"]["session_options"]["provider_options"]:
        p["cuda"]["gpu_mem_limit"] = str(budget)
    path.write_text(json.dumps(doc, indent=2))
    return dst


def test_the_remedy_names_the_largest_context_tier_that_fits(offloaded: Path, tmp_path: Path) -> None:
    """A budget one half of the growing state short names the tier of half the context: room = budget - fixed bytes."""
    m = fit_package(offloaded).rows[0].memory
    growing = m.state_total - m.fixed_state
    assert growing > 0 and m.context > 0
    budget = m.device_total - growing // 2
    pkg = _with_budget(offloaded, tmp_path / "pkg", budget)
    [found] = profile_fit_violations(pkg)
    tokens = int((budget - (m.device_total - growing)) // (growing / m.context))
    assert 0 < tokens < m.context
    assert found.message.endswith(f"use a context tier of at most {tokens} tokens")


def test_the_remedy_counts_the_resident_slots_to_drop(offloaded: Path, tmp_path: Path) -> None:
    """An overshoot of one byte is met by dropping one resident slot, of the largest expert size, out of those planned."""
    m = fit_package(offloaded).rows[0].memory
    pkg = _with_budget(offloaded, tmp_path / "pkg", m.device_total - 1)
    [found] = profile_fit_violations(pkg)
    per = max(e.bytes_per_expert for e in m.experts if e.resident)
    held = sum(e.resident or 0 for e in m.experts if e.resident)
    assert f"drop at least 1 resident slots ({per} bytes each, {held} planned)" in found.message


def test_the_sizes_are_given_in_gib_too(
    offloaded: Path, tmp_path: Path, messages_snapshot: SnapshotAssertion
) -> None:
    """At a long context tier the state reaches tenths of a GiB: the message gives bytes and GiB."""
    pkg = _with_budget(offloaded, tmp_path / "pkg", 1 << 27)  # 128 MiB
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text())
    doc["runtime_profiles"][0]["overlay"].setdefault("search", {})["max_length"] = 1 << 20
    path.write_text(json.dumps(doc, indent=2))
    [found] = profile_fit_violations(pkg)
    assert messages_snapshot == {"1M-token tier, 128 MiB budget": found.message}
