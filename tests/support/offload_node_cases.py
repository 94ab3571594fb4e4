"""The CUDA-only QMoE offload node cases, shared by the contract tests (tests/unit/contracts) and
the GPU suite (tests/gpu), which asserts them against a real CUDA session.

Each row changes exactly one thing from a valid base node of ``offload_node_kit.offload_model``.
"""

from __future__ import annotations

from typing import Any

from onnx import TensorProto as TP

__all__ = ["NEGATIVES"]

_INT_MSG = ("quant_type='int' offload requires (bits=4, weights_prepacked=1, block_size=32), (bits=3, "
            "weights_prepacked=0, block_size in {32,64,128}), or (bits=2, weights_prepacked=1, "
            "block_size in {32,64,128})")  # fmt: skip

# (case, format, offload_model kwargs, rule id, exact reason)
NEGATIVES: list[tuple[str, str, dict[str, Any], str, str]] = [
    ("quant_type fp8", "int4", {"attrs": {"quant_type": "fp8"}}, "OFFLOAD-NODE-C01", "unsupported quant_type='fp8' (expected 'nvfp4' or 'int')"),
    ("int4 bits 8", "int4", {"attrs": {"expert_weight_bits": 8}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("int4 prepacked 0", "int4", {"attrs": {"weights_prepacked": 0}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("int4 prepacked omitted", "int4", {"attrs": {"weights_prepacked": None}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("int4 block 64", "int4", {"attrs": {"block_size": 64}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("int4 block omitted", "int4", {"attrs": {"block_size": None}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("int4 bits omitted (checker falls back to 8)", "int4", {"attrs": {"expert_weight_bits": None}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("int4 non-uniform fc2 bits", "int4", {"attrs": {"fc2_expert_weight_bits": 8}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("int3 prepacked 1", "int3", {"attrs": {"weights_prepacked": 1}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("int2 block 16", "int2", {"attrs": {"block_size": 16}}, "OFFLOAD-NODE-C02", _INT_MSG),
    ("nvfp4 bits 8", "nvfp4", {"attrs": {"expert_weight_bits": 8}}, "OFFLOAD-NODE-C03", "unsupported expert_weight_bits=8 (expected 4)"),
    ("nvfp4 prepacked 0", "nvfp4", {"attrs": {"weights_prepacked": 0}}, "OFFLOAD-NODE-C03", "requires weights_prepacked=1 (offline K-packed row-major FP4)"),
    ("nvfp4 block 32", "nvfp4", {"attrs": {"block_size": 32}}, "OFFLOAD-NODE-C03", "invalid block_size=32 for quant_type='nvfp4' (expected 16)"),
    ("activation silu", "int4", {"attrs": {"activation_type": "silu"}}, "OFFLOAD-NODE-C04", "unsupported activation_type='silu' (expected 'swiglu')"),
    ("swiglu_fusion 2", "int4", {"attrs": {"swiglu_fusion": 2}}, "OFFLOAD-NODE-C05", "unsupported swiglu_fusion=2 (expected interleaved SwiGLU)"),
    ("int3 swiglu_fusion 0", "int3", {"attrs": {"swiglu_fusion": 0}}, "OFFLOAD-NODE-C05", "unsupported swiglu_fusion=0 (expected interleaved SwiGLU)"),
    ("sparse mixer", "int4", {"attrs": {"use_sparse_mixer": 1}}, "OFFLOAD-NODE-C06", "use_sparse_mixer=1 is not supported by the QMoE offload backend"),
    ("k 0", "int4", {"attrs": {"k": 0}}, "OFFLOAD-NODE-C07", "attribute k must be positive"),
    ("fc3 weights", "int4", {"slots": {8: (TP.UINT8, [4, 64, 32])}}, "OFFLOAD-NODE-C08", "unsupported optional input slot 8 is present"),
    ("router_weights", "int4", {"slots": {14: (TP.FLOAT16, [2, 4])}}, "OFFLOAD-NODE-C08", "unsupported optional input slot 14 is present"),
    ("activation scale", "int4", {"slots": {17: (TP.FLOAT, [1])}}, "OFFLOAD-NODE-C08", "unsupported optional input slot 17 is present"),
    ("fc2 scales missing", "int4", {"slots": {6: None}}, "OFFLOAD-NODE-C09", "missing required expert weight/scale input at slot 6"),
    ("fc1 weights a graph input", "int4", {"graph_inputs": [2]}, "OFFLOAD-NODE-C09", "expert input slot 2 ('fc1_w') must be a constant initializer"),
    ("2-D per-channel scales", "int4", {"slots": {3: (TP.FLOAT16, [4, 128])}}, "OFFLOAD-NODE-C09", "expert input slot 3 ('fc1_s') must be 3D"),
    ("zero dimension", "int4", {"slots": {5: (TP.UINT8, [4, 0, 32])}}, "OFFLOAD-NODE-C09", "expert input slot 5 ('fc2_w') must have positive dimensions"),
    ("expert weights a graph output", "int4", {"graph_outputs": [5]}, "OFFLOAD-NODE-C09", "expert initializer 'fc2_w' is also a graph output"),
    ("fp32 activations", "int4", {"act": TP.FLOAT, "slots": {3: (TP.FLOAT, [4, 128, 2]), 6: (TP.FLOAT, [4, 64, 2])}}, "OFFLOAD-NODE-C10", "unsupported activation dtype for QMoE offload (expected FLOAT16 or BFLOAT16)"),
    ("int8 weights", "int4", {"slots": {2: (TP.INT8, [4, 128, 32])}}, "OFFLOAD-NODE-C11", "expert weight banks must be UINT8"),
    ("fp32 scales with fp16 activations", "int4", {"slots": {6: (TP.FLOAT, [4, 64, 2])}}, "OFFLOAD-NODE-C12", "expert scale bank dtype does not match expected offload scale type"),
    ("nvfp4 fp16 scales", "nvfp4", {"slots": {3: (TP.FLOAT16, [4, 128, 4])}}, "OFFLOAD-NODE-C12", "expert scale bank dtype does not match expected offload scale type"),
    ("k > E", "int4", {"attrs": {"k": 5}}, "OFFLOAD-NODE-C13", "invalid expert count or weight dimensions for QMoE offload"),
    ("fc2 expert count differs", "int4", {"slots": {5: (TP.UINT8, [3, 64, 32])}}, "OFFLOAD-NODE-C13", "invalid expert count or weight dimensions for QMoE offload"),
    ("int3 odd fc1 rows", "int3", {"slots": {2: (TP.UINT8, [4, 127, 24])}}, "OFFLOAD-NODE-C14", "INT3 fc1_experts_weights dim 1 must be even"),
    ("int3 packed width", "int3", {"slots": {2: (TP.UINT8, [4, 128, 32])}}, "OFFLOAD-NODE-C14", "invalid INT3 expert weight dimensions for QMoE offload"),
    ("int4 fc2 width", "int4", {"slots": {5: (TP.UINT8, [4, 64, 16])}}, "OFFLOAD-NODE-C15", "expert weight shapes do not match a supported QMoE offload layout"),
    ("int4 H=32 not divisible by 64", "int4", {"slots": {2: (TP.UINT8, [4, 128, 16]), 3: (TP.FLOAT16, [4, 128, 1]), 5: (TP.UINT8, [4, 32, 32]), 6: (TP.FLOAT16, [4, 32, 2])}}, "OFFLOAD-NODE-C15", "expert hidden_size and inter_size must be positive and divisible by 64"),
    ("fc1 scale blocks", "int4", {"slots": {3: (TP.FLOAT16, [4, 128, 4])}}, "OFFLOAD-NODE-C16", "expert scale dimensions do not match [E, 2*I, H/block_size] and [E, H, I/block_size]"),
    ("fc2 bias wrong shape", "int4", {"slots": {7: (TP.FLOAT16, [4, 128])}}, "OFFLOAD-NODE-C17", "optional bias slot 7 ('fc2_b') must match activation dtype and shape [E, 64]"),
    ("fc1 bias wrong dtype", "int4", {"slots": {4: (TP.FLOAT, [4, 128])}}, "OFFLOAD-NODE-C17", "optional bias slot 4 ('fc1_b') must match activation dtype and shape [E, 128]"),
    ("nvfp4 without fc2 global scale", "nvfp4", {"slots": {16: None}}, "OFFLOAD-NODE-C18", "NVFP4 requires constant global scale at slot 16"),
    ("nvfp4 fp16 global scale", "nvfp4", {"slots": {15: (TP.FLOAT16, [4])}}, "OFFLOAD-NODE-C18", "NVFP4 global scale slot 15 ('fc1_gs') must be FLOAT with at least E elements"),
    ("nvfp4 short global scale", "nvfp4", {"slots": {15: (TP.FLOAT, [2])}}, "OFFLOAD-NODE-C18", "NVFP4 global scale slot 15 ('fc1_gs') must be FLOAT with at least E elements"),
    ("int global scale a graph input", "int4", {"slots": {15: (TP.FLOAT, [4])}, "graph_inputs": [15]}, "OFFLOAD-NODE-C18", "optional expert slot 15 ('fc1_gs') must be a constant initializer"),
    ("expert weights shared with an Identity", "int4", {"shared": 2}, "OFFLOAD-NODE-SHARED", "expert initializer 'fc1_w' is shared with a non-offload consumer"),
    ("plain MoE", "int4", {"op_type": "MoE"}, "OFFLOAD-NODE-MOE", "operator 'MoE' does not support the QMoE offload backend"),
]  # fmt: skip
