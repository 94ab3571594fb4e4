"""Graph files: loading never reads weights, external data is checked, hard links work.

Invariants: load_graph reads no external bytes (a data file with no read permission still
loads); hard-linked data loads and reads (where onnx refuses it); escaping, absolute, missing,
short and out-of-range external data are refused with one line naming the graph and tensor;
save_graph keeps external references and moves new in-memory weights to a side file.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from support.minipkg import WEIGHT, _external, write_matmul_graph
from syrupy.assertion import SnapshotAssertion

from q38.errors import GraphError
from q38.package import all_graphs, external_refs, load_graph, open_package, read_tensor, save_graph
from q38.package.graphs import iter_tensors, tensor_digest


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


def test_a_to_eof_range_longer_than_the_shape_reads_only_the_shapes_bytes(tmp_path: Path) -> None:
    """Without a ``length`` field the range runs to the end of the file; bytes past what dtype x
    shape needs (a neighbour's) are allowed there but never read into the tensor."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "d.bin").write_bytes(b"\0" * 64 + WEIGHT.tobytes() + b"\xff" * 100)
    t = _external("w", "d.bin", 64, WEIGHT)
    del t.external_data[2]  # drop "length": read to EOF
    write_matmul_graph(pkg / "model.onnx", weight=t)
    model = load_graph(pkg / "model.onnx", root=pkg)
    got = read_tensor(model.graph.initializers["w"], graph_path=pkg / "model.onnx", root=pkg)
    np.testing.assert_array_equal(got, WEIGHT)


def test_an_empty_external_tensor_loads_and_reads_empty(tmp_path: Path) -> None:
    """A dimension of 0 is no negative dimension, and a length of 0 no negative length: a tensor
    of no elements stored as 0 external bytes (an empty data file) loads and reads as empty."""
    empty = np.zeros((16, 0), dtype=np.float32)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "model.onnx.data").write_bytes(b"")
    write_matmul_graph(pkg / "model.onnx", weight=_external("w", "model.onnx.data", 0, empty))
    model = load_graph(pkg / "model.onnx", root=pkg)
    (ref,) = external_refs(model)
    assert (ref.offset, ref.length, ref.shape) == (0, 0, (16, 0))
    got = read_tensor(model.graph.initializers["w"], graph_path=pkg / "model.onnx", root=pkg)
    assert got.shape == (16, 0) and got.dtype == np.float32


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


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_a_graph_path_that_is_not_a_regular_file_is_one_line_naming_the_graph(tmp_path: Path, kind: str, messages_snapshot: SnapshotAssertion) -> None:
    """The graph file itself is opened as a regular file only (a FIFO never blocks the read), and
    the refusal says it is the graph: ``graph <path>: <problem>``."""
    path = tmp_path / "model.onnx"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(GraphError) as info:
        load_graph(path, root=tmp_path)
    assert messages_snapshot == str(info.value)


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


def test_a_missing_input_inside_an_if_branch_is_refused_naming_the_graph_file(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """The structure check descends into a node's graph attribute and reports a fault there as a
    GraphError naming the graph file, like one in the main graph; outer values stay visible inside."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])

    def write(inner_input: str, name: str) -> Path:
        branch = helper.make_graph([helper.make_node("Identity", [inner_input], ["b"], name="inner")], "then", [],
                                   [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])  # fmt: skip
        nodes = [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=branch)]
        graph = helper.make_graph(nodes, "g", [x, helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])  # fmt: skip
        path = tmp_path / name
        path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
        return path

    load_graph(write("x", "outer.onnx"), root=tmp_path)  # an outer graph input is defined inside the branch
    with pytest.raises(GraphError) as info:
        load_graph(write("ghost", "branch.onnx"), root=tmp_path)
    assert messages_snapshot == str(info.value)


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


@pytest.mark.parametrize("key", ["offset", "length"])
@pytest.mark.parametrize(("value", "valid"), [
    ("0", True), ("1" + "0" * 18, True), (str(2**63 - 1), True), (str(2**63), False), ("9" * 19, False),
    ("-1", False), ("1.5", False), ("", False), ("\u0663", False), (" 1", False),
])  # fmt: skip
def test_an_external_offset_or_length_must_be_an_int64_decimal(tmp_path: Path, key: str, value: str, valid: bool) -> None:
    """ORT reads both as int64 decimals: 19 digits fit while below 2**63; a sign, a fraction, a
    non-ASCII digit or a space are refused by name before any byte is read."""
    tensor = _external("w", "model.onnx.data", 0, WEIGHT)
    next(e for e in tensor.external_data if e.key == key).value = value
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "model.onnx.data").write_bytes(WEIGHT.tobytes())
    write_matmul_graph(pkg / "model.onnx", weight=tensor)
    try:
        load_graph(pkg / "model.onnx", root=pkg)
        refused = ""
    except GraphError as exc:
        refused = str(exc)
    int64_refusal = f"model.onnx: initializer 'w' external data: {key} {value!r} is not a non-negative int64 decimal"
    assert (refused == int64_refusal) is not valid, refused


def test_iter_tensors_walks_initializers_attribute_tensors_and_subgraphs() -> None:
    """Every tensor of a model: initializers, a Constant's ``value`` (named node.attribute), and the
    same inside an If's branches; a node attribute that is not a tensor yields nothing."""
    def const(name: str, v: float) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [f"{name}_out"], name=name, value=helper.make_tensor(name, TensorProto.FLOAT, [1], [v]))

    branch = helper.make_graph([const("inner", 2.0)], "then", [], [helper.make_tensor_value_info("inner_out", TensorProto.FLOAT, [1])],
                               initializer=[helper.make_tensor("sub_w", TensorProto.FLOAT, [1], [3.0])])  # fmt: skip
    nodes = [const("outer", 1.0), helper.make_node("If", ["c"], ["r"], name="if", then_branch=branch, else_branch=branch),
             helper.make_node("Cast", ["outer_out"], ["cast"], name="cast", to=TensorProto.FLOAT16)]  # fmt: skip
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1])],
                              initializer=[helper.make_tensor("w", TensorProto.FLOAT, [1], [0.0])])  # fmt: skip
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    found = [(name, float(t.numpy()[0])) for name, t in iter_tensors(model)]
    assert sorted(found) == sorted([("w", 0.0), ("outer.value", 1.0), ("inner.value", 2.0), ("inner.value", 2.0),
                                    ("sub_w", 3.0), ("sub_w", 3.0)])  # fmt: skip


def test_a_string_tensors_digest_covers_each_strings_length_and_bytes() -> None:
    a = ir.StringTensor(np.array([b"ab", b"c"], dtype=object))
    b = ir.StringTensor(np.array([b"a", b"bc"], dtype=object))
    assert tensor_digest(a) != tensor_digest(b)
    expected = hashlib.sha256(b"".join(len(s).to_bytes(8, "little") + s for s in (b"ab", b"c"))).hexdigest()
    assert tensor_digest(a) == "s" + expected
    # str elements are hashed as their UTF-8 bytes, a lone surrogate (an undecodable byte) as the byte it escapes
    assert tensor_digest(ir.StringTensor(np.array(["ab", "c\udcff"], dtype=object))) == \
        tensor_digest(ir.StringTensor(np.array([b"ab", b"c\xff"], dtype=object)))
    assert tensor_digest(ir.tensor(np.arange(4, dtype=np.int32))) == hashlib.sha256(np.arange(4, dtype=np.int32).tobytes()).hexdigest()


def test_a_value_two_nodes_produce_is_refused_by_name(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])  # fmt: skip
    path = tmp_path / "model.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
    with pytest.raises(GraphError) as info:
        load_graph(path, root=tmp_path)
    assert messages_snapshot == str(info.value)


@pytest.mark.parametrize(("length", "size"), [
    (2048, 2048),
    (512, 1024),
    (None, 512),
], ids=["explicit-too-long", "explicit-too-short", "to-eof-too-short"])  # fmt: skip
def test_an_external_byte_count_that_does_not_fit_the_shape_is_refused(
        tmp_path: Path, length: int | None, size: int, messages_snapshot: SnapshotAssertion) -> None:  # fmt: skip
    """A stated length must equal dtype x shape (too long reads neighbour bytes), and a to-EOF range must hold at least that."""
    tensor = _external("w", "model.onnx.data", 0, WEIGHT)
    entry = next(e for e in tensor.external_data if e.key == "length")
    if length is None:
        tensor.external_data.remove(entry)
    else:
        entry.value = str(length)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "model.onnx.data").write_bytes(b"\0" * size)
    write_matmul_graph(pkg / "model.onnx", weight=tensor)
    with pytest.raises(GraphError) as info:
        load_graph(pkg / "model.onnx", root=pkg)
    assert messages_snapshot == str(info.value)


def test_a_packed_int4_external_tensor_loads_and_reads_as_its_raw_bytes(tmp_path: Path) -> None:
    """Three int4 values pack into ceil(12 bits / 8) = 2 bytes: that length loads, and read_tensor hands back those 2 bytes."""
    tensor = _external("w", "model.onnx.data", 0, np.zeros((3, 1), dtype=np.uint8))
    tensor.data_type = TensorProto.INT4
    next(e for e in tensor.external_data if e.key == "length").value = "2"
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "model.onnx.data").write_bytes(b"\x21\x03")
    write_matmul_graph(pkg / "model.onnx", weight=tensor)
    model = load_graph(pkg / "model.onnx", root=pkg)
    (ref,) = external_refs(model)
    assert (ref.dtype, ref.length, ref.shape) == (ir.DataType.INT4, 2, (3, 1))
    got = read_tensor(model.graph.initializers["w"], graph_path=pkg / "model.onnx", root=pkg)
    assert got.dtype == np.uint8
    assert got.tobytes() == b"\x21\x03"


def test_loading_a_graph_logs_its_path(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """INFO names the graph file being read, so a user sees which graph a slow or failing load is on."""
    pkg = _graph_with(tmp_path, "model.onnx.data", data=WEIGHT.tobytes())
    with caplog.at_level(logging.INFO, logger="q38.package.graphs"):
        load_graph(pkg / "model.onnx", root=pkg)
    assert f"reading graph {pkg / 'model.onnx'}" in [r.getMessage() for r in caplog.records if r.name == "q38.package.graphs"]


def test_an_initializer_with_a_negative_dimension_is_refused_naming_it_and_its_dims(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """onnx-ir would accept a negative dim silently; load_graph refuses it in one line naming the tensor and its shape."""
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[16, -1])
    write_matmul_graph(tmp_path / "model.onnx", weight=weight)
    with pytest.raises(GraphError) as info:
        load_graph(tmp_path / "model.onnx", root=tmp_path)
    assert messages_snapshot == str(info.value)


def test_a_graph_over_protobufs_2_gib_limit_is_refused_naming_it_before_any_read(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A graph file past 2 GiB (sparse here: nothing is read) is one line naming the file and its size."""
    path = tmp_path / "model.onnx"
    with open(path, "wb") as fh:
        fh.truncate((2 << 30) + 1)
    with pytest.raises(GraphError) as info:
        load_graph(path, root=tmp_path)
    assert messages_snapshot == str(info.value)


def test_many_tensors_in_one_data_file_stat_that_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a graph checks each external-data file once, not once per tensor (a real graph has thousands)."""
    data = tmp_path / "model.onnx.data"
    data.write_bytes(WEIGHT.tobytes() * 3)
    weights = [_external(f"w{i}", data.name, i * WEIGHT.nbytes, WEIGHT) for i in range(3)]
    nodes = [helper.make_node("MatMul", [a, w.name], [b], name=f"mm{i}")
             for i, (a, b, w) in enumerate(zip(["x", "a", "b"], ["a", "b", "y"], weights, strict=True))]  # fmt: skip
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], weights)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    stats: list[str] = []
    real_stat = Path.stat

    def counting_stat(self: Path, *, follow_symlinks: bool = True) -> os.stat_result:
        stats.append(os.fspath(self))
        return real_stat(self, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(Path, "stat", counting_stat)
    loaded = load_graph(tmp_path / "model.onnx", root=tmp_path)
    assert [r.offset for r in external_refs(loaded)] == [0, WEIGHT.nbytes, 2 * WEIGHT.nbytes]
    assert stats.count(os.fspath(data)) == 1


def test_a_string_tensor_without_string_data_is_digested_over_its_strings() -> None:
    """``ir.tensor`` of a str array is a plain Tensor of dtype STRING (no ``string_data``): the
    optimizer's source-identity walk gets a digest of its strings (it once got one digest for every such tensor)."""
    tensor = ir.tensor(np.array(["a", "b"]))
    assert tensor.dtype == ir.DataType.STRING and not hasattr(tensor, "string_data")
    assert tensor_digest(tensor).startswith("s")
    # Its digest covers its strings, as a loaded StringTensor's does: other strings, another digest.
    assert tensor_digest(tensor) != tensor_digest(ir.tensor(np.array(["a", "c"])))
    assert tensor_digest(tensor) == tensor_digest(ir.StringTensor(np.array([b"a", b"b"], dtype=object)))


def test_a_graph_file_that_fails_while_being_read_is_one_line_naming_it(messages_snapshot: SnapshotAssertion) -> None:
    """/proc/self/mem opens as a regular file but reading it fails (EIO): load_graph refuses with a
    GraphError naming the file and the errno, not an OSError traceback."""
    with pytest.raises(GraphError) as info:
        load_graph(Path("/proc/self/mem"), root=Path("/proc/self"))
    assert messages_snapshot == str(info.value)


def test_a_graph_onnx_ir_cannot_deserialize_is_one_line_naming_the_file_and_the_cause(tmp_path: Path) -> None:
    """An input of an unknown element type passes the protobuf decode but onnx-ir refuses the graph:
    the GraphError names the file and carries onnx-ir's reason (which names the graph), bounded."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "decoder_main",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])  # fmt: skip
    graph.input[0].type.tensor_type.elem_type = 999
    path = tmp_path / "model.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
    with pytest.raises(GraphError) as info:
        load_graph(path, root=tmp_path)
    prefix = f"{path}: not a valid ONNX model (malformed graph): "
    message = str(info.value)
    assert message.startswith(prefix)
    assert "decoder_main" in message[len(prefix):]


def test_saving_a_graph_logs_the_path_it_wrote(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """INFO names the graph file save_graph wrote, so a user sees which output file a step produced."""
    pkg = _graph_with(tmp_path, "model.onnx.data", data=WEIGHT.tobytes())
    model = load_graph(pkg / "model.onnx", root=pkg)
    out = pkg / "saved.onnx"
    with caplog.at_level(logging.INFO, logger="q38.package.graphs"):
        save_graph(model, out)
    assert f"wrote graph {out}" in [r.getMessage() for r in caplog.records if r.name == "q38.package.graphs"]


def test_a_graph_list_attributes_subgraphs_see_the_outer_values_defined_before_them(tmp_path: Path) -> None:
    """A subgraph held in a list-of-graphs attribute (a custom op's bodies) may read an outer graph
    input like an If branch may: the structure check loads it rather than calling it undefined."""
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["b"], name="inner")], "body", [],
                             [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])  # fmt: skip
    node = helper.make_node("Bodies", ["x"], ["y"], name="bodies", domain="custom.q38", bodies=[body, body])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])  # fmt: skip
    path = tmp_path / "bodies.onnx"
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("custom.q38", 1)]
    path.write_bytes(helper.make_model(graph, opset_imports=opsets).SerializeToString())
    model = load_graph(path, root=tmp_path)
    assert [g.name for g in all_graphs(model)] == ["g", "body", "body"]


def test_all_graphs_lists_nested_if_branches_after_their_parent() -> None:
    """all_graphs yields the main graph, then each branch followed by the branches nested in it, so
    a walk over every graph (weights, kernel checks) reaches a subgraph two levels down."""
    def out(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1])

    def leaf(name: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Identity", ["x"], [f"{name}_o"])], name, [], [out(f"{name}_o")])

    inner_if = helper.make_node("If", ["c"], ["then_o"], then_branch=leaf("deep_then"), else_branch=leaf("deep_else"))
    then = helper.make_graph([inner_if], "then", [], [out("then_o")])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=leaf("else"))]
    graph = helper.make_graph(nodes, "main", [out("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [out("y")])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    assert [g.name for g in all_graphs(model)] == ["main", "else", "then", "deep_else", "deep_then"]
