"""The optimizer pipeline (q38/optimize/pipeline.py): the pinned pass order, ``--pass`` / ``--skip``
selection, ``optimize_model`` running the passes in that order on a checked input and reading
weights through the caller's reader.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
import support.optimize_graphs as G
from support.optimize_helpers import ops

from q38.errors import FlagError
from q38.optimize import PASS_NAMES, PIPELINE, optimize_model, select_passes

MS = "com.microsoft"


def test_pipeline_order_is_pinned() -> None:
    # RMSNormRotary and the shared-expert fusion first; the hyper-connection fusion (whose fused
    # producers carry no shapes) before the FP8 head, which must handle such producers.
    assert PASS_NAMES == ("rms_norm_rotary", "shared_expert", "hyper_connection", "causal_conv_state", "fp8_head")
    assert [p.__name__ for p in PIPELINE] == [
        "FuseRMSNormRotaryPass", "FuseSharedExpertPass", "FuseHyperConnectionPass",
        "FuseCausalConvStatePass", "QuantizeFp8HeadPass",
    ]


def test_passes_and_skip_keep_pipeline_order() -> None:
    assert [p.name for p in select_passes(["fp8_head", "rms_norm_rotary", "shared_expert"], ["shared_expert"])] == [
        "rms_norm_rotary", "fp8_head",
    ]
    with pytest.raises(FlagError, match=r"^unknown pass 'fuse_all' \(known: rms_norm_rotary, "):
        select_passes(["fuse_all"])


def test_optimize_model_runs_passes_in_pipeline_order() -> None:
    model = ir.from_proto(G.hc_model())
    result = optimize_model(model, passes=list(reversed(PASS_NAMES)))
    seen = list(dict.fromkeys(o.pass_name for o in result.outcomes))
    assert seen == [n for n in PASS_NAMES if n in seen]
    assert list(result.rewrites) == list(PASS_NAMES)


def test_optimize_model_skips_the_skipped_passes_and_checks_its_input() -> None:
    model = ir.from_proto(G.hc_model())
    result = optimize_model(model, skip=("hyper_connection",))
    assert list(result.rewrites) == [n for n in PASS_NAMES if n != "hyper_connection"]
    assert ops(model)[(MS, "HyperConnectionPreMix")] == 1
    # The first pass checks the input's invariants: an out-of-order graph is refused, not rewritten.
    proto = G.hc_model()
    nodes = list(proto.graph.node)
    del proto.graph.node[:]
    proto.graph.node.extend(reversed(nodes))
    unsorted = ir.from_proto(proto)
    with pytest.raises(ir.passes.PassError) as err:
        optimize_model(unsorted)
    chain: list[BaseException] = []
    cause: BaseException | None = err.value
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__
    assert str(chain[-1]).startswith("rms_norm_rotary: input graph is not topologically sorted")
    assert [n.op_type for n in unsorted.graph] == [n.op_type for n in reversed(nodes)]


# -- the pipeline reads weights through the caller's reader ----------------------------------------------
def test_optimize_model_reads_weights_through_the_callers_reader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Package code passes its own reader (the bytes live in its pool): every pass must read
    through it. Here the weights' external file does not exist where onnx-ir would look."""
    from q38.optimize.pipeline import optimize_model

    proto = G.shared_expert_model()
    model = ir.from_proto(proto)
    arrays = {}
    for name, value in model.graph.initializers.items():
        arr = value.const_value.numpy()  # type: ignore[union-attr]
        arrays[name] = arr
        value.const_value = ir.ExternalTensor("pool.bin", 0, arr.nbytes, value.dtype,  # type: ignore[arg-type]
                                              shape=ir.Shape(arr.shape), name=name, base_dir=tmp_path)
    read: list[str] = []

    def reader(value: ir.Value) -> np.ndarray:
        read.append(value.name or "")
        return arrays[value.name or ""]

    result = optimize_model(model, passes=["shared_expert"], reader=reader)
    assert result.rewrites == {"shared_expert": 1}
    assert sorted(read) == sorted(n for n in arrays if "down_proj" not in n)
    fused = next(v for v in model.graph.initializers.values() if v.name.endswith(".fused"))
    np.testing.assert_array_equal(fused.const_value.numpy(), np.concatenate(  # type: ignore[union-attr]
        [arrays[f"mlp.shared_expert.{k}.weight"] for k in ("gate_proj", "up_proj")]
        + [arrays["mlp.shared_expert_gate.weight"]], axis=1))
