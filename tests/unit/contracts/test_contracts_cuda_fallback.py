"""CUDA-FALLBACK-001: ``q38 check`` names the nodes of CUDA graphs that would fall back to the CPU EP.

The facts are the GPU run's dump of the CUDA EP's kernel registry (``contracts/schemas/
cuda-kernels-<version>.json`` once committed, or ``$Q38_CUDA_KERNELS``). No GPU is here, so the dump
is a stand-in in the dump's own format: every op the package uses, registered for every version
and type, except Gather. Invariants guarded:
- with the dump, check warns once per Gather node of each CUDA graph (and nothing else), naming it;
  the CPU graphs of the same package get no such warning;
- without a dump, or with a dump of another onnxruntime version, the rule says nothing (coverage
  not probed), and check's exit status does not change (a warning);
- ``optimize --target cuda --target-ort`` reads the same dump (one loader).
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from support.contracts_testkit import ORT_VERSION, needs_fp16_gates

from contracts.cuda_kernels import ENV_VAR, fallback_nodes
from contracts.runner import check_package
from q38.cli import main
from q38.optimize.target_kernels import for_target
from q38.synth import synthesize

_VERSION = ORT_VERSION  # the dump stands for the installed onnxruntime's CUDA build
_OTHER = "1.31.1" if _VERSION != "1.31.1" else "1.32.0"


@pytest.fixture(scope="module")
def faithful(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("cuda-fallback") / "pkg", preset="tiny", variant="faithful", seed=0)


def _ops(pkg: Path) -> set[tuple[str, str]]:
    ops: set[tuple[str, str]] = set()
    for path in pkg.glob("*.onnx"):
        model = onnx.load(path, load_external_data=False)
        ops |= {(n.domain, n.op_type) for n in model.graph.node}
    return ops


def _dump(path: Path, ops: set[tuple[str, str]], *, version: str = _VERSION) -> Path:
    # a closed range serves every since-version in it (an open-ended one only its own start)
    kernels = [{"domain": d, "name": n, "kernels": [[1, 1000, {}]]} for d, n in sorted(ops)]
    path.write_text(json.dumps({"ort_version": version, "kernels": kernels}))
    return path


def _fallbacks(pkg: Path) -> list[tuple[str, str]]:
    report = check_package(pkg)
    return [(v.graph, v.node) for v in report.violations if v.rule_id == "CUDA-FALLBACK-001"]


def test_check_warns_once_per_node_a_cuda_graph_would_run_on_the_cpu(
    faithful: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(_dump(tmp_path / f"cuda-kernels-{_VERSION}.json", _ops(faithful) - {("", "Gather")})))
    found = _fallbacks(faithful)
    target = onnx.load(faithful / "model.onnx", load_external_data=False)
    gathers = [n.name for n in target.graph.node if n.op_type == "Gather"]
    assert gathers and found
    assert all(node.endswith("Gather") or "Gather" in node for _graph, node in found), found
    assert sorted(node for graph, node in found if graph == "target") == sorted(gathers)
    assert len(fallback_nodes(target, _VERSION)) == len(gathers)
    report = check_package(faithful)
    assert all(v.severity == "warning" for v in report.violations if v.rule_id == "CUDA-FALLBACK-001")


def test_a_graph_whose_session_names_no_cuda_provider_gets_no_fallback_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu = synthesize(tmp_path / "cpu", preset="tiny", exporter="builder", seed=0)  # CPU provider only
    monkeypatch.setenv(ENV_VAR, str(_dump(tmp_path / f"cuda-kernels-{_VERSION}.json", set())))
    assert _fallbacks(cpu) == []
    doc = json.loads((cpu / "genai_config.json").read_text())
    doc["model"]["decoder"].setdefault("session_options", {})["provider_options"] = [{"cuda": {}}]
    (cpu / "genai_config.json").write_text(json.dumps(doc))
    assert _fallbacks(cpu)  # the same graphs on a CUDA session: every node falls back under an empty dump


@needs_fp16_gates  # check's exit status of the synthetic package
def test_without_a_dump_of_this_version_the_rule_says_nothing(
    faithful: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert _fallbacks(faithful) == []
    monkeypatch.setenv(ENV_VAR, str(_dump(tmp_path / f"cuda-kernels-{_OTHER}.json", set(), version=_OTHER)))
    assert _fallbacks(faithful) == []
    assert main(["check", str(faithful)]) == 0


def test_optimize_reads_the_same_dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(_dump(tmp_path / f"cuda-kernels-{_VERSION}.json", {("", "Gather")})))
    kernels = for_target(_VERSION, "cuda")
    assert kernels.source == f"cuda-kernels-{_VERSION}.json"
    assert kernels.has("Gather", "") and not kernels.has("RMSNormRotary")
