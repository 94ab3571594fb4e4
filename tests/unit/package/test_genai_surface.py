"""GenAI 0.18.0's parser table: each refusal is one line naming the key path.

Invariants: an array item of the wrong JSON kind is refused naming the item's own path
(``key[i]``), not the array's and not a placeholder; a key of the wrong JSON kind is refused
naming every kind it takes; a value range (``ngram_size``, ``dflash2_max_snapshots``) includes its bounds.
"""

from __future__ import annotations

import pytest

from q38.errors import ConfigError
from q38.package.genai_surface import validate


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"model": {"eos_token_id": [1, [2]]}}, "pkg/genai_config.json: model.eos_token_id[1]: expected a number, got an array"),
        ({"model": {"decoder": {"layer_types": ["full_attention", {"a": 1}]}}},
         "pkg/genai_config.json: model.decoder.layer_types[1]: expected a string, got an object"),
        ({"model": {"decoder": {"state_groups": [{"kind": "paged_kv"}, {"kind": "paged_kv", "zz": 1}]}}},
         "pkg/genai_config.json: model.decoder.state_groups[1].zz: unknown key"),
        ({"model": {"decoder": {"state_groups": [{"kind": "paged_kv"}, "paged_kv"]}}},
         "pkg/genai_config.json: model.decoder.state_groups[1]: expected an object, got a string"),
        ({"model": {"decoder": []}}, "pkg/genai_config.json: model.decoder: expected an object, got an array"),
        ({"model": {"decoder": {"inputs": "x"}}}, "pkg/genai_config.json: model.decoder.inputs: expected an object, got a string"),
        ({"model": {"decoder": {"head_size": "4"}}}, "pkg/genai_config.json: model.decoder.head_size: expected a number, got a string"),
        ({"search": {"do_sample": "yes"}}, "pkg/genai_config.json: search.do_sample: expected a bool, got a string"),
        ({"search": {"do_sample": {"a": 1}}}, "pkg/genai_config.json: search.do_sample: expected a bool, got an object"),
        ({"model": {"eos_token_id": {"a": 1}}},
         "pkg/genai_config.json: model.eos_token_id: expected a number or an array, got an object"),
        ({"model": {"decoder": {"session_options": {"log_id": 3}}}},
         "pkg/genai_config.json: model.decoder.session_options.log_id: expected a string, got a number"),
    ],
)  # fmt: skip
def test_an_array_item_of_the_wrong_kind_names_its_index(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(doc, source="pkg/genai_config.json")
    assert str(info.value) == message


def _device_type(value: str) -> dict:
    return {"model": {"decoder": {"session_options": {"provider_options": [
        {"cuda": {"device_filtering_options": {"hardware_device_type": value}}}]}}}}  # fmt: skip


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"speculative": {"ngram_size": 0}}, None),
        ({"speculative": {"ngram_size": 2}}, None),
        ({"speculative": {"ngram_size": 16}}, None),
        ({"speculative": {"ngram_size": 1}}, "speculative.ngram_size: must be 0 or between 2 and 16, got 1"),
        ({"speculative": {"ngram_size": 17}}, "speculative.ngram_size: must be 0 or between 2 and 16, got 17"),
        ({"engine": {"dynamic_batching": {"dflash2_max_snapshots": 0}}}, None),
        (_device_type("GPU"), None),  # hardware_device_type is case-folded
        (_device_type("tpu"),
         ("model.decoder.session_options.provider_options[0].cuda.device_filtering_options.hardware_device_type: "
          "expected one of cpu, gpu, npu, got 'tpu'")),
        ({"engine": {"dynamic_batching": {"dflash2_max_snapshots": -1}}},
         "engine.dynamic_batching.dflash2_max_snapshots: must be >= 0, got -1"),
    ],
)  # fmt: skip
def test_a_value_range_includes_its_bounds(doc: dict, problem: str | None) -> None:
    """GenAI 0.18.0's value checks (probed): ``ngram_size`` 0 or 2..16 and ``dflash2_max_snapshots``
    >= 0 accept their bounds and refuse one past them."""
    if problem is None:
        validate(doc, source="pkg/genai_config.json")
        return
    with pytest.raises(ConfigError) as info:
        validate(doc, source="pkg/genai_config.json")
    assert str(info.value) == f"pkg/genai_config.json: {problem}"
