"""ORT 1.32.0 CPU behaviour of the synthetic model and the QMoE SM80 packer.

Invariants: faithful session creation fails NOT_IMPLEMENTED naming SparseAttentionIndexer (the
first QSA op in topological order); the cpu target runs a prefill (S=5) and a decode step (S=1,
presents fed back) with finite outputs and every present shape right; QMoE with SM80-packed
int4 bytes (weights_prepacked=1) matches a numpy dequantized reference, including the shared
path's un-renormalized router_weights mixing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

from q38.synth.qmoe import dequantize_int4, pack_sm80_int4, reference_qmoe


def test_faithful_not_implemented(tiny_faithful_package: Path) -> None:
    with pytest.raises(
        Exception, match=r"NOT_IMPLEMENTED.*SparseAttentionIndexer.*layers\.3/attn/indexer"
    ) as ei:
        ort.InferenceSession(
            str(tiny_faithful_package / "model.onnx"), providers=["CPUExecutionProvider"]
        )
    assert "DynamicSparseAttention" not in str(ei.value)


def _feeds(
    sess: ort.InferenceSession,
    ids: np.ndarray,
    pos: np.ndarray,
    total: int,
    past: dict[str, np.ndarray] | None,
) -> dict[str, np.ndarray]:
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), "position_ids": pos}
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            if past is not None:
                feeds[i.name] = past[i.name]
            else:
                shape = [
                    1 if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape
                ]
                feeds[i.name] = np.zeros(shape, np.float16 if "float16" in i.type else np.float32)
    return feeds


def test_cpu_prefill_then_decode(tiny_cpu_package: Path) -> None:
    sess = ort.InferenceSession(
        str(tiny_cpu_package / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in sess.get_outputs()]
    S = 5
    out = dict(
        zip(
            names,
            sess.run(
                None,
                _feeds(
                    sess,
                    np.arange(3, 3 + S, dtype=np.int64)[None],
                    np.arange(S, dtype=np.int64)[None],
                    S,
                    None,
                ),
            ),
        )
    )
    past: dict[str, np.ndarray] = {}
    for T, o in ((S, out), (S + 1, None)):
        if o is None:
            feeds = _feeds(sess, np.array([[7]], np.int64), np.array([[S]], np.int64), S + 1, past)
            o = dict(zip(names, sess.run(None, feeds)))
        seq = T if T == S else 1
        assert o["logits"].shape == (1, seq, 512) and o["mtp.0.logits"].shape == (1, seq, 512)
        assert o["hidden_states"].shape == (1, seq, 256)
        for name, v in o.items():
            assert np.isfinite(v).all(), name
            if name.startswith("present."):
                i, kind = int(name.split(".")[1]), name.split(".")[2]
                want = {
                    "conv": (1, 128, 3),
                    "recurrent": (1, 4, 16, 16),
                    "key": (1, 2, T, 16),
                    "value": (1, 2, T, 16),
                }[kind]
                assert v.shape == want, name
                assert (kind in ("key", "value")) == (i % 4 == 3)
                past[
                    name.replace("present.", "past.")
                    if kind in ("conv", "recurrent")
                    else f"past_key_values.{i}.{kind}"
                ] = v


def test_qmoe_sm80_matches_numpy_reference() -> None:
    rng = np.random.default_rng(0)
    E, H, N_I, T, B = 8, 64, 64, 7, 32
    q1 = rng.integers(0, 256, (E, 2 * N_I, H // 2), dtype=np.uint8)
    q2 = rng.integers(0, 256, (E, H, N_I // 2), dtype=np.uint8)
    s1 = rng.uniform(0.01, 0.03, (E, 2 * N_I, H // B)).astype(np.float16)
    s2 = rng.uniform(0.01, 0.03, (E, H, N_I // B)).astype(np.float16)
    d1 = np.stack([dequantize_int4(q1[e], s1[e], B) for e in range(E)])
    d2 = np.stack([dequantize_int4(q2[e], s2[e], B) for e in range(E)])
    x = rng.standard_normal((T, H)).astype(np.float16)
    lg = (rng.standard_normal((T, E)) * 2).astype(np.float16)
    sm = np.exp(lg.astype(np.float32))
    rw = (sm / sm.sum(-1, keepdims=True)).astype(np.float16)
    for with_rw in (True, False):
        ins = ["x", "p", "w1", "s1", "", "w2", "s2"] + (
            ["", "", "", "", "", "", "", "rw"] if with_rw else []
        )
        node = oh.make_node(
            "QMoE",
            ins,
            ["y"],
            domain="com.microsoft",
            quant_type="int",
            expert_weight_bits=4,
            block_size=B,
            weights_prepacked=1,
            activation_type="swiglu",
            swiglu_fusion=1,
            k=2,
            normalize_routing_weights=1,
            use_sparse_mixer=0,
        )
        graph_in = [
            oh.make_tensor_value_info(n, TensorProto.FLOAT16, s)
            for n, s in (("x", [T, H]), ("p", [T, E]), ("rw", [T, E]))
        ][: 3 if with_rw else 2]
        g = oh.make_graph(
            [node],
            "g",
            graph_in,
            [oh.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
            [
                nh.from_array(pack_sm80_int4(q1, 2 * N_I, H), "w1"),
                nh.from_array(s1, "s1"),
                nh.from_array(pack_sm80_int4(q2, H, N_I), "w2"),
                nh.from_array(s2, "s2"),
            ],
        )
        m = oh.make_model(
            g,
            opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)],
            ir_version=10,
        )
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {"x": x, "p": lg} | ({"rw": rw} if with_rw else {})
        y = sess.run(None, feeds)[0]
        ref = reference_qmoe(x, lg, d1, d2, 2, rw if with_rw else None)
        assert np.abs(y - ref).max() < 2e-3 * max(1.0, float(np.abs(ref).max()))
        # The raw (unpacked) bytes under weights_prepacked=1 give wrong numbers: the packer matters.
    bad = pack_sm80_int4(q1, 2 * N_I, H)
    assert not np.array_equal(bad, q1.reshape(bad.shape))
    assert onnx.__version__
