"""Graph files: loading never reads weights, external data is checked, hard links work.

Invariants: load_graph reads no external bytes (a data file with no read permission still
loads); hard-linked data loads and reads (where onnx refuses it); escaping, absolute, missing,
short and out-of-range external data are refused with one line naming the graph and tensor;
save_graph keeps external references and moves new in-memory weights to a side file.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from support.minipkg import WEIGHT, _external, write_matmul_graph

from q38.errors import GraphError
from q38.package import external_refs, load_graph, open_package, read_tensor, save_graph


def _graph_with(tmp_path: Path, location: str, offset: int = 0, data: bytes | None = None) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir(exist_ok=True)
    if data is not None:
        (pkg / "model.onnx.data").write_bytes(data)
    write_matmul_graph(pkg / "model.onnx", weight=_external("w", location, offset, WEIGHT))
    return pkg


def test_loading_reads_no_external_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _graph_with(tmp_path, "model.onnx.data", data=WEIGHT.tobytes())

    def refuse(*_a, **_k):
        raise AssertionError("external bytes were read")

    monkeypatch.setattr(ir.ExternalTensor, "_load", refuse)
    monkeypatch.setattr(os, "pread", refuse)
    model = load_graph(pkg / "model.onnx", root=pkg)
    (ref,) = external_refs(model)
    assert (ref.name, ref.location, ref.offset, ref.length, ref.shape) == ("w", "model.onnx.data", 0, WEIGHT.nbytes, (16, 16))
    assert isinstance(model.graph.initializers["w"].const_value, ir.ExternalTensor)


def test_hard_linked_data_loads_and_reads_where_onnx_refuses(tmp_path: Path) -> None:
    pkg = _graph_with(tmp_path, "model.onnx.data", data=WEIGHT.tobytes())
    os.link(pkg / "model.onnx.data", tmp_path / "elsewhere.bin")
    assert (pkg / "model.onnx.data").stat().st_nlink == 2
    with pytest.raises(Exception, match="hard link"):
        onnx.load(str(pkg / "model.onnx"))
    model = load_graph(pkg / "model.onnx", root=pkg)
    got = read_tensor(model.graph.initializers["w"], graph_path=pkg / "model.onnx", root=pkg)
    np.testing.assert_array_equal(got, WEIGHT)


def test_length_field_absent_reads_to_the_expected_size(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "d.bin").write_bytes(b"\0" * 64 + WEIGHT.tobytes())
    t = _external("w", "d.bin", 64, WEIGHT)
    del t.external_data[2]  # drop "length": read to EOF
    write_matmul_graph(pkg / "model.onnx", weight=t)
    model = load_graph(pkg / "model.onnx", root=pkg)
    np.testing.assert_array_equal(read_tensor(model.graph.initializers["w"], graph_path=pkg / "model.onnx", root=pkg), WEIGHT)


@pytest.mark.parametrize(
    ("location", "offset", "data", "message"),
    [
        ("../outside.bin", 0, None, "'../outside.bin' escapes the package directory"),
        ("/etc/passwd", 0, None, "absolute path '/etc/passwd' is not allowed"),
        ("missing.bin", 0, None, "'missing.bin' does not exist"),
        ("model.onnx.data", 0, b"\0" * 100, "byte range [0, 1024) is past the end of 'model.onnx.data' (100 bytes)"),
        ("model.onnx.data", 4096, WEIGHT.tobytes(), "byte range [4096, 5120) is past the end"),
    ],
)
def test_bad_external_data_is_refused_naming_graph_and_tensor(tmp_path: Path, location: str, offset: int, data: bytes | None, message: str) -> None:
    (tmp_path / "outside.bin").write_bytes(WEIGHT.tobytes())
    pkg = _graph_with(tmp_path, location, offset, data)
    with pytest.raises(GraphError) as info:
        load_graph(pkg / "model.onnx", root=pkg)
    text = str(info.value)
    assert text.startswith("model.onnx: initializer 'w' external data: ")
    assert message in text


def test_symlink_escaping_the_package_is_refused_and_inside_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "outside.bin").write_bytes(WEIGHT.tobytes())
    pkg = _graph_with(tmp_path, "model.onnx.data")
    (pkg / "model.onnx.data").symlink_to(tmp_path / "outside.bin")
    with pytest.raises(GraphError, match="outside the package directory"):
        load_graph(pkg / "model.onnx", root=pkg)
    (pkg / "model.onnx.data").unlink()
    (pkg / "real.bin").write_bytes(WEIGHT.tobytes())
    (pkg / "model.onnx.data").symlink_to("real.bin")
    load_graph(pkg / "model.onnx", root=pkg)
    (pkg / "model.onnx.data").unlink()
    (pkg / "model.onnx.data").symlink_to("model.onnx.data")
    with pytest.raises(GraphError, match="symlink loop"):
        load_graph(pkg / "model.onnx", root=pkg)


def test_truncated_protobuf_is_one_line(tmp_path: Path) -> None:
    pkg = _graph_with(tmp_path, "model.onnx.data", data=WEIGHT.tobytes())
    data = (pkg / "model.onnx").read_bytes()
    (pkg / "model.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphError) as info:
        load_graph(pkg / "model.onnx", root=pkg)
    assert "not a valid ONNX model (truncated or malformed protobuf)" in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_inputs_and_cycles_are_refused(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    def write(nodes, name):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        p = tmp_path / name
        p.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
        return p

    p = write([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], "missing.onnx")
    with pytest.raises(GraphError, match="node 'add' input 'ghost' is not produced by any node"):
        load_graph(p, root=tmp_path)
    p = write([helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"), helper.make_node("Identity", ["x"], ["y"])], "cycle.onnx")
    with pytest.raises(GraphError, match="node 'r1' input 'b' is produced later"):
        load_graph(p, root=tmp_path)


def test_save_graph_keeps_external_references_and_externalizes_new_weights(tmp_path: Path, mini_package: Path) -> None:
    package = open_package(mini_package)
    model = package.load("target")
    new = ir.Value(name="fresh", const_value=ir.tensor(np.full((32, 32), 3.0, dtype=np.float32), name="fresh"))
    model.graph.register_initializer(new)
    out = tmp_path / "out"
    out.mkdir()
    os.link(mini_package / "model.onnx.data", out / "model.onnx.data")
    save_graph(model, out / "model.onnx")
    proto = onnx.load(str(out / "model.onnx"), load_external_data=False)
    locations = {t.name: {e.key: e.value for e in t.external_data}["location"] for t in proto.graph.initializer}
    assert locations == {"w": "model.onnx.data", "fresh": "model.q38.data"}
    again = load_graph(out / "model.onnx", root=out)
    np.testing.assert_array_equal(read_tensor(again.graph.initializers["fresh"], graph_path=out / "model.onnx", root=out), 3.0)
    np.testing.assert_array_equal(read_tensor(again.graph.initializers["w"], graph_path=out / "model.onnx", root=out), WEIGHT)


@pytest.mark.parametrize("replacement", ["directory", "fifo", "missing"])
def test_data_file_replaced_after_its_checks_is_refused_as_a_graph_error(tmp_path: Path, replacement: str) -> None:
    """The per-file check is cached; each read opens the file afresh and refuses a non-regular one."""
    pkg = _graph_with(tmp_path, "model.onnx.data", data=WEIGHT.tobytes())
    model = load_graph(pkg / "model.onnx", root=pkg)
    files: dict = {}
    w = model.graph.initializers["w"]
    np.testing.assert_array_equal(read_tensor(w, graph_path=pkg / "model.onnx", root=pkg, files=files), WEIGHT)
    data = pkg / "model.onnx.data"
    data.unlink()
    if replacement == "directory":
        data.mkdir()
    elif replacement == "fifo":
        os.mkfifo(data)
    with pytest.raises(GraphError) as info:
        read_tensor(w, graph_path=pkg / "model.onnx", root=pkg, files=files)
    assert type(info.value) is GraphError
    assert str(info.value).startswith(f"model.onnx: external data of 'w' {data}: ")


def test_save_graph_places_each_new_weight_at_its_own_aligned_offset(tmp_path: Path, mini_package: Path) -> None:
    """Three new weights of odd byte sizes (1030, 1204, 1100): each lands 64-byte aligned after the
    previous one, and each reads back as itself (a cursor that lost its place would overlap them)."""
    model = open_package(mini_package).load("target")
    made = {f"new{i}": np.arange(n, dtype=dt) * (i + 1) for i, (n, dt) in enumerate(
        [(515, np.float16), (301, np.float32), (550, np.float16)])}  # fmt: skip
    for name, array in made.items():
        model.graph.register_initializer(ir.Value(name=name, const_value=ir.tensor(array, name=name)))
    out = tmp_path / "out"
    out.mkdir()
    os.link(mini_package / "model.onnx.data", out / "model.onnx.data")
    save_graph(model, out / "model.onnx")
    proto = onnx.load(str(out / "model.onnx"), load_external_data=False)
    spans = {t.name: {e.key: e.value for e in t.external_data} for t in proto.graph.initializer if t.name in made}
    offsets = sorted((int(s["offset"]), int(s["length"])) for s in spans.values())
    assert all(off % 64 == 0 for off, _ in offsets)
    assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(offsets))
    again = load_graph(out / "model.onnx", root=out)
    for name, array in made.items():
        np.testing.assert_array_equal(read_tensor(again.graph.initializers[name], graph_path=out / "model.onnx", root=out), array)
