"""CausalConvWithState / VarlenCausalConvWithState rules (``ort-contract-rules.md`` §3).

Three layers, labelled by where ORT enforces them:

* schema inference (``cpu-session``, any EP): attribute ranges, ranks, the 1.32.0 extended
  attributes; the message is ORT's ``[ShapeInferenceError]`` text;
* the CPU kernel constructor (``cpu-session``, only nodes that run on CPU): ndim=1, no
  state_window, no extended options, activation spelling;
* the CUDA kernel (``cuda-only``) and compute-time shape rules (``run-time``), e.g. the
  ``past_state`` shape for channels-first / channels-last / windowed state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import onnx_ir as ir

from contracts._graph import as_ir_model, attr, input_at, node_label, output_at, static_dims
from contracts._rule import OrtVersions, Rule, Violation
from q38._ops import CAUSAL_CONV_WITH_STATE, MS_DOMAIN, VARLEN_CAUSAL_CONV_WITH_STATE

__all__ = ["RULES", "check_causal_conv", "expected_state_shape"]

_CC = CAUSAL_CONV_WITH_STATE
_VL = VARLEN_CAUSAL_CONV_WITH_STATE
_SRC = "ort-contract-rules.md §3"
_ACTIVATIONS = frozenset({"none", "silu", "swish"})
_EXTENDED_INT = {"input_channels": 0, "input_channel_offset": 0, "state_length": 0,
                 "state_channels_last": -1, "state_update_capacity": 0}  # fmt: skip
_V132 = OrtVersions(since="1.32.0")
_V131 = OrtVersions(until="1.32.0")


def _nodes(model: Any, op_type: str) -> list[ir.Node]:
    graph = as_ir_model(model).graph
    return [n for n in graph.all_nodes() if n.domain == MS_DOMAIN and n.op_type == op_type]


def _rank(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None:
        return None
    return len(value.shape)


def _is_extended(node: ir.Node) -> bool:
    if any(int(attr(node, k, d)) != d for k, d in _EXTENDED_INT.items()):
        return True
    return output_at(node, 2) is not None


def _cc_base(node: ir.Node) -> str | None:
    """Attribute checks every version runs first (3A.1-3A.5)."""
    ndim = int(attr(node, "ndim", 1))
    dilation = int(attr(node, "dilation", 1))
    window = int(attr(node, "state_window", 0))
    channels_last = int(attr(node, "channels_last", 0))
    p = "CausalConvWithState: "
    if ndim not in {1, 2, 3}:
        return f"{p}ndim must be 1, 2, or 3, got {ndim}"
    if dilation < 1:
        return f"{p}dilation must be >= 1, got {dilation}"
    if not 0 <= window <= 8:
        return f"{p}state_window must be in [0, 8], got {window}"
    if channels_last not in {0, 1}:
        return f"{p}channels_last must be 0 or 1, got {channels_last}"
    if channels_last == 1 and ndim != 1:
        return f"{p}channels_last requires ndim = 1"
    return None


def _cc_ranks(node: ir.Node) -> str | None:
    """Rank checks of the plain (non-extended) path (3A.5-3A.6)."""
    p = "CausalConvWithState: "
    ndim = int(attr(node, "ndim", 1))
    rx, rw = _rank(input_at(node, 0)), _rank(input_at(node, 1))
    if int(attr(node, "channels_last", 0)) == 1:
        if rx is not None and rx < 3:
            return f"{p}channels_last input must have rank >= 3"
    elif rx is not None and rx != ndim + 2:
        return f"{p}input must have rank ndim + 2 ({ndim + 2}), got rank {rx}"
    if rw is not None and rw != ndim + 2:
        return f"{p}weight must have rank ndim + 2 ({ndim + 2}), got rank {rw}"
    return None


def _cc_extended(node: ir.Node) -> str | None:
    """The 1.32.0 extended-attribute checks (3A.7), for a node that uses them."""
    p = "CausalConvWithState: "
    if int(attr(node, "channels_last", 0)) != 1 or int(attr(node, "ndim", 1)) != 1 or int(attr(node, "state_window", 0)) != 0:
        return f"{p}extended attributes require channels_last=1, ndim=1, state_window=0"
    scl = int(attr(node, "state_channels_last", -1))
    cap = int(attr(node, "state_update_capacity", 0))
    ic = int(attr(node, "input_channels", 0))
    off = int(attr(node, "input_channel_offset", 0))
    if scl not in {-1, 0, 1} or not 0 <= cap <= 8 or ic < 0 or off < 0:
        return f"{p}invalid extended attributes"
    x, w = input_at(node, 0), input_at(node, 1)
    rx = _rank(x)
    if rx is not None and rx != 3:
        return f"{p}extended input must have rank 3"
    xd, wd = static_dims(x), static_dims(w)
    if xd is not None:
        selected = ic if ic > 0 else xd[2]
        if off + selected > xd[2]:
            return f"{p}channel slice exceeds input width"
        if wd is not None and wd[0] != selected:
            return f"{p}weight channels mismatch"
    length = int(attr(node, "state_length", 0))
    dilation = int(attr(node, "dilation", 1))
    if wd is not None and len(wd) == 3 and length != 0 and length < (wd[2] - 1) * dilation:
        return f"{p}state_length is too short"
    if output_at(node, 2) is not None and cap <= 0:
        return f"{p}state_update output requires state_update_capacity > 0"
    return None


def _cc_schema(node: ir.Node) -> str | None:
    """The first 1.32.0 schema-inference failure of one CausalConvWithState node."""
    base = _cc_base(node)
    if base is not None:
        return base
    return _cc_extended(node) if _is_extended(node) else _cc_ranks(node)


def _check_cc_schema(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _CC):
        reason = _cc_base(node) or (None if _is_extended(node) else _cc_ranks(node))
        if reason is not None:
            found.append(Violation("CCONV-SCHEMA-001", reason, node=node_label(node)))
    return found


def _check_cc_extended(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _CC):
        if _cc_base(node) is None and _is_extended(node):
            reason = _cc_extended(node)
            if reason is not None:
                found.append(Violation("CCONV-SCHEMA-003", reason, node=node_label(node)))
    return found


def _check_cc_legacy_attrs(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _CC):
        if output_at(node, 2) is not None:
            found.append(Violation("CCONV-SCHEMA-002", f"Node({node_label(node)}) with schema(com.microsoft::CausalConvWithState:1) has output size {len(node.outputs)} not in range [min=2, max=2]", node=node_label(node)))
        for name in _EXTENDED_INT:
            if name in node.attributes:
                found.append(
                    Violation(
                        "CCONV-SCHEMA-002",
                        f"Unrecognized attribute: {name} for operator CausalConvWithState",
                        node=node_label(node),
                    )
                )
    return found


def _cc_cpu_kernel(node: ir.Node) -> list[str]:
    out = []
    if _is_extended(node):
        out.append("CPU CausalConvWithState does not support extended channel/state options (CUDA only)")
    if int(attr(node, "ndim", 1)) != 1:
        out.append("CPU CausalConvWithState only supports ndim=1")
    if str(attr(node, "activation", "none")) not in _ACTIVATIONS:
        out.append("activation must be one of: none, silu, swish")
    if int(attr(node, "state_window", 0)) != 0:
        out.append("CPU CausalConvWithState does not support state_window > 0 (CUDA EP only)")
    return out


def _check_cc_cpu_kernel(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found: list[Violation] = []
    for node in _nodes(model, _CC):
        if _cc_schema(node) is not None:
            continue  # schema inference fails first
        found.extend(Violation("CCONV-CPU-001", text, node=node_label(node)) for text in _cc_cpu_kernel(node))
    return found


def _check_cc_cuda_kernel(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _CC):
        if _cc_schema(node) is not None:
            continue
        label = node_label(node)
        if int(attr(node, "ndim", 1)) != 1:
            found.append(Violation("CCONV-CUDA-001", "CUDA CausalConvWithState only supports ndim=1", node=label))
        if str(attr(node, "activation", "none")) not in _ACTIVATIONS:
            found.append(Violation("CCONV-CUDA-001", "activation must be one of: none, silu, swish", node=label))
    return found


def expected_state_shape(node: ir.Node, batch: Any, channel_dims: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The ``past_state`` shape ORT expects (§3C.2), or None when the weight shape is unknown.

    ``channel_dims`` are (C,) for channels-first or (d_1, ..., d_n) for channels-last inputs.
    """
    wd = static_dims(input_at(node, 1))
    if wd is None or len(wd) < 3:
        return None
    length = (wd[-1] - 1) * int(attr(node, "dilation", 1))
    window = int(attr(node, "state_window", 0))
    lead: tuple[Any, ...] = (window,) if window > 0 else ()
    if int(attr(node, "channels_last", 0)) == 1:
        return (*lead, batch, length, *channel_dims)
    return (*lead, batch, *channel_dims, length)


def _check_cc_state_shapes(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _CC):
        if _cc_schema(node) is not None or _is_extended(node):
            continue
        x, w, past = input_at(node, 0), input_at(node, 1), input_at(node, 3)
        if x is None or x.shape is None:
            continue
        dims = tuple(x.shape)
        channels_last = int(attr(node, "channels_last", 0)) == 1
        channel_dims = dims[2:] if channels_last else (dims[1],)
        wd = static_dims(w)
        if wd is not None and len(wd) >= 2 and wd[1] != 1:
            found.append(Violation("CCONV-RUN-001", "weight must be depthwise (group=1)", node=node_label(node)))
        channels = 1
        for d in channel_dims:
            channels = channels * d if isinstance(d, int) and isinstance(channels, int) else -1
        if wd is not None and channels > 0 and wd[0] != channels:
            found.append(Violation("CCONV-RUN-001", "weight channels must match input channels", node=node_label(node)))
        expected = expected_state_shape(node, dims[0], channel_dims)
        if past is None or past.shape is None or expected is None:
            continue
        got = tuple(past.shape)
        mismatch = len(got) != len(expected) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(got, expected)
        )
        if mismatch:
            fmt = ",".join(str(d) for d in expected)
            found.append(
                Violation(
                    "CCONV-RUN-002",
                    f"Input 'past_state' is expected to have shape {{{fmt}}}, got {{{','.join(str(d) for d in got)}}}.",
                    node=node_label(node),
                )
            )
    return found


def _vl_schema(node: ir.Node, *, v132: bool = True) -> str | None:
    p = "VarlenCausalConvWithState: "
    dilation = int(attr(node, "dilation", 1))
    cap = int(attr(node, "state_update_capacity", 0))
    if dilation < 1:
        return f"{p}dilation must be >= 1, got {dilation}"
    if not 0 <= cap <= 8:
        return f"{p}state_update_capacity must be in [0, 8], got {cap}"
    dynamic = input_at(node, 6) is not None
    if not dynamic and v132 and (int(attr(node, "group_size", 1)) != 1 or int(attr(node, "delta_offset", 0)) != 0):
        return f"{p}group_size and delta_offset require kernel_delta"
    rx, rw = _rank(input_at(node, 0)), _rank(input_at(node, 1))
    if rx is not None and rx != 2:
        return f"{p}input must have rank 2 (total_tokens, channels)"
    if rw is not None and rw != 3:
        return f"{p}weight must have rank 3 (channels, 1, kernel_size)"
    return None


def _check_vl_schema(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _VL):
        reason = _vl_schema(node, v132=True)
        if reason is not None:
            found.append(Violation("VCCONV-SCHEMA-001", reason, node=node_label(node)))
    return found


def _check_vl_cpu_kernel(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _VL):
        if _vl_schema(node) is not None:
            continue
        label = node_label(node)
        if int(attr(node, "group_size", 1)) != 1 or int(attr(node, "delta_offset", 0)) != 0:
            found.append(Violation("VCCONV-CPU-001", "CPU VarlenCausalConvWithState does not support dynamic grouped convolution (CUDA only)", node=label))
        if str(attr(node, "activation", "none")) not in _ACTIVATIONS:
            found.append(Violation("VCCONV-CPU-001", "activation must be one of: none, silu, swish", node=label))
    return found


_Check = Callable[[Any, Mapping[str, str]], list[Violation]]
def _check_vl_legacy_attrs(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _VL):
        for name in ("group_size", "delta_offset"):
            if name in node.attributes:
                found.append(Violation("VCCONV-SCHEMA-002", f"Unrecognized attribute: {name} for operator VarlenCausalConvWithState", node=node_label(node)))
    return found


def _check_vl_schema_131(model: Any, _entries: Mapping[str, str]) -> list[Violation]:
    found = []
    for node in _nodes(model, _VL):
        reason = _vl_schema(node, v132=False)
        if reason is not None:
            found.append(Violation("VCCONV-SCHEMA-001", reason, node=node_label(node)))
    return found


RULES: tuple[Rule, ...] = (
    Rule("CCONV-SCHEMA-001", "CausalConvWithState schema: ndim 1-3, dilation >= 1, state_window 0-8, "
         "channels_last 0/1 (ndim 1), ranks, extended attributes", _SRC + "A; probed 1.32.0",
         "cpu-session", "graph", _check_cc_schema),
    Rule("CCONV-SCHEMA-002", "onnxruntime 1.31.1 does not know the extended CausalConvWithState "
         "attributes nor a 3rd output", "ort-cpu-capabilities.md §7; probed 1.31.1", "cpu-session",
         "graph", _check_cc_legacy_attrs, _V131),
    Rule("CCONV-SCHEMA-003", "1.32.0 extended attributes: channels_last=1, ndim=1, state_window=0, "
         "valid ranges, rank-3 input, channel slice, weight channels, state_length", _SRC + "A.7; probed",
         "cpu-session", "graph", _check_cc_extended, _V132),
    Rule("CCONV-CPU-001", "CPU kernel: ndim=1, state_window=0, no extended options, activation "
         "none/silu/swish", _SRC + "B (causal_conv_with_state.cc)", "cpu-session", "graph",
         _check_cc_cpu_kernel, ep="cpu"),
    Rule("CCONV-CUDA-001", "CUDA kernel: ndim=1, activation none/silu/swish", _SRC + "D",
         "cuda-only", "graph", _check_cc_cuda_kernel, ep="cuda"),
    Rule("CCONV-RUN-001", "weight is depthwise [C,1,k] with C = input channels", _SRC + "C.1",
         "run-time", "graph", _check_cc_state_shapes),
    Rule("VCCONV-SCHEMA-001", "VarlenCausalConvWithState schema: dilation, state_update_capacity, "
         "dynamic attributes need kernel_delta, ranks", _SRC + "E; probed 1.32.0", "cpu-session",
         "graph", _check_vl_schema, _V132),
    Rule("VCCONV-SCHEMA-001", "VarlenCausalConvWithState schema (1.31.1): dilation, "
         "state_update_capacity, ranks", _SRC + "E; probed 1.31.1", "cpu-session", "graph",
         _check_vl_schema_131, _V131),
    Rule("VCCONV-SCHEMA-002", "onnxruntime 1.31.1 does not know group_size / delta_offset",
         "probed 1.31.1", "cpu-session", "graph", _check_vl_legacy_attrs, _V131),
    Rule("VCCONV-CPU-001", "Varlen CPU kernel: no dynamic grouped mode, activation none/silu/swish",
         _SRC + "E.6", "cpu-session", "graph", _check_vl_cpu_kernel, _V132, ep="cpu"),
)  # fmt: skip
# CCONV-RUN-001 also reports CCONV-RUN-002 (past_state shape, §3C.2) from the same pass.


def check_causal_conv(
    model: Any, *, ort_version: str = "1.32.0", eps: frozenset[str] = frozenset({"cpu"})
) -> list[Violation]:
    """Every applicable CausalConvWithState / Varlen rule for ``model`` on execution providers ``eps``."""
    found: list[Violation] = []
    for rule in RULES:
        if rule.applies(ort_version) and (rule.ep == "any" or rule.ep in eps) and rule.enforced != "run-time":
            found.extend(rule.check(model, {}))
    return found
