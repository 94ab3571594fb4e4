"""Fault classes of issue 24 through every command: tensor types, invalid sources, non-UTF-8 paths.

* **Every tensor type** (24.5): one extra initializer of each element type - string, bool,
  complex64/128, the four float8 variants, int4/uint4, float4, a 0-d and an empty tensor, uint64,
  float64, int8 - inline, and (every type with a byte buffer) again as external data in a file
  of its own, goes through ``check``, ``optimize``, ``offload``, ``diff`` and ``export-genai``:
  exit 0 (1 for ``diff``: the packages differ), or exit 2 with one line naming the tensor; never
  exit 70. A written output passes ``check``.
* **Invalid source** (24.4): a source ``check`` fails (opset 0 in the default domain) is refused by
  every writing command before anything is written, exit 2 naming the rule; with
  ``--allow-invalid-source`` the output carries no violation the source does not.
* **Unusual value_info** (24.6): every value onnx can type declared with an int64-max last
  dimension (both variants; a ``Shape`` feeding a ``Reshape`` then carries a 2**63-1 length)
  goes through ``check``, ``optimize``, ``offload`` and ``export-genai``: exit 0 or one line,
  never exit 70, and a written output has no violation its source lacks.
* **Paths are bytes** (24.4): a package under a non-UTF-8 directory offloads; its manifest records
  the path in an escaped form plus its bytes, and :func:`recorded_path` gives the path back.

Each case asserts the exit code, one bounded line on failure, nothing partial at the destination
and the inputs unchanged (bytes and inodes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from support.fsnap import staging_debris, tree_identity

from contracts.runner import check_package
from q38.cli import main
from q38.errors import LINE_LIMIT
from q38.package.manifest import recorded_path


def _raw(name: str, dtype: int, dims: list[int], data: bytes) -> onnx.TensorProto:
    t = TensorProto()
    t.name, t.data_type, t.raw_data = name, dtype, data
    t.dims.extend(dims)
    return t


def _every_type() -> list[onnx.TensorProto]:
    s = TensorProto()
    s.name, s.data_type = "x_string", TensorProto.STRING
    s.dims.extend([2])
    s.string_data.extend([b"a", b"\xff not utf-8"])
    out = [
        s,
        numpy_helper.from_array(np.array([True, False]), "x_bool"),
        numpy_helper.from_array(np.array([1 + 2j], dtype=np.complex64), "x_complex64"),
        numpy_helper.from_array(np.array([1 + 2j], dtype=np.complex128), "x_complex128"),
        numpy_helper.from_array(np.array(3.0, dtype=np.float32), "x_scalar_0d"),
        numpy_helper.from_array(np.zeros((0, 4), dtype=np.float32), "x_empty"),
        numpy_helper.from_array(np.array([1], dtype=np.uint64), "x_uint64"),
        numpy_helper.from_array(np.array([1], dtype=np.float64), "x_float64"),
        numpy_helper.from_array(np.array([1], dtype=np.int8), "x_int8"),
        _raw("x_int4", TensorProto.INT4, [3], b"\x21\x03"),
        _raw("x_uint4", TensorProto.UINT4, [3], b"\x21\x03"),
    ]
    for name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ"):
        out.append(_raw(f"x_{name.lower()}", getattr(TensorProto, name), [3], b"\x01\x02\x03"))
    if hasattr(TensorProto, "FLOAT4E2M1"):
        out.append(_raw("x_float4e2m1", TensorProto.FLOAT4E2M1, [3], b"\x21\x03"))
    return out


def _with_every_type(src: Path, dst: Path, *, external: bool) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    model = onnx.load(dst / "model.onnx", load_external_data=False)
    inits = _every_type()
    if external:
        offset = 0
        with open(dst / "types.data", "wb") as fh:
            for t in inits:
                if t.data_type == TensorProto.STRING or not t.raw_data:
                    continue  # strings cannot be external; an empty tensor has no bytes
                data = t.raw_data
                fh.write(data)
                t.ClearField("raw_data")
                t.data_location = TensorProto.EXTERNAL
                for key, value in (("location", "types.data"), ("offset", str(offset)), ("length", str(len(data)))):
                    entry = t.external_data.add()
                    entry.key, entry.value = key, value
                offset += len(data)
    model.graph.initializer.extend(inits)
    onnx.save(model, dst / "model.onnx")
    return dst


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("fault-classes") / "pkg", preset="tiny", variant="cpu", seed=0)


@pytest.fixture(scope="module", params=["inline", "external"])
def typed(request: pytest.FixtureRequest, base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _with_every_type(base, tmp_path_factory.mktemp(f"typed-{request.param}") / "pkg", external=request.param == "external")


def _argv(command: str, src: Path, out: Path, base: Path) -> list[str]:
    if command == "check":
        return ["check", str(src)]
    if command == "diff":
        return ["diff", str(base), str(src)]
    if command == "offload":
        return ["offload", str(out), "--from-package", str(src), "--offload-mode", "auto"]
    return [command, str(src), str(out)]


def _one_line_or_ok(rc: int, err: str, ok: tuple[int, ...]) -> None:
    assert rc != 70 and "internal error" not in err and "Traceback" not in err, err[-2000:]
    if rc == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and len(lines[0]) <= LINE_LIMIT, err[-2000:]
    else:
        assert rc in ok, (rc, err[-2000:])


@pytest.mark.parametrize("command", ["check", "optimize", "offload", "diff", "export-genai"])
def test_every_tensor_type_goes_through_every_command(
    command: str, typed: Path, base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_identity(typed)
    out = tmp_path / "out"
    rc = main(_argv(command, typed, out, base))
    err = capsys.readouterr().err
    _one_line_or_ok(rc, err, (0, 1) if command == "diff" else (0,))
    if rc == 2:
        assert "x_" in err, f"the refusal names no tensor: {err}"
    assert tree_identity(typed) == before
    assert staging_debris(tmp_path) == []
    if command in ("optimize", "offload", "export-genai"):
        if rc == 0:
            report = check_package(out)
            assert report.errors == [], [(v.rule_id, v.message) for v in report.errors]
        else:
            assert not os.path.lexists(out)


@pytest.fixture(scope="module")
def opset0(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pkg = tmp_path_factory.mktemp("opset0") / "pkg"
    shutil.copytree(base, pkg, symlinks=True)
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = 0
    onnx.save(model, pkg / "model.onnx")
    return pkg


@pytest.mark.parametrize("command", ["optimize", "offload", "export-genai"])
def test_a_source_check_fails_is_refused_before_writing(
    command: str, opset0: Path, base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_identity(opset0)
    out = tmp_path / "out"
    assert main(_argv(command, opset0, out, base)) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= LINE_LIMIT, err
    assert lines[0].startswith(f"q38 {command}: error: the source fails check, ORT-OPSET-001 [target]: ")
    assert "--allow-invalid-source writes anyway" in lines[0]
    assert list(tmp_path.iterdir()) == []
    assert tree_identity(opset0) == before


@pytest.mark.parametrize("command", ["optimize", pytest.param("offload", marks=pytest.mark.slow)])
def test_allow_invalid_source_writes_an_output_with_only_the_sources_violations(
    command: str, opset0: Path, base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    rc = main([*_argv(command, opset0, out, base), "--allow-invalid-source"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "fails check" in err and "writing anyway" in err
    source_rules = {v.rule_id for v in check_package(opset0).errors}
    output_rules = {v.rule_id for v in check_package(out).errors}
    assert output_rules and output_rules <= source_rules, (output_rules, source_rules)


@pytest.mark.slow
def test_a_package_under_a_non_utf8_directory_offloads_and_its_manifest_round_trips(base: Path, tmp_path: Path) -> None:
    top = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9-\xff"))
    top.mkdir()
    src = top / "pkg"
    shutil.copytree(base, src, symlinks=True)
    before = tree_identity(src)
    out = top / "out"
    # A real child with a strict UTF-8 stdout: the summary names the path, which is not UTF-8.
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]), PYTHONIOENCODING="utf-8:strict")
    proc = subprocess.run([sys.executable, "-m", "q38", "offload", str(out), "--from-package", str(src),
                           "--offload-mode", "auto"], env=env, capture_output=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert os.fsencode(out) in proc.stdout  # printed as the path's own bytes
    text = (out / "package_manifest.json").read_bytes()
    text.decode("utf-8")  # valid UTF-8 JSON whatever the path
    sources = json.loads(text)["sources"]
    assert [recorded_path(s) for s in sources] == [str(src)]
    assert os.fsencode(recorded_path(sources[0])) == os.fsencode(src)
    assert "\\\\xe9" in sources[0]["path"] or "\\xe9" in sources[0]["path"]
    assert check_package(out).errors == []
    assert tree_identity(src) == before


def _with_huge_value_info(src: Path, dst: Path) -> Path:
    """``src`` with a value_info for every value onnx types, its last dimension 2**63-1."""
    shutil.copytree(src, dst)
    path = dst / "model.onnx"
    model = onnx.load(path, load_external_data=False)
    typed = onnx.shape_inference.infer_shapes(model).graph.value_info
    for info in typed:
        tensor = info.type.tensor_type
        dims: list[int | str] = [d.dim_param or d.dim_value for d in tensor.shape.dim] if tensor.HasField("shape") else []
        shape = [*dims[:-1], 2**63 - 1] if dims else [2**63 - 1]
        model.graph.value_info.append(onnx.helper.make_tensor_value_info(info.name, tensor.elem_type, shape))
    assert len(model.graph.value_info) > 20
    onnx.save(model, path)
    return dst


@pytest.fixture(scope="module", params=["cpu", "faithful"])
def huge_value_info(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    root = tmp_path_factory.mktemp(f"huge-vi-{request.param}")
    src = synthesize(root / "src", preset="tiny", variant=request.param, seed=0)
    return _with_huge_value_info(src, root / "pkg")


@pytest.mark.parametrize("command", ["check", "optimize", "offload", "export-genai"])
def test_an_int64_max_value_info_dimension_never_crashes_a_command(
    command: str, huge_value_info: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_identity(huge_value_info)
    out = tmp_path / "out"
    rc = main(_argv(command, huge_value_info, out, huge_value_info))
    err = capsys.readouterr().err
    _one_line_or_ok(rc, err, (0,))
    assert tree_identity(huge_value_info) == before
    assert staging_debris(tmp_path) == []
    if command != "check" and rc == 0:
        source_rules = {v.rule_id for v in check_package(huge_value_info).errors}
        new = [(v.rule_id, v.message) for v in check_package(out).errors if v.rule_id not in source_rules]
        assert new == []
    elif command != "check":
        assert not os.path.lexists(out)
