"""The golden extension itself (tests/golden.py), driven through pytester.

Invariants guarded:
* ``--snapshot-update`` writes one JSON file per snapshot under ``goldens/<test_module>/``
  (indent 2, one record per line, trailing newline) and a rerun without it passes;
* a changed graph fails and the report shows the changed node as a -/+ line diff;
* a deleted test leaves an unused golden that fails the run (with and without pytest-xdist);
* initializers are dtype/shape/sha256, never bytes; external data is hashed from the file,
  also through a hard link, and an unreadable file is recorded as location/offset/length;
* packages: config/pool/manifest with absolute paths, q38_version and the hashes of libraries
  and .onnx files masked (data-file hashes kept).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import golden
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

pytest_plugins = ["pytester"]

GOLDEN_SRC = Path(golden.__file__)

CONFTEST = '''
import pytest
from golden import GraphGoldenExtension, PackageGoldenExtension

@pytest.fixture
def graph_snapshot(snapshot):
    return snapshot.use_extension(GraphGoldenExtension)
'''

MODULE = '''
import onnx
from onnx import helper, TensorProto
import numpy as np
from onnx import numpy_helper

def make(op):
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="/mm"),
         helper.make_node(op, ["h"], ["y"], name="/act")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 3])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], producer_version="9.9")

def test_graph(graph_snapshot):
    assert graph_snapshot == make("{op}")

def test_second(graph_snapshot):
    assert graph_snapshot(name="named") == make("Relu")
'''

XDIST = {"serial": [], "xdist-2": ["-n", "2", "-p", "xdist"]}


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # The inner run must not believe it is an xdist worker of the outer run (syrupy reads these).
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(var, raising=False)
    shutil.copy(GOLDEN_SRC, pytester.path / "golden.py")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_sample=MODULE.replace("{op}", "Relu"))
    return pytester


def _run(p: pytest.Pytester, mode: str, *args: str) -> pytest.RunResult:
    return p.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark", *XDIST[mode], *args
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(XDIST))
def test_update_rerun_select_change_and_unused(project: pytest.Pytester, mode: str) -> None:
    project.makepyfile(test_other=MODULE.replace("{op}", "Tanh"))
    result = _run(project, mode, "--snapshot-update")
    result.assert_outcomes(passed=4)
    gdir = project.path / "goldens" / "test_sample"
    assert sorted(p.name for p in gdir.iterdir()) == ["test_graph.json", "test_second[named].json"]
    text = (gdir / "test_graph.json").read_text()
    assert text.startswith(f'{{\n  "format": "q38-graph",\n  "version": {golden.VERSION},\n')
    assert text.endswith("}\n") and "\n    " in text
    assert (
        '    {"domain": "", "op": "Relu", "name": "/act", "attributes": {}, '
        '"inputs": ["h"], "outputs": ["y"]}'
    ) in text.splitlines()
    assert '"producer_version": "<masked>"' in text

    # Running one module (or one test) does not flag the goldens of the others as unused.
    _run(project, mode, "test_sample.py", "-k", "test_graph or test_second").assert_outcomes(passed=2)
    _run(project, mode, "test_sample.py", "-k", "test_graph").assert_outcomes(passed=1)

    project.makepyfile(test_sample=MODULE.replace("{op}", "Sigmoid"))
    result = _run(project, mode, "test_sample.py")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(['E * -  *{"domain": "", "op": "Relu", "name": "/act"*',
                                 'E * +  *{"domain": "", "op": "Sigmoid", "name": "/act"*'])

    project.makepyfile(test_sample=MODULE.replace("{op}", "Relu").split("def test_second")[0])
    result = _run(project, mode)
    assert result.ret != 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*1 snapshot unused*"])
    assert (gdir / "test_second[named].json").exists()

    _run(project, mode, "--snapshot-update").assert_outcomes(passed=3)
    assert sorted(p.name for p in gdir.iterdir()) == ["test_graph.json"]
    assert len(list((project.path / "goldens" / "test_other").iterdir())) == 2


def _external_model(tmp_path: Path) -> tuple[Path, bytes]:
    arr = np.arange(12, dtype=np.float16).reshape(3, 4)
    data = arr.tobytes()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "w.bin").write_bytes(b"\0" * 16 + data)
    t = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT16, dims=[3, 4])
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"), ("offset", "16"), ("length", str(len(data)))):
        t.external_data.add(key=k, value=v)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="/mm")],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, ["B", 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, ["B", 4])],
        [t],
    )
    path = tmp_path / "pkg" / "model.onnx"
    onnx.save(helper.make_model(g), os.fspath(path))
    return path, data


def test_external_initializers_are_hashed_from_the_file_even_when_hard_linked(tmp_path: Path) -> None:
    path, data = _external_model(tmp_path)
    os.link(path.parent / "w.bin", tmp_path / "other_link.bin")
    init = golden.canonical_graph(path)["initializers"]
    assert init == [
        {"name": "w", "dtype": "FLOAT16", "shape": [3, 4], "location": "w.bin",
         "sha256": hashlib.sha256(data).hexdigest()}
    ]
    assert "raw_data" not in golden.dumps(golden.canonical_graph(path))


def test_unreadable_external_data_is_recorded_by_location(tmp_path: Path) -> None:
    path, data = _external_model(tmp_path)
    (path.parent / "w.bin").unlink()
    (rec,) = golden.canonical_graph(path)["initializers"]
    assert rec == {"name": "w", "dtype": "FLOAT16", "shape": [3, 4], "location": "w.bin",
                   "offset": 16, "length": len(data),
                   "unreadable": "FileNotFoundError: No such file or directory"}


def test_inline_tensors_and_subgraphs_are_canonical() -> None:
    then = helper.make_graph([helper.make_node("Identity", ["a"], ["o"])], "then", [],
                             [helper.make_tensor_value_info("o", onnx.TensorProto.INT64, [2])])
    shape = numpy_helper.from_array(np.array([0, -1], dtype=np.int64))
    g = helper.make_graph(
        [
            helper.make_node("Constant", [], ["a"], value=shape, name="/c"),
            helper.make_node("If", ["cond"], ["o"], then_branch=then, else_branch=then, name="/if"),
        ],
        "g",
        [helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("o", onnx.TensorProto.INT64, [2])],
        [numpy_helper.from_array(np.ones(4, np.float32), "big")],
    )
    canon = golden.canonical_graph(helper.make_model(g))
    const, if_node = canon["nodes"]
    assert const["attributes"]["value"] == {"tensor": {
        "dtype": "INT64", "shape": [2], "sha256": hashlib.sha256(shape.raw_data).hexdigest(),
        "values": [0, -1]}}
    assert if_node["attributes"]["then_branch"]["graph"]["nodes"][0]["op"] == "Identity"
    assert canon["initializers"] == [{"name": "big", "dtype": "FLOAT", "shape": [4],
                                      "sha256": hashlib.sha256(np.ones(4, np.float32).tobytes()).hexdigest()}]
    assert json.loads(golden.dumps(canon)) == canon


def test_package_form_masks_paths_versions_and_library_hashes(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "libs").mkdir(parents=True)
    (pkg / "libs" / "libcustom_ops.so").write_bytes(b"x")
    (pkg / "genai_config.json").write_text(json.dumps(
        {"model": {"custom_ops_library": str(pkg / "libs" / "libcustom_ops.so"), "type": "q38"}}))
    (pkg / "package_manifest.json").write_text(json.dumps({
        "q38_version": "0.1.0",
        "libs": [{"path": "libs/libcustom_ops.so", "sha256": "ab" * 32}],
        "graphs": [{"path": "model.onnx", "sha256": "cd" * 32}],
        "data": [{"path": "model.onnx.data", "sha256": "ef" * 32}],
        "workdir": "/tmp/pytest-of-root/pytest-3/x0/stage",
    }))
    (pkg / "weights_pool.txt").write_text(f"# pool\n\nmodel.onnx.data {pkg}/model.onnx.data\n")
    canon = golden.canonical_package(pkg)
    assert canon["config"] == {"model": {"custom_ops_library": "<package>/libs/libcustom_ops.so", "type": "q38"}}
    assert canon["manifest"] == {
        "data": [{"path": "model.onnx.data", "sha256": "ef" * 32}],
        "graphs": [{"path": "model.onnx", "sha256": "<sha256:graph>"}],
        "libs": [{"path": "libs/libcustom_ops.so", "sha256": "<sha256:lib>"}],
        "q38_version": "<masked>",
        "workdir": "<tmp>/stage",
    }
    assert canon["pool"] == ["# pool", "", "model.onnx.data <package>/model.onnx.data"]
    assert [f["path"] for f in canon["files"]] == [
        "genai_config.json", "libs", "libs/libcustom_ops.so", "package_manifest.json", "weights_pool.txt"]
