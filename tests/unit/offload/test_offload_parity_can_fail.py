"""Offload parity that can fail: the converted graph's logits match the source's, and a broken
conversion -- its routed experts permuted, an expert's scales dropped -- is reported.

The parity check (:func:`parity`) is the one ``test_offload_ort`` applies to ``model_s2.onnx``
against the source with router_weights unused: the same feeds through real ORT CPU sessions, every
logits output equal within ``REL`` x max |source logits| (REL = 1e-3: the conversion moves bytes
and edits no arithmetic, so the two run the same kernels on the same values). The self-test breaks
a copy of the converted package by editing its external data bytes (the graph is untouched, so the
offload session options still apply): the first decoder layer's FC1 experts rolled by one along
the expert axis (a permuted expert table), or its FC2 scales zeroed (a dropped weight). Both must
fail parity; rolled, every expert a token is routed to holds another expert's weights.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from support.offload_synthpkg import feeds_for

from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions
from q38.package import open_package

REL = 1e-3
ROWS = 2  # model_s2.onnx verifies 2 rows


class ParityError(AssertionError):
    """The converted graph's logits differ from the source's beyond REL x max |source|."""


def parity(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want) and got, (sorted(got), sorted(want))
    for name in want:
        g, w = np.asarray(got[name], np.float64), np.asarray(want[name], np.float64)
        scale = float(np.abs(w).max())
        err = float(np.abs(g - w).max()) if np.isfinite(g).all() else float("inf")
        if err > REL * scale:
            raise ParityError(f"{name}: max |diff| {err:.4g} > {REL} x max |ref| {scale:.4g}")


def _session(path: Path, entries: dict[str, str]) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for key, value in entries.items():
        so.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _logits(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs() if o.name.endswith("logits")]
    return dict(zip(names, session.run(names, feeds), strict=True))


@pytest.fixture(scope="module")
def converted(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The converted package, its session entries, the feeds and the source's logits (router_weights unused)."""
    root = tmp_path_factory.mktemp("offload_parity")
    out = root / "out"
    convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto", target_resident_slots=2))
    entries = {**open_package(out).config.model.decoder.session_options.config_entries,
               "session.moe.offload.mode": "auto"}
    src = root / "src"
    shutil.copytree(tiny_cpu_package, src, symlinks=True)
    model = onnx.load(src / "model.onnx", load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "QMoE" and len(node.input) > 14:
            del node.input[14:]  # router_weights unused, as the converted graph runs
    (src / "model.onnx").unlink()
    onnx.save(model, src / "model.onnx")
    source = _session(src / "model.onnx", {})
    feeds = feeds_for(_session(out / "model_s2.onnx", entries), rows=ROWS, seed=7)
    want = _logits(source, feeds)
    for w in want.values():  # O(1), spread: a broken expert cannot hide
        assert 0.1 < np.abs(w).max() < 1e3 and np.asarray(w, np.float64).std() > 1e-3
    return out, entries, feeds, want


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


def test_converted_graph_passes_parity(converted) -> None:  # type: ignore[no-untyped-def]
    out, entries, feeds, want = converted
    parity(_logits(_session(out / "model_s2.onnx", entries), feeds), want)


@pytest.mark.parametrize(("slot", "edit"), [
    (2, lambda a: np.roll(a, 1, axis=0)),  # FC1 experts permuted
    (6, np.zeros_like),  # FC2 scales dropped
], ids=["fc1-experts-rolled", "fc2-scales-dropped"])
def test_broken_conversion_fails_parity(converted, tmp_path: Path, slot: int,  # type: ignore[no-untyped-def]
                                        edit: Callable[[np.ndarray], np.ndarray]) -> None:
    out, entries, feeds, want = converted
    broken = _broken_copy(out, tmp_path, slot, edit)
    with pytest.raises(ParityError):
        parity(_logits(_session(broken / "model_s2.onnx", entries), feeds), want)
