"""Multi-draft parity that can fail: a verify graph's first rows are the 2-row graph's.

The target is causal (attention, the conv carry and the linear-attention state only look back),
so ``model_s3.onnx`` / ``model_s4.onnx`` fed 3 / 4 tokens must give, for the first 2 rows, the
logits (target and draft 0) that ``model_s2.onnx`` gives for those 2 tokens -- the chained drafts
(rows of their own outputs ``mtp.1.logits`` ...) are added beside the shared computation and must
not disturb it. :func:`parity` compares them within ``REL`` x max |s2 logits| (REL = 1e-3: the same
kernels on the same values; only the row count differs).

The self-test breaks the verify graph alone: a weight of the first decoder layer that both graphs
read from the shared data file is given, in a copy of s3 / s4 only, its values rolled by one (an
inline initializer replacing the external reference), and parity must fail.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from support.offload_synthpkg import feeds_for

from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions
from q38.package import open_package

REL = 1e-3


class ParityError(AssertionError):
    """The verify graph's first rows differ from the 2-row graph's beyond REL x max |s2|."""


def parity(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(want) <= set(got) and want, (sorted(got), sorted(want))
    for name, w in want.items():
        g = np.asarray(got[name], np.float64)[:, : w.shape[1]]
        w64 = np.asarray(w, np.float64)
        scale = float(np.abs(w64).max())
        err = float(np.abs(g - w64).max()) if np.isfinite(g).all() else float("inf")
        if err > REL * scale:
            raise ParityError(f"{name}: max |diff| {err:.4g} > {REL} x max |ref| {scale:.4g}")


@pytest.fixture(scope="module")
def converted(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("multidraft_parity") / "out"
    convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto", target_resident_slots=2))
    entries = {**open_package(out).config.model.decoder.session_options.config_entries,
               "session.moe.offload.mode": "auto"}
    return out, entries


def _logits(path: Path, entries: dict[str, str], rows: int) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for key, value in entries.items():
        so.add_session_config_entry(key, value)
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = feeds_for(session, rows=rows, seed=11)  # the same seed: the first 2 tokens are the same
    names = [o.name for o in session.get_outputs() if o.name.endswith("logits")]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _first_rows_fed_alike(rows: int) -> None:
    a = np.random.default_rng(11).integers(0, 512, size=(1, 2), dtype=np.int64)
    b = np.random.default_rng(11).integers(0, 512, size=(1, rows), dtype=np.int64)
    assert np.array_equal(a, b[:, :2])  # numpy draws a prefix: feeds_for's tokens agree row by row


def _want(out: Path, entries: dict[str, str]) -> dict[str, np.ndarray]:
    want = _logits(out / "model_s2.onnx", entries, 2)
    assert {"logits", "mtp.0.logits"} <= set(want)
    for w in want.values():
        assert 0.1 < np.abs(w).max() < 1e3 and np.asarray(w, np.float64).std() > 1e-3
    return want


@pytest.mark.parametrize("rows", [3, 4])
def test_verify_graph_first_rows_match_s2(converted, rows: int) -> None:  # type: ignore[no-untyped-def]
    out, entries = converted
    _first_rows_fed_alike(rows)
    got = _logits(out / f"model_s{rows}.onnx", entries, rows)
    assert {f"mtp.{j}.logits" for j in range(rows - 1)} <= set(got)
    parity(got, _want(out, entries))


@pytest.mark.parametrize("rows", [3, 4])
def test_verify_graph_with_a_rolled_weight_fails_parity(converted, tmp_path: Path, rows: int) -> None:  # type: ignore[no-untyped-def]
    out, entries = converted
    copy = tmp_path / "broken"
    shutil.copytree(out, copy, symlinks=True)
    path = copy / f"model_s{rows}.onnx"
    model = onnx.load(path, load_external_data=False)
    used = {i for n in model.graph.node if n.name.startswith("/model/layers.0/") for i in n.input}
    init = next(t for t in model.graph.initializer if t.name in used and t.data_type == onnx.TensorProto.FLOAT16
                and t.data_location == onnx.TensorProto.EXTERNAL and len(t.dims) == 2)
    arr = numpy_helper.to_array(init, base_dir=str(copy))
    init.CopyFrom(numpy_helper.from_array(np.roll(arr, 1, axis=-1), init.name))
    path.unlink()
    onnx.save(model, path)
    with pytest.raises(ParityError):
        parity(_logits(path, entries, rows), _want(out, entries))
