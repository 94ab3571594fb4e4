"""Helpers for the offload tests: tree digests (byte-identical sources) and ORT feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def tree_digest(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root``: (size, sha256) - for byte-identical source checks."""
    import hashlib

    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        elif path.is_symlink():
            out[str(path.relative_to(root))] = (-1, str(path.readlink()))
    return out


def feeds_for(session: object, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs for a target-graph session: ``rows`` tokens, empty past."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    dtypes = {"tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32}
    for inp in session.get_inputs():  # type: ignore[attr-defined]
        if inp.name == "input_ids":
            out[inp.name] = rng.integers(0, 512, size=(1, rows), dtype=np.int64)
        elif inp.name == "attention_mask":
            out[inp.name] = np.ones((1, rows), np.int64)
        elif inp.name == "position_ids":
            out[inp.name] = np.arange(rows, dtype=np.int64)[None]
        else:
            shape = [d if isinstance(d, int) else (1 if k == 0 else 0) for k, d in enumerate(inp.shape)]
            out[inp.name] = np.zeros(shape, dtypes[inp.type])
    return out
