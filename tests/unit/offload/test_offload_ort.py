"""Converted packages in a real onnxruntime 1.32.0 CPU session.

Invariants guarded:
- every emitted ``session.moe.offload.*`` set (decoder options and each runtime-profile overlay,
  for several flag combinations) passes ``contracts.offload_config`` and is accepted by a real
  CPU session (mode=auto there: the CPU wheel has no offload backend);
- the converted ``model_s2.onnx`` of the cpu variant runs on CPU and gives bit-identical logits
  (and MTP logits) to the source graph once the source's router_weights are unused;
- where router_weights were used, the documented effect holds: ORT weights the top-k experts by
  the renormalized softmax of router_probs instead of the raw router_weights, so the QMoE output
  of the source equals the converted output times the per-token sum of the top-k probabilities;
- parity that can fail: the converted 2-row graph's logits are the source's within 1e-3 of their
  magnitude (router_weights unused), and a converted package whose first decoder QMoE's experts
  are permuted or whose FC2 scales are zeroed fails that check.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.offload_synthpkg import (
    AUTO_MODE,
    ParityError,
    cpu_session,
    feeds_for,
    logits_of,
    logits_parity,
)

from contracts.offload_config import check_offload_config
from q38.offload.options import OffloadOptions, offload_config_entries
from q38.package import open_package
from q38.synth.qmoe import dequantize_int4, pack_sm80_int4, quantize_int4, reference_qmoe


def _auto(entries: dict[str, str]) -> dict[str, str]:
    return {**entries, **AUTO_MODE}


def test_emitted_options_accepted_by_ort(converted_cpu: Path) -> None:
    cfg = open_package(converted_cpu).config
    sets = [cfg.model.decoder.session_options.config_entries]
    sets += [p.overlay.session_options.config_entries for p in cfg.runtime_profiles if p.overlay.session_options]
    assert len(sets) == 5
    for entries in sets:
        offload = {k: v for k, v in entries.items() if k.startswith("session.moe.offload.")}
        assert check_offload_config(offload) == []
        cpu_session(converted_cpu / "model_s2.onnx", _auto(offload))


@pytest.mark.parametrize(
    "options",
    [
        OffloadOptions(),
        OffloadOptions(mode="auto", placement="static", cpu_execution=True),
        OffloadOptions(device_expert_bytes=0, host_expert_bytes=2**64 - 1),
        OffloadOptions(device_expert_bytes=1 << 30, expert_profile="p.bin", total_resident_slots=3),
    ],
    ids=["defaults", "static-cpu", "budget-extremes", "profile"],
)
def test_option_combinations_pass_contract_and_ort(options: OffloadOptions, converted_cpu: Path) -> None:
    caps = {"/model/layers.0/moe/QMoE": 0, "/mtp/0/moe/QMoE": 8}
    entries = offload_config_entries(options, caps)
    assert check_offload_config(entries) == []
    cpu_session(converted_cpu / "model_s2.onnx", _auto(entries))


def _strip_router_weights(src: Path, dest: Path) -> Path:
    """A copy of the source package whose target graph has router_weights unused (slot 14 empty)."""
    shutil.copytree(src, dest, symlinks=True)
    model = onnx.load(dest / "model.onnx", load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "QMoE" and len(node.input) > 14:
            del node.input[14:]  # router_weights unused, as the converted graph runs
    (dest / "model.onnx").unlink()  # never write through a link
    onnx.save(model, dest / "model.onnx")
    return dest


def test_s2_matches_source_where_router_weights_unused(converted_auto: tuple[Path, dict[str, str]],
                                                       tiny_cpu_package: Path, tmp_path: Path) -> None:
    out, entries = converted_auto
    converted = cpu_session(out / "model_s2.onnx", entries)
    unused = cpu_session(_strip_router_weights(tiny_cpu_package, tmp_path / "unused") / "model.onnx", {})
    used = cpu_session(tiny_cpu_package / "model.onnx", {})
    feeds = feeds_for(converted, rows=2, seed=7)
    got = logits_of(converted, feeds)
    want = logits_of(unused, feeds)
    assert set(got) == {"logits", "mtp.0.logits"}
    for name in got:
        assert np.isfinite(got[name]).all()
        np.testing.assert_array_equal(got[name], want[name])
    # With router_weights used (the source as synthesized), the logits differ: the effect is
    # the renormalization documented in test_router_weights_effect_is_renormalization.
    before = logits_of(used, feeds)
    assert not np.array_equal(before["logits"], got["logits"])


def _qmoe_model(with_router_weights: bool, *, tokens: int, h: int, inter: int, e: int, k: int,
                rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    block = 32
    w1 = (rng.standard_normal((e, 2 * inter, h)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((e, h, inter)) * 0.2).astype(np.float32)
    inits, deq1, deq2 = [], [], []
    for name, w, n_, k_ in (("fc1", w1, 2 * inter, h), ("fc2", w2, h, inter)):
        packed, scales, deq = [], [], []
        for i in range(e):
            raw, sc = quantize_int4(w[i], block)
            packed.append(pack_sm80_int4(raw, n_, k_))
            scales.append(sc)
            deq.append(dequantize_int4(raw, sc, block))
        inits.append(helper.make_tensor(f"{name}_w", TensorProto.UINT8, [e, k_, n_ // 2],
                                        np.stack(packed).tobytes(), raw=True))
        inits.append(helper.make_tensor(f"{name}_s", TensorProto.FLOAT16, [e, n_, k_ // block],
                                        np.stack(scales).astype(np.float16).tobytes(), raw=True))
        (deq1 if name == "fc1" else deq2).append(np.stack(deq))
    nodes = []
    ins = ["x", "logits", "fc1_w", "fc1_s", "", "fc2_w", "fc2_s"]
    if with_router_weights:
        nodes.append(helper.make_node("Softmax", ["logits"], ["rw"], axis=-1))
        ins += ["", "", "", "", "", "", "", "rw"]
    nodes.append(helper.make_node(
        "QMoE", ins, ["y"], domain="com.microsoft", quant_type="int", expert_weight_bits=4, block_size=block,
        weights_prepacked=1, activation_type="swiglu", swiglu_fusion=1, k=k, normalize_routing_weights=1,
        use_sparse_mixer=0))
    graph = helper.make_graph(
        nodes, "qmoe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [tokens, h]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT16, [tokens, e])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [tokens, h])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    return model, deq1[0], deq2[0]


def test_router_weights_effect_is_renormalization(tmp_path: Path) -> None:
    tokens, h, inter, e, k = 6, 64, 64, 8, 2
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((tokens, h)) * 0.5).astype(np.float16)
    logits = rng.standard_normal((tokens, e)).astype(np.float16)
    outs = {}
    for used in (True, False):
        model, w1, w2 = _qmoe_model(used, tokens=tokens, h=h, inter=inter, e=e, k=k,
                                    rng=np.random.default_rng(1))
        path = tmp_path / f"qmoe_{used}.onnx"
        onnx.save(model, path)
        outs[used] = cpu_session(path, {"session.moe.offload.mode": "auto"}).run(
            None, {"x": x, "logits": logits})[0].astype(np.float32)
    probs = np.exp(logits.astype(np.float32) - logits.astype(np.float32).max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    topk_mass = np.sort(probs, axis=-1)[:, ::-1][:, :k].sum(-1, keepdims=True)
    np.testing.assert_allclose(outs[False], reference_qmoe(x, logits, w1, w2, k), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(outs[True], outs[False] * topk_mass, rtol=2e-2, atol=2e-2)
    assert float(np.abs(outs[True] - outs[False]).max()) > 1e-2  # the effect is real, not noise


# -- parity that can fail ------------------------------------------------------------------------
# The parity check (logits_parity) is the one test_s2_matches_source_where_router_weights_unused
# pins bit for bit: the same feeds through real ORT CPU sessions, every logits output equal within
# REL x max |source logits| (REL = 1e-3: the conversion moves bytes and edits no arithmetic). The
# self-test breaks a copy of the converted package by editing its external data bytes (the graph is
# untouched, so the offload session options still apply): the first decoder layer's FC1 experts
# rolled by one along the expert axis (a permuted expert table), or its FC2 scales zeroed (a
# dropped weight). Both must fail parity; rolled, every expert a token is routed to holds another
# expert's weights.
REL = 1e-3
ROWS = 2  # model_s2.onnx verifies 2 rows


@pytest.fixture(scope="module")
def source_logits(converted_auto: tuple[Path, dict[str, str]], tiny_cpu_package: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The feeds of the converted 2-row graph and the source's logits on them (router_weights unused)."""
    out, entries = converted_auto
    src = _strip_router_weights(tiny_cpu_package, tmp_path_factory.mktemp("offload_parity") / "src")
    feeds = feeds_for(cpu_session(out / "model_s2.onnx", entries), rows=ROWS, seed=7)
    want = logits_of(cpu_session(src / "model.onnx", {}), feeds)
    for w in want.values():  # O(1), spread: a broken expert cannot hide
        assert 0.1 < np.abs(w).max() < 1e3 and np.asarray(w, np.float64).std() > 1e-3
    return feeds, want


def _broken_copy(out: Path, tmp_path: Path, slot: int, edit: Callable[[np.ndarray], np.ndarray]) -> Path:
    """A copy of the converted package whose first decoder QMoE's input ``slot`` has edited bytes."""
    copy = tmp_path / "broken"
    shutil.copytree(out, copy, symlinks=True)
    model = onnx.load(copy / "model_s2.onnx", load_external_data=False)
    node = next(n for n in model.graph.node if n.op_type == "QMoE" and not n.name.startswith("/mtp/"))
    init = next(t for t in model.graph.initializer if t.name == node.input[slot])
    ext = {e.key: e.value for e in init.external_data}
    assert ext, f"{init.name} is not external"
    data = copy / ext["location"]
    offset, length = int(ext.get("offset", 0)), int(ext["length"])
    raw = bytearray(data.read_bytes())
    experts = init.dims[0]
    arr = np.frombuffer(bytes(raw[offset:offset + length]), np.uint8).reshape(experts, -1)
    new = edit(arr)
    assert new.shape == arr.shape and not np.array_equal(new, arr)
    raw[offset:offset + length] = new.tobytes()
    data.unlink()  # never write through a link
    data.write_bytes(bytes(raw))
    return copy


def test_converted_graph_passes_parity(converted_auto: tuple[Path, dict[str, str]],
                                       source_logits: tuple[dict[str, np.ndarray], dict[str, np.ndarray]]) -> None:
    (out, entries), (feeds, want) = converted_auto, source_logits
    logits_parity(logits_of(cpu_session(out / "model_s2.onnx", entries), feeds), want, REL)


@pytest.mark.parametrize(("slot", "edit"), [
    (2, lambda a: np.roll(a, 1, axis=0)),  # FC1 experts permuted
    (6, np.zeros_like),  # FC2 scales dropped
], ids=["fc1-experts-rolled", "fc2-scales-dropped"])
def test_broken_conversion_fails_parity(converted_auto: tuple[Path, dict[str, str]],
                                        source_logits: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
                                        tmp_path: Path, slot: int, edit: Callable[[np.ndarray], np.ndarray]) -> None:
    (out, entries), (feeds, want) = converted_auto, source_logits
    broken = _broken_copy(out, tmp_path, slot, edit)
    with pytest.raises(ParityError):
        logits_parity(logits_of(cpu_session(broken / "model_s2.onnx", entries), feeds), want, REL)
