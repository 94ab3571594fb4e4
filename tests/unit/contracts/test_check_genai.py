"""``q38 check`` on packages the onnxruntime-genai builder wrote (genai surface).

Invariants guarded:
* for every builder package (committed fixtures, ``Q38_REAL_EXPORTS``, q38's builder-form synth
  packages): ``check --json`` exits 0, reports ``surface: genai``, and its ``graph_checks`` name
  every ``.onnx`` of the package with a provider and a positive rule count;
* ``check --ort`` creates a real CPU session for every graph of a CPU-provider package; a CUDA
  graph is never a plain OK: it runs on CPU said so, or is "skipped: op X has no CPU kernel";
* one broken copy per contract family exits 1 with the family's rule id: config surface (an
  unknown key, og's verdict), layout (external data past the end), path fields (a graph
  escaping the package; a shared-initializer byte range past its data file, named exactly), shared
  initializers (a dangling entry, named with its graph; an mtp entry the decoder graph lacks), and the graph schema (an
  unknown attribute, a wrong input type: found by the session under ``--ort``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
from support.contracts_testkit import FP16_GATES, ORT_VERSION, needs_fp16_gates
from support.genai_packages import (
    builder_packages,
    copy_package,
    edit_genai_config,
    real_package_dirs,
)

from contracts.runner import check_package
from q38.cli import main

REAL = real_package_dirs()


@pytest.fixture(scope="module")
def packages(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every builder package; where onnxruntime types GatedDeltaNet's gates float only (1.31.1), the
    real exports alone: q38's synthetic ones feed fp16 gates and fail that check by design."""
    if not FP16_GATES:
        return REAL
    return builder_packages(tmp_path_factory.mktemp("genai"), tiny_cpu_package)


def test_check_json_names_every_onnx_of_every_builder_package(packages: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    for pkg in packages:
        assert main(["check", str(pkg), "--json"]) == 0, pkg
        data = json.loads(capsys.readouterr().out)
        assert data["surface"] == "genai" and data["ok"] is True
        files = [c["file"] for c in data["graph_checks"]]
        assert sorted(files) == sorted(p.name for p in pkg.glob("*.onnx")), pkg
        assert data["graphs"] == [c["graph"] for c in data["graph_checks"]] and data["graphs"][0] == "decoder"
        assert all(c["rules"] > 0 and c["provider"] in ("CPU", "cuda") for c in data["graph_checks"])


def _providers(pkg: Path) -> list[Any]:
    return json.loads((pkg / "genai_config.json").read_text())["model"]["decoder"]["session_options"].get("provider_options", [])


def test_check_ort_creates_the_cpu_sessions(packages: list[Path]) -> None:
    cpu = [p for p in packages if not _providers(p)]
    assert cpu
    for pkg in cpu:
        report = check_package(pkg, ort_sessions=True)
        assert report.ok
        assert [(s.graph, s.status, s.message) for s in report.sessions] == [(g, "ok", "") for g in report.graphs], pkg


def test_a_cuda_graph_is_never_a_plain_ok(packages: list[Path]) -> None:
    cuda = [p for p in packages if _providers(p)]
    assert cuda
    for pkg in cuda:
        report = check_package(pkg, ort_sessions=True)
        for s in report.sessions:
            graph = next(c for c in report.graph_checks if c.graph == s.graph)
            if graph.provider != "cuda":
                continue
            assert s.status in ("ok", "skipped"), (pkg, s)
            if s.status == "ok":
                assert s.message == "CPU session: the config names cuda, which this onnxruntime lacks"
            else:
                assert "has no CPU kernel" in s.message, s.message
    paged = [p for p in cuda if p.name == "fp16-cuda-paged"]
    assert paged, "the paged fixture is committed"
    (session,) = check_package(paged[0], ort_sessions=True).sessions
    if ORT_VERSION.startswith("1.32."):
        assert (session.status, session.message) == ("skipped", "op PagedAttention has no CPU kernel")
    else:  # 1.31.1 has no CPU kernel for the conv and GatedDeltaNet ops of that graph either
        assert session.status == "skipped" and "PagedAttention" in session.message, session.message


@pytest.mark.skipif(not __import__("onnxruntime").__version__.startswith("1.32."), reason="the 1.32.0 CPU kernel table")
def test_a_skipped_session_names_every_op_without_a_cpu_kernel(tiny_builder_faithful_package: Path) -> None:
    sessions = check_package(tiny_builder_faithful_package, ort_sessions=True).sessions
    assert [(s.graph, s.status, s.message) for s in sessions] == [
        ("decoder", "skipped", ("op CausalConvWithState has no CPU kernel for bfloat16 (nor GatedAdd for bfloat16, "
                               "EngramGate for bfloat16, SparseAttentionIndexer, DynamicSparseAttention)")),
        ("mtp", "skipped", "op SparseAttentionIndexer has no CPU kernel (nor DynamicSparseAttention, GatedAdd for bfloat16)"),
        ("engram", "ok", ""),
    ]  # fmt: skip


def _cpu_package(packages: list[Path]) -> Path:
    return next(p for p in packages if not _providers(p))


def _edit_graph(pkg: Path, edit: Callable[[onnx.ModelProto], None]) -> None:
    _edit_graph_file(pkg / "model.onnx", edit)


def _edit_graph_file(path: Path, edit: Callable[[onnx.ModelProto], None]) -> None:
    model = onnx.load(path, load_external_data=False)
    edit(model)
    path.write_bytes(model.SerializeToString())


def _unknown_attribute(model: onnx.ModelProto) -> None:
    node = next(n for n in model.graph.node if n.domain == "com.microsoft")
    node.attribute.append(onnx.helper.make_attribute("q38_bogus_attribute", 1))


def _wrong_input_type(model: onnx.ModelProto) -> None:
    value = next(v for v in model.graph.input if v.name == "attention_mask")
    value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT


def _truncate_data(pkg: Path) -> None:
    with open(pkg / "model.onnx.data", "r+b") as fh:
        fh.truncate(16)


BROKEN: list[tuple[str, Callable[[Path], None], str]] = [
    ("unknown config key", lambda p: edit_genai_config(p, lambda d: d["model"]["decoder"].update({"q38_bogus": 1})),
     "CFG-SURFACE-001"),
    ("config value og refuses", lambda p: edit_genai_config(p, lambda d: d["model"].update({"context_length": 0})),
     "CFG-SURFACE-001"),
    ("external data past the end", _truncate_data, "PKG-GRAPH-001"),
    ("graph escaping the package",
     lambda p: edit_genai_config(p, lambda d: d["model"]["decoder"].update({"filename": "/etc/passwd"})), "PATH-FIELD-001"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "breaker", "rule_id"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_builder_package_fails_with_the_rule_id(
    case: str, breaker: Callable[[Path], None], rule_id: str, packages: list[Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    pkg = copy_package(_cpu_package(packages), tmp_path / "pkg")
    breaker(pkg)
    assert main(["check", str(pkg)]) == 1
    assert rule_id in capsys.readouterr().out
    assert rule_id in {v.rule_id for v in check_package(pkg).errors}


@pytest.mark.parametrize(("case", "edit", "ort_text"), [
    ("unknown attribute", _unknown_attribute, "Unrecognized attribute: q38_bogus_attribute"),
    ("wrong input type", _wrong_input_type, "Type Error: Type (tensor(int64))"),
], ids=["unknown attribute", "wrong input type"])  # fmt: skip
def test_a_broken_graph_fails(
    case: str, edit: Callable[[onnx.ModelProto], None], ort_text: str, packages: list[Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    pkg = copy_package(_cpu_package(packages), tmp_path / "pkg")
    _edit_graph(pkg, edit)
    assert main(["check", str(pkg), "--ort"]) == 1
    out = capsys.readouterr().out
    assert "session decoder: FAILED: " in out and ort_text in out
    report = check_package(pkg, ort_sessions=True)
    assert not report.ok and [s.status for s in report.sessions if s.graph == "decoder"] == ["failed"]


def _mtp_package(packages: list[Path]) -> Path:
    found = [p for p in packages if (p / "mtp.onnx").is_file() and
             json.loads((p / "genai_config.json").read_text())["model"]["decoder"].get("shared_initializers")]  # fmt: skip
    assert found, "the int4 cpu + MTP fixture (shared_initializers) is committed"
    return found[0]


@pytest.mark.parametrize("where", ["decoder", "mtp"])
def test_a_dangling_shared_initializer_fails(where: str, packages: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = copy_package(_mtp_package(packages), tmp_path / "pkg")
    edit_genai_config(pkg, lambda d: d["model"][where]["shared_initializers"][0].update({"name": "q38.no.such.tensor"}))
    assert main(["check", str(pkg)]) == 1
    out = capsys.readouterr().out
    assert "PKG-SHARED-001" in out
    (violation,) = [v for v in check_package(pkg).errors if v.rule_id == "PKG-SHARED-001"]
    assert violation.graph == where  # the section the entry belongs to (model.<where>.shared_initializers)
    assert violation.message.startswith(f"model.{where}.shared_initializers[0]: no initializer 'q38.no.such.tensor' in the ")
    assert violation.message.endswith("graph (dangling shared initializer)")


def test_an_mtp_entry_the_decoder_graph_lacks_is_dangling(packages: list[Path], tmp_path: Path) -> None:
    """Every shared entry is checked against the decoder graph too: one naming a tensor only mtp.onnx
    holds (its own dtype, shape and bytes, so the mtp graph agrees) is dangling in the decoder."""
    pkg = copy_package(_mtp_package(packages), tmp_path / "pkg")
    doc = json.loads((pkg / "genai_config.json").read_text())
    decoder = onnx.load(pkg / doc["model"]["decoder"]["filename"], load_external_data=False)
    mtp = onnx.load(pkg / doc["model"]["mtp"]["filename"], load_external_data=False)
    held = {t.name for t in decoder.graph.initializer}
    own = next(t for t in mtp.graph.initializer if t.name not in held and t.data_location == onnx.TensorProto.EXTERNAL)
    ext = {e.key: e.value for e in own.external_data}
    entry = {"name": own.name, "data_file": ext["location"], "offset": ext.get("offset", "0"), "length": ext["length"],
             "data_type": own.data_type, "shape": list(own.dims)}  # fmt: skip
    edit_genai_config(pkg, lambda d: d["model"]["mtp"]["shared_initializers"][0].update(entry))
    found = [(v.graph, v.message) for v in check_package(pkg).errors if v.rule_id == "PKG-SHARED-001"]
    want = f"model.mtp.shared_initializers[0]: no initializer {own.name!r} in the decoder graph (dangling shared initializer)"
    assert found == [("mtp", want)]


def test_a_shared_initializer_with_the_wrong_shape_fails(packages: list[Path], tmp_path: Path) -> None:
    pkg = copy_package(_mtp_package(packages), tmp_path / "pkg")
    edit_genai_config(pkg, lambda d: d["model"]["mtp"]["shared_initializers"][0].update(
        {"shape": [*d["model"]["mtp"]["shared_initializers"][0]["shape"], 1]}))  # fmt: skip
    messages = [v.message for v in check_package(pkg).errors if v.rule_id == "PKG-SHARED-001"]
    assert len(messages) == 1 and "the entry says data_type" in messages[0]


def test_runtime_profile_decoders_are_checked_as_graphs(packages: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A profile's alternate decoder is a graph of its own (checked, listed); a broken one fails."""
    pkg = copy_package(_cpu_package(packages), tmp_path / "pkg")
    shutil.copyfile(pkg / "model.onnx", pkg / "model_small.onnx")
    edit_genai_config(pkg, lambda d: d.update({"runtime_profiles": [
        {"id": "small", "eligibility": {"minimum_total_device_memory_bytes": 24 << 30},
         "overlay": {"model": {"decoder": {"filename": "model_small.onnx"}}}}]}))  # fmt: skip
    assert main(["check", str(pkg), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert ("profile:small", "model_small.onnx") in [(c["graph"], c["file"]) for c in data["graph_checks"]]
    _edit_graph_file(pkg / "model_small.onnx", _unknown_attribute)
    report = check_package(pkg, ort_sessions=True)
    assert [(s.graph, s.status) for s in report.sessions] == [("decoder", "ok"), ("profile:small", "failed")]


@needs_fp16_gates  # a synthetic faithful package
@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider' is not in available provider names")
def test_with_cuda_available_a_cuda_graph_is_tried_on_cuda_not_judged_by_the_cpu_table(
        tiny_faithful_package: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import onnxruntime

    table = {s.graph: s for s in check_package(tiny_faithful_package, ort_sessions=True).sessions}
    assert table["target"].message == "op SparseAttentionIndexer has no CPU kernel (nor DynamicSparseAttention)"
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    tried = {s.graph: s for s in check_package(tiny_faithful_package, ort_sessions=True).sessions}
    # the session itself was created (this wheel falls back to CPU): ORT's own NOT_IMPLEMENTED names one op
    assert (tried["target"].status, tried["target"].message) == ("skipped", "op SparseAttentionIndexer has no CPU kernel")
    assert (tried["head"].status, tried["head"].message) == ("ok", "")


@needs_fp16_gates  # a synthetic cpu package
def test_sessions_are_created_with_the_graphs_session_config(tiny_cpu_package: Path, tmp_path: Path) -> None:
    pkg = copy_package(tiny_cpu_package, tmp_path / "pkg")
    edit_genai_config(pkg, lambda d: d["model"]["decoder"]["session_options"].update({"session.moe.offload.mode": "bogus"}))
    report = check_package(pkg, ort_sessions=True)
    assert "OFFLOAD-CFG-003" in {v.rule_id for v in report.violations}
    failed = [(s.graph, s.status, s.message) for s in report.sessions if s.status != "ok"]
    assert failed and all(status == "failed" for _g, status, _m in failed), failed
    assert all("Invalid session.moe.offload.mode value 'bogus'" in m for _g, _s, m in failed), failed


def test_a_shared_initializer_range_past_its_data_file_is_named(packages: list[Path], tmp_path: Path) -> None:
    pkg = copy_package(_mtp_package(packages), tmp_path / "pkg")
    entry = json.loads((pkg / "genai_config.json").read_text())["model"]["decoder"]["shared_initializers"][0]
    edit_genai_config(pkg, lambda d: d["model"]["decoder"]["shared_initializers"][0].update({"offset": "999999999"}))
    size = (pkg / entry["data_file"]).stat().st_size
    found = [v.message for v in check_package(pkg).errors if v.rule_id == "PATH-FIELD-004"]
    end = 999999999 + int(entry["length"])
    want = (f"model.decoder.shared_initializers[0]: bytes [999999999, {end}) lie past the end of "
            f"{entry['data_file']!r} ({size} bytes)")  # fmt: skip
    assert found == [want]
