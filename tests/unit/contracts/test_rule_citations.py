"""Every path a rule cites is an onnxruntime source path or a file of this repository (issue 37 item 5).

``q38 explain OFFLOAD-CFG-004`` cited ``ort-contract-rules.md §1A; ort-cpu-capabilities.md §4``,
research notes that are not in the repository. What ``q38 explain`` / ``q38 rules`` / SARIF show
(the catalogue) may cite: onnxruntime C++ sources (``.cc`` / ``.h`` / ``.cu``, by path or name),
onnxruntime-genai's sources (``src/python/py/models/...``), and files that exist here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contracts.catalogue import catalogue
from contracts.citations import public_source, public_text

REPO = Path(__file__).resolve().parents[3]
# A path-like token: a file name with a documentation, source or data extension.
_PATH = re.compile(r"[\w./-]*\w\.(?:md|py|json|txt|cc|h|cu|cuh)\b")
_ORT_SOURCE = re.compile(r"\.(?:cc|h|cu|cuh)$")
_GENAI_SOURCE = "src/python/py/models/"
# Files of a package, named as such (bare, or under the DIR of a quoted onnxruntime-genai message), not citations.
_PACKAGE_FILES = {"genai_config.json", "tokenizer.json", "tokenizer_config.json", "package_manifest.json"}
# A file q38 writes, named as where a fact lands (docs/gpu.md: a GPU run dumps it), not a citation.
_WRITTEN = {"contracts/schemas/cuda-kernels-VERSION.json"}


def _in_repo(token: str) -> bool:
    if "VERSION" in token:  # a pattern: contracts/schemas/ort-VERSION.json
        return any(REPO.glob(token.replace("VERSION", "*")))
    return (REPO / token).exists()


def _foreign(text: str) -> list[str]:
    return [t for t in _PATH.findall(text)
            if not (_ORT_SOURCE.search(t) or t.startswith(_GENAI_SOURCE) or t.removeprefix("DIR/") in _PACKAGE_FILES | _WRITTEN or _in_repo(t))]


@pytest.mark.parametrize("entry", catalogue(), ids=lambda e: e.rule_id)
def test_a_rule_cites_only_onnxruntime_sources_and_files_of_this_repository(entry: object) -> None:
    texts = {f: getattr(entry, f) for f in ("summary", "source", "explanation", "example", "fix")}
    assert {f: _foreign(t) for f, t in texts.items() if _foreign(t)} == {}


def test_research_notes_become_the_onnxruntime_source_they_describe() -> None:
    source = "ort-contract-rules.md §1A; ort-cpu-capabilities.md §4 (core/framework/session_options.cc) rule 7"
    assert public_source(source) == "onnxruntime/core/framework/session_options.cc"
    assert public_source("ort-contract-rules.md §3C.1") == "onnxruntime/contrib_ops/cpu/bert/causal_conv_with_state.cc"
    assert public_source("SPEC §4; docs/package-format.md (genai)") == "docs/package-format.md (genai)"
    assert public_source("docs/package-format.md; reference/file-safety-facts.md") == "docs/package-format.md"
    assert public_text("the planner (ort-contract-rules.md §1C.4) examines") == (
        "the planner (onnxruntime/core/framework/session_state.cc) examines")
    # a citation of nothing foreign is kept as written
    kept = "onnxruntime get_all_operator_schema() (contracts/schemas/ort-1.32.0.json); onnx OpSchema::Verify"
    assert public_source(kept) == kept
