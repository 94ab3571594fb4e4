"""CausalConvWithState / VarlenCausalConvWithState rules (``ort-contract-rules.md`` §3).

Three layers, labelled by where ORT enforces them:

* schema inference (``cpu-session``, any EP): attribute ranges, ranks, the 1.32.0 extended
  attributes and the Varlen op's 1.32.0 dynamic mode (kernel_delta / previous_mask); the message is
  ORT's ``[ShapeInferenceError]`` text, the first failing check in ORT's order. Ranks and dims are
  the ones ORT infers (``contracts.shapes``), so a producer without a declared shape is still
  checked, and a dim ORT cannot read (unknown or symbolic) or an unshaped operand is not;
* the CPU kernel constructor (``cpu-session``, only nodes that run on CPU): ndim=1, no
  state_window, no extended options, activation spelling, dilation <= INT_MAX;
* the CUDA kernel (``cuda-only``) and compute-time shape rules (``run-time``, reported as warnings
  by the runner: a session is created and fails only when the model runs), e.g. the depthwise
  weight and the ``past_state`` shape for channels-first / channels-last / windowed state.

Unknown attributes, attribute kinds and arity (1.31.1 has no extended attributes and two outputs)
are the generic schema rules' (``contracts.schema_rules``); a node they reject is skipped here,
as ORT stops at the schema layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx_ir as ir

from contracts._facts import nodes_of
from contracts._graph import (
    ModelLike,
    attr_int,
    attr_str,
    input_at,
    node_label,
    output_at,
    per_node,
)
from contracts._rule import (
    GraphExample,
    GraphExamples,
    ModelCheck,
    OrtVersions,
    Rule,
    RuleDoc,
    Violation,
)
from contracts._versions import per_version
from contracts.cpu_kernels import runs_on_cpu
from contracts.schema_rules import schema_clean
from contracts.shape_types import Dim
from contracts.shapes import Shape, Shapes, shapes_of
from q38._ops import CAUSAL_CONV_WITH_STATE, MS_DOMAIN, VARLEN_CAUSAL_CONV_WITH_STATE

__all__ = ["RULES", "expected_state_shape"]

_CC = CAUSAL_CONV_WITH_STATE
_VL = VARLEN_CAUSAL_CONV_WITH_STATE
_SRC = "ort-contract-rules.md §3"
_INT_MAX = 2**31 - 1
_ACTIVATIONS = frozenset({"none", "silu", "swish"})
_EXTENDED_INT = {"input_channels": 0, "input_channel_offset": 0, "state_length": 0,
                 "state_channels_last": -1, "state_update_capacity": 0}  # fmt: skip
_V132 = OrtVersions(since="1.32.0")
_P = "CausalConvWithState: "


def _checked_nodes(model: ModelLike, op_type: str) -> list[ir.Node]:
    """The nodes of ``op_type`` that pass ORT's schema layer (the ones ORT infers shapes of)."""
    return [n for n in nodes_of(model, MS_DOMAIN, op_type) if schema_clean(model, n)]


def _is_extended(node: ir.Node) -> bool:
    if any(attr_int(node, k, d) != d for k, d in _EXTENDED_INT.items()):
        return True
    return output_at(node, 2) is not None


def _cc_base(node: ir.Node) -> str | None:
    """The general attribute checks (3A.1-3A.5): every node on 1.31.1, a plain node on 1.32.0."""
    ndim = attr_int(node, "ndim", 1)
    dilation = attr_int(node, "dilation", 1)
    window = attr_int(node, "state_window", 0)
    channels_last = attr_int(node, "channels_last", 0)
    if ndim not in {1, 2, 3}:
        return f"{_P}ndim must be 1, 2, or 3, got {ndim}"
    if dilation < 1:
        return f"{_P}dilation must be >= 1, got {dilation}"
    if not 0 <= window <= 8:
        return f"{_P}state_window must be in [0, 8], got {window}"
    if channels_last not in {0, 1}:
        return f"{_P}channels_last must be 0 or 1, got {channels_last}"
    if channels_last == 1 and ndim != 1:
        return f"{_P}channels_last requires ndim = 1"
    return None


def _cc_ranks(node: ir.Node, shapes: Shapes) -> str | None:
    """Rank checks of the plain (non-extended) path (3A.5-3A.6)."""
    ndim = attr_int(node, "ndim", 1)
    rx, rw = shapes.rank(input_at(node, 0)), shapes.rank(input_at(node, 1))
    if attr_int(node, "channels_last", 0) == 1:
        if rx is not None and rx < 3:
            return f"{_P}channels_last input must have rank >= 3"
    elif rx is not None and rx != ndim + 2:
        return f"{_P}input must have rank ndim + 2 ({ndim + 2}), got rank {rx}"
    if rw is not None and rw != ndim + 2:
        return f"{_P}weight must have rank ndim + 2 ({ndim + 2}), got rank {rw}"
    return None


def _cc_extended_attributes(node: ir.Node) -> str | None:
    """The extended-attribute checks that need no shape, in ORT's order (3A.7).

    Ranges first (state_channels_last -1/0/1, state_update_capacity 0-8, input_channels,
    input_channel_offset and state_length 0-INT_MAX), then the layout they need, which also refuses
    dilation < 1 (before the general checks: probed 1.32.0), then the third output's capacity.
    """
    ints = {k: attr_int(node, k, d) for k, d in _EXTENDED_INT.items()}
    if (ints["state_channels_last"] not in {-1, 0, 1} or not 0 <= ints["state_update_capacity"] <= 8
            or any(not 0 <= ints[k] <= _INT_MAX for k in ("input_channels", "input_channel_offset", "state_length"))):
        return f"{_P}invalid extended attributes"
    if (attr_int(node, "channels_last", 0) != 1 or attr_int(node, "ndim", 1) != 1
            or attr_int(node, "state_window", 0) != 0 or attr_int(node, "dilation", 1) < 1):
        return f"{_P}extended attributes require channels_last=1, ndim=1, state_window=0"
    if output_at(node, 2) is not None and ints["state_update_capacity"] <= 0:
        return f"{_P}state_update output requires state_update_capacity > 0"
    return None


def _cc_extended(node: ir.Node, shapes: Shapes) -> str | None:
    """The 1.32.0 extended-attribute checks (3A.7), for a node that uses them, in ORT's order.

    After the attribute checks, nothing more without an input shape: the input's rank (3), the
    channel slice (when the input's width is known), the weight's rank (3) and channels (when the
    selected channels are known), then the receptive field (k-1) x dilation (kernel >= 1, at most
    INT_MAX) and an explicit state_length covering it (when the kernel is known).
    """
    found = _cc_extended_attributes(node)
    x, w = input_at(node, 0), input_at(node, 1)
    rx = shapes.rank(x)
    if found is not None or rx is None:
        return found
    if rx != 3:
        return f"{_P}extended input must have rank 3"
    ic, off = attr_int(node, "input_channels", 0), attr_int(node, "input_channel_offset", 0)
    width = shapes.dim(x, 2)
    if width is not None and off + (ic if ic > 0 else width) > width:
        return f"{_P}channel slice exceeds input width"
    rw = shapes.rank(w)
    if rw is None:
        return None
    if rw != 3:
        return f"{_P}weight must have rank 3"
    selected, channels = (ic if ic > 0 else width), shapes.dim(w, 0)
    if selected is not None and channels is not None and channels != selected:
        return f"{_P}weight channels mismatch"
    kernel = shapes.dim(w, 2)
    if kernel is None:
        return None
    field = (kernel - 1) * attr_int(node, "dilation", 1)
    if kernel < 1 or field > _INT_MAX:
        return f"{_P}invalid receptive field"
    length = attr_int(node, "state_length", 0)
    if length != 0 and length < field:
        return f"{_P}state_length is too short"
    return None


def _cc_schema(node: ir.Node, shapes: Shapes, *, v132: bool) -> tuple[str, str] | None:
    """(rule id, text) of the first schema-inference failure of one node.

    1.32.0 checks a node using the extended attributes (or the third output) by those alone: their
    layout check also covers ndim, channels_last, state_window and dilation, so the general checks
    (CCONV-SCHEMA-001) only see plain nodes. 1.31.1 has no extended attributes.
    """
    if v132 and _is_extended(node):
        found = _cc_extended(node, shapes)
        return None if found is None else ("CCONV-SCHEMA-003", found)
    found = _cc_base(node) or _cc_ranks(node, shapes)
    return None if found is None else ("CCONV-SCHEMA-001", found)


def _schema_rule(rule_id: str, *, v132: bool) -> ModelCheck:
    def check(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
        shapes = shapes_of(model)

        def one(node: ir.Node) -> Iterable[Violation]:
            found = _cc_schema(node, shapes, v132=v132)
            if found is not None and found[0] == rule_id:
                yield Violation(rule_id, found[1], node=node_label(node))

        return per_node(_checked_nodes(model, _CC), one)

    return check


def cc_cpu_kernel_problems(node: ir.Node) -> list[str]:
    """The CPU kernel constructor's refusals of one (schema-valid) node, in its order (§3B)."""
    out = []
    if _is_extended(node):
        out.append("CPU CausalConvWithState does not support extended channel/state options (CUDA only)")
    if attr_int(node, "ndim", 1) != 1:
        out.append("CPU CausalConvWithState only supports ndim=1")
    if attr_str(node, "activation", "none") not in _ACTIVATIONS:
        out.append("activation must be one of: none, silu, swish")
    if attr_int(node, "state_window", 0) != 0:
        out.append("CPU CausalConvWithState does not support state_window > 0 (CUDA EP only)")
    dilation = attr_int(node, "dilation", 1)
    if dilation > _INT_MAX:
        out.append(f"dilation must be <= INT_MAX, got {dilation}")
    return out


def _check_cc_cpu_kernel(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    if not runs_on_cpu(model, version):
        return []  # a node without a CPU kernel fails the session first: no constructor runs
    shapes = shapes_of(model)

    def one(node: ir.Node) -> Iterable[Violation]:
        if _cc_schema(node, shapes, v132=True) is not None:
            return  # schema inference fails first
        for text in cc_cpu_kernel_problems(node):
            yield Violation("CCONV-CPU-001", text, node=node_label(node))

    return per_node(_checked_nodes(model, _CC), one)


def _check_cc_cuda_kernel(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
    shapes = shapes_of(model)

    def one(node: ir.Node) -> Iterable[Violation]:
        if _cc_schema(node, shapes, v132=True) is not None:
            return
        label = node_label(node)
        if attr_int(node, "ndim", 1) != 1:
            yield Violation("CCONV-CUDA-001", "CUDA CausalConvWithState only supports ndim=1", node=label)
        if attr_str(node, "activation", "none") not in _ACTIVATIONS:
            yield Violation("CCONV-CUDA-001", "activation must be one of: none, silu, swish", node=label)
        dilation = attr_int(node, "dilation", 1)
        if dilation > _INT_MAX:
            yield Violation("CCONV-CUDA-001", f"dilation must be <= INT_MAX, got {dilation}", node=label)

    return per_node(_checked_nodes(model, _CC), one)


def expected_state_shape(node: ir.Node, batch: Dim, channel_dims: tuple[Dim, ...], *, kernel: int) -> Shape:
    """The ``past_state`` shape ORT expects (§3C.2) for a weight of ``kernel`` taps.

    ``channel_dims`` are (C,) for channels-first or (d_1, ..., d_n) for channels-last inputs.
    """
    length = (kernel - 1) * attr_int(node, "dilation", 1)
    window = attr_int(node, "state_window", 0)
    lead: Shape = (window,) if window > 0 else ()
    if attr_int(node, "channels_last", 0) == 1:
        return (*lead, batch, length, *channel_dims)
    return (*lead, batch, *channel_dims, length)


def _mismatch(got: Shape, expected: Shape) -> bool:
    if len(got) != len(expected):
        return True
    return any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(got, expected, strict=True))


def _dims_text(dims: Shape) -> str:
    return ",".join("?" if d is None else str(d) for d in dims)


def run_time_problems(node: ir.Node, shapes: Shapes) -> list[tuple[str, str]]:
    """§3C: (rule id, ORT's text) of what the CPU compute refuses, from the inferred shapes."""
    x, w, past = input_at(node, 0), input_at(node, 1), input_at(node, 3)
    dims = shapes.shape(x)
    if dims is None or len(dims) < 3:
        return []
    found = []
    channel_dims = dims[2:] if attr_int(node, "channels_last", 0) == 1 else (dims[1],)
    wd = shapes.shape(w)
    if wd is not None and len(wd) >= 2 and isinstance(wd[1], int) and wd[1] != 1:
        found.append(("CCONV-RUN-001", "weight must be depthwise (group=1)"))
    channels: int | None = 1
    for d in channel_dims:
        channels = channels * d if isinstance(d, int) and channels is not None else None
    if wd is not None and wd and isinstance(wd[0], int) and channels is not None and wd[0] != channels:
        found.append(("CCONV-RUN-001", "weight channels must match input channels"))
    kernel = wd[-1] if wd is not None and len(wd) >= 3 and isinstance(wd[-1], int) else None
    got = shapes.shape(past)
    expected = None if kernel is None else expected_state_shape(node, dims[0], channel_dims, kernel=kernel)
    if got is not None and expected is not None and _mismatch(got, expected):
        want, have = _dims_text(expected), _dims_text(got)
        found.append(("CCONV-RUN-002", f"Input 'past_state' is expected to have shape {{{want}}}, got {{{have}}}."))
    return found


def _run_rule(rule_id: str) -> ModelCheck:
    def check(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
        shapes = shapes_of(model)

        def one(node: ir.Node) -> Iterable[Violation]:
            if _cc_schema(node, shapes, v132=True) is not None or _is_extended(node):
                return
            for rid, text in run_time_problems(node, shapes):
                if rid == rule_id:
                    yield Violation(rid, text, node=node_label(node), severity="warning")

        return per_node(_checked_nodes(model, _CC), one)

    return check


_VP = "VarlenCausalConvWithState: "
_VL_BIAS, _VL_COUNT, _VL_DELTA, _VL_MASK = 3, 5, 6, 7
_VL_DYNAMIC_TEXT = f"{_VP}dynamic mode requires dilation=1, activation=none and no bias"


def _vl_attributes(node: ir.Node, *, v132: bool) -> str | None:
    """The attribute and input-presence checks ORT's inference makes first (capacity before dilation)."""
    dilation = attr_int(node, "dilation", 1)
    cap = attr_int(node, "state_update_capacity", 0)
    if not 0 <= cap <= 8:
        return f"{_VP}state_update_capacity must be in [0, 8], got {cap}"
    if dilation < 1:
        return f"{_VP}dilation must be >= 1, got {dilation}"
    if not v132:
        return None  # 1.31.1 knows neither the dynamic attributes nor the dynamic inputs
    group_size, offset = attr_int(node, "group_size", 1), attr_int(node, "delta_offset", 0)
    if not 1 <= group_size <= _INT_MAX or not 0 <= offset <= _INT_MAX - 2:
        return f"{_VP}invalid group_size or delta_offset"
    delta, mask = input_at(node, _VL_DELTA) is not None, input_at(node, _VL_MASK) is not None
    if delta != mask:
        return f"{_VP}kernel_delta and previous_mask must be supplied together"
    if not delta and (group_size != 1 or offset != 0):
        return f"{_VP}group_size and delta_offset require kernel_delta"
    return None


def _known(dim: Dim) -> int | None:
    return dim if isinstance(dim, int) else None


def _vl_dynamic_operands(node: ir.Node, shapes: Shapes) -> str | None:
    """Dynamic mode's weight, kernel_delta and previous_mask shapes; an unshaped operand is not checked."""
    w = shapes.shape(input_at(node, 1))
    if w is not None and (len(w) != 3 or _known(w[1]) not in {None, 1} or _known(w[2]) not in {None, 2}):
        return f"{_VP}dynamic weight must have shape (channels, 1, 2)"
    delta = shapes.shape(input_at(node, _VL_DELTA))
    taps = None if delta is None or len(delta) != 3 else _known(delta[1])
    if delta is not None and (len(delta) != 3 or (taps is not None and taps < attr_int(node, "delta_offset", 0) + 2)):
        return f"{_VP}invalid kernel_delta shape or delta_offset"
    mask = shapes.shape(input_at(node, _VL_MASK))
    if mask is not None and (len(mask) != 2 or _known(mask[1]) not in {None, 1}):
        return f"{_VP}previous_mask must have shape (total_tokens, 1)"
    return None


def _vl_dynamic(node: ir.Node, shapes: Shapes) -> str | None:
    """Dynamic mode (kernel_delta and previous_mask, 1.32.0), in ORT's order.

    The input's checks need only the input's shape: channels and total_tokens come from its dims,
    and a dim ORT cannot read (unknown or symbolic) is not checked.
    """
    bias = input_at(node, _VL_BIAS) is not None
    if attr_int(node, "dilation", 1) != 1 or attr_str(node, "activation", "none") != "none" or bias:
        return _VL_DYNAMIC_TEXT
    found = _vl_dynamic_operands(node, shapes)
    x = shapes.shape(input_at(node, 0))
    if found is not None or x is None:
        return found
    if len(x) != 2:
        return f"{_VP}input must have rank 2"
    tokens, channels = _known(x[0]), _known(x[1])
    group_size = attr_int(node, "group_size", 1)
    if channels is not None and (channels <= 0 or channels % group_size != 0):
        return f"{_VP}group_size must divide channels"
    delta = shapes.shape(input_at(node, _VL_DELTA))
    mask = shapes.shape(input_at(node, _VL_MASK))
    leading = [_known(s[0]) for s in (delta, mask) if s is not None]
    if tokens is not None and any(t is not None and t != tokens for t in leading):
        return f"{_VP}dynamic inputs must match total_tokens"
    groups = None if delta is None else _known(delta[2])
    if channels is not None and groups is not None and groups != channels // group_size:
        return f"{_VP}kernel_delta groups mismatch"
    return None


def _vl_ranks_and_lengths(node: ir.Node, shapes: Shapes) -> str | None:
    """The checks of every mode, made only when both input and weight have shapes (ORT returns early).

    Ranks of input and weight, then cumulative_sequence_length (rank 1, >= 2 elements, batch_size
    <= total_tokens) and, when cumulative_sequence_length has a shape, capture_count (rank 1,
    batch_size elements).
    """
    x, w = shapes.shape(input_at(node, 0)), shapes.shape(input_at(node, 1))
    if x is None or w is None:
        return None
    if len(x) != 2:
        return f"{_VP}input must have rank 2 (total_tokens, channels)"
    if len(w) != 3:
        return f"{_VP}weight must have rank 3 (channels, 1, kernel_size)"
    cu = shapes.shape(input_at(node, 2))
    if cu is None:
        return None
    if len(cu) != 1:
        return f"{_VP}cumulative_sequence_length must have rank 1"
    entries, tokens = _known(cu[0]), _known(x[0])
    if entries is not None and entries < 2:
        return f"{_VP}cumulative_sequence_length must have at least 2 elements"
    if entries is not None and tokens is not None and tokens < entries - 1:
        return f"{_VP}total_tokens must be at least batch_size"
    count = shapes.shape(input_at(node, _VL_COUNT))
    if count is not None and len(count) != 1:
        return f"{_VP}capture_count must have rank 1"
    size = None if count is None else _known(count[0])
    if entries is not None and size is not None and size != entries - 1:
        return f"{_VP}capture_count must have shape (batch_size)"
    return None


def _vl_schema(node: ir.Node, shapes: Shapes, *, v132: bool = True) -> str | None:
    """ORT's ``[ShapeInferenceError]`` text for the first check of one node that fails, else None."""
    found = _vl_attributes(node, v132=v132)
    if found is None and v132 and input_at(node, _VL_DELTA) is not None:
        found = _vl_dynamic(node, shapes)
    return found if found is not None else _vl_ranks_and_lengths(node, shapes)


def _vl_schema_rule(*, v132: bool) -> ModelCheck:
    def check(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
        shapes = shapes_of(model)

        def one(node: ir.Node) -> Iterable[Violation]:
            reason = _vl_schema(node, shapes, v132=v132)
            if reason is not None:
                yield Violation("VCCONV-SCHEMA-001", reason, node=node_label(node))

        return per_node(_checked_nodes(model, _VL), one)

    return check


def _check_vl_cpu_kernel(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    if not runs_on_cpu(model, version):
        return []
    shapes = shapes_of(model)

    def one(node: ir.Node) -> Iterable[Violation]:
        if _vl_schema(node, shapes) is not None:
            return
        label = node_label(node)
        if attr_int(node, "group_size", 1) != 1 or attr_int(node, "delta_offset", 0) != 0:
            yield Violation("VCCONV-CPU-001", "CPU VarlenCausalConvWithState does not support dynamic grouped convolution (CUDA only)", node=label)
        if attr_str(node, "activation", "none") not in _ACTIVATIONS:
            yield Violation("VCCONV-CPU-001", "activation must be one of: none, silu, swish", node=label)

    return per_node(_checked_nodes(model, _VL), one)


def _check_vl_cpu_run(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    """VCCONV-RUN-001: a dynamic node the CPU kernel loads but refuses on its first run.

    The constructor accepts group_size 1 and delta_offset 0; a wired kernel_delta is dynamic mode,
    which the CPU kernel has not got at all (probed, 1.32.0: the session is created, ``run`` fails
    with varlen_causal_conv_with_state.cc's text). A warning, as every run-time rule: the load succeeds.
    """
    if not runs_on_cpu(model, version):
        return []
    shapes = shapes_of(model)

    def one(node: ir.Node) -> Iterable[Violation]:
        if _vl_schema(node, shapes) is not None or input_at(node, _VL_DELTA) is None:
            return
        if attr_int(node, "group_size", 1) != 1 or attr_int(node, "delta_offset", 0) != 0:
            return  # VCCONV-CPU-001: the constructor refuses it first
        yield Violation("VCCONV-RUN-001", "CPU VarlenCausalConvWithState does not support dynamic grouped convolution "
                        "(CUDA only)", node=node_label(node), severity="warning")

    return per_node(_checked_nodes(model, _VL), one)

# The rules' examples (ONNX text, onnx.parser): one node of each op, float, shapes its inference takes.
_EX_CC = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[1,4,5] x, float[4,1,3] w) => (float[] y, float[] st) {
  [cc] y, st = com.microsoft.CausalConvWithState (x, w, "", "")
}"""
# past_state wired: [batch 1, channels 4, (k-1) x dilation = 2]
_EX_CC_PAST = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[1,4,5] x, float[4,1,3] w, float[1,4,2] past) => (float[] y, float[] st) {
  [cc] y, st = com.microsoft.CausalConvWithState (x, w, "", past)
}"""
# 1.32.0's extended attributes, channels-last input [1, 5, 4]
_EX_CC_EXTENDED = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[1,5,4] x, float[4,1,3] w) => (float[] y, float[] st) {
  [cc] y, st = com.microsoft.CausalConvWithState <channels_last: int = 1, dilation: int = 2, state_length: int = 4>
      (x, w, "", "")
}"""
_EX_VL = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[6,4] x, float[4,1,3] w, int32[3] cu, float[2,4,2] st) => (float[] y, float[] sto) {
  [vl] y, sto = com.microsoft.VarlenCausalConvWithState (x, w, cu, "", st)
}"""
# dynamic mode (kernel_delta, previous_mask wired), with the shapes its inference takes at group_size 1
_EX_VL_DYNAMIC = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[6,4] x, float[4,1,2] w, int32[3] cu, float[2,4,1] st, float[6,2,4] kd, float[6,1] pm)
  => (float[] y, float[] sto) {
  [vl] y, sto = com.microsoft.VarlenCausalConvWithState (x, w, cu, "", st, "", kd, pm)
}"""
_EX_CCONV_SCHEMA_001 = GraphExamples.edited(_EX_CC, ("State (x", "State <state_window: int = 9> (x"))
_EX_VCCONV_SCHEMA_001 = GraphExamples.edited(_EX_VL, ("State (x", "State <dilation: int = 0> (x"))

FAMILY = "causal-conv"
"""The rule family of this module's rules (``q38 rules --family``)."""

_DOC_CCONV_SCHEMA_001 = RuleDoc(
    "ORT's CausalConvWithState schema requires ndim 1-3, dilation >= 1, state_window 0-8, "
    "channels_last 0/1 (only with ndim 1) and the input / weight ranks that ndim implies; "
    "1.31.1 knows no extended attributes at all. Session creation fails on any EP.",
    "CausalConvWithState(input, weight, ..., dilation=0)",
    "Use dilation >= 1 and the attribute ranges of the installed ORT (drop extended attributes for 1.31.1).",
)

_DOC_VCCONV_SCHEMA_001 = RuleDoc(
    "ORT's VarlenCausalConvWithState shape inference checks state_update_capacity, dilation, "
    "group_size / delta_offset, that kernel_delta and previous_mask come together (and with the "
    "dynamic attributes), dynamic mode's weight (C,1,2), kernel_delta and previous_mask shapes "
    "against total_tokens and channels, the input and weight ranks, cumulative_sequence_length "
    "and capture_count; the session fails otherwise (1.31.1 has a narrower schema).",
    "VarlenCausalConvWithState(group_size=2, ...) without the kernel_delta input",
    "Wire kernel_delta and previous_mask together with the dynamic attributes; keep the shapes "
    "ORT's message names.",
)

RULES: tuple[Rule, ...] = (
    Rule("CCONV-SCHEMA-001", "CausalConvWithState schema: ndim 1-3, dilation >= 1, state_window 0-8, "
         "channels_last 0/1 (ndim 1), ranks of input and weight", _SRC + "A; probed 1.31.1 and 1.32.0",
         "cpu-session", "graph", _schema_rule("CCONV-SCHEMA-001", v132=True), _V132, family=FAMILY, doc=_DOC_CCONV_SCHEMA_001,
         examples=_EX_CCONV_SCHEMA_001),
    Rule("CCONV-SCHEMA-001", "CausalConvWithState schema (1.31.1: no extended attributes)",
         _SRC + "A; probed 1.31.1", "cpu-session", "graph", _schema_rule("CCONV-SCHEMA-001", v132=False),
         OrtVersions(until="1.32.0"), family=FAMILY, doc=_DOC_CCONV_SCHEMA_001,
         examples=_EX_CCONV_SCHEMA_001),
    Rule("CCONV-SCHEMA-003", "1.32.0 extended attributes, checked before the general ones: valid ranges, "
         "channels_last=1, ndim=1, state_window=0 (and dilation >= 1), capacity for the third output, rank-3 "
         "input, channel slice, rank-3 weight, weight channels, receptive field, state_length >= (k-1) x dilation",
         _SRC + "A.7; probed", "cpu-session", "graph", _schema_rule("CCONV-SCHEMA-003", v132=True), _V132, family=FAMILY, doc=RuleDoc(
        "ORT 1.32.0's extended CausalConvWithState attributes (channels_last=1, ndim=1, "
        "state_window=0 combinations, channel slices, state_length >= (k-1) x dilation, rank-3 "
        "input) are validated by its schema; some combinations are accepted but inconsistent, "
        "which q38 reports as warnings.",
        "CausalConvWithState(channels_last=1, state_length=1) with a kernel of width 4",
        "Make state_length at least (k-1) x dilation and the channel slice fit the weight's channels.",
    ), examples=GraphExamples.edited(_EX_CC_EXTENDED, ("state_length: int = 4", "state_length: int = 3"))),
    *per_version("CCONV-CPU-001", "CPU kernel: ndim=1, state_window=0, no extended options, activation "
                 "none/silu/swish, dilation <= INT_MAX", _SRC + "B (causal_conv_with_state.cc)", "cpu-session",
                 "graph", _check_cc_cpu_kernel, ep="cpu", family=FAMILY, doc=RuleDoc(
        "The CPU CausalConvWithState kernel constructor supports only ndim=1, state_window=0, no "
        "extended options, activation none/silu/swish and dilation <= INT_MAX; a node assigned to "
        "the CPU EP outside that fails session creation.",
        "CausalConvWithState(activation='gelu', ...) on a cpu-variant graph",
        "Use activation none/silu/swish and ndim=1 on CPU graphs (or run the node on CUDA).",
    ), examples=GraphExamples.edited(_EX_CC, ("State (x", "State <activation: string = \"gelu\"> (x"))),
    Rule("CCONV-CUDA-001", "CUDA kernel: ndim=1, activation none/silu/swish, dilation <= INT_MAX",
         _SRC + "D", "cuda-only", "graph", _check_cc_cuda_kernel, ep="cuda", family=FAMILY, doc=RuleDoc(
        "The CUDA CausalConvWithState kernel supports only ndim=1 ('CUDA CausalConvWithState only "
        "supports ndim=1'), activation none/silu/swish and dilation <= INT_MAX.",
        "CausalConvWithState(ndim=2, ...) on a CUDA graph",
        "Use ndim=1 and a supported activation for CUDA nodes.",
    ), examples=GraphExamples.edited(_EX_CC, ("State (x", "State <activation: string = \"Silu\"> (x"))),
    Rule("CCONV-RUN-001", "weight is depthwise [C,1,k] with C = input channels", _SRC + "C.1",
         "run-time", "graph", _run_rule("CCONV-RUN-001"), family=FAMILY, doc=RuleDoc(
        "At run time the kernel reads the weight as depthwise [C, 1, k] with C the input's "
        "channels; another shape is not caught at session creation but fails (or reads wrong "
        "memory) on the first run.",
        "CausalConvWithState(input: [1, 64, T], weight: [32, 1, 4])",
        "Give the weight shape [C, 1, k] with C equal to the input's channel count.",
    ), examples=GraphExamples.edited(_EX_CC_PAST, ("float[4,1,3] w", "float[4,2,3] w"))),
    Rule("CCONV-RUN-002", "past_state has the shape (k-1) x dilation implies (channels-first, "
         "channels-last, windowed)", _SRC + "C.2", "run-time", "graph", _run_rule("CCONV-RUN-002"), family=FAMILY, doc=RuleDoc(
        "At run time past_state must have the shape (k-1) x dilation implies: [B, C, (k-1)*d] "
        "channels-first, [B, (k-1)*d, C] channels-last, windowed state leading with its window; a "
        "mismatched state is only detected when the model runs.",
        "past_state: [1, 64, 2] for a kernel of width 4, dilation 1 (needs 3)",
        "Declare past_state with (k-1) x dilation history positions in the layout the node uses.",
    ), examples=GraphExamples.edited(_EX_CC_PAST, ("float[1,4,2] past", "float[1,4,1] past"))),
    Rule("VCCONV-SCHEMA-001", "VarlenCausalConvWithState schema: state_update_capacity, dilation, "
         "group_size / delta_offset ranges, kernel_delta with previous_mask, dynamic mode (dilation 1, "
         "no activation or bias, weight (C,1,2), kernel_delta taps, previous_mask (T,1), group_size "
         "divides channels, total_tokens, groups), ranks, cumulative_sequence_length, capture_count",
         _SRC + "E; probed 1.32.0", "cpu-session", "graph", _vl_schema_rule(v132=True), _V132, family=FAMILY, doc=_DOC_VCCONV_SCHEMA_001,
         examples=_EX_VCCONV_SCHEMA_001),
    Rule("VCCONV-SCHEMA-001", "VarlenCausalConvWithState schema (1.31.1): state_update_capacity, "
         "dilation, ranks, cumulative_sequence_length, capture_count", _SRC + "E; probed 1.31.1",
         "cpu-session", "graph", _vl_schema_rule(v132=False), OrtVersions(until="1.32.0"), family=FAMILY, doc=_DOC_VCCONV_SCHEMA_001,
         examples=_EX_VCCONV_SCHEMA_001),
    *per_version("VCCONV-CPU-001", "Varlen CPU kernel: no dynamic grouped mode, activation none/silu/swish",
                 _SRC + "E.6", "cpu-session", "graph", _check_vl_cpu_kernel, ep="cpu", since="1.32.0", family=FAMILY, doc=RuleDoc(
        "The CPU VarlenCausalConvWithState kernel has no dynamic grouped mode ('CPU "
        "VarlenCausalConvWithState does not support dynamic grouped convolution (CUDA only)': the "
        "constructor refuses group_size / delta_offset, and a wired kernel_delta is refused on the "
        "first run) and supports activation none/silu/swish only.",
        "VarlenCausalConvWithState(dynamic grouped, ...) on a CPU graph",
        "Use the static form on CPU graphs, or run the node on CUDA.",
    ), examples=GraphExamples.edited(_EX_VL, ("State (x", "State <activation: string = \"gelu\"> (x"))),
    *per_version("VCCONV-RUN-001", "Varlen CPU kernel: a wired kernel_delta (dynamic mode) is refused on the "
                 "first run", _SRC + "E.6; probed 1.32.0", "run-time", "graph", _check_vl_cpu_run, ep="cpu",
                 since="1.32.0", family=FAMILY, doc=RuleDoc(
        "The CPU VarlenCausalConvWithState kernel has no dynamic mode: with group_size 1 and "
        "delta_offset 0 its constructor accepts a node whose kernel_delta is wired, and the first "
        "run fails ('CPU VarlenCausalConvWithState does not support dynamic grouped convolution "
        "(CUDA only)'). A warning: the session is created.",
        "VarlenCausalConvWithState(x, w, cu, , state, , kernel_delta, previous_mask) on a CPU graph",
        "Use the static form (no kernel_delta / previous_mask) on CPU graphs, or run the node on CUDA.",
    ), examples=GraphExamples(GraphExample(_EX_VL), GraphExample(_EX_VL_DYNAMIC))),
)  # fmt: skip
