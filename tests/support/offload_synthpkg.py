"""Helpers for the offload tests: tree digests (byte-identical sources), graph edits, ORT sessions,
feeds and the logits parity check of converted graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

if TYPE_CHECKING:
    import onnxruntime as ort


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


def dims_of(value: onnx.ValueInfoProto) -> list[object]:
    """The shape of a graph input / output: a symbol's name or a fixed size per axis."""
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def edit_graph(path: Path, edit: Callable[[onnx.ModelProto], None]) -> None:
    """Load the graph at ``path`` (weights stay external), apply ``edit`` and save it in place."""
    model = onnx.load(path, load_external_data=False)
    edit(model)
    onnx.save(model, path)


AUTO_MODE = {"session.moe.offload.mode": "auto"}
"""The offload mode a CPU session runs converted graphs with (the CPU wheel has no offload backend)."""


def drop_mtp_draft(model: onnx.ModelProto) -> None:
    """Remove the target's MTP draft (its ``/mtp/`` nodes and ``mtp.`` outputs): a target without one."""
    keep = [n for n in model.graph.node if not n.name.startswith("/mtp/")]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    outs = [o for o in model.graph.output if not o.name.startswith("mtp.")]
    del model.graph.output[:]
    model.graph.output.extend(outs)


def cpu_session(path: Path, entries: dict[str, str]) -> ort.InferenceSession:
    """A real onnxruntime CPU session of the graph at ``path`` with the session config ``entries``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    for key, value in entries.items():
        so.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def logits_of(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every ``*logits`` output of ``session`` on ``feeds``, by name."""
    names = [o.name for o in session.get_outputs() if o.name.endswith("logits")]
    return dict(zip(names, session.run(names, feeds), strict=True))


class ParityError(AssertionError):
    """Logits differ from the reference's beyond ``rel`` x max |reference| (offload parity)."""


def logits_parity(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rel: float, *, first_rows: bool = False) -> None:
    """Raise :class:`ParityError` unless every logits output of ``want`` is within ``rel`` x its
    max magnitude of ``got``'s; ``first_rows``: ``got`` verifies more rows (a verify graph against
    the 2-row one), its first rows are compared and it may hold more outputs.
    """
    if first_rows:
        assert set(want) <= set(got) and want, (sorted(got), sorted(want))
    else:
        assert set(got) == set(want) and got, (sorted(got), sorted(want))
    for name, w in want.items():
        g = np.asarray(got[name], np.float64)
        if first_rows:
            g = g[:, : w.shape[1]]
        w64 = np.asarray(w, np.float64)
        scale = float(np.abs(w64).max())
        err = float(np.abs(g - w64).max()) if np.isfinite(g).all() else float("inf")
        if err > rel * scale:
            raise ParityError(f"{name}: max |diff| {err:.4g} > {rel} x max |ref| {scale:.4g}")
