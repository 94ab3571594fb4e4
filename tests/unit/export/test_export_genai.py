"""``q38 export-genai``: a real GenAI client (onnxruntime-genai 0.18.0) end to end on CPU.

Invariants guarded:
* the exported genai_config.json is one 0.18.0 accepts: model.type qwen3_5_moe_text, only string
  provider/session option values, no runtime_profiles / shared_initializers / qwen38_graph /
  indexer names, and ``og.Config`` parses it;
* og.Model + og.Generator (greedy, Config.clear_providers()) generate tokens from an exported
  synthetic cpu package, and they are exactly the greedy tokens of a plain ORT full-recompute loop
  over the same graph (so GenAI carries the KV, conv and recurrent state correctly);
* the tokens are identical before and after ``q38 optimize --target cpu``;
* a layered package exports and generates the same tokens as the flat one;
* faithful-variant, custom-lineage and offloaded (fixed sequence length, multi-draft) packages
  are refused with one line, exit 2, nothing written;
* the package is byte-identical afterwards; an existing OUT is refused; ``--link copy`` copies.
* parity that can fail: the exported model.onnx computes the source's logits within 1e-3 of their
  magnitude, and an export whose lm_head columns are rolled fails that check and (with
  onnxruntime-genai) generates other tokens than the source's greedy ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from support.fsnap import staging_debris, tree_snapshot

from q38.cli import main

PROMPT = [1, 5, 9, 17, 33, 65]
NEW_TOKENS = 8


def _og():  # type: ignore[no-untyped-def]
    return pytest.importorskip(
        "onnxruntime_genai", reason="onnxruntime-genai (0.18.0) is not installed (test dependency group)"
    )


def _export(pkg: Path, out: Path, *extra: str) -> None:
    assert main(["export-genai", str(pkg), str(out), *extra]) == 0


def _full_recompute_feeds(session: object, ids: list[int]) -> dict[str, np.ndarray]:
    """The whole sequence ``ids`` with empty state (no cache): what a full recompute feeds."""
    feeds: dict[str, np.ndarray] = {}
    for arg in session.get_inputs():  # type: ignore[attr-defined]
        if arg.name == "input_ids":
            feeds[arg.name] = np.array([ids], dtype=np.int64)
        elif arg.name == "attention_mask":
            feeds[arg.name] = np.ones((1, len(ids)), dtype=np.int64)
        elif arg.name == "position_ids":
            feeds[arg.name] = np.arange(len(ids), dtype=np.int64)[None]
        else:
            shape = [1 if d == "batch_size" else 0 if isinstance(d, str) else int(d) for d in arg.shape]
            feeds[arg.name] = np.zeros(shape, dtype=np.float16 if "float16" in arg.type else np.float32)
    return feeds


def _ort_greedy(graph: Path, prompt: list[int], n: int) -> list[int]:
    """Greedy tokens by re-running the whole sequence with empty state each step (no cache)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    ids = list(prompt)
    for _ in range(n):
        logits = session.run(["logits"], _full_recompute_feeds(session, ids))[0]
        ids.append(int(logits[0, -1].astype(np.float32).argmax()))
    return ids[len(prompt):]


def test_config_is_018_shaped(exported: Path) -> None:
    doc = json.loads((exported / "genai_config.json").read_text())
    assert set(doc) == {"model", "search"}
    model = doc["model"]
    assert model["type"] == "qwen3_5_moe_text"
    assert set(model) == {
        "type", "bos_token_id", "eos_token_id", "pad_token_id", "vocab_size", "context_length", "decoder",
    }
    dec = model["decoder"]
    assert dec["filename"] == "model.onnx"
    assert "shared_initializers" not in dec
    assert dec["session_options"] == {"log_id": "q38", "provider_options": []}
    assert set(dec["inputs"]) == {
        "input_ids", "attention_mask", "position_ids", "past_key_names", "past_value_names",
        "past_conv_names", "past_recurrent_names",
    }
    assert set(dec["outputs"]) == {
        "logits", "present_key_names", "present_value_names", "present_conv_names", "present_recurrent_names",
    }
    assert sorted(p.name for p in exported.iterdir()) == ["genai_config.json", "model.onnx", "model.onnx.data"]
    assert doc["search"]["max_length"] <= model["context_length"]


def test_og_config_parses_cuda_provider_strings(tiny_cpu_package: Path, tmp_path: Path) -> None:
    og = _og()
    out = tmp_path / "cuda"
    _export(tiny_cpu_package, out, "--provider", "cuda", "--link", "copy")
    doc = json.loads((out / "genai_config.json").read_text())
    (entry,) = doc["model"]["decoder"]["session_options"]["provider_options"]
    assert list(entry) == ["cuda"]
    assert entry["cuda"] and all(isinstance(v, str) for v in entry["cuda"].values())
    config = og.Config(str(out))  # strict 0.18.0 parse: rejects numbers in provider options
    config.clear_providers()
    assert all(os.stat(p).st_nlink == 1 for p in out.iterdir())


def test_og_generates_the_ort_greedy_tokens(exported: Path, tiny_cpu_package: Path) -> None:
    _og()
    from q38.export_genai import generate_tokens

    tokens = generate_tokens(exported, PROMPT, NEW_TOKENS)
    assert len(tokens) == NEW_TOKENS
    assert all(0 <= t < 512 for t in tokens)
    assert tokens == _ort_greedy(tiny_cpu_package / "model.onnx", PROMPT, NEW_TOKENS)


@pytest.mark.slow
def test_tokens_identical_after_optimize_cpu(exported: Path, tiny_cpu_package: Path, tmp_path: Path) -> None:
    _og()
    from q38.export_genai import generate_tokens

    optimized = tmp_path / "opt"
    assert main(["optimize", str(tiny_cpu_package), str(optimized), "--target", "cpu"]) == 0
    _export(optimized, tmp_path / "genai_opt")
    before = generate_tokens(exported, PROMPT, NEW_TOKENS)
    after = generate_tokens(tmp_path / "genai_opt", PROMPT, NEW_TOKENS)
    assert after == before


def test_cli_generate_json(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _og()
    out = tmp_path / "g"
    prompt = ",".join(str(t) for t in PROMPT)
    _export(tiny_cpu_package, out, "--generate", "3", "--prompt", prompt, "--json")
    summary = json.loads(capsys.readouterr().out)
    assert summary["states"] == {"conv": 6, "recurrent": 6, "key": 2, "value": 2}
    assert len(summary["tokens"]) == 3


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], out: Path, needle: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert needle in err
    assert not os.path.lexists(out)
    assert staging_debris(out.parent) == []


def test_refuses_faithful(tiny_faithful_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_snapshot(tiny_faithful_package)
    out = tmp_path / "out"
    _refused(capsys, ["export-genai", str(tiny_faithful_package), str(out)], out, "faithful-variant package")
    assert tree_snapshot(tiny_faithful_package) == before


def test_refuses_custom_lineage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from q38.synth import synthesize

    pkg = synthesize(tmp_path / "custom", preset="tiny", variant="cpu", lineage="custom")
    out = tmp_path / "out"
    _refused(capsys, ["export-genai", str(pkg), str(out)], out, "custom-lineage package")


def test_refuses_existing_out(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert main(["export-genai", str(tiny_cpu_package), str(out)]) == 2
    err = capsys.readouterr().err
    assert "refusing to overwrite" in err and err.count("\n") == 1
    assert list(out.iterdir()) == []


def test_refuses_unfed_graph_input(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnx

    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    model.graph.input.append(onnx.helper.make_tensor_value_info("past.0.indexer_key", onnx.TensorProto.FLOAT16, [1, 0, 16]))
    (pkg / "model.onnx").write_bytes(model.SerializeToString())
    out = tmp_path / "out"
    # check fails the source (CFG-GRAPH-001): refused before anything is read for writing ...
    _refused(capsys, ["export-genai", str(pkg), str(out)], out, "the source fails check, CFG-GRAPH-001 [target]: input 'past.0.indexer_key'")
    # ... and export's own reader refuses it too when told to write anyway.
    _refused(capsys, ["export-genai", "-q", "--allow-invalid-source", str(pkg), str(out)], out, "graph input 'past.0.indexer_key' is not fed")


@pytest.mark.slow
def test_package_byte_identical(tiny_cpu_package: Path, tmp_path: Path) -> None:
    before = tree_snapshot(tiny_cpu_package)
    _export(tiny_cpu_package, tmp_path / "a", "--link", "hardlink")
    _export(tiny_cpu_package, tmp_path / "b", "--link", "copy")
    assert tree_snapshot(tiny_cpu_package) == before
    assert (tmp_path / "b" / "model.onnx.data").read_bytes() == (tiny_cpu_package / "model.onnx.data").read_bytes()


@pytest.mark.slow
def test_layered_package_generates_same_tokens(exported: Path, tmp_path: Path) -> None:
    _og()
    from q38.export_genai import generate_tokens
    from q38.synth import synthesize

    layered = synthesize(tmp_path / "layered", preset="tiny", variant="cpu", layout="layered")
    _export(layered, tmp_path / "genai")
    assert generate_tokens(tmp_path / "genai", PROMPT, NEW_TOKENS) == generate_tokens(exported, PROMPT, NEW_TOKENS)


@pytest.mark.slow
def test_refuses_offloaded_package(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    offloaded = tmp_path / "off"
    assert main(["offload", str(offloaded), "--from-package", str(tiny_cpu_package), "--offload-mode", "auto"]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    _refused(capsys, ["export-genai", str(offloaded), str(out)], out, "has a fixed sequence length 4")


# -- parity that can fail ------------------------------------------------------------------------
# _parity runs the whole prompt (full recompute, empty state) through the exported and the source
# model.onnx with real ORT CPU sessions and requires every logit within REL x max |source logits|
# (REL = 1e-3: the export passes the graph through; only the config changes). The self-test edits a
# copy of the export: the MatMul that produces logits reads an inline copy of its weight rolled
# along the vocabulary axis. Parity must fail, and onnxruntime-genai (when installed) must
# generate tokens other than the source's greedy ones.
REL = 1e-3


class ParityError(AssertionError):
    """The exported graph's logits differ from the source's beyond REL x max |source|."""


def _logits(graph: Path, ids: list[int]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["logits"], _full_recompute_feeds(session, ids))[0], np.float64)


def parity(got: np.ndarray, want: np.ndarray) -> None:
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max()) if got.shape == want.shape and np.isfinite(got).all() else float("inf")
    if err > REL * scale:
        raise ParityError(f"logits: max |diff| {err:.4g} > {REL} x max |ref| {scale:.4g}")


def _well_scaled(want: np.ndarray) -> None:
    assert 0.1 < np.abs(want).max() < 1e3 and want.std() > 1e-3


def test_exported_graph_passes_parity(exported: Path, tiny_cpu_package: Path) -> None:
    want = _logits(tiny_cpu_package / "model.onnx", PROMPT)
    _well_scaled(want)
    parity(_logits(exported / "model.onnx", PROMPT), want)


@pytest.mark.slow
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

    greedy = _ort_greedy(tiny_cpu_package / "model.onnx", PROMPT, NEW_TOKENS)  # one session, stepped
    assert generate_tokens(exported, PROMPT, NEW_TOKENS) == greedy
    assert generate_tokens(broken, PROMPT, NEW_TOKENS) != greedy
