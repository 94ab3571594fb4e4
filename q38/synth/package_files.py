"""The synthetic package's config document, pool and manifest, as q38.package records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from q38.package import (
    FileRecord,
    Manifest,
    Placement,
    PoolEntry,
    WeightsPool,
    format_pool,
    sha256_file,
)
from q38.package.io.elf import shared_object_header
from q38.synth.graph import ExtRef, known_sha256
from q38.synth.spec import PREFILL_CHUNK, Spec

__all__ = ["LIB_HC", "LIB_QSA", "config_dict", "dumps_json", "manifest", "pool_text"]

# Placeholder library bytes (not loadable: an ELF shared-object header, no sections, then a
# note): deterministic, distinct per role; they pass q38 build's --lib-NAME shared-object check.
LIB_QSA = shared_object_header() + b"q38 synthetic placeholder: qsa libcustom_ops (RegisterCustomOps)\n"
LIB_HC = shared_object_header() + b"q38 synthetic placeholder: hc libcustom_ops (RegisterCustomOps), different bytes\n"


def dumps_json(data: object) -> str:
    """``data`` as the synthetic package writes JSON: sorted keys, indent 2, newline-ended (byte-stable)."""
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def config_dict(
    s: Spec, *, variant: str, lineage: str, decoder: str = "model.onnx"
) -> dict[str, Any]:
    """The v12b ``genai_config.json`` document of a synthetic package with the graphs of ``s``.

    ``lineage == "custom"`` names the custom-ops library in the decoder's session options;
    only the ``faithful`` variant declares the indexer key cache inputs / outputs.
    """
    session: dict[str, Any] = {
        "log_id": "q38",
        "provider_options": [{"cuda": {"enable_cuda_graph": "1", "gpu_mem_limit": "25769803776"}}],
    }
    if lineage == "custom":
        session["custom_ops_library"] = "libs/libcustom_ops.so"
    return {
        "model": {
            "type": "qwen38_flash_graph",
            "bos_token_id": 1,
            "eos_token_id": [2],
            "pad_token_id": 0,
            "vocab_size": s.vocab,
            "context_length": s.context,
            "decoder": {
                "filename": decoder,
                "hidden_size": s.streams,
                "num_attention_heads": s.heads,
                "num_key_value_heads": s.kv_heads,
                "head_size": s.head_size,
                "num_hidden_layers": s.layers,
                "session_options": session,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "position_ids": "position_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                    "past_conv_names": "past.%d.conv",
                    "past_recurrent_names": "past.%d.recurrent",
                    # the indexer key cache exists only where the indexer does (faithful)
                    **({"past_indexer_names": "past.%d.indexer_key"} if variant == "faithful" else {}),
                },
                "outputs": {
                    "logits": "logits",
                    "hidden_states": "hidden_states",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                    "present_conv_names": "present.%d.conv",
                    "present_recurrent_names": "present.%d.recurrent",
                    **(
                        {"present_indexer_names": "present.%d.indexer_key"}
                        if variant == "faithful"
                        else {}
                    ),
                },
            },
            "qwen38_graph": {
                "surface": "v12b",
                "lineage": lineage,
                "variant": variant,
                "target": {"filename": "model.onnx"},
                "fold": {
                    "head_r2": {
                        "filename": "head_r2.onnx",
                        "session_options": {
                            "provider_options": [{"cuda": {"enable_cuda_graph": "1"}}]
                        },
                    }
                },
                "prefill": {"filename": "prefill.onnx", "chunk": PREFILL_CHUNK},
                "kv_capacity": s.context,
                "weights_pool": "weights_pool.txt",
            },
        },
        "runtime_profiles": [],
        "search": {"max_length": s.context},
    }


def pool_text(entries: list[tuple[str, ExtRef, str]], *, file_prefix: str = "") -> str:
    """Pool format 1: (pool_id, ref, provenance) per shared tensor, all placement ``device``."""
    return format_pool(
        WeightsPool.from_entries(
            PoolEntry(
                pool_id, f"{file_prefix}{ref.location}", ref.offset, ref.length, ref.dtype,
                tuple(ref.shape), Placement.DEVICE, prov,
            )
            for pool_id, ref, prov in entries
        )
    )


def manifest(root: Path, notes: list[str]) -> Manifest:
    """The ``q38 synth`` manifest of every regular file under ``root`` (symlinks and the manifest left out).

    Data files this process wrote reuse the sha256 taken while writing (:func:`known_sha256`).
    """
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if rel.endswith("package_manifest.json"):
            continue
        files[rel] = FileRecord("write", known_sha256(path) or sha256_file(path))
    return Manifest(command="synth", files=files, notes=tuple(notes))
