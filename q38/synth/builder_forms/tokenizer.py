"""Tokenizer files beside the graphs, as ``tokenizer.save_pretrained`` leaves them in a builder package.

A byte-level BPE ``tokenizer.json`` over the synthetic vocabulary and its
``tokenizer_config.json``. Deterministic text, no merges.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["tokenizer_files"]

_SPECIAL = ("<|pad|>", "<|im_start|>", "<|im_end|>")  # ids 0 (pad), 1 (bos), 2 (eos)


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character map (the ByteLevel pre-tokenizer's alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokenizer_files(vocab_size: int, context: int) -> dict[str, str]:
    """File name -> text of the two tokenizer files for a vocabulary of ``vocab_size`` ids."""
    vocab: dict[str, int] = {t: i for i, t in enumerate(_SPECIAL)}
    for ch in _byte_chars():
        vocab[ch] = len(vocab)
    reserved = [f"<|reserved_{k}|>" for k in range(vocab_size - len(vocab))]
    added = [(i, t) for i, t in enumerate(_SPECIAL)]
    for t in reserved:
        added.append((len(vocab), t))
        vocab[t] = len(vocab)
    tok: dict[str, Any] = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, t in added
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }  # fmt: skip
    cfg = {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None,
        "eos_token": _SPECIAL[2], "pad_token": _SPECIAL[0], "errors": "replace",
        "model_max_length": context, "tokenizer_class": "Qwen2Tokenizer", "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for i, t in added
        },
    }  # fmt: skip
    def dump(doc: dict[str, Any]) -> str:
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"

    return {"tokenizer.json": dump(tok), "tokenizer_config.json": dump(cfg)}
