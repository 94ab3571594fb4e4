"""The workload ``q38 profile`` runs: prompts (token ids) and a greedy continuation length.

``--prompts FILE`` holds one prompt per non-empty line: token ids (``5 6 7`` or ``5,6,7``), or
text, encoded by the package's tokenizer when onnxruntime-genai can load it. Without a file,
``--prompt-count`` prompts of ``--prompt-length`` ids are drawn from ``--seed`` (uniform over
the vocabulary): the same seed gives the same prompts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from q38.errors import ProfileError, clip, quote
from q38.package.io.files import TEXT_LIMIT, read_bounded

__all__ = ["Tokenizer", "Workload", "read_prompts", "synthetic_prompts"]

Tokenizer = Callable[[str], list[int]]
_IDS: Final = re.compile(r"\s*\d+(?:[\s,]+\d+)*\s*,?\s*")
MAX_PROMPTS: Final = 100_000


@dataclass(frozen=True)
class Workload:
    """Token-id prompts to profile and the greedy tokens to generate after each; refuses an empty one."""

    prompts: tuple[tuple[int, ...], ...]
    tokens: int  # greedy tokens generated per prompt
    source: str  # what the prompts came from (for the report)

    def __post_init__(self) -> None:
        if not self.prompts:
            raise ProfileError(f"{self.source}: no prompts")
        if self.tokens < 1:
            raise ProfileError(f"--tokens {self.tokens}: must be at least 1")


def synthetic_prompts(count: int, length: int, vocab: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """``count`` prompts of ``length`` ids uniform in ``[0, vocab)``, from ``seed``."""
    if count < 1 or length < 1:
        raise ProfileError(f"--prompt-count {count} / --prompt-length {length}: both must be at least 1")
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(count, length))
    return tuple(tuple(int(t) for t in row) for row in ids)


def read_prompts(path: Path, *, vocab: int, tokenizer: Callable[[], Tokenizer | str]) -> tuple[tuple[int, ...], ...]:
    """The prompts of ``path``; a bad file is one :class:`ProfileError` line naming file and line.

    ``tokenizer()`` gives an encoder, or the reason there is none; it is asked only when a line
    is text.
    """
    data = read_bounded(path, what="--prompts", limit=TEXT_LIMIT, error=ProfileError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"--prompts {clip(path)}: not UTF-8 text (byte {exc.start})") from None
    prompts: list[tuple[int, ...]] = []
    encode: Tokenizer | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"--prompts {clip(path)}:{number}"
        if _IDS.fullmatch(line):
            ids = [int(t) for t in re.split(r"[\s,]+", line.strip().rstrip(",")) if t]
        else:
            if encode is None:
                got = tokenizer()
                if isinstance(got, str):
                    raise ProfileError(f"{where}: {quote(line)} is not a line of token ids, and {got}")
                encode = got
            ids = list(encode(line))
            if not ids:
                raise ProfileError(f"{where}: the tokenizer gives no tokens for {quote(line)}")
        bad = [t for t in ids if t >= vocab]
        if bad:
            raise ProfileError(f"{where}: token id {bad[0]} is outside the vocabulary (vocab_size {vocab})")
        prompts.append(tuple(ids))
        if len(prompts) > MAX_PROMPTS:
            raise ProfileError(f"--prompts {clip(path)}: more than {MAX_PROMPTS} prompts")
    if not prompts:
        raise ProfileError(f"--prompts {clip(path)}: no prompt (every line is empty)")
    return tuple(prompts)


def og_tokenizer(root: Path) -> Callable[[], Tokenizer | str]:
    """A lazy encoder from onnxruntime-genai's tokenizer for the package at ``root``, or why not."""

    def load() -> Tokenizer | str:
        try:
            import onnxruntime_genai as og  # deferred: heavy and optional (ImportError: why not)
        except ImportError:
            return "onnxruntime-genai is not installed (text prompts need its tokenizer)"
        try:
            config = og.Config(str(root))
            config.clear_providers()
            tok = og.Tokenizer(og.Model(config))
        except Exception as exc:  # og raises RuntimeError / its own types with one-line texts
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"the package has no tokenizer onnxruntime-genai can load ({clip(first, 160)})"

        def encode(text: str) -> list[int]:
            return [int(t) for t in tok.encode(text)]

        return encode

    return load


def prompt_lengths(prompts: Sequence[Sequence[int]]) -> list[int]:
    """The token count of each prompt, in order (the profile's workload record)."""
    return [len(p) for p in prompts]
