"""The public builder's graph forms (``q38 synth --exporter builder``; docs/synthetic-model.md)."""

from __future__ import annotations

from q38.synth.builder_forms.package import write_builder_package

__all__ = ["write_builder_package"]
