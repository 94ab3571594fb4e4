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
    ],
)  # fmt: skip
def test_an_array_item_of_the_wrong_kind_names_its_index(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(doc, source="pkg/genai_config.json")
    assert str(info.value) == message
