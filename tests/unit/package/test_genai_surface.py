"""GenAI 0.18.0's parser table: each refusal is one line naming the key path.

Invariants: an array item of the wrong JSON kind is refused naming the item's own path
(``key[i]``), not the array's and not a placeholder; a key of the wrong JSON kind is refused
naming every kind it takes; a value range (``ngram_size``, ``dflash2_max_snapshots``) includes its bounds.
"""

from __future__ import annotations

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import ConfigError
from q38.package.genai.schema import validate


@pytest.mark.parametrize(
    "doc",
    [
        {"model": {"eos_token_id": [1, [2]]}},
        {"model": {"decoder": {"layer_types": ["full_attention", {"a": 1}]}}},
        {"model": {"decoder": {"state_groups": [{"kind": "paged_kv"}, {"kind": "paged_kv", "zz": 1}]}}},
        {"model": {"decoder": {"state_groups": [{"kind": "paged_kv"}, "paged_kv"]}}},
        {"model": {"decoder": []}},
        {"model": {"decoder": {"inputs": "x"}}},
        {"model": {"decoder": {"head_size": "4"}}},
        {"search": {"do_sample": "yes"}},
        {"search": {"do_sample": {"a": 1}}},
        {"model": {"eos_token_id": {"a": 1}}},
        {"model": {"decoder": {"session_options": {"log_id": 3}}}},
    ],
)  # fmt: skip
def test_an_array_item_of_the_wrong_kind_names_its_index(doc: dict, messages_snapshot: SnapshotAssertion) -> None:
    with pytest.raises(ConfigError) as info:
        validate(doc, source="pkg/genai_config.json")
    assert messages_snapshot == str(info.value)


def _device_type(value: str) -> dict:
    return {"model": {"decoder": {"session_options": {"provider_options": [
        {"cuda": {"device_filtering_options": {"hardware_device_type": value}}}]}}}}  # fmt: skip


@pytest.mark.parametrize(
    ("doc", "refused"),
    [
        ({"speculative": {"ngram_size": 0}}, False),
        ({"speculative": {"ngram_size": 2}}, False),
        ({"speculative": {"ngram_size": 16}}, False),
        ({"speculative": {"ngram_size": 1}}, True),
        ({"speculative": {"ngram_size": 17}}, True),
        ({"engine": {"dynamic_batching": {"dflash2_max_snapshots": 0}}}, False),
        (_device_type("GPU"), False),  # hardware_device_type is case-folded
        (_device_type("tpu"), True),
        ({"engine": {"dynamic_batching": {"dflash2_max_snapshots": -1}}}, True),
    ],
)  # fmt: skip
def test_a_value_range_includes_its_bounds(doc: dict, refused: bool, messages_snapshot: SnapshotAssertion) -> None:
    """GenAI 0.18.0's value checks (probed): ``ngram_size`` 0 or 2..16 and ``dflash2_max_snapshots``
    >= 0 accept their bounds and refuse one past them."""
    if not refused:
        validate(doc, source="pkg/genai_config.json")
        return
    with pytest.raises(ConfigError) as info:
        validate(doc, source="pkg/genai_config.json")
    assert messages_snapshot == str(info.value)
