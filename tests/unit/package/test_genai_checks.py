"""GenAI 0.18.0's checks after parsing a genai config (state groups, runtime profiles, value ranges).

Invariant: each refusal is one line ``SOURCE: key.path: what`` naming the element at fault (the
second of two clashing ones), in GenAI's words; profiles apart in either memory range, or meant for
different kinds of device (``is_integrated``), are accepted. Whether GenAI itself refuses exactly
these documents is ``test_genai_config_differential``'s part.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.genai_config_corpus import OgProbe

from q38.errors import ConfigError
from q38.package.genai.config import parse_genai_config


def _doc() -> dict[str, Any]:
    return {"model": {"type": "qwen3_5_moe_text", "context_length": 64, "vocab_size": 32,
                      "decoder": {"filename": "model.onnx", "num_hidden_layers": 4}}}  # fmt: skip


def _profile(pid: str, lo: int, hi: int | None = None, **eligibility: object) -> dict[str, Any]:
    elig: dict[str, object] = {"minimum_total_device_memory_bytes": lo, **eligibility}
    if hi is not None:
        elig["maximum_total_device_memory_bytes"] = hi
    return {"id": pid, "eligibility": elig, "overlay": {"search": {"chunk_size": 8}}}


def _overlay_file(name: str) -> list[dict[str, Any]]:
    return [{"id": "a", "eligibility": {"minimum_total_device_memory_bytes": 0},
             "overlay": {"model": {"decoder": {"filename": name}}}}]  # fmt: skip


def _groups(*groups: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["model"]["decoder"].__setitem__("state_groups", list(groups))


def _past_keys(template: str) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        d["model"]["decoder"].update(inputs={"past_key_names": template}, state_groups=[{"kind": "paged_kv", "layer_ids": [3]}])
    return edit


def _present_keys(template: str) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        d["model"]["decoder"].update(outputs={"present_key_names": template}, state_groups=[{"kind": "paged_kv", "layer_ids": [3]}])
    return edit


def _profiles(*profiles: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.__setitem__("runtime_profiles", list(profiles))


_REFUSED = [
    (_groups({"kind": "paged_kv", "layer_ids": []}),
     "model.decoder.state_groups[0]: (paged_kv) must contain at least one layer_id"),
    (_groups({"kind": "paged_kv", "layer_ids": [1, 1]}),
     "model.decoder.state_groups[0]: (paged_kv) contains duplicate layer_id 1"),
    (_groups({"kind": "paged_kv", "layer_ids": [3]}, {"kind": "paged_kv", "layer_ids": [2, 3]}),
     "model.decoder.state_groups[1]: (paged_kv) overlaps another paged_kv group at layer_id 3"),
    (_groups({"kind": "fixed_conv", "layer_ids": [1]}, {"kind": "fixed_conv", "layer_ids": [1]}),
     "model.decoder.state_groups[1]: (fixed_conv) resolves more than one binding to 'past_key_values.1.conv_state'"),
    (_past_keys("past.%s.key"),
     "model.decoder.state_groups[0]: (paged_kv) binding 'key' has malformed input template 'past.%s.key'; expected exactly one %d"),
    (_past_keys("past.%d.%d.key"),
     ("model.decoder.state_groups[0]: (paged_kv) binding 'key' has malformed input template 'past.%d.%d.key'; "
      "expected exactly one %d")),
    (_past_keys("past.key"),
     "model.decoder.state_groups[0]: (paged_kv) binding 'key' has malformed input template 'past.key'; expected exactly one %d"),
    (_present_keys("present.key"),
     "model.decoder.state_groups[0]: (paged_kv) binding 'key' has malformed output template 'present.key'; expected exactly one %d"),
    (_profiles({"id": "a", "eligibility": {"maximum_total_device_memory_bytes": 5}, "overlay": {"search": {"chunk_size": 8}}}),
     "runtime_profiles[0].eligibility: runtime profile 'a' is missing minimum_total_device_memory_bytes"),
    (_profiles({"id": "a", "eligibility": {"minimum_total_device_memory_bytes": 0}, "overlay": {"model": {"decoder": {}}, "search": {}}}),
     "runtime_profiles[0].overlay: runtime profile 'a' does not contain any overlay fields"),
    (_profiles(*_overlay_file("")),
     "runtime_profiles[0].overlay.model.decoder.filename: runtime profile 'a': must not be empty"),
    (_profiles(*_overlay_file("../x.onnx")),
     "runtime_profiles[0].overlay.model.decoder.filename: runtime profile 'a': must not contain path traversal (..): '../x.onnx'"),
    (_profiles(_profile("a", 10, 5)),
     "runtime_profiles[0].eligibility: runtime profile 'a' has maximum_total_device_memory_bytes below its minimum"),
    (_profiles(_profile("a", 0, None, minimum_free_device_memory_bytes=10, maximum_free_device_memory_bytes=5)),
     "runtime_profiles[0].eligibility: runtime profile 'a' has maximum_free_device_memory_bytes below its minimum"),
    (_profiles(_profile("", 0, 5)), "runtime_profiles[0].id: runtime profile id must not be empty"),
    (_profiles(_profile("a", 0, 5), _profile("a", 6, 9)), "runtime_profiles[1].id: duplicate runtime profile id 'a'"),
    (_profiles(_profile("a", 0, 5), _profile("b", 5, 9)),
     "runtime_profiles[1].eligibility: runtime profile eligibility ranges overlap: 'a' and 'b'"),
    (_profiles(_profile("a", 5, 9), _profile("b", 0, 5)),  # inclusive ranges: touching at 5 overlaps
     "runtime_profiles[1].eligibility: runtime profile eligibility ranges overlap: 'a' and 'b'"),
    (_profiles(_profile("a", 0, 5, is_integrated=True), _profile("b", 3, 9, is_integrated=True)),
     "runtime_profiles[1].eligibility: runtime profile eligibility ranges overlap: 'a' and 'b'"),
    (lambda d: d["model"].pop("context_length"),
     "model.context_length: must be set and > 0 (onnxruntime-genai requires it)"),
    (_groups(), "model.decoder.state_groups: must not be empty"),
    (_groups({"kind": "fixed_conv", "layer_ids": [1], "state_update": {}}),
     "model.decoder.state_groups[0]: (fixed_conv) state_update capacity must be in [1, 8]"),
    (_groups({"layer_ids": [1]}), "model.decoder.state_groups[0]: is missing kind"),
    (_groups({"kind": "fixed_conv", "layer_ids": [1], "state_update": {"capacity": 2, "key_head_count": 2}}),
     "model.decoder.state_groups[0]: (fixed_conv) fixed_conv state_update does not use key_head_count"),
    (_groups({"kind": "fixed_recurrent", "layer_ids": [1], "state_update": {"capacity": 2}}),
     "model.decoder.state_groups[0]: (fixed_recurrent) fixed_recurrent state_update requires key_head_count"),
    (_groups({"kind": "fixed_conv", "layer_ids": [1], "state_update": {"capacity": 2}}, {"kind": "fixed_recurrent", "layer_ids": [2]}),
     "model.decoder.state_groups: all fixed state groups must declare state_update when any fixed group declares it"),
    (_groups({"kind": "fixed_conv", "layer_ids": [1], "state_update": {"capacity": 2}},
             {"kind": "fixed_recurrent", "layer_ids": [2], "state_update": {"capacity": 2, "key_head_count": 2, "enabled": False}}),
     "model.decoder.state_groups: all fixed state_update groups must use the same enabled setting"),
    (lambda d: d["model"]["decoder"].__setitem__("num_hidden_layers", 2**31),
     "model.decoder.num_hidden_layers: value 2.14748e+09 is out of int32 range"),
]  # fmt: skip


@pytest.mark.parametrize(("edit", "message"), _REFUSED)
def test_each_refusal_names_its_element_in_genais_words(edit: Callable[[dict[str, Any]], None], message: str) -> None:
    doc = _doc()
    edit(doc)
    with pytest.raises(ConfigError) as info:
        parse_genai_config(doc, source="c")
    assert str(info.value) == f"c: {message}"


@pytest.mark.parametrize("edit", [
    _profiles(_profile("a", 0, 5), _profile("b", 6, 9)),
    _profiles(_profile("a", 0, 5, minimum_free_device_memory_bytes=0, maximum_free_device_memory_bytes=3),
              _profile("b", 0, 9, minimum_free_device_memory_bytes=4)),
    _profiles(_profile("a", 0, 5, is_integrated=True), _profile("b", 0, 9, is_integrated=False)),
    _groups({"kind": "paged_kv", "layer_ids": [3]}, {"kind": "paged_kv", "layer_ids": [2]}),
])  # fmt: skip
def test_profiles_apart_in_either_range_or_device_kind_and_disjoint_groups_are_accepted(
        edit: Callable[[dict[str, Any]], None]) -> None:  # fmt: skip
    doc = _doc()
    edit(doc)
    cfg = parse_genai_config(doc, source="c")
    assert len(cfg.runtime_profiles) in (0, 2)


@pytest.mark.differential
def test_genai_itself_refuses_each_refused_document(tmp_path: Path) -> None:
    """The table above is GenAI 0.18.0's behaviour, not a guess: ``og.Config`` refuses each case."""
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai 0.18.0 is a test dependency")
    og = OgProbe(tmp_path)
    for edit, message in _REFUSED:
        doc = _doc()
        edit(doc)
        assert og.verdict(doc) is not None, message
    assert og.verdict(_doc()) is None
