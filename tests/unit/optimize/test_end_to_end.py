"""`q38 optimize --target cpu` on the synthetic cpu-variant package, end to end.

Invariants guarded:
* the optimized target graph runs in an ORT CPU session and matches the unoptimized graph's
  logits and every present state over a prefill and 3 decode steps (fp16 tolerance: atol 2e-2,
  rtol 2e-2; both sessions at ORT_DISABLE_ALL);
* the source package is byte-identical after optimize, and after a failed optimize;
* the manifest records the rewrite counts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from q38.cli import main

ATOL = RTOL = 2e-2


def _digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module", params=["tiny", pytest.param("full", marks=pytest.mark.slow)])
def packages(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("e2e")
    src, out = base / "src", base / "out"
    assert main(["synth", str(src), "--preset", request.param, "--variant", "cpu"]) == 0
    before = _digest(src)
    assert main(["optimize", str(src), str(out), "--target", "cpu"]) == 0
    assert _digest(src) == before
    return src, out


def _session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


_NP = {"tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(int64)": np.int64}


def _decode(sess: ort.InferenceSession, steps: int = 3, prompt: int = 5) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    inputs = {i.name: i for i in sess.get_inputs()}
    past: dict[str, np.ndarray] = {}
    for name, info in inputs.items():
        if name.startswith("past"):
            shape = [1 if d == "batch_size" or d == "B" else (0 if isinstance(d, str) else d) for d in info.shape]
            shape = [1 if i == 0 else s for i, s in enumerate(shape)]
            past[name] = np.zeros(shape, _NP[info.type])
    names = [o.name for o in sess.get_outputs()]
    results = []
    total = 0
    for step in range(steps + 1):
        s = prompt if step == 0 else 1
        ids = rng.integers(0, 500, (1, s)).astype(np.int64)
        feeds = {"input_ids": ids, "position_ids": np.arange(total, total + s, dtype=np.int64)[None],
                 "attention_mask": np.ones((1, total + s), np.int64), **past}
        feeds = {k: v for k, v in feeds.items() if k in inputs}
        outs = dict(zip(names, sess.run(None, feeds), strict=True))
        results.append(outs)
        total += s
        past = {k: outs[k.replace("past_key_values", "present").replace("past", "present")] for k in past}
    return results


@pytest.mark.slow
def test_cpu_optimized_package_matches_unoptimized_over_prefill_and_decode(packages: tuple[Path, Path]) -> None:
    src, out = packages
    manifest = json.loads((out / "package_manifest.json").read_text())
    assert manifest["rewrites"]["shared_expert"] > 0 and manifest["rewrites"]["causal_conv_state"] > 0
    assert manifest["rewrites"]["rms_norm_rotary"] == 0
    ref = _decode(_session(src / "model.onnx"))
    got = _decode(_session(out / "model.onnx"))
    for step_ref, step_got in zip(ref, got, strict=True):
        assert step_ref.keys() == step_got.keys()
        for name, value in step_ref.items():
            np.testing.assert_allclose(step_got[name].astype(np.float32), value.astype(np.float32),
                                       atol=ATOL, rtol=RTOL, err_msg=name)


def test_failed_optimize_leaves_source_identical_and_no_output(tmp_path: Path) -> None:
    src = tmp_path / "src"
    assert main(["synth", str(src), "--preset", "tiny", "--variant", "cpu"]) == 0
    before = _digest(src)
    (tmp_path / "out").mkdir()  # destination exists: refused
    assert main(["optimize", str(src), str(tmp_path / "out"), "--target", "cpu"]) == 2
    assert main(["optimize", str(src), str(tmp_path / "o2"), "--passes", "nope"]) == 2
    assert _digest(src) == before
    assert not (tmp_path / "o2").exists()
