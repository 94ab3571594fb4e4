"""The runtime-profile fit contract (PKG-FIT-001/002) and ``q38 offload``'s refusal (issue 29)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.rule_cases import host_map_first_pool_entry

from contracts.package_layout import PackageView
from contracts.profile_fit import profile_fit_violations
from contracts.runner import ALL_RULES, check_package
from q38.cli import main
from q38.fit import fit_package
from q38.package.memory import read_package_facts

GIB = 1 << 30


@pytest.fixture(scope="module")
def offloaded(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fit_offload") / "off"
    assert main(["offload", str(out), "--from-package", str(tiny_cpu_package), "--target-resident-slots", "2"]) == 0
    return out


def _edit(src: Path, dst: Path, fn: object) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    path = dst / "genai_config.json"
    doc = json.loads(path.read_text())
    fn(doc)  # type: ignore[operator]
    path.write_text(json.dumps(doc, indent=2))
    return dst


def test_profiles_offload_writes_pass_the_contract(offloaded: Path) -> None:
    assert profile_fit_violations(offloaded) == []
    report = check_package(offloaded)
    assert "PKG-FIT-001" in report.rules_checked
    assert not [v for v in report.violations if v.rule_id.startswith("PKG-FIT")]
    facts = read_package_facts(offloaded)
    assert [p.id for p in facts.profiles] == ["20gib-to-24gib", "24gib-to-28gib", "28gib-to-32gib", "32gib-to-34gib"]
    # each profile's overlay session options cap its arena at the smallest device it admits (the
    # decoder's own cap is one device's)
    assert [p.gpu_mem_limit for p in facts.profiles] == [20 * GIB, 24 * GIB, 28 * GIB, 32 * GIB]
    # the verify graphs (model_s2/s3/s4) replace the decoder in a profile; they are no companions
    assert {"model_s2.onnx", "model_s3.onnx", "model_s4.onnx"} <= {p.name for p in offloaded.iterdir()}
    assert facts.companions == ("head_r2.onnx", "prefill.onnx")
    assert {facts.arena_strategy, *(p.arena_strategy for p in facts.profiles)} == {"kSameAsRequested"}
    # the resident slots are what the profile's node_overrides say: 2 per node, bytes per expert each
    rows = {r.name: r for r in fit_package(offloaded).rows}
    m = rows["20gib-to-24gib"].memory
    assert m.offloaded and all(e.resident == 2 for e in m.experts)
    assert m.expert_device == sum(2 * e.bytes_per_expert for e in m.experts)
    assert m.expert_host == sum((e.experts - 2) * e.bytes_per_expert for e in m.experts)


def test_a_profile_over_its_budget_is_an_error_with_the_numbers(offloaded: Path, tmp_path: Path) -> None:
    def shrink(doc: dict) -> None:  # type: ignore[type-arg]
        profile = doc["runtime_profiles"][0]
        profile["eligibility"]["minimum_total_device_memory_bytes"] = 1 << 20  # 1 MiB device
        for p in profile["overlay"]["model"]["decoder"]["session_options"]["provider_options"]:
            p["cuda"]["gpu_mem_limit"] = str(1 << 20)

    pkg = _edit(offloaded, tmp_path / "pkg", shrink)
    found = profile_fit_violations(pkg)
    assert [v.rule_id for v in found] == ["PKG-FIT-001"]
    text = found[0].message
    exact = fit_package(pkg).rows[0].memory.device_total
    assert "'20gib-to-24gib' at context 4096" in text and f"by {exact - (1 << 20)} bytes" in text
    assert "context tier of at most" in text
    assert main(["check", str(pkg)]) == 1


def test_host_bytes_over_the_profile_maximum(offloaded: Path, tmp_path: Path) -> None:
    def cap(doc: dict) -> None:  # type: ignore[type-arg]
        doc["runtime_profiles"][1]["eligibility"]["maximum_effective_host_memory_bytes"] = 1024

    pkg = _edit(offloaded, tmp_path / "pkg", cap)
    found = profile_fit_violations(pkg)
    assert [v.rule_id for v in found] == ["PKG-FIT-002"]
    assert "'24gib-to-28gib'" in found[0].message and "exceed maximum_effective_host_memory_bytes 1024" in found[0].message


def test_offload_refuses_a_profile_that_cannot_fit_its_tier(tiny_cpu_package: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    tokens = 1 << 27  # 2 GQA layers x 256 bytes per token: 32 GiB of KV, over every 20-34 GiB profile

    def long(doc: dict) -> None:  # type: ignore[type-arg]
        doc["model"]["context_length"] = tokens
        doc["model"]["qwen38_graph"]["kv_capacity"] = tokens

    src = _edit(tiny_cpu_package, tmp_path / "src", long)
    out = tmp_path / "out"
    assert main(["offload", str(out), "--from-package", str(src), "--target-resident-slots", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("q38 offload: error: PKG-FIT-001: runtime_profiles '20gib-to-24gib'")
    assert f"at context {tokens}" in err and "exceed its budget 21474836480 bytes" in err and "nothing written" in err
    over = int(err.split(" by ")[1].split(" bytes")[0])
    state = fit_package(src, contexts=[tokens]).rows[0].memory
    assert over > 0 and over == pytest.approx(state.state_total - 20 * GIB, rel=0.01)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no staging directory left behind


def _one_profile(device: int, host: int) -> object:
    def add(doc: dict) -> None:  # type: ignore[type-arg]
        eligibility = {"minimum_total_device_memory_bytes": device, "maximum_effective_host_memory_bytes": host}
        doc["runtime_profiles"] = [{"id": "p", "eligibility": eligibility,
                                    "overlay": {"model": {"decoder": {"filename": "model.onnx"}}}}]  # fmt: skip

    return add


def test_planned_placements_are_judged_instead_of_the_written_pool(tiny_cpu_package: Path, tmp_path: Path) -> None:
    """``placements`` (q38 offload's plan, not written yet) decide where the bytes go: one entry planned
    host_mapped breaks a host maximum of 0 that the written, all-device pool meets."""
    pkg = _edit(tiny_cpu_package, tmp_path / "pkg", _one_profile(GIB, 0))
    assert profile_fit_violations(pkg) == []
    planned = dict(read_package_facts(pkg).placements)
    assert planned and set(planned.values()) == {"device"}
    planned[next(iter(planned))] = "host_mapped"
    found = profile_fit_violations(pkg, placements=planned)
    assert [v.rule_id for v in found] == ["PKG-FIT-002"]
    assert "'p' at context" in found[0].message and "exceed maximum_effective_host_memory_bytes 0" in found[0].message


def test_each_fit_rule_record_reports_exactly_its_own_violations(tiny_cpu_package: Path, tmp_path: Path) -> None:
    """The PKG-FIT-001 / PKG-FIT-002 records of the registry, evaluated on a package, each give the
    violations of their own id that profile_fit_violations finds, and no other."""
    pkg = _edit(tiny_cpu_package, tmp_path / "pkg", _one_profile(1 << 20, 0))
    host_map_first_pool_entry(pkg)
    found = profile_fit_violations(pkg)
    assert sorted(v.rule_id for v in found) == ["PKG-FIT-001", "PKG-FIT-002"]
    view = PackageView(root=pkg)
    for rule_id in ("PKG-FIT-001", "PKG-FIT-002"):
        [rule] = [r for r in ALL_RULES if r.rule_id == rule_id]
        assert rule.check(view) == [v for v in found if v.rule_id == rule_id]
