"""Shared-weight identity is (file identity, byte range, dtype, shape) - not the byte range alone.

Invariants (issue 16, assembly survivor "sharing identity ignoring dtype and shape"):
- a head tensor reading the *same byte range* of the shared data file as the target's ``W_lm``,
  but as float16 [64, 64] instead of float [64, 32], is not merged into ``W_lm``'s pool row;
- a prefill tensor whose bytes equal ``W_lm``'s but whose dtype / shape differ is not redirected
  into the target's file: it stays at its own location and offset;
- ``W_lm`` itself is still shared by all three graphs (one pool row, one copy of its bytes).

External data without ``length`` (issue 25): a tensor whose external data names no ``length`` reads
from its offset to the end of its file, so its identity covers those bytes. The target's ``eps``
(float scalar, no length, the last 4 bytes of model.onnx.data) and a prefill scalar of the same
dtype and shape, also without a length, but holding other bytes in a file of its own, stay
distinct: the prefill keeps its own file, reads its own value, and no pool row pairs them. A
prefill scalar without a length whose bytes *are* ``eps``'s is still shared.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.build_bundles import EPS, W_LM, make_bundles

from q38.assembly import BuildRequest, LinkPolicy, build_package


def _add_view(graph_path: Path, name: str, location: str, offset: int) -> None:
    """Add ``name`` = float16 [64, 64] over ``location[offset:offset+8192]``, exposed as an output."""
    model = onnx.load(os.fspath(graph_path), load_external_data=False)
    t = TensorProto(name=name, data_type=TensorProto.FLOAT16, dims=[64, 64])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(W_LM.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    model.graph.initializer.append(t)
    model.graph.node.append(helper.make_node("Identity", [name], [f"{name}_out"]))
    model.graph.output.append(helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT16, [64, 64]))
    os.unlink(graph_path)  # the bundle files are hard links: never write through them
    onnx.save(model, os.fspath(graph_path))


@pytest.fixture
def views(tmp_path: Path) -> dict[str, Path]:
    b = make_bundles(tmp_path / "src")
    assert W_LM.nbytes == 64 * 64 * 2  # same length: only dtype and shape tell the tensors apart
    _add_view(b["head"] / "head_r2.onnx", "W_lm_h16", "model.onnx.data", 0)  # target's file (hard link), W_lm's range
    _add_view(b["prefill"] / "prefill.onnx", "W_lm16", "prefill.onnx.data", 64)  # W_lm's bytes, own file
    return b


def _ext(path: Path) -> dict[str, dict[str, str]]:
    m = onnx.load(os.fspath(path), load_external_data=False)
    return {t.name: {e.key: e.value for e in t.external_data} for t in m.graph.initializer if t.external_data}


@pytest.mark.parametrize("link", [LinkPolicy.AUTO, LinkPolicy.COPY])
def test_same_bytes_as_another_dtype_or_shape_stay_distinct(views, tmp_path, link):
    pkg = tmp_path / "pkg"
    build_package(BuildRequest(out=pkg, target=views["target"], head=views["head"], prefill=views["prefill"], link=link))
    pool = (pkg / "weights_pool.txt").read_text().splitlines()[2:]
    assert pool == ["w0000 model.onnx.data 0 8192 float 64x32 device target:W_lm,head:W_lm,prefill:W_lm"]
    head, prefill = _ext(pkg / "head_r2.onnx"), _ext(pkg / "prefill.onnx")
    assert head["W_lm_h16"] == {"location": "model.onnx.data", "offset": "0", "length": "8192"}
    assert prefill["W_lm16"] == {"location": "prefill.onnx.data", "offset": "64", "length": "8192"}
    assert prefill["W_lm"] == {"location": "model.onnx.data", "offset": "0", "length": "8192"}
    assert (pkg / "prefill.onnx.data").is_file()


OTHER = np.array(0.25, dtype=np.float32)  # same dtype and shape as EPS, other bytes


def _add_scalar(bundle: Path, name: str, value: np.ndarray, location: str) -> None:
    """Add ``name`` = float [] in ``location`` (its own file, offset 0, no ``length``), exposed as an output."""
    (bundle / location).write_bytes(value.tobytes())
    graph_path = bundle / "prefill.onnx"
    model = onnx.load(os.fspath(graph_path), load_external_data=False)
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0")):
        e = t.external_data.add()
        e.key, e.value = k, v
    model.graph.initializer.append(t)
    model.graph.node.append(helper.make_node("Identity", [name], [f"{name}_out"]))
    model.graph.output.append(helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, []))
    os.unlink(graph_path)  # never write through a hard link
    onnx.save(model, os.fspath(graph_path))


@pytest.mark.parametrize("link", [LinkPolicy.AUTO, LinkPolicy.COPY])
def test_tensors_without_length_share_only_equal_bytes(tmp_path: Path, link: LinkPolicy) -> None:
    b = make_bundles(tmp_path / "src")
    _add_scalar(b["prefill"], "eps_other", OTHER, "eps_other.bin")
    _add_scalar(b["prefill"], "eps_same", EPS, "eps_same.bin")
    pkg = tmp_path / "pkg"
    build_package(BuildRequest(out=pkg, target=b["target"], head=b["head"], prefill=b["prefill"], link=link))

    prefill = onnx.load(os.fspath(pkg / "prefill.onnx"), load_external_data=False)
    ext = {t.name: {e.key: e.value for e in t.external_data} for t in prefill.graph.initializer}
    assert ext["eps_other"]["location"] == "eps_other.bin"  # not redirected into the target's file
    assert ext["eps_same"]["location"] == "model.onnx.data"  # equal bytes: shared with the target's eps
    onnx.load_external_data_for_model(prefill, os.fspath(pkg))
    values = {t.name: numpy_helper.to_array(t) for t in prefill.graph.initializer}
    assert values["eps_other"] == OTHER
    assert values["eps_same"] == EPS

    rows = (pkg / "weights_pool.txt").read_text().splitlines()[2:]
    eps_rows = [r for r in rows if "target:eps" in r.split()[-1].split(",")]
    assert len(eps_rows) == 1
    assert "prefill:eps_same" in eps_rows[0] and "eps_other" not in eps_rows[0]
    assert not any("eps_other" in r for r in rows)
