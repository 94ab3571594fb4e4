"""Writes a builder-form package: one flat folder, as the public builder leaves it.

``model.onnx``, ``mtp.onnx``, (faithful) ``engram.onnx``, their ``.data`` files,
``genai_config.json`` and the tokenizer files. No weights pool, no manifest (the public builder
writes neither).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx

from q38.package.genai.config import dumps_genai_config, parse_genai_config
from q38.synth.builder_forms import config as cfg
from q38.synth.builder_forms.assembly import SHARED_WITH_MTP, build_decoder, build_engram, build_mtp
from q38.synth.builder_forms.forms import BF16, FP16
from q38.synth.builder_forms.tokenizer import tokenizer_files
from q38.synth.graph import DataFile
from q38.synth.package_files import LIB_QSA
from q38.synth.spec import Spec
from q38.synth.weights import Weights

__all__ = ["MTP_SEED", "write_builder_package"]

MTP_SEED = 0x4D5450  # the MTP head's own tensors (same names as decoder layer 0, other bytes)
ENGRAM_SEED = 0x454E47


def _save(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString(deterministic=True))


def _graph(
    root: Path,
    name: str,
    seed: int,
    build: Callable[[Weights], onnx.ModelProto],
    *,
    block: bool = False,
) -> Weights:
    """Build one graph into ``name`` with every initializer in ``name.data``; returns its Weights."""
    data = DataFile(root / f"{name}.data", f"{name}.data")
    w = Weights(seed, data, threshold=0, block=block)
    try:
        _save(build(w), root / name)
    finally:
        data.close()
    return w


def write_builder_package(
    root: Path,
    s: Spec,
    seed: int,
    *,
    variant: str,
    lineage: str,
    prepacked: bool,
    linear_attn: str = "gated_delta_net",
) -> None:
    """Write the package into the (existing, empty) directory ``root``."""
    io = BF16 if variant == "faithful" else FP16
    dec = _graph(root, "model.onnx", seed,
                 lambda w: build_decoder(w, s, io=io, variant=variant, prepacked=prepacked,
                                         lineage=lineage, linear_attn=linear_attn),
                 block=s.block_weights)  # fmt: skip
    _graph(root, "mtp.onnx", seed ^ MTP_SEED,
           lambda w: build_mtp(w, dec, s, io=io, variant=variant, prepacked=prepacked),
           block=s.block_weights)  # fmt: skip
    if variant == "faithful":
        _graph(
            root,
            "engram.onnx",
            seed ^ ENGRAM_SEED,
            lambda w: build_engram(w, s),
            block=s.block_weights,
        )
    shared = cfg.shared_initializers({n: dec.refs[n] for n in SHARED_WITH_MTP})
    doc = cfg.config_dict(s, variant=variant, lineage=lineage, shared=shared)
    # Through the strict genai-surface parser: the cpu config is one onnxruntime-genai 0.18.0
    # accepts; the faithful one is accepted as the Qwen3.8 research builder's (0.18.0 refuses it).
    parsed = parse_genai_config(doc, source="genai_config.json", research=variant == "faithful")
    (root / "genai_config.json").write_text(dumps_genai_config(parsed), encoding="utf-8")
    for name, text in tokenizer_files(s.vocab, s.context).items():
        (root / name).write_text(text, encoding="utf-8")
    if lineage == "custom":
        (root / "libs").mkdir()
        (root / "libs" / "libcustom_ops.so").write_bytes(LIB_QSA)
