"""The source-derived CUDA kernel facts that stand in until a GPU dump exists.

Invariants guarded:
- Both supported versions have a committed fact file labelled source-derived, with the repo, the
  path and the commit it was read at; the loader carries that provenance and marks the facts as
  not probed; QMoE's CUDA kernels are float16 and bfloat16 only (onnxruntime issue 29035), and
  ``#if``'d registrations are listed as build-dependent.
- The facts judge only the ops they list: an op the source snapshot lacks is unknown (no fallback
  warning), and they never make ORT-KERNEL-002 an error (only a GPU dump does).
- A GPU dump (``$Q38_CUDA_KERNELS``) replaces them; a source-derived one there names every path
  it was read from.
- The generator's reader takes typed, versioned and untyped declarations, the first type of a
  multi-typed name, and the preprocessor conditions around them.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from support.contracts_testkit import _model, _vi, qmoe_initializers, qmoe_node
from syrupy.assertion import SnapshotAssertion

from contracts.cuda_kernels import ENV_VAR, cuda_kernels
from contracts.runner import check_graph

_ROOT = Path(__file__).resolve().parents[3]
_VERSIONS = ("1.31.1", "1.32.0")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cuda_kernel_facts", _ROOT / "tools" / "cuda_kernel_facts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _qmoe() -> onnx.ModelProto:
    return _model([qmoe_node()], [_vi("x", TP.FLOAT, [2, 64]), _vi("router", TP.FLOAT, [2, 4])],
                  [_vi("y", TP.FLOAT, [2, 64])], qmoe_initializers())  # fmt: skip


@pytest.mark.parametrize("version", _VERSIONS)
def test_each_version_has_labelled_source_derived_facts(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    doc = json.loads((_ROOT / "contracts" / "schemas" / f"cuda-kernels-{version}.source.json").read_text())
    assert doc["ort_version"] == version and doc["domains"] == ["com.microsoft"]
    origin = doc["provenance"]
    assert origin["kind"] == "source-derived" and origin["repo"] == "microsoft/onnxruntime"
    assert len(origin["ref"]) == 40 and origin["paths"] == ["onnxruntime/contrib_ops/cuda/cuda_contrib_kernels.cc"]
    by_op = {k["name"]: k for k in doc["kernels"]}
    assert by_op["QMoE"]["kernels"] == [[1, 2147483647, {"T": ["tensor(bfloat16)", "tensor(float16)"]}]]
    assert any("USE_FP8_KV_CACHE" in c for c in by_op["GroupQueryAttention"]["build_dependent"])
    facts = cuda_kernels(version)
    assert facts is not None and not facts.probed
    assert facts.provenance.startswith(f"source-derived from microsoft/onnxruntime@{origin['ref']}")


@pytest.mark.parametrize("version", _VERSIONS)
def test_source_facts_warn_only_about_the_ops_they_list(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    found = check_graph(_qmoe(), eps=frozenset({"cuda"}), ort_version=version)
    assert [(v.rule_id, v.severity) for v in found] == [("CUDA-FALLBACK-001", "warning")]
    # an op the snapshot does not list (RMSNormRotary is no upstream op) and a standard op: unknown, not missing
    unknown = _model([oh.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", TP.BFLOAT16, [2])], [_vi("y", TP.BFLOAT16, [2])])
    assert not cuda_kernels(version).judges("com.microsoft", "RMSNormRotary")  # type: ignore[union-attr]
    assert [v.rule_id for v in check_graph(unknown, eps=frozenset({"cuda"}), ort_version=version)] == []


def test_a_gpu_dump_replaces_the_source_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = tmp_path / "cuda-kernels-1.32.0.json"
    dump.write_text(json.dumps({"ort_version": "1.32.0", "kernels": [
        {"domain": "com.microsoft", "name": "QMoE", "kernels": [[1, 1000, {"T": ["tensor(float)"]}]]}]}))  # fmt: skip
    monkeypatch.setenv(ENV_VAR, str(dump))
    facts = cuda_kernels("1.32.0")
    assert facts is not None and facts.probed and facts.provenance == "GPU registry dump cuda-kernels-1.32.0.json"
    assert check_graph(_qmoe(), eps=frozenset({"cuda"}), ort_version="1.32.0") == []
    # a probed registry that lacks an op (Max on int16 has no CPU kernel either): the session fails
    node = oh.make_node("Max", ["a", "b"], ["y"], name="max")
    both = _model([node], [_vi("a", TP.INT16, [2]), _vi("b", TP.INT16, [2])], [_vi("y", TP.INT16, [2])])
    assert "ORT-KERNEL-002" in {v.rule_id for v in check_graph(both, eps=frozenset({"cuda"}), ort_version="1.32.0")}


def test_source_facts_name_every_path_they_were_read_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages_snapshot: SnapshotAssertion
) -> None:
    dump = tmp_path / "cuda-kernels-1.32.0.source.json"
    paths = ["a/kernels.cc", "b/more_kernels.cc"]
    origin = {"kind": "source-derived", "ref": "0" * 40, "paths": paths}
    doc = {"ort_version": "1.32.0", "provenance": origin, "kernels": []}
    dump.write_text(json.dumps(doc))
    monkeypatch.setenv(ENV_VAR, str(dump))
    facts = cuda_kernels("1.32.0")
    assert facts is not None and not facts.probed
    assert messages_snapshot == {"two paths, no repo": facts.provenance}


def test_the_generator_reads_declarations_and_their_conditions() -> None:
    text = "\n".join([
        "class CUDA_MS_OP_TYPED_CLASS_NAME(1, MLFloat16, QMoE);",
        "class CUDA_MS_OP_VERSIONED_TYPED_CLASS_NAME(1, 16, float, Foo);",
        "#ifdef USE_FP8_KV_CACHE",
        "class CUDA_MS_OP_TYPED_CLASS_NAME(1, BFloat16_Float8E4M3FN, GroupQueryAttention);",
        "#endif",
        "class CUDA_MS_OP_CLASS_NAME(1, Trilu);",
        "class CUDA_MS_OP_THREE_TYPED_CLASS_NAME(1, UInt4x2, float, int32_t, GatherBlockQuantized);",
    ])  # fmt: skip
    assert _generator().parse(text) == [
        ("QMoE", 1, 2147483647, "tensor(float16)", ""),
        ("Foo", 1, 16, "tensor(float)", ""),
        ("GroupQueryAttention", 1, 2147483647, "tensor(bfloat16)", "#ifdef USE_FP8_KV_CACHE"),
        ("Trilu", 1, 2147483647, None, ""),
        ("GatherBlockQuantized", 1, 2147483647, "tensor(uint4)", ""),
    ]
