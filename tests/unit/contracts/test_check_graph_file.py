"""``q38 check MODEL.onnx``: one graph, for a cpu or cuda session, with session options.

Invariants guarded:
- A graph file is checked like a package graph: the graph rules of the version for the session's
  provider, the session-config rules on ``--session-option`` entries; exit 0 on no error, 1 on an
  error, and every ``--format`` renders the one-graph report (json names the graph).
- A node no CPU kernel serves fails a cpu check (ORT-KERNEL-001, ORT's words; a real CPU session
  refuses it too); ``--ort`` creates the real session, with the providers of the check and the
  session options; a graph of custom-op domains is skipped (their library is not loaded).
- ``--provider cuda`` of a float32 QMoE warns that it runs on the CPU EP (its CUDA kernels are
  fp16/bf16 only), on both versions, and says where the CUDA facts come from (source-derived,
  with repo and commit); the same graph in float16 gets no such warning.
- A graph a package names is said to be that package's graph (role and package on stderr).
- Bad input is one line and exit 2: an unreadable file, ``--session-option`` without ``=``,
  ``--provider`` or ``--session-option`` given with a package.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import _model, _vi, ort_error, qmoe_initializers, qmoe_node
from syrupy.assertion import SnapshotAssertion

from q38.cli import main


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def _max(elem: int) -> onnx.ModelProto:
    node = oh.make_node("Max", ["a", "b"], ["y"], name="max")
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info(n, elem, [2]) for n in ("a", "b")],
                          [oh.make_tensor_value_info("y", elem, [2])])  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _qmoe(elem: int) -> onnx.ModelProto:
    """The float32 QMoE of the contract tests; ``elem`` float16 re-types its activations."""
    model = _model([qmoe_node()], [_vi("x", TP.FLOAT, [2, 64]), _vi("router", TP.FLOAT, [2, 4])],
                   [_vi("y", TP.FLOAT, [2, 64])], qmoe_initializers())  # fmt: skip
    if elem != TP.FLOAT:
        for value in [*model.graph.input, *model.graph.output]:
            value.type.tensor_type.elem_type = elem
        for init in model.graph.initializer:
            if init.data_type == TP.FLOAT:
                values = onnx.numpy_helper.to_array(init).astype("float16")
                init.CopyFrom(onnx.numpy_helper.from_array(values, init.name))
    return model


def test_a_graph_without_a_cpu_kernel_fails_a_cpu_check_and_a_real_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _save(_max(TP.INT16), tmp_path / "max16.onnx")
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "ORT-KERNEL-001" in out and "Could not find an implementation for Max(13) node with name 'max'" in out
    error = ort_error(onnx.load(bad))
    assert error is not None and "Could not find an implementation for Max(13) node with name 'max'" in error
    good = _save(_max(TP.INT32), tmp_path / "max32.onnx")
    assert main(["check", str(good), "--ort"]) == 0
    out = capsys.readouterr().out
    assert "session max32.onnx: ok" in out and "OK: 0 error(s)" in out


@pytest.mark.parametrize(
    ("provider", "asked"),
    [
        ("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"]),
        ("cpu", ["CPUExecutionProvider"]),
    ],
)
def test_ort_creates_the_session_with_the_providers_of_the_check(
    provider: str, asked: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A build with several providers (onnxruntime-gpu) refuses a session that names none; this
    # wheel has only the CPU EP, so the session the spy creates runs there.
    import onnx_ir as ir
    import onnxruntime as ort

    from contracts.runner import sessions_for_file

    path = _save(_max(TP.INT32), tmp_path / "max32.onnx")
    real, calls = ort.InferenceSession, []

    def spy(model: str, options: ort.SessionOptions, providers: list[str] | None = None) -> object:
        calls.append(providers)
        return real(model, options, providers=["CPUExecutionProvider"])

    several = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(ort, "InferenceSession", spy)
    monkeypatch.setattr(ort, "get_available_providers", lambda: several)
    (result,) = sessions_for_file("max32.onnx", path, ir.load(path), {}, provider)
    assert (result.status, calls) == ("ok", [asked])


def test_ort_gives_the_session_the_options_and_skips_a_graph_of_custom_ops(
    tmp_path: Path, messages_snapshot: SnapshotAssertion
) -> None:
    import onnx_ir as ir

    from contracts.runner import sessions_for_file

    path = _save(_max(TP.INT32), tmp_path / "max32.onnx")
    (plain,) = sessions_for_file("max32.onnx", path, ir.load(path), {}, "cpu")
    assert (plain.status, plain.message) == ("ok", "")
    # an option ORT acts on when it creates the session: read the .onnx file as ORT format
    entries = {"session.load_model_format": "ORT"}
    (failed,) = sessions_for_file("max32.onnx", path, ir.load(path), entries, "cpu")
    assert failed.status == "failed"
    assert failed.message.startswith("[ONNXRuntimeError] : 1 : FAIL : "), failed.message
    assert failed.message.endswith(" ORT model verification failed."), failed.message
    nodes = [
        oh.make_node("Fold", ["x"], ["h"], domain="z.ops"),
        oh.make_node("Unfold", ["h"], ["y"], domain="a.ops"),
    ]
    custom = _model(nodes, [_vi("x", TP.FLOAT, [1])], [_vi("y", TP.FLOAT, [1])], ms=False)
    custom.opset_import.extend([oh.make_opsetid("z.ops", 1), oh.make_opsetid("a.ops", 1)])
    cpath = _save(custom, tmp_path / "custom.onnx")
    (skipped,) = sessions_for_file("custom.onnx", cpath, ir.load(cpath), {}, "cpu")
    assert skipped.status == "skipped"
    assert messages_snapshot == {"custom-op domains": skipped.message}


@pytest.mark.parametrize("fmt", ["json", "sarif", "github", "junit"])
def test_every_format_renders_the_one_graph_report(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _save(_max(TP.INT16), tmp_path / "max16.onnx")
    assert main(["check", str(bad), "--format", fmt]) == 1
    out = capsys.readouterr().out
    assert "ORT-KERNEL-001" in out
    if fmt == "json":
        doc = json.loads(out)
        assert doc["graphs"] == ["max16.onnx"] and doc["ok"] is False
        assert [v["rule_id"] for v in doc["violations"]] == ["ORT-KERNEL-001"]


def test_session_options_reach_the_session_config_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _save(_max(TP.INT32), tmp_path / "max32.onnx")
    assert main(["check", str(good), "--ort-version", "1.32.0", "--session-option", "session.moe.offload.placement=static"]) == 0
    capsys.readouterr()
    argv = ["check", str(good), "--ort-version", "1.32.0", "--session-option", "session.moe.offload.placement=static",
            "--session-option", "session.moe.offload.placement=basic", "--format", "json"]  # fmt: skip
    assert main(argv) == 1  # the later value wins, as in ORT's config
    doc = json.loads(capsys.readouterr().out)
    assert [v["rule_id"] for v in doc["violations"]] == ["OFFLOAD-CFG-003"], doc


@pytest.mark.parametrize("version", ["1.31.1", "1.32.0"])
def test_a_float32_qmoe_on_cuda_is_said_to_run_on_the_cpu_ep(version: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    fp32 = _save(_qmoe(TP.FLOAT), tmp_path / "qmoe32.onnx")
    assert main(["check", str(fp32), "--provider", "cuda", "--ort-version", version, "--format", "json"]) == 0
    captured = capsys.readouterr()
    found = json.loads(captured.out)["violations"]
    assert [(v["rule_id"], v["severity"], v["node"]) for v in found] == [("CUDA-FALLBACK-001", "warning", "moe0")]
    assert "com.microsoft::QMoE" in found[0]["message"] and "source-derived from microsoft/onnxruntime@" in found[0]["message"]
    assert f"CUDA kernel facts for onnxruntime {version}: source-derived from microsoft/onnxruntime@" in captured.err
    fp16 = _save(_qmoe(TP.FLOAT16), tmp_path / "qmoe16.onnx")
    assert main(["check", str(fp16), "--provider", "cuda", "--ort-version", version, "--format", "json"]) == 0
    assert [v["rule_id"] for v in json.loads(capsys.readouterr().out)["violations"]] == []
    assert main(["check", str(fp32), "--ort-version", version, "--format", "json"]) == 0  # cpu: nothing to fall back from
    assert json.loads(capsys.readouterr().out)["violations"] == []


def test_a_graph_of_a_package_is_named_as_that_packages_graph(tiny_cpu_package: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg)
    graph = pkg / "model.onnx"
    assert graph.is_file()
    main(["check", str(graph)])
    err = capsys.readouterr().err
    assert "the target graph (" in err and f"of the package {pkg}" in err, err
    lone = tmp_path / "lone.onnx"
    shutil.copy(graph, lone)
    main(["check", str(lone)])
    assert "of the package" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["--session-option", "nokey"], "--session-option 'nokey': expected KEY=VALUE"),
        (["--session-option", "=1"], "expected KEY=VALUE"),
    ],
)
def test_a_bad_session_option_is_one_line_exit_2(argv: list[str], text: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    good = _save(_max(TP.INT32), tmp_path / "max32.onnx")
    assert main(["check", str(good), *argv]) == 2
    err = capsys.readouterr().err
    assert text in err and len(err.strip().splitlines()) == 1


def test_an_unreadable_graph_and_graph_flags_on_a_package_are_exit_2(tiny_cpu_package: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    assert main(["check", str(junk)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("q38 check: error: ") and len(err.strip().splitlines()) == 1
    assert main(["check", str(tiny_cpu_package), "--provider", "cuda"]) == 2
    assert "--provider applies to a graph file" in capsys.readouterr().err
    assert main(["check", str(tiny_cpu_package), "--session-option", "a=b"]) == 2
    assert "--session-option applies to a graph file" in capsys.readouterr().err


_REAL = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "real").glob("*/*.onnx"))


@pytest.mark.parametrize("graph", _REAL, ids=[f"{p.parent.name}/{p.name}" for p in _REAL])
def test_each_real_fixture_graph_gets_a_real_cpu_sessions_verdict(graph: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exporters' graphs (a CUDA fp16 PagedAttention has no CPU kernel): the cpu check agrees with a real session."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        error = None
    except Exception as exc:  # onnxruntime raises several pybind exception types
        error = str(exc)
    code = main(["check", str(graph), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    messages = [v["message"] for v in doc["violations"] if v["severity"] == "error"]
    assert code == (0 if error is None else 1), (error, messages)
    if error is not None and "NOT_IMPLEMENTED" in error:  # the op and node ORT names (its two wordings differ)
        kernel = [v for v in doc["violations"] if v["rule_id"] == "ORT-KERNEL-001"]
        assert any(f"{v['message'].split(' for ', 1)[1].split('(')[0].split('.')[-1]}(" in error and f"'{v['node']}'" in error
                   for v in kernel), (error, kernel)  # fmt: skip
