"""The genai surface's reader: what ``q38 check`` asks of a builder config document.

Invariants: a graph's kernel rules concern CUDA when it names CUDA, the CPU when it names the CPU
or no provider at all, and neither for a graph that runs only on another provider; the builder
package rules get the config parsed (naming the config file) and the loaded graphs, or nothing
when the config does not parse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx_ir as ir
import pytest

from q38.package.genai.config import parse_genai_config
from q38.package.genai.reader import READER


def _doc() -> dict[str, Any]:
    return {"model": {"type": "llama", "context_length": 64, "vocab_size": 32, "decoder": {"filename": "model.onnx"}}}


@pytest.mark.parametrize(("providers", "expected"), [
    (("cuda",), {"cuda"}),
    (("CPU", "cuda"), {"cuda"}),
    ((), {"cpu"}),
    (("CPU",), {"cpu"}),
    (("DML",), set()),
    (("QNN", "WebGPU"), set()),
])  # fmt: skip
def test_the_eps_a_genai_graphs_kernel_rules_concern_follow_its_providers(
        providers: tuple[str, ...], expected: set[str]) -> None:  # fmt: skip
    """A graph run only on another EP (DML, QNN, ...) is not held to CPU kernel rules it never meets."""
    assert READER.graph_eps(_doc(), providers) == frozenset(expected)


def test_the_rule_context_carries_the_parsed_config_and_the_loaded_graphs(tmp_path: Path) -> None:
    """The builder package rules read ``genai_config`` (parsed from the document, refusals naming the
    config file) and ``models`` (the loaded graphs by role) from the context."""
    doc = _doc()
    doc["model"]["engram"] = {"filename": "engram.onnx"}
    path = tmp_path / "genai_config.json"
    model = ir.Model(ir.Graph([], [], nodes=[]), ir_version=10)
    context = READER.rule_context(doc, path, {"decoder": model})
    assert context == {
        "genai_config": parse_genai_config(doc, source=str(path), research=True),
        "models": {"decoder": model},
    }
    assert context["genai_config"].og_refusal == f"{path}: model.engram: unknown key"


def test_the_rule_context_is_empty_for_a_config_that_does_not_parse(tmp_path: Path) -> None:
    """A config the parser refuses gives the package rules nothing (CFG-SURFACE-001 reports it)."""
    doc = _doc()
    doc["model"]["decoder"]["zz"] = 1
    assert READER.rule_context(doc, tmp_path / "genai_config.json", {}) == {}
