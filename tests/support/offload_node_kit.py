"""A valid offloadable QMoE node (ort-contract-rules.md §1G) and one-change variants of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh

MS = "com.microsoft"
E, H, I = 4, 64, 64  # noqa: E741 (the spec names: experts, hidden, inter)
_BYTES = {TP.UINT8: 1, TP.FLOAT16: 2, TP.BFLOAT16: 2, TP.FLOAT: 4, TP.FLOAT8E4M3FN: 1, TP.INT8: 1}

# format -> (attrs, {slot: (elem, shape)}) ; activations fp16 unless overridden
FORMATS: dict[str, tuple[dict[str, Any], dict[int, tuple[int, list[int]]]]] = {
    "int4": ({"quant_type": "int", "expert_weight_bits": 4, "weights_prepacked": 1, "block_size": 32},
             {2: (TP.UINT8, [E, 2 * I, H // 2]), 3: (TP.FLOAT16, [E, 2 * I, H // 32]),
              5: (TP.UINT8, [E, H, I // 2]), 6: (TP.FLOAT16, [E, H, I // 32])}),
    "int4-transposed": ({"quant_type": "int", "expert_weight_bits": 4, "weights_prepacked": 1, "block_size": 32},
                        {2: (TP.UINT8, [E, H, 2 * I // 2]), 3: (TP.FLOAT16, [E, 2 * I, H // 32]),
                         5: (TP.UINT8, [E, I, H // 2]), 6: (TP.FLOAT16, [E, H, I // 32])}),
    "int3": ({"quant_type": "int", "expert_weight_bits": 3, "weights_prepacked": 0, "block_size": 32},
             {2: (TP.UINT8, [E, 2 * I, 3 * H // 8]), 3: (TP.FLOAT16, [E, 2 * I, H // 32]),
              5: (TP.UINT8, [E, H, 3 * I // 8]), 6: (TP.FLOAT16, [E, H, I // 32])}),
    "int2": ({"quant_type": "int", "expert_weight_bits": 2, "weights_prepacked": 1, "block_size": 32},
             {2: (TP.UINT8, [E, 2 * I, H // 4]), 3: (TP.FLOAT16, [E, 2 * I, H // 32]),
              5: (TP.UINT8, [E, H, I // 4]), 6: (TP.FLOAT16, [E, H, I // 32])}),
    "nvfp4": ({"quant_type": "nvfp4", "expert_weight_bits": 4, "weights_prepacked": 1, "block_size": 16},
              {2: (TP.UINT8, [E, 2 * I, H // 2]), 3: (TP.FLOAT8E4M3FN, [E, 2 * I, H // 16]),
               5: (TP.UINT8, [E, H, I // 2]), 6: (TP.FLOAT8E4M3FN, [E, H, I // 16]),
               15: (TP.FLOAT, [E]), 16: (TP.FLOAT, [E])}),
}  # fmt: skip
SLOT_NAMES = {2: "fc1_w", 3: "fc1_s", 4: "fc1_b", 5: "fc2_w", 6: "fc2_s", 7: "fc2_b", 8: "fc3_w",
              14: "router_weights", 15: "fc1_gs", 16: "fc2_gs", 17: "fc1_as"}  # fmt: skip


def _init(name: str, elem: int, shape: Sequence[int]) -> onnx.TensorProto:
    count = int(np.prod(shape)) if shape else 1
    return oh.make_tensor(name, elem, list(shape), b"\x00" * (count * _BYTES[elem]), raw=True)


def offload_model(
    fmt: str = "int4",
    *,
    attrs: Mapping[str, Any] | None = None,
    slots: Mapping[int, tuple[int, list[int]] | None] | None = None,
    act: int = TP.FLOAT16,
    graph_inputs: Sequence[int] = (),
    graph_outputs: Sequence[int] = (),
    shared: int | None = None,
    op_type: str = "QMoE",
) -> onnx.ModelProto:
    """One QMoE node 'moe0'; ``slots`` adds (elem, shape) initializers or removes a slot (None).

    ``graph_inputs``/``graph_outputs``: slots whose tensor is a graph input (not constant) or also
    a graph output. ``shared``: a slot whose initializer an Identity node also consumes.
    """
    base_attrs, base_slots = FORMATS[fmt]
    node_attrs: dict[str, Any] = {**base_attrs, "activation_type": "swiglu", "swiglu_fusion": 1,
                                  "k": 2, "use_sparse_mixer": 0}  # fmt: skip
    node_attrs.update(attrs or {})
    spec = dict(base_slots)
    spec.update(slots or {})
    names = ["x", "router"] + [""] * 19
    inits, inputs = [], [oh.make_tensor_value_info("x", act, [2, H]),
                         oh.make_tensor_value_info("router", act, [2, E])]  # fmt: skip
    outputs = [oh.make_tensor_value_info("y", act, [2, H])]
    for slot, found in sorted(spec.items()):
        if found is None:
            continue
        name = SLOT_NAMES.get(slot, f"slot{slot}")
        names[slot] = name
        elem, shape = found
        if slot in graph_inputs:
            inputs.append(oh.make_tensor_value_info(name, elem, shape))
        else:
            inits.append(_init(name, elem, shape))
        if slot in graph_outputs:
            outputs.append(oh.make_tensor_value_info(name, elem, shape))
    while names[-1] == "":
        names.pop()
    nodes = [oh.make_node(op_type, names, ["y"], name="moe0", domain=MS,
                          **{k: v for k, v in node_attrs.items() if v is not None})]  # fmt: skip
    if shared is not None:
        elem, shape = spec[shared] or (TP.UINT8, [1])
        nodes.append(oh.make_node("Identity", [SLOT_NAMES[shared]], ["leak"], name="leak"))
        outputs.append(oh.make_tensor_value_info("leak", elem, shape))
    graph = oh.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model
