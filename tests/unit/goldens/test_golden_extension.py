"""The golden extension itself (tests/golden.py), driven through pytester.

Invariants guarded:
* ``--snapshot-update`` writes one JSON file per snapshot under ``goldens/<test_module>/``
  (indent 2, a record on one line when it fits 160 characters, trailing newline) and a rerun
  without it passes;
* identical canonical forms of one module are stored once: the first name holds the form, the
  others are references that read as it; a reference whose own test now differs fails, and an
  update of the referenced file alone gives the referrer its old form in full;
* a changed graph fails with a message naming the golden file (and the file it refers to), the
  difference as a ``q38 diff`` line, the first differing node in full on both sides, and
  ``nox -s goldens``; the fixture shows as ``<golden ...>``, not as the golden's text;
* a deleted test leaves an unused golden that fails a passing run (with and without
  pytest-xdist); a run that fails for another reason neither calls goldens unused nor deletes
  any under ``--snapshot-update``;
* tests using a golden fixture carry the ``golden`` marker; ``--goldens-only`` skips the others;
* floats are the shortest text of their dtype (``1e-05``, not ``9.999999747378752e-06``);
* initializers are dtype/shape/sha256, never bytes; external data is hashed from the file,
  also through a hard link, and an unreadable file is recorded as location/offset/length;
* packages: config/pool/manifest with absolute paths, q38_version and the hashes of libraries
  and .onnx files masked (data-file hashes kept); pool entries as records;
* messages: case -> message (or lines), cases sorted, a path under pytest's base temporary
  directory stored as ``<tmp>/...``; anything but text refused; a reworded message fails with
  the changed line.
"""

from __future__ import annotations

import difflib
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
import golden
import pytest

def pytest_addoption(parser):
    golden.add_options(parser)

def pytest_configure(config):
    config.pluginmanager.register(golden.GoldenPlugin(config), "q38-goldens")

@pytest.fixture
def graph_snapshot(snapshot):
    return golden.golden_assertion(snapshot, golden.GraphGoldenExtension)
'''

MODULE = '''
import onnx
from onnx import helper, TensorProto
import numpy as np
from onnx import numpy_helper

def make(op, alpha=0.1):
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="/mm"),
         helper.make_node(op, ["h"], ["y"], name="/act", alpha=alpha)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 3])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], producer_version="9.9")

def test_graph(graph_snapshot):
    assert graph_snapshot == make("{op}")

def test_second(graph_snapshot):
    assert graph_snapshot(name="named") == make("Elu")

def test_plain():
    assert True
'''

XDIST = {"serial": [], "xdist-2": ["-n", "2", "-p", "xdist"]}


def _literal(text: str) -> str:
    """``text`` as an fnmatch pattern that matches itself (brackets are pattern syntax)."""
    return "".join("[[]" if c == "[" else "[]]" if c == "]" else c for c in text)


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
    result.assert_outcomes(passed=6)
    gdir = project.path / "goldens" / "test_sample"
    assert sorted(p.name for p in gdir.iterdir()) == ["test_graph.json", "test_second[named].json"]
    text = (gdir / "test_graph.json").read_text()
    assert text.startswith(f'{{\n  "format": "q38-graph",\n  "version": {golden.VERSION},\n')
    assert text.endswith("}\n") and "\n    " in text
    assert (
        '    {"domain": "", "op": "Relu", "name": "/act", "attributes": {"alpha": 0.1}, '
        '"inputs": ["h"], "outputs": ["y"]}'
    ) in text.splitlines()
    assert '"producer_version": "<masked>"' in text

    # Running one module (or one test) does not flag the goldens of the others as unused.
    _run(project, mode, "test_sample.py", "-k", "test_graph").assert_outcomes(passed=1)

    project.makepyfile(test_sample=MODULE.replace("{op}", "Sigmoid"))
    result = _run(project, mode, "test_sample.py")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "E * golden goldens/test_sample/test_graph.json differs from this run:",
        'E *   ~ node "/act" (Relu) op: "Relu" -> "Sigmoid"',
    ])

    project.makepyfile(test_sample=MODULE.replace("{op}", "Relu").split("def test_second")[0])
    result = _run(project, mode)
    assert result.ret != 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*1 snapshot unused*"])
    assert (gdir / "test_second[named].json").exists()

    _run(project, mode, "--snapshot-update").assert_outcomes(passed=4)
    assert sorted(p.name for p in gdir.iterdir()) == ["test_graph.json"]
    assert len(list((project.path / "goldens" / "test_other").iterdir())) == 2


FAILING_FIRST = '''
from test_sample import make

def test_two_goldens(graph_snapshot):
    assert graph_snapshot(name="a") == make("{op}")
    assert graph_snapshot(name="b") == make("Elu")
'''


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(XDIST))
def test_a_failing_run_calls_no_golden_unused_and_deletes_none(project: pytest.Pytester, mode: str) -> None:
    project.makepyfile(test_pair=FAILING_FIRST.replace("{op}", "Relu"))
    _run(project, mode, "--snapshot-update").assert_outcomes(passed=4)
    project.makepyfile(test_pair=FAILING_FIRST.replace("{op}", "Sigmoid"))  # fails before golden "b"
    result = _run(project, mode)
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert "snapshot unused" not in out and "snapshots unused" not in out, out
    assert "--snapshot-update to delete" not in out and "--snapshot-disable-unused" not in out
    result.stdout.fnmatch_lines(["goldens: the unused-golden check is skipped because this run failed (exit 1)*"])

    # An update run in which a test fails for another reason deletes nothing.
    project.makepyfile(test_pair=FAILING_FIRST.replace("{op}", "Relu").replace(
        'name="a") == make("Relu")', 'name="a") == make("Relu") and 1 / 0'))
    result = _run(project, mode, "--snapshot-update")
    result.assert_outcomes(passed=3, failed=1)
    assert (project.path / "goldens" / "test_pair" / "test_two_goldens[b].json").exists()


@pytest.mark.slow
def test_identical_forms_are_stored_once_and_a_reference_keeps_its_meaning(project: pytest.Pytester) -> None:
    gdir = project.path / "goldens" / "test_sample"
    project.makepyfile(test_sample=MODULE.replace("{op}", "Elu"))  # test_graph == test_second
    _run(project, "serial", "--snapshot-update").assert_outcomes(passed=3)
    full, ref = gdir / "test_graph.json", gdir / "test_second[named].json"
    assert json.loads(ref.read_text()) == {"format": "q38-golden-ref", "version": golden.VERSION,
                                           "same_as": "test_graph.json"}
    assert json.loads(full.read_text())["nodes"][1]["op"] == "Elu"
    _run(project, "serial").assert_outcomes(passed=3)

    # The referrer's own graph changes: it fails against the shared form, naming its own file.
    project.makepyfile(test_sample=MODULE.replace("{op}", "Elu").replace(
        'name="named") == make("Elu")', 'name="named") == make("Elu", alpha=0.5)'))
    result = _run(project, "serial")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "graph_snapshot = <golden GraphGoldenExtension>",
        "*",
        "E * " + _literal("golden goldens/test_sample/test_second[named].json (same as test_graph.json) differs from this run:"),
        'E *   ~ node "/act" (Elu) attribute alpha: 0.1 -> 0.5',
        "E * first differing node, in the golden:",
        "E *     " + _literal('{"domain": "", "op": "Elu", "name": "/act", "attributes": {"alpha": 0.1}, "inputs": ["h"], "outputs": ["y"]}'),
        "E * and in this run:",
        "E *     " + _literal('{"domain": "", "op": "Elu", "name": "/act", "attributes": {"alpha": 0.5}, "inputs": ["h"], "outputs": ["y"]}'),
        "E * if this change is intended: nox -s goldens (then review `git diff --stat goldens/`)",
    ])
    assert '"format": "q38-graph"' not in result.stdout.str()  # no dump of the golden itself

    # Only the owner is updated: the referrer keeps what it meant, now in full, and still passes.
    project.makepyfile(test_sample=MODULE.replace("{op}", "Selu"))
    _run(project, "serial", "-k", "test_graph", "--snapshot-update").assert_outcomes(passed=1)
    assert json.loads(full.read_text())["nodes"][1]["op"] == "Selu"
    assert json.loads(ref.read_text())["nodes"][1]["op"] == "Elu"
    _run(project, "serial").assert_outcomes(passed=3)

    # Identical again: the next update stores the form once more.
    project.makepyfile(test_sample=MODULE.replace("{op}", "Elu"))
    _run(project, "serial", "--snapshot-update").assert_outcomes(passed=3)
    assert json.loads(ref.read_text())["same_as"] == "test_graph.json"


@pytest.mark.slow
def test_golden_tests_are_marked_and_goldens_only_skips_the_rest(project: pytest.Pytester) -> None:
    _run(project, "serial", "--snapshot-update").assert_outcomes(passed=3)
    _run(project, "serial", "-m", "not golden").assert_outcomes(passed=1, deselected=2)
    # Skipping (not deselecting) keeps syrupy's cleanup: a removed test's golden is deleted.
    project.makepyfile(test_sample=MODULE.replace("{op}", "Relu").split("def test_second")[0]
                       + "\ndef test_plain():\n    assert True\n")
    result = _run(project, "serial", "--goldens-only", "--snapshot-update", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*not a golden test (--goldens-only)*"])
    assert not (project.path / "goldens" / "test_sample" / "test_second[named].json").exists()


def _wide_model(eps: float) -> onnx.ModelProto:
    inputs = [f"/model/layers.0/moe/input_{i}_with_a_long_exporter_name" for i in range(12)]
    node = helper.make_node(
        "QMoE", inputs, ["/model/layers.0/moe/QMoE/output_0"], name="/model/layers.0/moe/QMoE",
        domain="com.microsoft", k=8, activation_type="swiglu", expert_weight_bits=4,
        swiglu_limit=7.0, activation_alpha=1.702, activation_beta=1.0, normalize_routing_weights=1,
        epsilon=eps,
    )
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT16, None) for n in inputs],
        [helper.make_tensor_value_info("/model/layers.0/moe/QMoE/output_0", onnx.TensorProto.FLOAT16, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


def test_one_changed_attribute_is_one_short_changed_line() -> None:
    before = golden.dumps(golden.canonical_graph(_wide_model(1e-6))).splitlines()
    after = golden.dumps(golden.canonical_graph(_wide_model(1e-5))).splitlines()
    assert max(len(line) for line in before + after) <= 160
    changed = [d for d in difflib.unified_diff(before, after, lineterm="", n=0)
               if d[:1] in "+-" and not d.startswith(("+++", "---"))]
    assert changed == ['-        "epsilon": 1e-06,', '+        "epsilon": 1e-05,']


def test_floats_are_the_shortest_text_of_their_dtype() -> None:
    half = numpy_helper.from_array(np.array([0.1, 1 / 3], dtype=np.float16), "h")
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=half, name="/c"),
         helper.make_node("LeakyRelu", ["c"], ["y"], name="/act", alpha=1e-5),
         helper.make_node("Constant", [], ["f"], value_floats=[0.1, 3.4028235e38], name="/f")],
        "g", [], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, [2])],
    )
    canon = golden.canonical_graph(helper.make_model(g))
    const, act, floats = canon["nodes"]
    assert act["attributes"]["alpha"] == 1e-05
    assert const["attributes"]["value"]["tensor"]["values"] == [0.1, 0.3333]
    assert floats["attributes"]["value_floats"] == [0.1, 3.4028235e38]
    text = golden.dumps(canon)
    assert '"alpha": 1e-05' in text and "9.99999974" not in text and "0.0999755859375" not in text
    # Equal texts, equal values: the short text reads back as the very same float32.
    assert np.float32(act["attributes"]["alpha"]) == np.float32(g.node[1].attribute[0].f)


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
    (pkg / "weights_pool.txt").write_text(
        "# pool\n\nw0 model.onnx.data 0 8 float16 2x2 device target:a,head:b\n")
    canon = golden.canonical_package(pkg)
    assert canon["config"] == {"model": {"custom_ops_library": "<package>/libs/libcustom_ops.so", "type": "q38"}}
    assert canon["manifest"] == {
        "data": [{"path": "model.onnx.data", "sha256": "ef" * 32}],
        "graphs": [{"path": "model.onnx", "sha256": "<sha256:graph>"}],
        "libs": [{"path": "libs/libcustom_ops.so", "sha256": "<sha256:lib>"}],
        "q38_version": "<masked>",
        "workdir": "<tmp>/stage",
    }
    assert canon["pool"] == ["# pool", "", {
        "pool_id": "w0", "file": "model.onnx.data", "offset": 0, "length": 8, "dtype": "float16",
        "shape": [2, 2], "placement": "device", "provenance": ["target:a", "head:b"]}]
    assert [f["path"] for f in canon["files"]] == [
        "genai_config.json", "libs", "libs/libcustom_ops.so", "package_manifest.json", "weights_pool.txt"]


def test_inventory_omits_the_manifest_size_which_varies_by_machine(tmp_path: Path) -> None:
    """Two packages whose manifests differ only in inode / device numbers (another machine, another
    digit count) have one canonical form; any other file's size is still recorded."""
    from q38.canonical.package import canonical_package

    forms = []
    for name, ino in (("a", 7), ("b", 123456789012)):
        pkg = tmp_path / name
        (pkg / "head").mkdir(parents=True)
        identity = {"st_dev": ino % 1000, "st_ino": ino, "size": 4, "mtime_ns": 1}
        doc = json.dumps({"files": {"x.data": {"identity": identity}}}, sort_keys=True)
        (pkg / "package_manifest.json").write_text(doc)
        (pkg / "head" / "package_manifest.json").write_text(doc)
        (pkg / "x.data").write_bytes(b"abcd")
        forms.append(canonical_package(pkg))
    assert forms[0] == forms[1]
    assert {"path": "x.data", "kind": "file", "size": 4} in forms[0]["files"]
    assert {"path": "head/package_manifest.json", "kind": "file"} in forms[0]["files"]


def test_messages_are_sorted_by_case_with_temporary_paths_masked(tmp_path: Path) -> None:
    root = os.fspath(tmp_path / "basetemp")
    data = {"b": f"{root}/test_x0/pkg: not a package directory", "a": [f"config {root}/cfg1: is a directory", "two"]}
    assert golden.canonical_messages(data, root) == {
        "format": "q38-messages",
        "messages": {"a": ["config <tmp>: is a directory", "two"], "b": "<tmp>/pkg: not a package directory"},
    }
    # Outside the base temporary directory a path is kept as written.
    assert golden.canonical_messages("/etc/passwd: refused", root)["messages"] == "/etc/passwd: refused"


@pytest.mark.parametrize("data", [7, {"case": None}, ["line", 3]])
def test_a_message_that_is_not_text_is_refused_rather_than_stored_as_its_repr(data: object) -> None:
    with pytest.raises(TypeError, match=r"^messages_snapshot: .* not a message or a list of messages$"):
        golden.canonical_messages(data)


def test_a_reworded_message_fails_with_the_changed_line() -> None:
    before = golden.dumps(golden.canonical_messages({"cap": "negative resident-slot cap -3"}))
    after = golden.dumps(golden.canonical_messages({"cap": "negative resident slot cap -3"}))
    lines = golden.explain(before, after, location="goldens/test_options/t.json")
    assert lines[1:] == [
        '  ~ messages.cap: "negative resident-slot cap -3" -> "negative resident slot cap -3"',
        "if this change is intended: nox -s goldens (then review `git diff --stat goldens/`)",
    ]
