"""The committed real fixtures (tests/fixtures/real): intact, what they claim, and runnable.

No torch here: the packages were written by the real onnxruntime-genai 0.18.0 builder
(``make_real_fixtures.py``, ``nox -s fixtures`` regenerates them byte for byte); these tests read
them with onnx / onnxruntime / onnxruntime-genai only.

* Every file matches MANIFEST.sha256 and the manifest lists every file.
* Each fixture is what its name claims, read from its graphs: QMoE with 14 inputs and
  ``weights_prepacked`` absent (cpu) vs 1 (cuda prepacked); the default LinearAttention form vs
  the GatedDeltaNet form; PagedAttention; a separate ``mtp.onnx`` whose shared initializers
  resolve in both graphs.
* The int4 ``-e cpu`` graphs create real ORT CPU sessions; every contrib node of every fixture
  agrees with the probed CPU-kernel table (q38.ort_kernels) both ways.
* onnxruntime-genai 0.18.0 generates from int4-cpu the 12 greedy tokens og itself recorded.
"""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import helper

from q38 import ort_kernel_probe as probe
from q38.ort_kernels import cpu_kernels

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
MANIFEST = REAL / "MANIFEST.sha256"
V132 = ort.__version__ == "1.32.0"


def _manifest() -> dict[str, str]:
    out = {}
    for line in MANIFEST.read_text().splitlines():
        digest, rel = line.split("  ", 1)
        out[rel] = digest
    return out


def _packages() -> list[str]:
    return sorted({rel.split("/", 1)[0] for rel in _manifest() if "/" in rel})


def _graph(name: str, filename: str = "model.onnx") -> onnx.ModelProto:
    return onnx.load(REAL / name / filename, load_external_data=False)


def _ops(model: onnx.ModelProto) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((n.domain, n.op_type) for n in model.graph.node)


def _nodes(model: onnx.ModelProto, op: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == op]


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _config(name: str) -> dict[str, Any]:
    return json.loads((REAL / name / "genai_config.json").read_text())


MS = "com.microsoft"


def test_every_file_matches_the_manifest_and_is_listed() -> None:
    listed = _manifest()
    on_disk = {  # everything in a package folder, and the greedy records
        p.relative_to(REAL).as_posix()
        for p in REAL.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and (p.parent != REAL or p.name.startswith("greedy-"))
    }
    assert on_disk == set(listed)
    bad = [rel for rel, digest in listed.items() if hashlib.sha256((REAL / rel).read_bytes()).hexdigest() != digest]
    assert bad == []


def test_the_fixture_set() -> None:
    assert _packages() == ["fp16-cuda-gdn", "fp16-cuda-paged", "int4-cpu", "int4-cpu-mtp", "int4-cuda-prepacked"]
    for name in _packages():
        files = {p.name for p in (REAL / name).iterdir()}
        assert {"genai_config.json", "model.onnx", "model.onnx.data", "tokenizer.json", "tokenizer_config.json"} <= files
        assert _config(name)["model"]["type"] == "qwen3_5_moe_text"


def _qmoe(name: str) -> list[onnx.NodeProto]:
    nodes = _nodes(_graph(name), "QMoE")
    assert len(nodes) == 4, name  # one routed MoE per layer
    for n in nodes:
        assert len(n.input) == 14, (name, n.name)  # no router_weights slot
        a = _attrs(n)
        assert (a["expert_weight_bits"], a["block_size"], a["swiglu_fusion"], a["k"]) == (4, 32, 1, 2)
        assert "quant_type" not in a
    return nodes


def test_int4_cpu_is_the_default_linear_attention_form() -> None:
    g = _graph("int4-cpu")
    ops = _ops(g)
    assert [ops[(MS, op)] for op in ("LinearAttentionGate", "LinearAttention", "CausalConvWithState", "GatedRMSNorm")] == [3, 3, 3, 3]
    assert ops[(MS, "GroupQueryAttention")] == 1 and ops[(MS, "MRotaryEmbedding")] == 2
    assert ops[(MS, "GatedDeltaNet")] == 0 and ops[(MS, "PagedAttention")] == 0
    assert all("weights_prepacked" not in _attrs(n) for n in _qmoe("int4-cpu"))
    for i, conv in enumerate(_nodes(g, "CausalConvWithState")):
        assert conv.output[1] == f"present.{i}.conv"
        assert _attrs(conv) == {"ndim": 1, "activation": b"silu", "state_window": 0}
    for la in _nodes(g, "LinearAttention"):
        assert _attrs(la)["update_rule"] == b"gated_delta"
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in g.graph.input}
    assert dims["position_ids"] == [3, "batch_size", "sequence_length"]  # MRoPE
    assert dims["past_key_values.3.key"][-1] == "kv_cache_dim"


def test_int4_cuda_prepacked_sets_weights_prepacked() -> None:
    assert {_attrs(n).get("weights_prepacked") for n in _qmoe("int4-cuda-prepacked")} == {1}
    assert _config("int4-cuda-prepacked")["model"]["decoder"]["session_options"]["provider_options"][0].keys() == {"cuda"}


def test_fp16_cuda_gdn_is_the_gated_delta_net_form() -> None:
    g = _graph("fp16-cuda-gdn")
    ops = _ops(g)
    assert ops[(MS, "GatedDeltaNet")] == 3 and ops[(MS, "LinearAttention")] == 0 and ops[(MS, "LinearAttentionGate")] == 0
    assert ops[(MS, "QMoE")] == 0 and ops[(MS, "MoE")] == 4  # fp16 exports use plain MoE
    for n in _nodes(g, "GatedDeltaNet"):
        a = _attrs(n)
        assert (a["gate_activation"], a["beta_activation"], a["qk_l2_norm"]) == (b"qwen", b"sigmoid", 1)
        # 0.18.0's Qwen3.5 builder: separate q/k/v, no cu_seqlens (dense), decay/beta Cast to fp32.
        assert len(n.input) == 9 and all(n.input[:3]) and n.input[3] == ""
        assert n.input[4].endswith("decay_fp32/Cast/output_0") and n.input[5].endswith("beta_fp32/Cast/output_0")
        assert n.input[6].startswith("past.") and n.input[6].endswith(".recurrent")


def test_fp16_cuda_paged_uses_paged_attention() -> None:
    g = _graph("fp16-cuda-paged")
    ops = _ops(g)
    assert ops[(MS, "PagedAttention")] == 1 and ops[(MS, "GroupQueryAttention")] == 0
    assert ops[(MS, "VarlenCausalConvWithState")] == 3 and ops[(MS, "GatedDeltaNet")] == 3
    names = {i.name for i in g.graph.input}
    assert {"block_table", "cumulative_sequence_lengths", "past_sequence_lengths"} <= names
    assert "attention_mask" not in names
    for n in _nodes(g, "GatedDeltaNet"):
        assert n.input[3] == "cumulative_sequence_lengths"
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in g.graph.input}
    assert len(dims["input_ids"]) == 1  # one packed token axis


def test_int4_cpu_mtp_has_a_separate_mtp_graph_with_shared_initializers() -> None:
    cfg = _config("int4-cpu-mtp")["model"]
    assert cfg["mtp"]["filename"] == "mtp.onnx" and (REAL / "int4-cpu-mtp" / "mtp.onnx").is_file()
    target, mtp = _graph("int4-cpu-mtp"), _graph("int4-cpu-mtp", "mtp.onnx")
    assert "hidden_states" in {o.name for o in target.graph.output}
    assert "hidden_states" in {i.name for i in mtp.graph.input}
    assert _ops(mtp)[(MS, "QMoE")] == 1
    for section, graph in (("decoder", target), ("mtp", mtp)):
        shared = cfg[section]["shared_initializers"]
        assert shared, section
        inits = {t.name: t for t in graph.graph.initializer}
        for entry in shared:
            tensor = inits[entry["name"]]
            assert tensor.data_type == entry["data_type"] and list(tensor.dims) == entry["shape"]
            location = {e.key: e.value for e in tensor.external_data}
            assert location["location"] == entry["data_file"]
            assert (int(location["offset"]), int(location["length"])) == (int(entry["offset"]), int(entry["length"]))
            assert int(entry["offset"]) + int(entry["length"]) <= (REAL / "int4-cpu-mtp" / entry["data_file"]).stat().st_size


@pytest.mark.parametrize(("name", "filename"), [("int4-cpu", "model.onnx"), ("int4-cpu-mtp", "model.onnx"), ("int4-cpu-mtp", "mtp.onnx")])
def test_int4_cpu_graphs_create_real_cpu_sessions(name: str, filename: str) -> None:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(str(REAL / name / filename), so, providers=["CPUExecutionProvider"])
    assert "logits" in {o.name for o in sess.get_outputs()}


@pytest.mark.parametrize("name", ["int4-cpu", "int4-cpu-mtp", "int4-cuda-prepacked", "fp16-cuda-gdn", "fp16-cuda-paged"])
def test_the_kernel_table_agrees_with_a_real_session_of_each_fixture(name: str) -> None:
    kernels = cpu_kernels()
    for path in sorted((REAL / name).glob("*.onnx")):
        nodes = list(ir.load(path).graph.all_nodes())
        missing = kernels.missing(nodes)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        try:
            ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            error = None
        except Exception as exc:
            error = str(exc)
        if error is None:
            assert missing == [], (path.name, missing)
        elif probe.classify(error) == probe.VERDICT_NONE:
            assert missing and any(m.op in error for m in missing), (path.name, error, missing)


def test_onnxruntime_genai_generates_the_recorded_greedy_tokens() -> None:
    og = pytest.importorskip("onnxruntime_genai")
    recorded = json.loads((REAL / "greedy-int4-cpu.json").read_text())
    assert len(recorded["tokens"]) == 12 and recorded["produced_by"].startswith("onnxruntime-genai 0.18.0")
    config = og.Config(str(REAL / "int4-cpu"))
    config.clear_providers()
    model = og.Model(config)
    params = og.GeneratorParams(model)
    length = len(recorded["prompt"]) + 12
    params.set_search_options(max_length=length, min_length=length, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(recorded["prompt"])
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    assert tokens == recorded["tokens"]


def test_check_ort_skips_the_paged_cuda_fixture_naming_the_op(capsys: pytest.CaptureFixture[str]) -> None:
    from q38.cli import main

    assert main(["check", str(REAL / "fp16-cuda-paged"), "--ort"]) == 0
    out = capsys.readouterr().out
    expected = {  # the installed ORT's own kernels decide (1.31.1 has no Varlen conv / GatedDeltaNet)
        "1.32.0": "op PagedAttention has no CPU kernel",
        "1.31.1": "op VarlenCausalConvWithState has no CPU kernel (nor GatedDeltaNet, PagedAttention)",
    }[ort.__version__]
    assert f"session decoder: SKIPPED: {expected}\n" in out
    assert main(["check", str(REAL / "int4-cpu-mtp"), "--ort"]) == 0
    out = capsys.readouterr().out
    assert "session decoder: ok\n" in out and "session mtp: ok\n" in out


def _generator() -> Any:
    import importlib.util
    import sys

    if "make_real_fixtures" in sys.modules:
        return sys.modules["make_real_fixtures"]
    spec = importlib.util.spec_from_file_location("make_real_fixtures", REAL / "make_real_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_real_fixtures"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # imports no torch at module level
    return module


def test_the_generators_manifest_is_the_committed_one() -> None:
    assert _generator().manifest_text(REAL) == MANIFEST.read_text()


def test_compare_lists_every_differing_file(tmp_path: Path) -> None:
    gen = _generator()
    copy = tmp_path / "real"
    for rel in _manifest():
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_bytes((REAL / rel).read_bytes())
    assert gen.compare(REAL, copy) == []
    data = bytearray((copy / "int4-cpu" / "model.onnx").read_bytes())
    data[-1] ^= 1
    (copy / "int4-cpu" / "model.onnx").write_bytes(bytes(data))
    (copy / "fp16-cuda-gdn" / "tokenizer.json").unlink()
    (copy / "int4-cpu-mtp" / "extra.bin").write_bytes(b"x")
    assert gen.compare(REAL, copy) == ["fp16-cuda-gdn/tokenizer.json", "int4-cpu-mtp/extra.bin", "int4-cpu/model.onnx"]
    assert gen.main(["compare", str(REAL), str(copy)]) == 1
