"""``q38 export-genai`` of packages the onnxruntime-genai builder wrote (genai surface).

Invariants guarded:
* the int4 cpu fixture's export generates the same 12 greedy tokens with onnxruntime-genai 0.18.0
  as the fixture itself (and as the greedy tokens recorded when the fixture was made);
* a cpu export passes everything through: every file but the config byte-identical, the config
  changed only by the listed rewrites, accepted by ``og.Config``; the source is unchanged;
* CUDA exports lose their CUDA provider options and generate on CPU the tokens the source
  generates there;
* the MTP export (which og cannot load as written: "GetMemoryInfo for CPU should not be used")
  loses both shared_initializers lists, keeps mtp.onnx, and generates the decoder's tokens;
* an mtp.onnx with an op that has no CPU kernel is dropped with a warning (section, graph and
  its own data gone; the decoder's tokens unchanged);
* refused in one line, exit 2, nothing written: a decoder without CPU kernels (the paged export),
  a research-builder config 0.18.0 refuses.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

import onnx
import pytest
from support.fsnap import staging_debris, tree_snapshot
from support.genai_packages import FIXTURES, copy_package, real_package_dirs

from q38.cli import main

PROMPT = [1, 5, 9, 17]
REAL = real_package_dirs()


def _og():  # type: ignore[no-untyped-def]
    return pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai 0.18.0 is a test dependency")


def _tokens(model_dir: Path, n: int = 12, prompt: list[int] = PROMPT) -> list[int]:
    from q38.export_genai import generate_tokens

    return generate_tokens(model_dir, prompt, n)


def _export(src: Path, out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:  # type: ignore[type-arg]
    assert main(["export-genai", str(src), str(out), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _named(*names: str) -> list[Path]:
    return [p for p in REAL if p.name in names]


def test_int4_cpu_export_generates_the_fixtures_12_greedy_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _og()
    src = FIXTURES / "int4-cpu"
    recorded = json.loads((FIXTURES / "greedy-int4-cpu.json").read_text())  # written when the fixture was made
    prompt = recorded["prompt"]
    before = tree_snapshot(src)
    report = _export(src, tmp_path / "out", capsys)
    assert tree_snapshot(src) == before
    assert report["rewrites"] == [] and report["dropped"] == []
    ours, theirs = _tokens(tmp_path / "out", 12, prompt), _tokens(src, 12, prompt)
    assert len(ours) == 12 and ours == theirs == recorded["tokens"][:12]


def test_cpu_exports_pass_everything_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    og = _og()
    cpu = [p for p in REAL if not json.loads((p / "genai_config.json").read_text())["model"]["decoder"]
           ["session_options"].get("provider_options")]  # fmt: skip
    for i, src in enumerate(cpu):
        out = tmp_path / f"out{i}"
        report = _export(src, out, capsys)
        srcfiles = {p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()}
        assert set(report["files"]) == srcfiles
        for rel in srcfiles - {"genai_config.json"}:
            assert _digest(out / rel) == _digest(src / rel), rel
        og.Config(str(out))
        allowed = ("model.decoder/mtp.shared_initializers: dropped",)
        assert all(line.startswith(allowed) for line in report["rewrites"]), report["rewrites"]
        if not report["rewrites"]:
            assert _digest(out / "genai_config.json") == _digest(src / "genai_config.json")


def test_cuda_exports_drop_the_cuda_provider_and_generate_like_the_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _og()
    cuda = _named("int4-cuda-prepacked", "fp16-cuda-gdn")
    assert cuda, "the CUDA fixtures are committed"
    for src in cuda:
        out = tmp_path / src.name
        report = _export(src, out, capsys)
        assert report["rewrites"] == ["model.decoder.session_options.provider_options: dropped cuda (CPU export)"]
        doc = json.loads((out / "genai_config.json").read_text())
        assert doc["model"]["decoder"]["session_options"]["provider_options"] == []
        assert _tokens(out, 8) == _tokens(src, 8)


def _mtp_fixture() -> Path:
    found = [p for p in REAL if (p / "mtp.onnx").is_file()]
    assert found, "the int4 cpu + MTP fixture is committed (tests/fixtures/real/int4-cpu-mtp)"
    return found[0]


def test_mtp_export_drops_both_shared_initializer_lists_and_generates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _og()
    from q38.errors import ExportError

    src = _mtp_fixture()
    with pytest.raises(ExportError, match="GetMemoryInfo for CPU should not be used"):
        _tokens(src)
    report = _export(src, tmp_path / "out", capsys)
    assert [r.split(":")[0] for r in report["rewrites"]] == ["model.decoder/mtp.shared_initializers"]
    doc = json.loads((tmp_path / "out" / "genai_config.json").read_text())
    assert "shared_initializers" not in doc["model"]["decoder"] and "shared_initializers" not in doc["model"]["mtp"]
    assert (tmp_path / "out" / "mtp.onnx").is_file()
    decoder_only = copy_package(tmp_path / "out", tmp_path / "decoder-only")
    d = json.loads((decoder_only / "genai_config.json").read_text())
    d["model"].pop("mtp")
    (decoder_only / "genai_config.json").write_text(json.dumps(d))
    assert _tokens(tmp_path / "out") == _tokens(decoder_only)


def test_an_mtp_graph_without_cpu_kernels_is_dropped_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    _og()
    src = copy_package(_mtp_fixture(), tmp_path / "src")
    model = onnx.load(src / "mtp.onnx", load_external_data=False)
    first = model.graph.input[0].name
    model.graph.node.append(onnx.helper.make_node(
        "PagedAttention", [first], ["q38_unused"], domain="com.microsoft", name="cuda_only"))  # fmt: skip
    (src / "mtp.onnx").write_bytes(model.SerializeToString())
    # The one-input PagedAttention also breaks its schema (ORT-SCHEMA-004), so the source gate
    # would refuse it: this test is about the CPU-kernel drop, hence --allow-invalid-source.
    with caplog.at_level(logging.WARNING, logger="q38.export_builder"):
        report = _export(src, tmp_path / "out", capsys, "--allow-invalid-source")
    assert report["dropped"] == ["model.mtp (mtp.onnx): op PagedAttention has no CPU kernel"]
    assert any("dropping model.mtp" in r.getMessage() for r in caplog.records)
    out = tmp_path / "out"
    assert not (out / "mtp.onnx").exists() and not (out / "mtp.onnx.data").exists()
    assert "mtp" not in json.loads((out / "genai_config.json").read_text())["model"]
    assert (out / "model.onnx.data").is_file()
    assert len(_tokens(out)) == 12


def test_refusals_are_one_line_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from q38.synth import synthesize

    research = synthesize(tmp_path / "research", preset="tiny", variant="faithful", exporter="builder")
    cases = [(research, r"onnxruntime-genai 0.18.0 refuses the config")]
    cases += [(p, r"op PagedAttention has no CPU kernel") for p in _named("fp16-cuda-paged")]
    for src, expect in cases:
        work = tmp_path / f"w-{src.name}"
        work.mkdir()
        before = tree_snapshot(src)
        assert main(["export-genai", str(src), str(work / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and re.search(expect, err), err
        assert list(work.iterdir()) == [] and staging_debris(work) == []
        assert tree_snapshot(src) == before
