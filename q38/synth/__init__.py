"""The synthetic Qwen3.8-Flash generator (docs/synthetic-model.md): ``synthesize``."""

from __future__ import annotations

from q38.synth.writer import OPTIONS, synthesize

__all__ = ["OPTIONS", "synthesize"]
