"""The genai-surface config records: what parse_genai_config carries from the document.

Invariants: a ``speculative`` block is carried verbatim; a research-builder config keeps
onnxruntime-genai 0.18.0's refusal (one line naming the file and key) in ``og_refusal``, and
the genai reader reports it as a warning.
"""

from __future__ import annotations

from typing import Any

from q38.package.genai_config import parse_genai_config
from q38.package.readers.genai import READER

SOURCE = "pkg/genai_config.json"


def _doc() -> dict[str, Any]:
    return {"model": {"type": "llama", "context_length": 64, "vocab_size": 32, "decoder": {"filename": "model.onnx"}}}


def test_a_speculative_block_is_carried() -> None:
    doc = _doc()
    doc["speculative"] = {"max_draft_tokens": 4, "ngram_size": 3}
    assert parse_genai_config(doc, source=SOURCE).speculative == {"max_draft_tokens": 4, "ngram_size": 3}
    assert parse_genai_config(_doc(), source=SOURCE).speculative == {}


def test_a_research_config_keeps_genais_refusal() -> None:
    doc = _doc()
    doc["model"]["engram"] = {"filename": "engram.onnx"}
    cfg = parse_genai_config(doc, source=SOURCE, research=True)
    assert cfg.og_refusal == f"{SOURCE}: model.engram: unknown key"
    assert cfg.model.engram is not None and cfg.model.engram.filename == "engram.onnx"
    assert parse_genai_config(_doc(), source=SOURCE, research=True).og_refusal == ""
    assert READER.config_problem(doc) == (
        "warning", "onnxruntime-genai 0.18.0 refuses this config: genai_config.json: model.engram: unknown key"
    )
