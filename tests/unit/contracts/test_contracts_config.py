"""The config rule family (CFG-*, contracts.config_surface): genai_config.json values judged by name.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.config_surface import check_genai_config, session_option_blocks


@pytest.mark.parametrize(("graph", "where", "shown"), [
    ({"kv_capacity": 64, "prefill": {"chunk": True}}, "prefill.chunk", "true"),
    ({"kv_capacity": False, "prefill": {"chunk": 16}}, "kv_capacity", "false"),
])


def test_a_json_boolean_prefill_size_is_refused_by_name(graph: dict[str, Any], where: str, shown: str) -> None:
    found = check_genai_config({"model": {"qwen38_graph": graph}})
    assert [(v.rule_id, v.message) for v in found if v.rule_id != "CFG-SURFACE-001"] == [
        ("CFG-PREFILL-001", f"model.qwen38_graph.{where}: expected an integer, got {shown}")]


def test_a_profile_whose_maximum_is_below_its_minimum_is_cfg_profile_002() -> None:
    profiles = [{"id": "a", "eligibility": {"minimum_total_device_memory_bytes": 20,
                                            "maximum_total_device_memory_bytes": 10}}]
    found = check_genai_config({"runtime_profiles": profiles})
    assert [(v.rule_id, v.message) for v in found if v.rule_id != "CFG-SURFACE-001"] == [
        ("CFG-PROFILE-002", "runtime_profiles[0].eligibility: maximum_total_device_memory_bytes is below the minimum")]


def test_the_head_graphs_own_session_options_are_checked() -> None:
    """v12b's ``fold.head_r2`` carries the head graph's own session_options: a non-string config
    entry and an absolute custom-op library there are refused, named by their JSON path."""
    so = {"config_entries": {"session.x": 1}, "custom_ops_library": "/abs/ops.so"}
    config = {"model": {"qwen38_graph": {"fold": {"head_r2": {"filename": "head_r2.onnx", "session_options": so}}}}}
    where = "model.qwen38_graph.fold.head_r2.session_options"
    assert list(session_option_blocks(config)) == [(where, so)]
    found = [(v.rule_id, v.message) for v in check_genai_config(config)]
    assert found == [
        ("CFG-VALUES-001", f"{where}.config_entries.session.x: session config values must be strings, got 1"),
        ("CFG-LIB-001", f"{where}.custom_ops_library: absolute path '/abs/ops.so' is not allowed (must be inside the package)"),
    ]


@pytest.mark.parametrize(("document", "shown"), [([], "list"), ("x", "str"), (None, "NoneType")])
def test_a_document_that_is_not_an_object_is_one_cfg_surface_line(document: Any, shown: str) -> None:
    """A top-level genai_config.json that is not an object is named once, by what it is, not walked."""
    found = check_genai_config(document)
    assert [(v.rule_id, v.message) for v in found] == [
        ("CFG-SURFACE-001", f"genai_config.json: expected an object, got {shown}")]


def test_a_runtime_profile_overlays_session_options_are_checked() -> None:
    """A profile overlay's decoder session_options reach the session too: a non-string config
    entry there is refused, named by its runtime_profiles[i] JSON path."""
    so = {"config_entries": {"session.y": 2}}
    config = {"runtime_profiles": [{"id": "a", "overlay": {"model": {"decoder": {"session_options": so}}}}]}
    where = "runtime_profiles[0].overlay.model.decoder.session_options"
    assert list(session_option_blocks(config)) == [(where, so)]
    found = [(v.rule_id, v.message) for v in check_genai_config(config) if v.rule_id != "CFG-SURFACE-001"]
    assert ("CFG-VALUES-001", f"{where}.config_entries.session.y: session config values must be strings, got 2") in found
