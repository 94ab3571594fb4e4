"""Every q38 command on every committed builder fixture, with the exact outcome each one has.

The fixtures (``tests/fixtures/real/``, written by the released onnxruntime-genai 0.18.0 builder)
are fixed bytes, so what each command does with each of them is known exactly; the table below
states it. Invariants guarded, per fixture:
* ``check --json --ort``: exit 0, surface genai, no violation at all, exactly the graphs the config
  names (role, file, provider) with every graph rule of that provider evaluated on each, and each
  session's exact outcome (a CUDA graph is never a plain OK: it ran on CPU said so, or is skipped
  naming the op);
* ``optimize --json``: exit 0, the default target and its reason (from the decoder's provider),
  the node counts and fusions per graph; the output passes ``check --ort`` with the same session
  outcomes; the source is byte-identical afterwards;
* ``export-genai --json``: the exact config rewrites and dropped sections, every other file
  byte for byte, or the exact one-line refusal (exit 2, nothing written);
* ``build`` with the fixture as the target bundle: exit 0, the graph placed unchanged, the
  v12b config's dimensions and state templates those of the fixture's own config, and the built
  package passes check.

The generic invariants over every builder package (other exports, synth builder packages) live
in the per-command test modules; this one pins the committed fixtures so that a change of any
outcome is seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.fsnap import tree_snapshot
from support.genai_packages import FIXTURES

from contracts.runner import ALL_RULES, installed_ort_version
from q38.cli import main

CPU_SESSION_NOTE = "CPU session: the config names cuda, which this onnxruntime lacks"
CUDA_DROPPED = "model.decoder.session_options.provider_options: dropped cuda (CPU export)"
SHARED_DROPPED = (
    "model.decoder/mtp.shared_initializers: dropped (onnxruntime-genai 0.18.0 on CPU: 'GetMemoryInfo for CPU "
    "should not be used'; each graph's own data reference names the same bytes)"
)
NO_FUSION = {"causal_conv_state": 0, "fp8_head": 0, "hyper_connection": 0, "rms_norm_rotary": 0, "shared_expert": 0}
CUDA_FUSIONS = {**NO_FUSION, "fp8_head": 1, "shared_expert": 4}


@dataclass(frozen=True)
class Expected:
    """What every command does with one fixture."""

    graphs: list[tuple[str, str, str]]  # (role, file, provider)
    sessions: list[tuple[str, str, str]]  # (graph, status, message)
    target: str  # optimize's default --target
    nodes: dict[str, list[int]]  # graph -> [before, after]
    fusions: dict[str, int]
    export_rewrites: list[str] = field(default_factory=list)
    export_refusal: str = ""  # the error line after "q38 export-genai: error: <decoder path>: "
    optimized_sessions: list[tuple[str, str, str]] | None = None  # None: the source's
    build_refusal: str = ""  # the error line after "q38 build: error: <config path>: "
    build_warning: str = ""  # the warning after "<config path>: "


EXPECTED: dict[str, Expected] = {
    "int4-cpu": Expected(
        [("decoder", "model.onnx", "CPU")], [("decoder", "ok", "")], "cpu", {"decoder": [154, 154]}, NO_FUSION,
    ),
    "int4-cpu-mtp": Expected(
        [("decoder", "model.onnx", "CPU"), ("mtp", "mtp.onnx", "CPU")], [("decoder", "ok", ""), ("mtp", "ok", "")],
        "cpu", {"decoder": [154, 154], "mtp": [56, 56]}, NO_FUSION, [SHARED_DROPPED],
        build_warning="the v12b surface has no model.mtp (mtp.onnx): the built package runs the decoder without it",
    ),
    "int4-cuda-prepacked": Expected(
        [("decoder", "model.onnx", "cuda")], [("decoder", "ok", CPU_SESSION_NOTE)], "cuda",
        {"decoder": [158, 158]}, NO_FUSION, [CUDA_DROPPED],
    ),
    "fp16-cuda-gdn": Expected(
        [("decoder", "model.onnx", "cuda")], [("decoder", "ok", CPU_SESSION_NOTE)], "cuda",
        {"decoder": [151, 147]}, CUDA_FUSIONS, [CUDA_DROPPED],  # the FP8 head is a CUDA kernel:
        optimized_sessions=[("decoder", "skipped", "op MatMulBlockQuantizedFp8Weight has no CPU kernel")],
    ),
    "fp16-cuda-paged": Expected(
        [("decoder", "model.onnx", "cuda")], [("decoder", "skipped", "op PagedAttention has no CPU kernel")], "cuda",
        {"decoder": [145, 141]}, CUDA_FUSIONS,
        export_refusal="op PagedAttention has no CPU kernel in the installed onnxruntime; onnxruntime-genai cannot "
        "run this decoder on CPU",
        optimized_sessions=[
            ("decoder", "skipped", "op PagedAttention has no CPU kernel (nor MatMulBlockQuantizedFp8Weight)")],
        build_refusal="model.decoder.inputs.attention_metadata: the v12b surface has no binding for graph input "
        "'attention_metadata' (nor 3 more); build from an export without it (e.g. not paged)",
    ),
}  # fmt: skip
TARGET_REASON = {
    "cpu": "its model.decoder.session_options name no CUDA provider",
    "cuda": "its model.decoder.session_options name the CUDA provider",
}


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _graph_rules(provider: str) -> int:
    """Every graph rule of the registry that applies to the installed onnxruntime and the provider."""
    ep = "cuda" if provider == "cuda" else "cpu"
    version = installed_ort_version()
    return len([r for r in ALL_RULES if r.kind == "graph" and r.ep in ("any", ep) and r.applies(version)])


def _sessions(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(s["graph"], s["status"], s["message"]) for s in report["sessions"]]


@pytest.fixture(scope="module")
def fixture_copies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Private copies (own inodes: a hard link another test makes to a fixture is not this test's warning)."""
    base = tmp_path_factory.mktemp("fixtures")
    return {name: Path(shutil.copytree(FIXTURES / name, base / name)) for name in EXPECTED}


def test_the_table_covers_every_committed_fixture() -> None:
    assert sorted(EXPECTED) == sorted(p.parent.name for p in FIXTURES.glob("*/genai_config.json"))
    cuda_only = {r.rule_id for r in ALL_RULES if r.kind == "graph" and r.ep == "cuda"}
    cpu_only = {r.rule_id for r in ALL_RULES if r.kind == "graph" and r.ep == "cpu"}
    assert cuda_only and cpu_only, "each provider's graph gets its own kernel rules on top of the common ones"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check(name: str, fixture_copies: dict[str, Path]) -> None:
    exp, pkg = EXPECTED[name], fixture_copies[name]
    rc, out, _ = _run("check", str(pkg), "--json", "--ort")
    report = json.loads(out)
    assert (rc, report["surface"], report["ok"], report["violations"]) == (0, "genai", True, [])
    checks = [(c["graph"], c["file"], c["provider"], c["rules"]) for c in report["graph_checks"]]
    assert checks == [(g, f, p, _graph_rules(p)) for g, f, p in exp.graphs]
    assert sorted(f for _, f, _ in exp.graphs) == sorted(p.name for p in pkg.glob("*.onnx"))
    assert _sessions(report) == exp.sessions


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_optimize_then_check(name: str, fixture_copies: dict[str, Path], tmp_path: Path) -> None:
    exp, pkg = EXPECTED[name], fixture_copies[name]
    before = tree_snapshot(pkg)
    rc, out, _ = _run("optimize", str(pkg), str(tmp_path / "out"), "--json")
    assert tree_snapshot(pkg) == before
    result = json.loads(out)
    assert rc == 0
    assert (result["target"], result["target_reason"]) == (exp.target, TARGET_REASON[exp.target])
    assert (result["nodes"], result["rewrites"]) == (exp.nodes, exp.fusions)
    rc, out, _ = _run("check", str(tmp_path / "out"), "--json", "--ort")
    report = json.loads(out)
    assert (rc, report["ok"], report["violations"]) == (0, True, [])
    assert _sessions(report) == (exp.sessions if exp.optimized_sessions is None else exp.optimized_sessions)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_export_genai(name: str, fixture_copies: dict[str, Path], tmp_path: Path) -> None:
    exp, pkg, out = EXPECTED[name], fixture_copies[name], tmp_path / "out"
    before = tree_snapshot(pkg)
    rc, stdout, stderr = _run("export-genai", str(pkg), str(out), "--json")
    assert tree_snapshot(pkg) == before
    if exp.export_refusal:
        assert (rc, stdout) == (2, "")
        assert stderr.splitlines()[-1] == f"q38 export-genai: error: {pkg / 'model.onnx'}: {exp.export_refusal}"
        assert not out.exists() and list(tmp_path.iterdir()) == []
        return
    result = json.loads(stdout)
    assert (rc, result["rewrites"], result["dropped"]) == (0, exp.export_rewrites, [])
    files = sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*") if p.is_file())
    assert sorted(result["files"]) == files
    for rel in files:
        same = _digest(out / rel) == _digest(pkg / rel)
        assert same is (rel != "genai_config.json" or not exp.export_rewrites), rel
    assert result["files"]["genai_config.json"] == ("write" if exp.export_rewrites else "copy")


@pytest.fixture(scope="module")
def head_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("b") / "bundles", preset="tiny", variant="cpu", bundles=True) / "head"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_build_from_the_fixture_folder(
    name: str, fixture_copies: dict[str, Path], head_bundle: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp, pkg, out = EXPECTED[name], fixture_copies[name], tmp_path / "built"
    before = tree_snapshot(pkg)
    with caplog.at_level(logging.WARNING, logger="q38.assembly"):
        rc, _, stderr = _run("build", str(out), "--target", str(pkg), "--head", str(head_bundle), "--layout", "layered",
                             "--copy")  # fmt: skip
    assert tree_snapshot(pkg) == before
    config = pkg / "genai_config.json"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ([f"{config}: {exp.build_warning}"] if exp.build_warning else [])
    if exp.build_refusal:
        assert rc == 2 and stderr.splitlines()[-1] == f"q38 build: error: {config}: {exp.build_refusal}"
        assert list(tmp_path.iterdir()) == []
        return
    assert rc == 0
    assert _digest(out / "target" / "model.onnx") == _digest(pkg / "model.onnx")
    upstream = json.loads(config.read_text())["model"]
    built = json.loads((out / "target" / "genai_config.json").read_text())["model"]
    dims = ("head_size", "hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads")
    assert {k: built["decoder"][k] for k in dims} == {k: upstream["decoder"][k] for k in dims}
    for kind in ("inputs", "outputs"):  # every binding the exporter wrote, kept
        assert built["decoder"][kind] == upstream["decoder"][kind], kind
    assert (built["type"], built["context_length"], built["vocab_size"]) == (
        "qwen38_flash_graph", upstream["context_length"], upstream["vocab_size"])  # fmt: skip
    rc, stdout, _ = _run("check", str(out), "--json")
    report = json.loads(stdout)
    assert (rc, report["surface"], report["ok"]) == (0, "v12b", True)
