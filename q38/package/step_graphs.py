"""The graphs one decode step of a package runs, as ``q38 profile`` drives them (either surface)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # onnx_ir (and sympy through it) loads when a graph does
    import onnx_ir as ir

__all__ = ["DecodeGraphs", "StepGraph"]


@dataclass(frozen=True)
class StepGraph:
    """One graph a decode step runs: its role (``decoder``, ``mtp``), file, directory and model.

    ``inputs`` / ``outputs`` are the config's name templates (``past_key_names`` ...), from which
    the caller pairs each present state with the past state it feeds.
    """

    role: str
    rel: str
    root: Path
    model: ir.Model
    inputs: Mapping[str, str]
    outputs: Mapping[str, str]


@dataclass(frozen=True)
class DecodeGraphs:
    """A package's decode graphs (decoder first), head size, vocabulary and the MTP's hidden input."""

    graphs: tuple[StepGraph, ...]
    head_size: int | None
    vocab_size: int
    main_hidden: str = "hidden_states"
