"""Regressions for optimizer guard gaps found by tests/unit/properties/test_optimizer_properties.py.

Invariants guarded (one test each):
* causal_conv_state: a first-token carry whose Concat joins on the channel axis is declined (it
  used to be replaced by the op's sequence-axis present_state);
* hyper_connection: an (R, C) up projection (PreMix branch gates) is declined, LowRankMix needs
  (R, C*H) per-feature gates;
* hyper_connection: an (H) norm scale is declined even when the stream width is symbolic (the
  op needs (C*H); the check uses the down projection's rows);
* rms_norm_rotary: broadcast position ids ([1, 1], [1, S]) are declined; the op reads [B, S]
  positions or one base position, and a [1, 1] gather used to become "base position + s";
* rms_norm_rotary: a negative epsilon is declined (the op requires a finite nonnegative one).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import support.optimize_graphs as G
from support.optimize_helpers import apply, ops, reasons

from q38.optimize.causal_conv_state import FuseCausalConvStatePass
from q38.optimize.hyper_connection import FuseHyperConnectionPass
from q38.optimize.rms_norm_rotary import FuseRMSNormRotaryPass

MS = "com.microsoft"


def _set_init(proto: onnx.ModelProto, name: str, arr: np.ndarray) -> None:
    init = next(t for t in proto.graph.initializer if t.name == name)
    init.CopyFrom(onnx.numpy_helper.from_array(arr, name))


def test_conv_first_token_carry_on_channel_axis_is_declined() -> None:
    proto = G.conv_carry_model(form="first_token", S=1, K=3, C=4)
    concat = next(n for n in proto.graph.node if n.op_type == "Concat")
    concat.attribute[0].i = 1
    model, p = apply(FuseCausalConvStatePass, proto)
    assert p.count == 0 and reasons(p) == ["carry Concat axis 1 is not the sequence axis"]
    assert ops(model)[("", "Concat")] == 1


def test_hyper_connection_per_branch_up_projection_is_declined() -> None:
    proto = G.hc_model(C=2, H=4, R=3)
    _set_init(proto, "/l0/attn_hc.up", np.full((3, 2), 0.1, np.float16))
    model, p = apply(FuseHyperConnectionPass, proto)
    assert reasons(p) == ["up weight '/l0/attn_hc.up' shape [3, 2] is not (R, C*H) = [3, 8] (per-feature gates)"]
    assert (MS, "HyperConnectionLowRankMix") not in ops(model)


def test_hyper_connection_per_feature_scale_with_symbolic_width_is_declined() -> None:
    proto = G.hc_model(C=2, H=4, R=3, scale_shape=(4,))
    proto.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "W"
    _, p = apply(FuseHyperConnectionPass, proto)
    assert reasons(p) == ["norm scale '/l0/attn_hc.norm.weight' length 4 is not C*H = 8 (down rows)"]


@pytest.mark.parametrize("shape,shown", [([1, 1], "[1,1]"), ([1, "S"], "[1,S]")])
def test_rms_norm_rotary_broadcast_position_ids_are_declined(shape: list[str | int | None], shown: str) -> None:
    proto = G.rms_rotary_model()
    pos = next(i for i in proto.graph.input if i.name == "position_ids")
    pos.CopyFrom(onnx.helper.make_tensor_value_info("position_ids", G.I64, shape))
    model, p = apply(FuseRMSNormRotaryPass, proto)
    assert reasons(p) == [f"position ids shape {shown} is not the input's [B, S] = [B, S]"]
    assert (MS, "RMSNormRotary") not in ops(model)


def test_rms_norm_rotary_negative_epsilon_is_declined() -> None:
    proto = G.rms_rotary_model()
    _set_init(proto, "/q.eps", np.array(-0.125, np.float16))
    _, p = apply(FuseRMSNormRotaryPass, proto)
    assert reasons(p) == ["epsilon -0.125 is not finite and nonnegative"]
