"""Shared-weight identity is (file identity, byte range, dtype, shape) - not the byte range alone.

Invariants (issue 16, assembly survivor "sharing identity ignoring dtype and shape"):
- a head tensor reading the *same byte range* of the shared data file as the target's ``W_lm``,
  but as float16 [64, 64] instead of float [64, 32], is not merged into ``W_lm``'s pool row;
- a prefill tensor whose bytes equal ``W_lm``'s but whose dtype / shape differ is not redirected
  into the target's file: it stays at its own location and offset;
- ``W_lm`` itself is still shared by all three graphs (one pool row, one copy of its bytes).
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from support.build_bundles import W_LM, make_bundles

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
