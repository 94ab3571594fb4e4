"""q38.ort_kernels: CPU-kernel knowledge probed from the installed onnxruntime, cached per build.

* The probe agrees with real sessions both ways: hand-built nodes with real shapes (run, not only
  created), standard ops answered from ORT's registry, and every contrib node of real packages
  (a CPU package whose session is created: all have kernels; a QSA package whose session fails
  naming op X: X has none).
* The cache: one probe, then none (probe calls and session attempts counted), deterministic JSON,
  re-probed on another version / identity / probe revision and on every kind of corruption
  (never trusted, never a hang on a FIFO), written atomically (a failed write leaves the old file
  and no temporary), and a cache that cannot be written still yields the table.
* The documented facts of onnxruntime 1.32.0 and 1.31.1 (real-exporter-forms.md §2,
  ort-cpu-capabilities.md §7) hold for whichever is installed (``nox -s contracts`` runs both).
* A bad probe is never recorded as "no kernel": the verdict texts, and a probe child that
  crashes mid-attempt is restarted on the next attempt.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from q38 import ort_kernel_probe as probe
from q38 import ort_kernels
from q38.ort_kernels import CpuKernels, KernelKnowledgeError, OpKernels, cpu_kernels

V132 = ort.__version__ == "1.32.0"
V131 = ort.__version__ == "1.31.1"


# ---------------------------------------------------------------- helpers


def _verdict(model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None) -> str:
    """A real CPU session's verdict on ``model`` (and one run when ``feeds`` are given)."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return probe.classify(str(exc))
    if feeds is not None:
        sess.run(None, feeds)
    return probe.VERDICT_KERNEL


def _model(node: onnx.NodeProto, inputs: list[tuple[str, int, list[int]]], outputs: list[tuple[str, int]]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)], ir_version=10
    )


_NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def _feeds(inputs: list[tuple[str, int, list[int]]]) -> dict[str, np.ndarray] | None:
    """Random feeds, or None when a dtype has no numpy type here (bf16: create only)."""
    rng = np.random.default_rng(0)
    out = {}
    for name, elem, shape in inputs:
        if elem == TensorProto.INT64:
            out[name] = np.zeros(shape, np.int64)
        elif elem in _NP:
            out[name] = rng.standard_normal(shape).astype(_NP[elem])
        else:
            return None
    return out


def _rotary(t: int) -> tuple[onnx.ModelProto, list[tuple[str, int, list[int]]]]:
    ins = [("x", t, [1, 2, 4, 8]), ("pos", TensorProto.INT64, [1, 4]), ("cos", t, [16, 4]), ("sin", t, [16, 4])]
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft")
    return _model(node, ins, [("y", t)]), ins


def _gated_rms(t: int) -> tuple[onnx.ModelProto, list[tuple[str, int, list[int]]]]:
    ins = [("x", t, [2, 8]), ("scale", t, [8]), ("gate", t, [2, 8])]
    node = helper.make_node("GatedRMSNorm", ["x", "scale", "gate"], ["y"], domain="com.microsoft")
    return _model(node, ins, [("y", t)]), ins


def _linear_attention(t: int) -> tuple[onnx.ModelProto, list[tuple[str, int, list[int]]]]:
    ins = [("q", t, [1, 3, 16]), ("k", t, [1, 3, 16]), ("v", t, [1, 3, 16])]
    node = helper.make_node(
        "LinearAttention", ["q", "k", "v"], ["y", "state"], domain="com.microsoft", q_num_heads=2, kv_num_heads=2,
        update_rule="linear",
    )
    return _model(node, ins, [("y", t), ("state", t)]), ins


def _dynamic_sparse_attention(t: int) -> tuple[onnx.ModelProto, list[tuple[str, int, list[int]]]]:
    ins = [("qkv", t, [1, 1, 96]), ("sel", TensorProto.INT32, [1, 2, 1, 4]), ("cnt", TensorProto.INT32, [1, 2, 1]),
           ("seqlens", TensorProto.INT32, [1]), ("total", TensorProto.INT32, [1])]
    node = helper.make_node(
        "DynamicSparseAttention", ["qkv", "", "", "", "", "", "", "sel", "cnt", "seqlens", "total"],
        ["y"], domain="com.microsoft", num_heads=2, kv_num_heads=2,
    )
    return _model(node, ins, [("y", t)]), ins


def _matmul(t: int) -> tuple[onnx.ModelProto, list[tuple[str, int, list[int]]]]:
    ins = [("a", t, [2, 4]), ("b", t, [4, 3])]
    return _model(helper.make_node("MatMul", ["a", "b"], ["y"]), ins, [("y", t)]), ins


HAND_BUILT: list[tuple[str, str, Callable[[int], tuple[onnx.ModelProto, list[tuple[str, int, list[int]]]]]]] = [
    ("com.microsoft", "RotaryEmbedding", _rotary),
    ("com.microsoft", "GatedRMSNorm", _gated_rms),
    ("com.microsoft", "LinearAttention", _linear_attention),
    ("com.microsoft", "DynamicSparseAttention", _dynamic_sparse_attention),
    ("", "MatMul", _matmul),
]
DTYPES = [("float", TensorProto.FLOAT), ("float16", TensorProto.FLOAT16), ("bfloat16", TensorProto.BFLOAT16)]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache directory and no in-process table."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(ort_kernels.CACHE_ENV, str(cache))
    ort_kernels.clear_memo()
    yield cache
    ort_kernels.clear_memo()


class _Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.sessions = 0


@pytest.fixture
def counted_probe(monkeypatch: pytest.MonkeyPatch) -> _Counter:
    """Count real probe runs and the session attempts they made."""
    counter = _Counter()
    real = probe.run_probe

    def run(*args: object, **kwargs: object) -> list[probe.Outcome]:
        counter.calls += 1
        outcomes = real(*args, **kwargs)  # type: ignore[arg-type]
        counter.sessions += sum(o.attempts for o in outcomes)
        return outcomes

    monkeypatch.setattr(probe, "run_probe", run)
    return counter


def _tiny_table(version: str = "1.32.0", identity: str = "x") -> CpuKernels:
    return CpuKernels(version, identity, {("com.microsoft", "QMoE"): OpKernels("output:0", {"float": "kernel"}, ("float",), {})})


@pytest.fixture
def fake_build(monkeypatch: pytest.MonkeyPatch) -> _Counter:
    """Replace the (real, ~1 s) probe by a tiny table for the cache-logic tests; count builds."""
    counter = _Counter()

    def build(version: str, identity: str) -> CpuKernels:
        counter.calls += 1
        return _tiny_table(version, identity)

    monkeypatch.setattr(ort_kernels, "build_table", build)
    return counter


# ---------------------------------------------------------------- agreement with real sessions


@pytest.mark.parametrize(("domain", "op", "make"), HAND_BUILT, ids=[h[1] for h in HAND_BUILT])
@pytest.mark.parametrize(("dtype", "elem"), DTYPES, ids=[d[0] for d in DTYPES])
def test_probe_agrees_with_a_real_node_session(domain: str, op: str, make: Callable[[int], tuple[onnx.ModelProto, list[tuple[str, int, list[int]]]]], dtype: str, elem: int) -> None:
    model, inputs = make(elem)
    real = _verdict(model, _feeds(inputs))
    assert real in {probe.VERDICT_KERNEL, probe.VERDICT_CTOR, probe.VERDICT_NONE}, "the test's own graph is invalid"
    assert cpu_kernels().has(op, domain, dtype) is (real != probe.VERDICT_NONE), (op, dtype, real)


def _session_error(path: Path) -> str | None:
    """ORT's text when a CPU session of ``path`` cannot be created, else None."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return str(exc)
    return None


def test_every_contrib_node_of_a_cpu_package_has_a_kernel(tiny_cpu_package: Path) -> None:
    kernels = cpu_kernels()
    for path in sorted(tiny_cpu_package.rglob("*.onnx")):
        error = _session_error(path)
        if error is not None:  # a graph this ORT cannot create says nothing about kernels
            assert probe.classify(error) != probe.VERDICT_NONE or not V132, (path, error)
            continue
        nodes = [n for n in ir.load(path).graph.all_nodes() if n.domain == "com.microsoft"]
        assert nodes, path
        assert kernels.missing(nodes) == [], path
        assert all(kernels.has_node(n) for n in nodes)


def test_the_op_a_failed_session_names_has_no_kernel(tiny_faithful_package: Path) -> None:
    kernels = cpu_kernels()
    named = set()
    for path in sorted(tiny_faithful_package.rglob("*.onnx")):
        text = _session_error(path)
        if text is None or probe.classify(text) != probe.VERDICT_NONE:
            continue
        op = text.split("implementation for ")[-1].split("(")[0] if "implementation for " in text else text.split("com.microsoft.")[1].split("(")[0]
        named.add(op)
        nodes = [n for n in ir.load(path).graph.all_nodes() if n.op_type == op]
        assert nodes and not any(kernels.has_node(n) for n in nodes), op
        assert op in {m.op for m in kernels.missing(nodes)}
    # 1.31.1 refuses the faithful graphs at the schema (fp16 GatedDeltaNet decay) before any kernel lookup.
    assert named or not V132, "the faithful package should have a graph without CPU kernels"


# ---------------------------------------------------------------- the cache


@pytest.mark.slow
def test_probe_once_then_the_cache(isolated: Path, counted_probe: _Counter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = cpu_kernels()
    sessions = counted_probe.sessions
    assert counted_probe.calls == 1 and sessions > 300
    files = list(isolated.iterdir())
    assert [f.name for f in files] == [f"ort-cpu-kernels-{ort.__version__}-{first.identity}.json"]
    text = files[0].read_text()
    assert text == first.to_json() and text.endswith("}\n")
    assert json.loads(text)["onnxruntime"]["version"] == ort.__version__
    assert cpu_kernels() is first  # in-process
    ort_kernels.clear_memo()
    second = cpu_kernels()
    assert counted_probe.calls == 1 and counted_probe.sessions == sessions
    assert second == first and second.to_json() == text  # from the file: no session at all
    # A fresh probe elsewhere writes the same bytes: the table is deterministic.
    monkeypatch.setenv(ort_kernels.CACHE_ENV, str(tmp_path / "other"))
    ort_kernels.clear_memo()
    assert cpu_kernels().to_json() == text and counted_probe.calls == 2


def test_another_version_or_identity_is_probed_again(isolated: Path, fake_build: _Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_kernels()
    assert fake_build.calls == 1
    version, identity = ort_kernels.installed_identity()
    for other in [(version, "0" * 16), ("9.9.9", identity)]:
        monkeypatch.setattr(ort_kernels, "installed_identity", lambda o=other: o)
        ort_kernels.clear_memo()
        table = cpu_kernels()
        assert (table.ort_version, table.identity) == other
    assert fake_build.calls == 3 and len(list(isolated.iterdir())) == 3


def test_a_file_of_another_version_under_this_name_is_not_trusted(isolated: Path, fake_build: _Counter) -> None:
    version, identity = ort_kernels.installed_identity()
    path = isolated / f"ort-cpu-kernels-{version}-{identity}.json"
    isolated.mkdir()
    path.write_text(_tiny_table("1.0.0", identity).to_json())
    table = cpu_kernels()
    assert fake_build.calls == 1 and table.ort_version == version
    assert json.loads(path.read_text())["onnxruntime"]["version"] == version


def _doc(identity: str, version: str) -> dict[str, object]:
    return json.loads(_tiny_table(version, identity).to_json())


CORRUPTIONS: list[tuple[str, Callable[[Path, str, str], None]]] = [
    ("truncated", lambda p, i, v: p.write_text(_tiny_table(v, i).to_json()[:50])),
    ("not json", lambda p, i, v: p.write_bytes(b"\x00\xffgarbage")),
    ("empty", lambda p, i, v: p.write_text("")),
    ("a list", lambda p, i, v: p.write_text("[]")),
    ("duplicate key", lambda p, i, v: p.write_text(_tiny_table(v, i).to_json().replace('"format"', '"ops": {}, "format"', 1))),
    ("NaN", lambda p, i, v: p.write_text(_tiny_table(v, i).to_json().replace('"probe_revision": 1', '"probe_revision": NaN'))),
    ("older probe revision", lambda p, i, v: p.write_text(json.dumps({**_doc(i, v), "probe_revision": 0}))),
    ("other format", lambda p, i, v: p.write_text(json.dumps({**_doc(i, v), "format": "x"}))),
    ("extra key", lambda p, i, v: p.write_text(json.dumps({**_doc(i, v), "extra": 1}))),
    ("unknown verdict", lambda p, i, v: p.write_text(_tiny_table(v, i).to_json().replace('"kernel"', '"maybe"'))),
    ("bad slot", lambda p, i, v: p.write_text(_tiny_table(v, i).to_json().replace('"output:0"', '"side:x"'))),
    ("no ops", lambda p, i, v: p.write_text(json.dumps({**_doc(i, v), "ops": {}}))),
    ("oversized", lambda p, i, v: p.write_bytes(b" " * (ort_kernels.CACHE_LIMIT + 1))),
    ("a directory", lambda p, i, v: p.mkdir()),
    ("a FIFO", lambda p, i, v: os.mkfifo(p)),
    ("a symlink to a valid table", lambda p, i, v: (p.with_name("real.json").write_text(_tiny_table(v, i).to_json()), p.symlink_to("real.json"))),
]


@pytest.mark.parametrize("corrupt", [c[1] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupt_cache_is_probed_again_and_replaced(isolated: Path, fake_build: _Counter, corrupt: Callable[[Path, str, str], None], caplog: pytest.LogCaptureFixture) -> None:
    version, identity = ort_kernels.installed_identity()
    path = isolated / f"ort-cpu-kernels-{version}-{identity}.json"
    isolated.mkdir()
    corrupt(path, identity, version)
    is_dir = path.is_dir() and not path.is_symlink()
    table = cpu_kernels()
    assert fake_build.calls == 1 and table == _tiny_table(version, identity)
    if not is_dir:  # a directory in the way cannot be replaced: the table is still returned
        assert path.is_file() and not path.is_symlink() and path.read_text() == table.to_json()
        ort_kernels.clear_memo()
        assert cpu_kernels() == table and fake_build.calls == 1
    assert "CPU-kernel cache" in caplog.text
    assert not [p for p in isolated.iterdir() if p.name.endswith((".tmp", ".partial"))]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(isolated: Path, fake_build: _Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    version, identity = ort_kernels.installed_identity()
    path = isolated / f"ort-cpu-kernels-{version}-{identity}.json"
    isolated.mkdir()
    path.write_text("old bytes")

    def boom(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ort_kernels.os, "replace", boom)
    assert cpu_kernels() == _tiny_table(version, identity)
    assert path.read_text() == "old bytes"
    assert sorted(p.name for p in isolated.iterdir()) == [path.name]


def test_an_unwritable_cache_still_yields_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_build: _Counter, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(ort_kernels.CACHE_ENV, str(blocker / "q38"))
    ort_kernels.clear_memo()
    try:
        assert cpu_kernels() == _tiny_table(*ort_kernels.installed_identity())
    finally:
        ort_kernels.clear_memo()
    assert "not written" in caplog.text


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ort_kernels.CACHE_ENV, str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert ort_kernels.cache_dir() == tmp_path / "a"
    monkeypatch.delenv(ort_kernels.CACHE_ENV)
    assert ort_kernels.cache_dir() == tmp_path / "x" / "q38"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert ort_kernels.cache_dir() == tmp_path / "h" / ".cache" / "q38"


def test_another_version_comes_from_its_cache_or_fails_in_one_line(isolated: Path, fake_build: _Counter) -> None:
    with pytest.raises(KernelKnowledgeError, match=r"^no CPU-kernel table for onnxruntime 0\.1\.2 in .* run q38 once with onnxruntime 0\.1\.2 installed$"):
        cpu_kernels("0.1.2")
    isolated.mkdir()
    (isolated / "ort-cpu-kernels-0.1.2-abc.json").write_text(_tiny_table("0.1.2", "abc").to_json())
    assert cpu_kernels("0.1.2") == _tiny_table("0.1.2", "abc")
    assert fake_build.calls == 0


# ---------------------------------------------------------------- the facts


CPU_1_32 = ["LinearAttentionGate", "LinearAttention", "MRotaryEmbedding", "EngramGate", "NGramHashMapping",
            "GatherBlockQuantized", "SkipSimplifiedLayerNormalization", "GatedRMSNorm", "GroupQueryAttention",
            "QMoE", "MoE", "CausalConvWithState", "GatedDeltaNet", "HyperConnectionPreMix",
            "HyperConnectionPostMix", "BranchwiseRMSNorm", "GatedAdd", "RotaryEmbedding", "MatMulNBits", "ScaledSiLU"]
NO_CPU = ["SparseAttentionIndexer", "DynamicSparseAttention", "PagedAttention", "PackedSparseAttentionIndexer",
          "SparsePagedAttention", "HyperConnectionLowRankMix", "RMSNormRotary", "MatMulBlockQuantizedFp8Weight"]


@pytest.mark.skipif(not V132, reason="facts of onnxruntime 1.32.0")
def test_facts_of_1_32_0() -> None:
    k = cpu_kernels()
    assert [op for op in CPU_1_32 if not k.has(op)] == []
    assert [op for op in NO_CPU if k.has(op)] == []
    for op in ["GatedDeltaNet", "GatedRMSNorm", "SkipSimplifiedLayerNormalization", "HyperConnectionPreMix", "QMoE"]:
        assert k.has(op, dtype="bfloat16"), op
    for op in ["LinearAttention", "MoE", "GroupQueryAttention", "RotaryEmbedding", "MatMulNBits", "CausalConvWithState"]:
        assert not k.has(op, dtype="bfloat16") and k.has(op, dtype="float16") and k.has(op, dtype="float"), op
    assert k.has("SimplifiedLayerNormalization", "")
    # Every probed case of these ops was decided by a session, not by the registry fallback.
    for op in CPU_1_32 + NO_CPU[:5]:
        verdicts = k.ops[("com.microsoft", op)].probed
        assert verdicts and probe.VERDICT_UNDETERMINED not in verdicts.values(), (op, verdicts)


@pytest.mark.skipif(not V131, reason="facts of onnxruntime 1.31.1")
def test_facts_of_1_31_1() -> None:
    k = cpu_kernels()
    assert not k.has("GatedDeltaNet")  # schema, no CPU kernel
    assert k.has("GatedRMSNorm", dtype="float16") and not k.has("GatedRMSNorm", dtype="bfloat16")
    assert k.has("QMoE", dtype="float16") and not k.has("QMoE", dtype="bfloat16")
    for op in ["HyperConnectionLowRankMix", "RMSNormRotary", "PackedSparseAttentionIndexerMerge"]:
        assert ("com.microsoft", op) not in k.ops and not k.has(op)  # no schema at all
    for op in ["LinearAttention", "CausalConvWithState", "SkipSimplifiedLayerNormalization", "GroupQueryAttention", "MoE"]:
        assert k.has(op), op
    for op in ["DynamicSparseAttention", "SparseAttentionIndexer"]:
        assert not k.has(op), op


def test_dtype_spellings_and_unknown_ops() -> None:
    k = cpu_kernels()
    spellings = ["float16", "tensor(float16)", TensorProto.FLOAT16, ir.DataType.FLOAT16]
    assert {k.has("LinearAttention", dtype=s) for s in spellings} == {True}
    assert {k.has("LinearAttention", dtype=s) for s in ["float32", "float", TensorProto.FLOAT, ir.DataType.FLOAT]} == {True}
    assert not k.has("NoSuchOp") and not k.has("FoldMid2", "qwen.fold") and not k.has("LinearAttention", "")
    assert k.has("MatMul", "ai.onnx") == k.has("MatMul", "") is True


def test_node_dtype_reads_the_compute_slot() -> None:
    k = cpu_kernels()
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.BFLOAT16))
    node = ir.Node("com.microsoft", "LinearAttention", [x, x, x], num_outputs=2)
    assert k.slot("LinearAttention") == ("output", 0)
    assert k.node_dtype(node) is None  # the output has no type yet
    node.outputs[0].dtype = ir.DataType.BFLOAT16
    assert k.node_dtype(node) == "bfloat16"
    assert k.has_node(node) is k.has("LinearAttention", dtype="bfloat16")
    missing = k.missing([node])
    if not k.has("LinearAttention", dtype="bfloat16"):
        assert [(m.op, m.dtype, m.describe()) for m in missing] == [("LinearAttention", "bfloat16", "LinearAttention for bfloat16")]
    untyped = ir.Node("com.microsoft", "DynamicSparseAttention", [x], num_outputs=1)
    assert [m.describe() for m in k.missing([untyped])] == ["DynamicSparseAttention"]
    assert k.missing([ir.Node("", "MatMul", [x, x], num_outputs=1)]) == []  # standard ops: left to the session


# ---------------------------------------------------------------- a bad probe is not "no kernel"


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        (None, "kernel"),
        ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for QMoE(1) node with name 'moe0'", "none"),
        ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Failed to find kernel for com.microsoft.QMoE(1) (node:'' ep:'CPUExecutionProvider'). However the types are incompatible.", "none"),
        ("[ONNXRuntimeError] : 1 : FAIL : Exception during initialization: moe_quantization_cpu.cc:997 CPU bfloat16 QMoE requires a shared layout.", "ctor"),
        ("[ONNXRuntimeError] : 1 : FAIL : Node () Op (GatedDeltaNet) [ShapeInferenceError] GatedDeltaNet: initial_state is required for packed QKV", "bad"),
        ("[ONNXRuntimeError] : 1 : FAIL : Type Error: Type (tensor(float16)) of output arg (out0) of node () does not match expected type (tensor(float)).", "bad"),
        ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : EPContext node generated by '(unknown)' is not compatible with any execution provider added to the session.", "bad"),
        ("[ONNXRuntimeError] : 1 : FAIL : Fatal error: com.microsoft:RMSNormRotary(-1) is not a registered function/op", "bad"),
    ],
)
def test_verdict_texts(text: str | None, verdict: str) -> None:
    assert probe.classify(text) == verdict


def test_an_op_whose_graph_cannot_be_built_is_undetermined_never_none() -> None:
    cases = [c for c in probe.all_cases() if c.op == "BeamSearch"]  # needs GRAPH attributes
    assert cases
    outcomes = probe.run_probe(cases, workers=1)
    assert {o.verdict for o in outcomes} == {probe.VERDICT_UNDETERMINED}
    k = cpu_kernels()
    # ... and is answered from ORT's registered CPU kernels instead.
    assert k.has("BeamSearch") is bool(k.ops[("com.microsoft", "BeamSearch")].registered)


_CRASHING_CHILD = r"""
import json, os, sys
cases = json.loads(sys.stdin.read())
for key, first in cases:
    for index in range(first, 3):
        print(json.dumps(["try", key, index]), flush=True)
        if index == 0 and key.endswith("crash"):
            os.abort()
        if index == 1:
            print(json.dumps(["end", key, index + 1, "kernel", ""]), flush=True)
            break
"""


def test_a_child_that_dies_mid_attempt_is_restarted_on_the_next_attempt(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CRASHING_CHILD)
    cases = [probe.Case("d", "a", "crash"), probe.Case("d", "b", "ok"), probe.Case("d", "c", "crash")]
    outcomes = probe.run_probe(cases, workers=1, command=[sys.executable, str(script)])
    assert [(o.case.op, o.verdict, o.attempts) for o in outcomes] == [("a", "kernel", 2), ("b", "kernel", 2), ("c", "kernel", 2)]


def test_a_child_that_fails_outside_an_attempt_is_one_error(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text("import sys; sys.stderr.write('boom\\n'); sys.exit(3)\n")
    with pytest.raises(probe.ProbeError, match=r"^CPU kernel probe child failed \(exit 3\): boom$"):
        probe.run_probe([probe.Case("d", "a", "x")], workers=1, command=[sys.executable, str(script)])


@pytest.mark.slow
def test_a_session_that_aborts_the_probe_process_is_undetermined_never_none() -> None:
    """QLinearLeakyRelu without its optional inputs aborts ORT 1.32.0's process (its kernel reads
    a missing input). Started at that attempt (its last), the probe counts the crash as a bad
    attempt: the case is undetermined, not "none"; from the start the kernel is found."""
    case = next(c for c in probe.all_cases() if c.op == "QLinearLeakyRelu" and c.dtype == "tensor(uint8)")
    argv = [sys.executable, probe.__file__]
    worker = probe._Worker(argv, [case], {case.key: 1})  # attempt 1: required inputs only
    done = worker.finish()
    crashed = not done
    while worker.remaining:
        worker = probe._Worker(argv, worker.remaining, worker.resume)
        done = worker.finish()
    assert done[case.key].verdict != probe.VERDICT_NONE
    if V132:
        assert crashed and done[case.key].verdict == probe.VERDICT_UNDETERMINED
        assert done[case.key].reason == "an attempt crashed the probe process"
    assert probe.run_probe([case], workers=1)[0].verdict == probe.VERDICT_KERNEL


# ---------------------------------------------------------------- q38 check --ort uses the table


@pytest.mark.skipif(not V132, reason="1.31.1 refuses the faithful graphs at the schema first")
def test_check_skips_a_graph_without_kernels_without_a_session(tiny_faithful_package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contracts.runner import check_package

    created: list[str] = []
    real = ort.InferenceSession

    def session(path: str, *args: object, **kwargs: object) -> object:
        created.append(Path(path).name)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ort, "InferenceSession", session)
    report = check_package(tiny_faithful_package, ort_sessions=True)
    skipped = {s.graph: s.message for s in report.sessions if s.status == "skipped"}
    assert skipped["target"].startswith("op SparseAttentionIndexer has no CPU kernel (nor ")
    assert "DynamicSparseAttention" in skipped["target"]
    assert "model.onnx" not in created and created  # the head is still created


def test_the_skip_line_names_the_op_and_the_dtype() -> None:
    from contracts.runner import _no_kernel_message
    from q38.ort_kernels import MissingKernel

    dsa = MissingKernel("n1", "com.microsoft", "DynamicSparseAttention", "float16", False)
    la = MissingKernel("n2", "com.microsoft", "LinearAttention", "bfloat16", True)
    assert _no_kernel_message([dsa]) == "op DynamicSparseAttention has no CPU kernel"
    assert _no_kernel_message([la, dsa, dsa]) == "op LinearAttention has no CPU kernel for bfloat16 (nor DynamicSparseAttention)"
