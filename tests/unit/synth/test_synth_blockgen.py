"""Block-generated weights (q38.synth.blockgen, the large and slice presets).

Invariants: a tensor's bytes do not depend on how it is cut into pieces; the same (seed, name) gives
the same bytes and another name other bytes; fp16 / bf16 / fp8 values stay finite inside the drawn
range; a Weights without ``block`` (tiny / full presets, goldened) keeps numpy's per-element draw.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from q38.synth import weights as weights_mod
from q38.synth.blockgen import BLOCK_BYTES, BlockStream, base_block
from q38.synth.graph import DataFile, GraphBuilder, rng_for
from q38.synth.weights import Weights


def _draw(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, n, dtype=np.uint8)


def test_stream_pieces_equal_whole() -> None:
    base = base_block(("codes",), np.dtype(np.uint8), _draw)
    total = 3 * (base.size // 2) + 12345
    whole = BlockStream(7, "t", base, total).take(total)
    s = BlockStream(7, "t", base, total)
    pieces = np.concatenate(
        [s.take(n) for n in (1, 999_999, 4 << 20, total - 1 - 999_999 - (4 << 20))]
    )
    assert np.array_equal(whole, pieces)
    other = BlockStream(7, "u", base, total).take(total)
    assert not np.array_equal(whole, other)
    n = base.size // 2
    assert not np.array_equal(whole[:n], whole[n : 2 * n])  # blocks of one tensor differ
    with pytest.raises(ValueError):
        s.take(1)


def _write(tmp: Path, name: str, block: bool, chunk: int, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setattr(weights_mod, "BLOCK_CHUNK_BYTES", chunk)
    data = DataFile(tmp / name, "d")
    w = Weights(3, data, block=block)
    g = GraphBuilder("g")
    w.codes(g, "c", (4, 512, 256), misalign=16)
    w.uniform(g, "s", (4, 256, 256), 0.01, 0.03)
    w.normal(g, "n", (1024, 512), scale=0.5)
    w.normal_streamed(g, "f8", (2, 512, 512), 0.5, ml_dtypes.float8_e4m3fn)
    w.uniform(g, "b", (512, 512), 0.5, 2.0, dtype=ml_dtypes.bfloat16)
    data.close()
    return (tmp / name).read_bytes()


def test_weights_block_deterministic_and_chunk_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _write(tmp_path, "a", True, 1 << 30, monkeypatch)
    b = _write(tmp_path, "b", True, 4096, monkeypatch)
    assert a == b and len(a) > 2 * 512 * 256


def test_block_values_finite_and_in_range() -> None:
    for dt, lo, hi in ((np.float16, 0.01, 0.03), (ml_dtypes.bfloat16, 0.5, 2.0),
                       (ml_dtypes.float8_e4m3fn, 0.5, 2.0)):  # fmt: skip
        base = base_block(("uniform", lo, hi), np.dtype(dt),
                          lambda rng, n, dt=dt, lo=lo, hi=hi: weights_mod.cast_generated(
                              rng.uniform(lo, hi, n), dt))  # fmt: skip
        v = BlockStream(1, "x", base, base.size).take(base.size).astype(np.float32)
        assert np.isfinite(v).all() and v.min() >= lo * 0.9 and v.max() <= hi * 1.1
        assert base.nbytes == 2 * BLOCK_BYTES


def test_without_block_keeps_numpy_draw(tmp_path: Path) -> None:
    data = DataFile(tmp_path / "d", "d")
    w = Weights(5, data)
    w.normal(GraphBuilder("g"), "n", (1024, 512))
    data.close()
    want = weights_mod.cast_generated(
        rng_for(5, "n").standard_normal((1024, 512)) * 0.05, np.float16
    )
    got = np.frombuffer((tmp_path / "d").read_bytes(), np.float16).reshape(1024, 512)
    assert np.array_equal(got, want)


def test_slice_has_the_real_dims_and_block_weights() -> None:
    from q38.synth.spec import spec_for

    s = spec_for("slice")
    assert (s.layers, s.hidden, s.streams, s.heads, s.kv_heads, s.head_size) == (
        4,
        2560,
        10240,
        24,
        2,
        256,
    )
    assert (s.conv_dim, s.gdn_hv * s.gdn_dv, s.experts) == (10240, 6144, 512)  # reference §1.2
    assert s.qsa_layers == (3,) and s.block_weights and s.rotary_dim // 2 == sum(s.mrope_section)
    assert not spec_for("tiny").block_weights and not spec_for("full").block_weights
    assert spec_for("large", 1.0).block_weights


def test_large_block_package_runs_on_ort_cpu(tmp_path: Path) -> None:
    """A block-generated large package (QMoE codes in stored order) loads and gives finite,
    non-constant logits on ORT CPU."""
    import onnxruntime as ort

    from q38.synth import synthesize

    out = synthesize(tmp_path / "p", preset="large", variant="cpu", weight_gb=0.05)
    sess = ort.InferenceSession(str(out / "prefill.onnx"), providers=["CPUExecutionProvider"])
    feeds: dict[str, np.ndarray] = {
        "input_ids": (np.arange(8, dtype=np.int64) * 37 % 500 + 3)[None],
        "attention_mask": np.ones((1, 8), np.int64),
        "position_ids": np.arange(8, dtype=np.int64)[None],
    }
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            shape = [1 if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape]
            feeds[i.name] = np.zeros(shape, np.float16 if "float16" in i.type else np.float32)
    logits = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))["logits"]
    values = logits.astype(np.float32)
    assert np.isfinite(values).all() and values.std() > 0
