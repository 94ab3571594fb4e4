"""Streaming synthesis (large preset) and ``--context-length``.

Invariants: the fast SM80 packer is byte-identical to the step-by-step port of ORT's packer for
every supported shape; a tensor written in pieces (uint8 codes through the packer, uniform fp16
scales) has exactly the bytes, offset and shape of the same tensor written whole; the large
preset's peak anonymous memory does not grow with --weight-gb (0.2 vs 0.6 GB differ by < 64 MiB,
measured in a child process; the builder exporter 0.1 vs 0.3 GB); --context-length sets model.context_length, kv_capacity,
search.max_length and the rotary caches (the cpu variant runs a 300-token prefill at positions up
to 8191 with --context-length 8192 on ORT CPU); bad values exit 2 with one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from q38.cli import main
from q38.synth import synthesize
from q38.synth import weights as weights_mod
from q38.synth.graph import DataFile, GraphBuilder
from q38.synth.qmoe import pack_sm80_int4, pack_sm80_int4_steps
from q38.synth.weights import Weights

RSS_CHILD = Path(__file__).resolve().parents[2] / "support" / "rss_child.py"


@pytest.mark.parametrize(
    ("n", "k"), [(128, 64), (64, 64), (32, 64), (16, 64), (64, 128), (48, 192)]
)
def test_fast_packer_matches_steps(n: int, k: int) -> None:
    raw = np.random.default_rng(n * k).integers(0, 256, (3, n, k // 2), dtype=np.uint8)
    fast = pack_sm80_int4(raw, n, k)
    assert fast.shape == (3, k, n // 2) and fast.dtype == np.uint8
    assert np.array_equal(fast, pack_sm80_int4_steps(raw, n, k))
    assert np.array_equal(pack_sm80_int4(raw[0], n, k), fast[0])


def _write(
    tmp: Path, name: str, chunk_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[bytes, dict]:
    monkeypatch.setattr(weights_mod, "CHUNK_BYTES", chunk_bytes)
    data = DataFile(tmp / name, "model.onnx.data")
    w = Weights(7, data)
    g = GraphBuilder("g")
    w.normal(g, "a", (40,))  # a small inline tensor first, then misaligned streamed ones
    w.codes(g, "c", (9, 64, 32), misalign=16, transform=lambda r: pack_sm80_int4(r, 64, 64))
    w.uniform(g, "s", (9, 64, 2), 0.01, 0.03, misalign=16)
    w.codes(g, "n", (5, 16, 8))
    data.close()
    return (tmp / name).read_bytes(), dict(w.refs)


def test_pieces_equal_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole, refs_whole = _write(tmp_path, "whole.data", 1 << 30, monkeypatch)
    pieces, refs_pieces = _write(tmp_path, "pieces.data", 2048, monkeypatch)  # 1 row per piece
    assert whole == pieces and refs_whole == refs_pieces
    assert refs_whole["c"].shape == (9, 64, 32) and refs_whole["c"].offset % 64 == 16
    assert refs_whole["s"].dtype == "float16" and refs_whole["s"].length == 9 * 64 * 2 * 2


def _peak(tmp: Path, gb: str, exporter: str = "research") -> int:
    report = tmp / f"rss{gb}{exporter}.json"
    cmd = [sys.executable, str(RSS_CHILD), str(report), "synth", str(tmp / f"p{gb}{exporter}"),
           "--preset", "large", "--weight-gb", gb, "--exporter", exporter]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["rc"] == 0
    return int(data["rss_anon_peak_kib"])


@pytest.mark.slow
@pytest.mark.parametrize(("exporter", "gbs"), [("research", ("0.2", "0.6")),
                                                ("builder", ("0.1", "0.3"))])  # fmt: skip
def test_large_memory_does_not_grow_with_weight_gb(
    tmp_path: Path, exporter: str, gbs: tuple[str, str]
) -> None:
    small, big = _peak(tmp_path, gbs[0], exporter), _peak(tmp_path, gbs[1], exporter)
    assert abs(big - small) < 64 * 1024, (small, big)
    size = (tmp_path / f"p{gbs[1]}{exporter}" / "model.onnx.data").stat().st_size
    assert size > 0.9 * float(gbs[1]) * 1e9


def test_context_length_config(tmp_path: Path) -> None:
    out = synthesize(tmp_path / "p", context_length=8192)
    cfg = json.loads((out / "genai_config.json").read_text(encoding="utf-8"))["model"]
    assert cfg["context_length"] == 8192 and cfg["qwen38_graph"]["kv_capacity"] == 8192
    assert cfg["qwen38_graph"]["prefill"]["chunk"] == 256
    full = json.loads((out / "genai_config.json").read_text(encoding="utf-8"))
    assert full["search"]["max_length"] == 8192
    m = onnx.load(str(out / "model.onnx"), load_external_data=False)
    cos = next(t for t in m.graph.initializer if t.name == "model.rotary_emb.cos_cache")
    assert list(cos.dims) == [8192, 8]


def test_context_length_cpu_prefill_300_at_8192(tmp_path: Path) -> None:
    out = synthesize(tmp_path / "p", variant="cpu", context_length=8192)
    sess = ort.InferenceSession(str(out / "prefill.onnx"), providers=["CPUExecutionProvider"])
    S = 300
    feeds: dict[str, np.ndarray] = {
        "input_ids": (np.arange(S, dtype=np.int64) % 500 + 3)[None],
        "attention_mask": np.ones((1, S), np.int64),
        "position_ids": np.arange(8192 - S, 8192, dtype=np.int64)[None],  # the last rotary rows
    }
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            shape = [1 if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape]
            feeds[i.name] = np.zeros(shape, np.float16 if "float16" in i.type else np.float32)
    names = [o.name for o in sess.get_outputs()]
    res = dict(zip(names, sess.run(None, feeds)))
    assert res["logits"].shape == (1, S, 512) and np.isfinite(res["logits"]).all()
    assert res["present.3.key"].shape == (1, 2, S, 16)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "q38 synth: error: --context-length 0: must be positive"),
        ("-5", "q38 synth: error: --context-length -5: must be positive"),
        (
            "128",
            "q38 synth: error: --context-length 128: must be at least the prefill chunk (256)",
        ),
    ],
)
def test_bad_context_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    assert main(["synth", str(tmp_path / "out"), f"--context-length={value}"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == message and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_normal_streamed_pieces_equal_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ml_dtypes

    def write(name: str, chunk: int) -> bytes:
        monkeypatch.setattr(weights_mod, "CHUNK_BYTES", chunk)
        data = DataFile(tmp_path / name, "x.data")
        Weights(7, data, threshold=0).normal_streamed(
            GraphBuilder("g"), "fp8", (6, 32, 64), 0.5, ml_dtypes.float8_e4m3fn
        )
        data.close()
        return (tmp_path / name).read_bytes()

    whole = write("whole", 1 << 30)
    assert write("pieces", 32 * 64 * 8) == whole and len(whole) == 6 * 32 * 64
    ref = (weights_mod.rng_for(7, "fp8").standard_normal((6, 32, 64)) * 0.5).astype(
        ml_dtypes.float8_e4m3fn
    )
    assert whole == ref.tobytes()
