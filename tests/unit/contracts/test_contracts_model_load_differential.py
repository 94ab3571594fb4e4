"""Model-level load rules (contracts.model_load) vs real onnxruntime sessions, on the installed version.

Invariants guarded:
- Every case builds a model ORT refuses (or accepts) before looking at any node: IR version (over
  the build's maximum, missing, 0 / negative), duplicate graph inputs / outputs, opset imports
  (twice, ``ai.onnx`` as ``""``), external-data fields (unknown / duplicate / missing keys, offset
  and length grammar, absolute / escaping / missing locations, size, range). The contract's verdict
  equals a real CPU session's, and ORT's text contains the contract's (its ORT part).
- The raw header reader takes packed dims as ORT does (the size it computes from them), and an
  external-data violation names the graph of the package it is in.
- Run on 1.32.0 (``nox -s cpu``) and 1.31.1 (``nox -s contracts-1.31.1``): the IR maximum is
  version-specific (13 / 14) and probed here, never assumed.
- ``q38 check`` fails a package whose graph has an IR version ORT refuses, with ORT's text
  (issue 24: ``ir_version = 99`` was ``OK``).
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from support.contracts_testkit import ORT_VERSION, graph_violations, ort_error

from contracts import model_load
from contracts.package_layout import GraphFile, PackageView
from contracts.runner import check_package
from q38.cli import main

pytestmark = pytest.mark.differential
_TOP = model_load.max_ir_version(ORT_VERSION)


def _add(*, ir_version: int | None = 8, opsets: tuple[tuple[str, int], ...] = (("", 17),), op: str = "Add") -> onnx.ModelProto:
    x = oh.make_tensor_value_info("x", TP.FLOAT, [2])
    y = oh.make_tensor_value_info("y", TP.FLOAT, [2])
    ins = ["x", "w"] if op == "Add" else ["x"]
    graph = oh.make_graph([oh.make_node(op, ins, ["y"], name="n")], "g", [x], [y], [nh.from_array(np.ones(2, np.float32), "w")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid(d, v) for d, v in opsets])
    if ir_version is None:
        model.ClearField("ir_version")
    else:
        model.ir_version = ir_version
    return model


def _dup_input() -> onnx.ModelProto:
    model = _add()
    model.graph.input.append(copy.deepcopy(model.graph.input[0]))
    return model


def _dup_output() -> onnx.ModelProto:
    model = _add()
    model.graph.output.append(copy.deepcopy(model.graph.output[0]))
    return model


_GRAPH_CASES: dict[str, Callable[[], onnx.ModelProto]] = {
    "ir at the maximum": lambda: _add(ir_version=_TOP),
    "ir one over": lambda: _add(ir_version=_TOP + 1),
    "ir 99": lambda: _add(ir_version=99),
    "ir 0": lambda: _add(ir_version=0),
    "ir -1": lambda: _add(ir_version=-1),
    "ir 3": lambda: _add(ir_version=3),
    "duplicate graph input": _dup_input,
    "duplicate graph output": _dup_output,
    "opset twice, later wins (accepted)": lambda: _add(opsets=(("", 13), ("", 20)), op="Gelu"),
    "opset twice, later wins (refused)": lambda: _add(opsets=(("", 20), ("", 13)), op="Gelu"),
    "ai.onnx after ''": lambda: _add(opsets=(("", 13), ("ai.onnx", 20)), op="Gelu"),
    "'' after ai.onnx": lambda: _add(opsets=(("ai.onnx", 20), ("", 13)), op="Gelu"),
    "ai.onnx only": lambda: _add(opsets=(("ai.onnx", 20),), op="Gelu"),
    "no default import: the newest": lambda: _add(opsets=(("com.microsoft", 1),), op="Gelu"),
}


@pytest.mark.parametrize("label", list(_GRAPH_CASES))
def test_graph_level_load_rules_agree_with_a_real_session(label: str) -> None:
    model = _GRAPH_CASES[label]()
    error = ort_error(model)
    errors = [v for v in graph_violations(model) if v.severity == "error"]
    if error is None:
        assert not errors, (label, errors)
    else:
        assert errors, (label, error)
        assert any(v.message in error for v in errors), (label, error, errors)


def test_the_ir_maximum_is_the_installed_builds() -> None:
    assert ort_error(_add(ir_version=_TOP)) is None
    error = ort_error(_add(ir_version=_TOP + 1))
    assert error is not None and f"max supported IR version: {_TOP}" in error


# --- external data and the raw header -------------------------------------------------------------


def _external(entries: list[tuple[str, str]], *, dims: tuple[int, ...] = (4,)) -> onnx.ModelProto:
    x = oh.make_tensor_value_info("x", TP.FLOAT, list(dims))
    y = oh.make_tensor_value_info("y", TP.FLOAT, list(dims))
    w = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=list(dims), data_location=TP.EXTERNAL)
    for key, value in entries:
        w.external_data.add(key=key, value=value)
    graph = oh.make_graph([oh.make_node("Add", ["x", "w"], ["y"], name="add")], "g", [x], [y], [w])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


_L = ("location", "w.bin")


def _graph_in_doc_string() -> onnx.ModelProto:
    """A valid model whose doc_string (a length-delimited field, not the graph) holds the bytes of a
    graph with an absolute external location: ORT ignores it, so must the header reader."""
    model = _add()
    model.doc_string = _external([("location", "/etc/hostname")]).graph.SerializeToString().decode("ascii")
    return model
_HEADER_CASES: dict[str, Callable[[], onnx.ModelProto]] = {
    "plain": lambda: _external([_L]),
    "offset and length": lambda: _external([_L, ("offset", "16"), ("length", "16")]),
    "unaligned offset": lambda: _external([_L, ("offset", "3")]),
    "checksum key": lambda: _external([_L, ("checksum", "abc")]),
    "duplicate offset": lambda: _external([_L, ("offset", "0"), ("offset", "16")]),
    "unknown key": lambda: _external([_L, ("bogus", "1")]),
    "basepath key": lambda: _external([_L, ("basepath", ".")]),
    "capitalised Location": lambda: _external([("Location", "w.bin")]),
    "duplicate location": lambda: _external([("location", "nope.bin"), _L]),
    "no location": lambda: _external([("offset", "0")]),
    "empty location": lambda: _external([("location", "")]),
    "offset with +": lambda: _external([_L, ("offset", "+16")]),
    "offset with a space": lambda: _external([_L, ("offset", " 16")]),
    "offset hex": lambda: _external([_L, ("offset", "0x10")]),
    "offset over int64": lambda: _external([_L, ("offset", "99999999999999999999")]),
    "negative offset": lambda: _external([_L, ("offset", "-4")]),
    "offset one below int64's minimum": lambda: _external([_L, ("offset", "-9223372036854775809")]),
    "offset int64's minimum": lambda: _external([_L, ("offset", "-9223372036854775808")]),
    "offset past the end": lambda: _external([_L, ("offset", "250")]),
    "length short": lambda: _external([_L, ("length", "8")]),
    "length long": lambda: _external([_L, ("length", "32")]),
    "absolute location": lambda: _external([("location", "/etc/hostname")]),
    "escaping location": lambda: _external([("location", "../outside.bin")]),
    "missing file": lambda: _external([("location", "nope.bin")]),
    "a doc_string holding a graph's bytes": lambda: _graph_in_doc_string(),
    "ir missing": lambda: _add(ir_version=None),
}


def _header_violations(path: Path) -> list[str]:
    header = model_load.read_header(path)
    assert header is not None
    view = PackageView(root=path.parent, graphs=(GraphFile("decoder", path, path.parent, ()),),
                       extra={"model_headers": {"decoder": header}})  # fmt: skip
    return [v.message for v in model_load.check_model_headers(view)]


def _ort_parts(message: str) -> list[str]:
    """The parts of a contract message that are ORT's words (its own context in parentheses, and
    the source-location ORT puts after 'Error: ', aside)."""
    core = message.split(" (initializer '", 1)[0]
    return [part for part in core.split("Error: ") if part]


@pytest.mark.parametrize("label", list(_HEADER_CASES))
def test_external_data_and_header_rules_agree_with_a_real_session(label: str, tmp_path: Path) -> None:
    import onnxruntime as ort

    model_dir = tmp_path / "pkg"
    model_dir.mkdir()
    (model_dir / "w.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    (tmp_path / "outside.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    path = model_dir / "model.onnx"
    path.write_bytes(_HEADER_CASES[label]().SerializeToString())
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        error = None
    except Exception as exc:  # onnxruntime raises several pybind exception types
        error = " ".join(str(exc).split())
    found = _header_violations(path)
    if error is None:
        assert not found, (label, found)
    else:
        assert found, (label, error)
        assert all(part.strip() in error for part in _ort_parts(found[0])), (label, error, found)


def _session_error(path: Path) -> str | None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several pybind exception types
        return " ".join(str(exc).split())
    return None


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _packed_dims_model(entries: list[tuple[str, str]], dims: tuple[int, ...]) -> bytes:
    """``_external``'s model with ``w``'s dims in the packed wire form (field 1, length-delimited),
    which protobuf parsers accept for a repeated int64 though onnx writes one varint per dim: the
    initializer travels in a second ``graph`` field, which a parser merges into the first."""
    model = _external(entries, dims=dims)
    w = model.graph.initializer.pop()
    w.ClearField("dims")
    packed = b"".join(_varint(d) for d in dims)
    tensor = w.SerializeToString() + b"\x0a" + _varint(len(packed)) + packed
    graph = b"\x2a" + _varint(len(tensor)) + tensor  # GraphProto.initializer (5)
    return model.SerializeToString() + b"\x3a" + _varint(len(graph)) + graph  # ModelProto.graph (7)


@pytest.mark.parametrize(("length", "problem"), [
    ("24", None),
    ("16", "TensorProto: w external data size mismatch. Computed size: 24, external_data.length: 16"),
])  # fmt: skip
def test_packed_dims_are_read_as_onnxruntime_reads_them(length: str, problem: str | None, tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    path = tmp_path / "model.onnx"
    path.write_bytes(_packed_dims_model([_L, ("length", length)], (2, 3)))
    assert list(onnx.load(path, load_external_data=False).graph.initializer[0].dims) == [2, 3]
    header = model_load.read_header(path)
    assert header is not None
    assert header.external == (model_load.ExternalTensor("w", TP.FLOAT, (2, 3), (_L, ("length", length))),)
    assert _header_violations(path) == ([problem] if problem else [])
    error = _session_error(path)
    assert (error is None) == (problem is None), error
    if problem is not None and error is not None:
        assert problem in error


def test_an_external_data_violation_names_the_graph_it_is_in(tmp_path: Path) -> None:
    """Two graphs of one package, only the decoder's external data missing: ORT-MODEL-004 is the
    decoder's (as a session of each graph tells), the encoder has none."""
    (tmp_path / "w.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    graphs, headers = [], {}
    for label, location in (("encoder", "w.bin"), ("decoder", "nope.bin")):
        path = tmp_path / f"{label}.onnx"
        path.write_bytes(_external([("location", location)]).SerializeToString())
        graphs.append(GraphFile(label, path, tmp_path, ()))
        headers[label] = model_load.read_header(path)
    view = PackageView(root=tmp_path, graphs=tuple(graphs), extra={"model_headers": headers})
    found = model_load.check_model_headers(view)
    assert [(v.rule_id, v.graph) for v in found] == [("ORT-MODEL-004", "decoder")]
    assert _session_error(tmp_path / "encoder.onnx") is None
    error = _session_error(tmp_path / "decoder.onnx")
    assert error is not None and all(part.strip() in error for part in _ort_parts(found[0].message))


def test_read_header_skips_what_it_does_not_need_and_refuses_garbage(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_add(ir_version=9).SerializeToString())
    header = model_load.read_header(path)
    assert header == model_load.ModelHeader(True, 9, ())
    path.write_bytes(b"\x0f\xff\xff")
    assert model_load.read_header(path) is None
    path.write_bytes(b"")
    assert model_load.read_header(path) is None
    assert model_load.read_header(tmp_path / "absent.onnx") is None


def test_check_fails_a_package_whose_ir_version_onnxruntime_refuses(tiny_cpu_package: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    model.ir_version = 99
    onnx.save(model, pkg / "model.onnx")
    assert main(["check", str(pkg)]) == 1
    out = capsys.readouterr().out
    assert "ORT-MODEL-001" in out and f"Unsupported model IR version: 99, max supported IR version: {_TOP}" in out
    model.ClearField("ir_version")
    onnx.save(model, pkg / "model.onnx")
    ids = {v.rule_id for v in check_package(pkg).errors}
    assert "ORT-MODEL-002" in ids
