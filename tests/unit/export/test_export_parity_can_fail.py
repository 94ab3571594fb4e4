"""Export parity that can fail: ``q38 export-genai``'s package computes the source's logits, and a
broken export -- its lm_head columns rolled by one (a permuted vocabulary) -- is reported both by
the logits check and by GenAI's generated tokens.

:func:`parity` runs the whole prompt (full recompute, empty state) through the exported and the
source ``model.onnx`` with real ORT CPU sessions and requires every logit within ``REL`` x max
|source logits| (REL = 1e-3: the export passes the graph through; only the config changes). The
self-test edits a copy of the export: the MatMul that produces ``logits`` reads an inline copy of
its weight rolled along the vocabulary axis. Parity must fail, and onnxruntime-genai (when
installed) must generate tokens other than the source's greedy ones.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from q38.cli import main

PROMPT = [1, 5, 9, 17, 33, 65]
NEW_TOKENS = 8
REL = 1e-3


class ParityError(AssertionError):
    """The exported graph's logits differ from the source's beyond REL x max |source|."""


def _logits(graph: Path, ids: list[int]) -> np.ndarray:
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    feeds: dict[str, np.ndarray] = {}
    for arg in session.get_inputs():
        if arg.name == "input_ids":
            feeds[arg.name] = np.array([ids], dtype=np.int64)
        elif arg.name == "attention_mask":
            feeds[arg.name] = np.ones((1, len(ids)), dtype=np.int64)
        elif arg.name == "position_ids":
            feeds[arg.name] = np.arange(len(ids), dtype=np.int64)[None]
        else:
            shape = [1 if d == "batch_size" else 0 if isinstance(d, str) else int(d) for d in arg.shape]
            feeds[arg.name] = np.zeros(shape, dtype=np.float16 if "float16" in arg.type else np.float32)
    return np.asarray(session.run(["logits"], feeds)[0], np.float64)


def parity(got: np.ndarray, want: np.ndarray) -> None:
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max()) if got.shape == want.shape and np.isfinite(got).all() else float("inf")
    if err > REL * scale:
        raise ParityError(f"logits: max |diff| {err:.4g} > {REL} x max |ref| {scale:.4g}")


def _greedy(graph: Path) -> list[int]:
    ids = list(PROMPT)
    for _ in range(NEW_TOKENS):
        ids.append(int(_logits(graph, ids)[0, -1].argmax()))
    return ids[len(PROMPT):]


@pytest.fixture(scope="module")
def exported(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export_parity") / "genai"
    assert main(["export-genai", str(tiny_cpu_package), str(out)]) == 0
    return out


def _well_scaled(want: np.ndarray) -> None:
    assert 0.1 < np.abs(want).max() < 1e3 and want.std() > 1e-3


def test_exported_graph_passes_parity(exported: Path, tiny_cpu_package: Path) -> None:
    want = _logits(tiny_cpu_package / "model.onnx", PROMPT)
    _well_scaled(want)
    parity(_logits(exported / "model.onnx", PROMPT), want)


def test_broken_export_fails_parity_and_generates_other_tokens(exported: Path, tiny_cpu_package: Path,
                                                               tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(exported, broken, symlinks=True)
    path = broken / "model.onnx"
    model = onnx.load(path, load_external_data=False)
    head = next(n for n in model.graph.node if "logits" in n.output)
    inits = {t.name: t for t in model.graph.initializer}
    weight = next(inits[i] for i in head.input if i in inits)
    arr = numpy_helper.to_array(weight, base_dir=str(broken))
    weight.CopyFrom(numpy_helper.from_array(np.roll(arr, 1, axis=-1), weight.name))
    path.unlink()  # never write through a link
    onnx.save(model, path)
    want = _logits(tiny_cpu_package / "model.onnx", PROMPT)
    with pytest.raises(ParityError):
        parity(_logits(path, PROMPT), want)
    og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (0.18.0) is not installed")
    assert og is not None
    from q38.export_genai import generate_tokens

    assert generate_tokens(exported, PROMPT, NEW_TOKENS) == _greedy(tiny_cpu_package / "model.onnx")
    assert generate_tokens(broken, PROMPT, NEW_TOKENS) != _greedy(tiny_cpu_package / "model.onnx")
