"""What a rule cites as its source: onnxruntime's source paths and the files of this repository.

A rule record's ``source`` was written against the research notes the contracts were derived
from (``ort-contract-rules.md §1C``, ``ort-cpu-capabilities.md §4``, ``SPEC §4``), files a user of
q38 does not have. :func:`public_source` is what ``q38 explain``, ``q38 rules`` and SARIF show:
each note's section becomes the onnxruntime source file that section describes, and the notes
that only record probe results, or restate a document of this repository cited beside them, are
dropped. ``tests/unit/contracts/test_rule_citations.py`` holds every cited path to: an
onnxruntime (or onnxruntime-genai) source path, or a file of this repository.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["public_source", "public_text"]

# ort-contract-rules.md sections -> the onnxruntime source file each describes (longest prefix wins).
_SECTION_SOURCES: Final = (
    ("1", "onnxruntime/core/framework/session_state.cc"),  # QMoE offload: node eligibility, placement
    ("1A", "onnxruntime/core/framework/session_options.cc"),  # the session.moe.offload.* key parsing
    ("2A", "onnxruntime/contrib_ops/cpu/bert/dynamic_sparse_attention_helper.h"),
    ("2B", "onnxruntime/contrib_ops/cuda/bert/dynamic_sparse_attention.cc"),
    ("2C", "onnxruntime/contrib_ops/cuda/sparse/packed_sparse_attention_indexer.cc"),
    ("2D", "onnxruntime/contrib_ops/cuda/sparse/packed_sparse_attention_indexer.cc"),
    ("2E", "onnxruntime/contrib_ops/cuda/sparse/sparse_attention_indexer.cc"),
    ("2F", "onnxruntime/contrib_ops/cuda/sparse/packed_sparse_attention_indexer.cc"),
    ("3A", "onnxruntime/contrib_ops/cpu/bert/causal_conv_with_state_helper.h"),
    ("3B", "onnxruntime/contrib_ops/cpu/bert/causal_conv_with_state.cc"),
    ("3C", "onnxruntime/contrib_ops/cpu/bert/causal_conv_with_state.cc"),
    ("3D", "onnxruntime/contrib_ops/cuda/bert/causal_conv_with_state.cc"),
    ("3E", "onnxruntime/contrib_ops/cuda/bert/causal_conv_with_state_validation.h"),
)
_SECTION: Final = re.compile(r"§(\d[A-G]?)[\w.-]*")
_NOTES: Final = re.compile(
    r"ort-contract-rules\.md|ort-cpu-capabilities\.md(?:\s*§[\w.]+)?|reference/file-safety-facts\.md|SPEC\s*§[\d.]+"
    r"|§[\w.-]+|\brules?\s+[\d-]+\b")
_BARE_ORT_DIR: Final = re.compile(r"\((core/[\w/]+\.(?:cc|h))\)")
_GENAI_BUILDER: Final = re.compile(r"onnxruntime-genai (\S+) builders/")


def _section_source(section: str) -> str:
    return max((p for p in _SECTION_SOURCES if section.startswith(p[0])), key=lambda p: len(p[0]))[1]


def public_source(text: str) -> str:
    """``text`` (a rule's source) citing only onnxruntime source paths and files of this repository."""
    text = _GENAI_BUILDER.sub(r"onnxruntime-genai \1 src/python/py/models/builders/", text)
    text = _BARE_ORT_DIR.sub(r"(onnxruntime/\1)", text)
    parts: list[str] = []
    for part in (p.strip() for p in text.split(";")):
        cited = [] if "ort-contract-rules.md" not in part and not part.startswith("§") else [
            _section_source(m.group(1)) for m in _SECTION.finditer(part)]
        rest = " ".join(_NOTES.sub("", part).split()).strip(" ,")
        rest = re.sub(r"^\(([^()]*)\)$", r"\1", re.sub(r"\s\(\s*[,\s]*\)", "", rest)).strip(" ,")
        parts.extend(dict.fromkeys(cited))
        if rest:
            parts.append(rest)
    return "; ".join(dict.fromkeys(parts)) or "probed against the released onnxruntime"


_IN_TEXT: Final = re.compile(r"ort-contract-rules\.md §(\d[A-G]?)[\w.-]*")


def public_text(text: str) -> str:
    """A rule's prose (its explanation) with each research-note citation made an onnxruntime source path."""
    text = _IN_TEXT.sub(lambda m: _section_source(m.group(1)), text)
    return text.replace("(builders/mtp.py)", "(onnxruntime-genai's src/python/py/models/builders/mtp.py)")
