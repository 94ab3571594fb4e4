"""GenAI 0.18.0's parser table: each refusal is one line naming the key path.

Invariants: an array item of the wrong JSON kind is refused naming the item's own path
(``key[i]``), not the array's and not a placeholder.
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
        ({"model": {"decoder": []}}, "pkg/genai_config.json: model.decoder: expected an object, got an array"),
        ({"model": {"decoder": {"inputs": "x"}}}, "pkg/genai_config.json: model.decoder.inputs: expected an object, got a string"),
        ({"model": {"decoder": {"head_size": "4"}}}, "pkg/genai_config.json: model.decoder.head_size: expected a number, got a string"),
        ({"search": {"do_sample": "yes"}}, "pkg/genai_config.json: search.do_sample: expected a bool, got a string"),
        ({"model": {"decoder": {"session_options": {"log_id": 3}}}},
         "pkg/genai_config.json: model.decoder.session_options.log_id: expected a string, got a number"),
    ],
)  # fmt: skip
def test_an_array_item_of_the_wrong_kind_names_its_index(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(doc, source="pkg/genai_config.json")
    assert str(info.value) == message
