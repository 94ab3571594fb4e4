"""Which surface a package directory is (``q38.package.detect_surface``), from its config alone.

Invariant guarded here: a ``model.qwen38_graph`` or ``model.qwen38`` section makes the document
q38's own (v12b) whatever ``model.type`` says, so the v12b parser, not the genai one, reports
what is wrong with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import ConfigError
from q38.package import detect_surface, open_any


@pytest.mark.parametrize("section", ["qwen38_graph", "qwen38"])
def test_a_qwen38_section_makes_a_config_v12b_whatever_its_type(tmp_path: Path, section: str, messages_snapshot: SnapshotAssertion) -> None:
    """A config with a builder model type but a q38 section is v12b, and the v12b parser refuses it."""
    config = tmp_path / "genai_config.json"
    doc = {"model": {"type": "qwen3", section: {}}}
    config.write_text(json.dumps(doc), encoding="utf-8")
    assert detect_surface(tmp_path) == "v12b"
    with pytest.raises(ConfigError) as info:
        open_any(tmp_path)
    assert messages_snapshot == str(info.value)
    del doc["model"][section]
    config.write_text(json.dumps(doc), encoding="utf-8")
    assert detect_surface(tmp_path) == "genai"  # the section alone decided it
