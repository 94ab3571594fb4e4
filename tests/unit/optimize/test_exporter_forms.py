"""Both exporters' graph forms through every pass: a fusion where one applies, a reason otherwise.

The builder forms are built from shared/reference/real-exporter-forms.md §1 (support.optimize_graphs
``hc_builder_model``, ``conv_state_output_model``, ``mrope_model``); the research forms are the
synthetic package's. Invariants guarded:

* the packed hyper-connection mix (ONE MatMul [down|inject] + Split, either column order, sizes
  as an input or an attribute) fuses into HyperConnectionLowRankMix with the previous PostMix as
  its prologue, and the final mixer (no combine: inject columns unused) fuses too, with numerical
  parity against the unfused graph on ORT CPU (ORT_DISABLE_ALL) through the numpy references;
* a final mixer with no inject projection at all fuses with a zero inject weight; the research
  final-norm mixer (per-branch Sigmoid(MatMul) gates, no low-rank projection) is declined with its
  reason;
* every candidate anchor of every pass gets exactly one outcome (fused or a specific reason, never
  the generic "not recognised") on both forms: every PreMix, every CausalConvWithState, every
  shared-expert GatedAdd, every logits projection, every rotary (Concat chains and MRotaryEmbedding).
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
from support.optimize_helpers import apply, ops, package_reader

from q38.optimize import PIPELINE, Outcome, optimize_model
from q38.optimize._common import UNRECOGNISED_REASON
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass

MS = "com.microsoft"


# -- one outcome per anchor, per pass, both forms ------------------------------------------------------
def _candidates(graph: ir.Graph, pass_name: str) -> list[str]:
    """The nodes each pass must give an outcome, counted independently of the pass's own anchors."""
    nodes = list(graph)

    def ms(n: ir.Node, op: str) -> bool:
        return n.domain == MS and n.op_type == op

    if pass_name == "hyper_connection":
        return [n.name for n in nodes if ms(n, "HyperConnectionPreMix")]
    if pass_name == "causal_conv_state":
        return [n.name for n in nodes if ms(n, "CausalConvWithState")]
    if pass_name == "shared_expert":  # the SiLU's gate projection: MatMul g with Mul(g, Sigmoid(g))
        return [n.name for n in nodes if n.op_type == "MatMul" and any(
            u.node.op_type == "Sigmoid" and any(v.node.op_type == "Mul" and n.outputs[0] in v.node.inputs
                                                for v in u.node.outputs[0].uses())
            for u in n.outputs[0].uses())]
    if pass_name == "fp8_head":
        return [n.name for n in nodes if n.op_type in ("MatMul", "MatMulNBits") and n.outputs[0].is_graph_output()
                and "logits" in (n.outputs[0].name or "")]
    return [n.name for n in nodes if n.op_type == "Concat" and any(
        i is not None and i.producer() is not None and i.producer().op_type == "Sub" for i in n.inputs)
    ] + [n.name for n in nodes if ms(n, "MRotaryEmbedding")]


def _builder_graphs() -> dict[str, onnx.ModelProto]:
    return {"hc": G.hc_builder_model(), "conv": G.conv_state_output_model(), "mrope": G.mrope_model(),
            "shared": G.shared_expert_model()}


@pytest.mark.parametrize("pass_cls", PIPELINE, ids=[p.name for p in PIPELINE])
@pytest.mark.parametrize("form", ["research", "builder"])
def test_every_candidate_anchor_gets_one_outcome(pass_cls, form: str, tiny_cpu_package) -> None:  # type: ignore[no-untyped-def]
    if form == "research":
        path = tiny_cpu_package / "model.onnx"
        graphs = {"target": (ir.load(path), package_reader(path))}
    else:
        graphs = {k: (ir.from_proto(v), None) for k, v in _builder_graphs().items()}
    total = 0
    for model, reader in graphs.values():
        wanted = _candidates(model.graph, pass_cls.name)
        outcomes: list[Outcome] = []
        p = pass_cls(outcomes=outcomes, **({"reader": reader} if reader else {}))
        phase_one = len(wanted)
        p(model)
        assert not [o for o in outcomes if o.reason == UNRECOGNISED_REASON], [o.line() for o in outcomes]
        seen = collections.Counter(o.anchor for o in outcomes)
        assert all(seen[name] == 1 for name in wanted), (wanted, seen)
        if pass_cls.name != "hyper_connection":  # its second phase has its own anchors (prologues)
            assert len(outcomes) == phase_one
        total += phase_one
    assert total > 0 or (form == "builder" and pass_cls.name == "rms_norm_rotary")


def test_builder_forms_outcomes_by_pass() -> None:
    """The verdict of every pass on each builder form (what --explain prints for them)."""
    got = {}
    for key, proto in _builder_graphs().items():
        result = optimize_model(ir.from_proto(proto))
        got[key] = sorted((o.pass_name, o.applied, o.reason) for o in result.outcomes)
    assert got["conv"] == [("causal_conv_state", False,
                            "present_state output already carries the state (no carry chain to remove)")]
    assert got["mrope"] == [("rms_norm_rotary", False, ("MRotaryEmbedding (multi-section rotary over [3, B, S] "
                             "positions) has no RMSNormRotary form; kept as exported"))]
    assert got["hc"] == sorted([("hyper_connection", True, "")] * 5 + [("fp8_head", True, "")])
    assert got["shared"] == [("shared_expert", True, "")]


def test_mrope_is_left_unchanged() -> None:
    model, p = apply(FuseRMSNormRotaryPass, G.mrope_model())
    assert p.count == 0 and ops(model)[(MS, "MRotaryEmbedding")] == 1


def _feeds(sess, seed: int = 0) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """A 5-token prefill with non-zero recurrent/conv state and an empty KV cache."""
    r = np.random.default_rng(seed)
    dims = {"batch_size": 1, "sequence_length": 5, "total_sequence_length": 5, "past_sequence_length": 0,
            "kv_cache_dim": 16}
    types = {"tensor(int64)": np.int64, "tensor(float16)": np.float16, "tensor(float)": np.float32}
    feeds = {}
    for i in sess.get_inputs():
        shape = [dims[d] if isinstance(d, str) else d for d in i.shape]
        if i.name == "input_ids":
            feeds[i.name] = r.integers(0, 500, shape).astype(np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.broadcast_to(np.arange(5, dtype=np.int64), shape).copy()
        elif i.type == "tensor(int64)":
            feeds[i.name] = np.ones(shape, np.int64)
        else:
            feeds[i.name] = (0.5 * r.standard_normal(shape)).astype(types[i.type])
    return feeds


@pytest.mark.parametrize("graph", ["model.onnx", "mtp.onnx"])
def test_builder_cpu_variant_graphs_keep_parity_after_optimize(graph: str, tiny_builder_cpu_package, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The passes on the synthesized builder cpu variant (--target cpu): ORT CPU outputs unchanged."""
    import shutil

    import onnxruntime as ort

    src = tmp_path / "src"
    shutil.copytree(tiny_builder_cpu_package, src)  # own inodes: onnx_ir reads the weights
    model = ir.load(src / graph)
    result = optimize_model(model, target="cpu")
    assert not [o for o in result.outcomes if o.reason == UNRECOGNISED_REASON]
    assert result.rewrites["shared_expert"] >= 1
    out = tmp_path / "out"
    out.mkdir()
    ir.save(model, out / graph, external_data=f"{graph}.data")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    before = ort.InferenceSession(str(src / graph), so, providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(str(out / graph), so, providers=["CPUExecutionProvider"])
    feeds = _feeds(before)
    names = [o.name for o in before.get_outputs()]
    assert names == [o.name for o in after.get_outputs()]
    for name, want, got in zip(names, before.run(None, feeds), after.run(None, feeds), strict=True):
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=2e-2, rtol=2e-2,
                                   err_msg=name)
