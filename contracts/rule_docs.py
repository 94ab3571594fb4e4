"""The long text of every contract rule: what ORT does, a violating example, the fix.

One :class:`RuleDoc` per rule id of ``contracts.runner.ALL_RULES``; the id, summary, ORT source,
enforcement point and versions stay on the :class:`~contracts._rule.Rule` records, and
:mod:`contracts.catalogue` joins the two (it refuses a rule without its entry here, and an entry
for no rule). ``q38 explain RULE-ID`` prints this text; SARIF carries it as each rule's help.

``explanation`` says what onnxruntime (or the package consumer) checks and quotes the message it
prints where it has one; ``example`` is a minimal violating input (an ONNX node in text form, a
config fragment, a file layout); ``fix`` is what to change. ``severity`` is the rule's default
level (a rule whose results are mostly errors may still report a warning case, e.g.
``OFFLOAD-NODE-001`` in ``auto`` mode).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts._rule import Severity

__all__ = ["DOCS", "RuleDoc"]


@dataclass(frozen=True)
class RuleDoc:
    """The explanation, violating example and fix of one rule, and its default level."""

    explanation: str
    example: str
    fix: str
    severity: Severity = "error"


_SCHEMA_SRC = (
    "ORT's graph resolve runs onnx's OpSchema::Verify on every node against the schema registered "
    "for the node's domain at the model's opset import (q38 mirrors the registry dumped from "
    "get_all_operator_schema(), contracts/schemas/ort-VERSION.json). "
)

def _node_check(rule: str, what: str, reason: str, example: str, fix: str) -> RuleDoc:
    """The RuleDoc of one id OFFLOAD-NODE-001 reports (ORT's offload planner).

    Built from the ort-contract-rules.md section ``rule``, what the check requires, ORT's reason
    text, a violating node and the fix.
    """
    return RuleDoc(
        f"ORT 1.32.0's offload planner (ort-contract-rules.md §{rule}) examines every MoE candidate "
        f"assigned to the CUDA EP when session.moe.offload.mode is auto or required: {what} "
        "In mode=required the first ineligible node fails the session with \"MoE offload "
        f"mode='required' rejected node 'NAME' (OP): {reason}.\"; in mode=auto it stays on the GPU, "
        "which q38 reports as a warning. Reported by OFFLOAD-NODE-001's check.",
        f"{example}, with session.moe.offload.mode=required, on CUDA",
        f"{fix} Or set session.moe.offload.mode=auto to keep the node resident on the GPU.",
    )


_INT_COMBOS = "(bits=4, weights_prepacked=1, block_size=32), (bits=3, weights_prepacked=0, block_size in {32,64,128}), or (bits=2, weights_prepacked=1, block_size in {32,64,128})"

_NODE_CHECK_DOCS: dict[str, RuleDoc] = {
    "OFFLOAD-NODE-C01": _node_check("1C.1", "quant_type is 'int' or 'nvfp4'.", "unsupported quant_type='fp8' (expected 'nvfp4' or 'int')",
                                    "QMoE(quant_type='fp8', ...)", "Quantize the experts as int (4/3/2-bit) or nvfp4."),
    "OFFLOAD-NODE-C02": _node_check("1C.2", f"an int node is one of {_INT_COMBOS}, with the same bits for fc1 and fc2.",
                                    f"quant_type='int' offload requires {_INT_COMBOS}",
                                    "QMoE(quant_type='int', expert_weight_bits=4, weights_prepacked=0, block_size=32)",
                                    "Re-quantize to a supported combination (q38 offload writes int4 prepacked, block 32)."),
    "OFFLOAD-NODE-C03": _node_check("1C.3", "an nvfp4 node has expert_weight_bits=4, weights_prepacked=1 and block_size absent or 16.",
                                    "unsupported expert_weight_bits=8 (expected 4)", "QMoE(quant_type='nvfp4', expert_weight_bits=8, ...)",
                                    "Give nvfp4 nodes expert_weight_bits=4, weights_prepacked=1, block_size 16 or absent."),
    "OFFLOAD-NODE-C04": _node_check("1C.4", "activation_type is 'swiglu'.", "unsupported activation_type='silu' (expected 'swiglu')",
                                    "QMoE(activation_type='silu', ...)", "Export the experts with a SwiGLU activation (activation_type='swiglu')."),
    "OFFLOAD-NODE-C05": _node_check("1C.5", "swiglu_fusion is 1 (interleaved) for INT3 and 0 or 1 otherwise.",
                                    "unsupported swiglu_fusion=2 (expected interleaved SwiGLU)", "QMoE(swiglu_fusion=2, ...)",
                                    "Write the fc1 gate/up halves interleaved (swiglu_fusion=1) or unfused (0)."),
    "OFFLOAD-NODE-C06": _node_check("1C.6", "use_sparse_mixer is 0.", "use_sparse_mixer=1 is not supported by the QMoE offload backend",
                                    "QMoE(use_sparse_mixer=1, ...)", "Route with top-k softmax (use_sparse_mixer=0)."),
    "OFFLOAD-NODE-C07": _node_check("1C.7", "attribute k is positive.", "attribute k must be positive", "QMoE(k=0, ...)",
                                    "Set k to the number of experts each token is routed to (>= 1)."),
    "OFFLOAD-NODE-C08": _node_check("1C.8", "fc3 weights/scales, zero points, router_weights and activation scales are absent.",
                                    "unsupported optional input slot 8 is present", "QMoE with fc3_experts_weights (input slot 8) wired",
                                    "Leave the unsupported optional inputs empty (fuse fc3 into fc1 for SwiGLU)."),
    "OFFLOAD-NODE-C09": _node_check("1C.9", "fc1/fc2 weights and scales are constant 3-D initializers with positive dims, not graph outputs.",
                                    "missing required expert weight/scale input at slot 6", "QMoE whose fc2_scales (slot 6) is empty or a graph input",
                                    "Store every expert weight and scale bank as a constant initializer."),
    "OFFLOAD-NODE-C10": _node_check("1C.10", "the activations are FLOAT16 or BFLOAT16.",
                                    "unsupported activation dtype for QMoE offload (expected FLOAT16 or BFLOAT16)", "QMoE on FLOAT activations",
                                    "Run the MoE block in float16 or bfloat16 (q38 build --dtype fp16)."),
    "OFFLOAD-NODE-C11": _node_check("1C.11", "the expert weight banks are UINT8.", "expert weight banks must be UINT8",
                                    "QMoE whose fc1_experts_weights is INT8", "Pack the quantized expert weights as UINT8."),
    "OFFLOAD-NODE-C12": _node_check("1C.12", "the scales are FLOAT8E4M3FN (nvfp4) or the activation dtype (int).",
                                    "expert scale bank dtype does not match expected offload scale type", "QMoE(int) with FLOAT scales and FLOAT16 activations",
                                    "Cast the scale banks to the activation dtype (int) or FLOAT8E4M3FN (nvfp4)."),
    "OFFLOAD-NODE-C13": _node_check("1C.13", "the expert count is 1..INT_MAX, at least k, and the same in every bank.",
                                    "invalid expert count or weight dimensions for QMoE offload", "QMoE(k=5) with 4 experts",
                                    "Give every bank the same expert count E with k <= E."),
    "OFFLOAD-NODE-C14": _node_check("1C.14", "INT3 weights use the INT3 packed layout (even fc1 rows, 3-bit packing of the columns).",
                                    "INT3 fc1_experts_weights dim 1 must be even", "QMoE(expert_weight_bits=3) with fc1 weights [4, 127, 24]",
                                    "Re-pack the INT3 experts with q38 offload (it writes the layout the backend reads)."),
    "OFFLOAD-NODE-C15": _node_check("1C.15", "int4/int2/nvfp4 weights are in the standard or transposed layout, with aligned H and I.",
                                    "expert weight shapes do not match a supported QMoE offload layout", "QMoE(int4) with fc2 weights [4, 64, 16] for I=64",
                                    "Re-pack the experts in the standard [E, N, K/pack] layout with H and I aligned."),
    "OFFLOAD-NODE-C16": _node_check("1C.16", "the scale banks are [E, 2*I, H/block_size] and [E, H, I/block_size].",
                                    "expert scale dimensions do not match [E, 2*I, H/block_size] and [E, H, I/block_size]",
                                    "QMoE(block_size=32) with fc1 scales [4, 128, 4] for H=64", "Write one scale per block_size weights of each row."),
    "OFFLOAD-NODE-C17": _node_check("1C.17", "optional biases are constant, in the activation dtype, [E, 2*I] (fc1) and [E, H] (fc2).",
                                    "optional bias slot 7 ('fc2_b') must match activation dtype and shape [E, 64]", "QMoE with an fc2 bias of shape [4, 128] for H=64",
                                    "Give the biases the activation dtype and shapes [E, 2*I] / [E, H], or drop them."),
    "OFFLOAD-NODE-C18": _node_check("1C.18", "nvfp4 nodes have constant FLOAT global scales of at least E elements (required); int nodes' are constant when present.",
                                    "NVFP4 requires constant global scale at slot 16", "QMoE(quant_type='nvfp4') without fc2 global scale (slot 16)",
                                    "Store both nvfp4 global scales as FLOAT initializers of E elements."),
    "OFFLOAD-NODE-MOE": _node_check("1B.6", "a plain com.microsoft MoE node (unquantized experts) has no offload backend.",
                                    "operator 'MoE' does not support the QMoE offload backend", "MoE(...) (not QMoE)",
                                    "Quantize the experts into a QMoE node (q38 build / offload), or keep the MoE resident."),
    "OFFLOAD-NODE-PACKED": _node_check("1F", "a MoEPacked node has activation_type swiglu, k in 1..16 and constant 3-D UINT8 expert banks (inputs 2-4) of one expert count in 1..512, >= k.",
                                       "MoEPacked expert weight dimensions are invalid for offload", "MoEPacked(k=0, ...) or with FLOAT16 expert banks",
                                       "Pack the experts as constant UINT8 [E, ., .] banks, 1 <= k <= 16, swiglu."),
    "OFFLOAD-NODE-SHARED": _node_check("1D", "an offloaded node's expert initializers are consumed by no other node (ORT drops such a node from the offload set, repeatedly, until none is left).",
                                       "expert initializer 'fc1_w' is shared with a non-offload consumer", "QMoE whose fc1_experts_weights also feeds an Identity",
                                       "Give the other consumer its own copy of the initializer, or remove it."),
}  # fmt: skip

DOCS: dict[str, RuleDoc] = {
    "SESSION-CFG-001": RuleDoc(
        "SessionOptions.add_session_config_entry hands ORT C strings: ORT cuts key and value at the "
        "first NUL, and ConfigOptions::AddConfigEntry refuses an empty key or one over 1024 bytes "
        "('Config key is empty or longer than maximum length 1024') and a value over 8192 bytes "
        "('Config value is longer than maximum length: 8192'); session creation fails.",
        '"session_options": {"config_entries": {"": "1"}}  (or a 9000-byte value)',
        "Remove the empty key; keep keys within 1024 and values within 8192 UTF-8 bytes.",
    ),
    "OFFLOAD-CFG-001": RuleDoc(
        "ORT 1.32.0 validates every session.moe.offload.* entry when the session is created; a key "
        "that is not one of its 25 known keys (case-sensitive) is refused with 'Unknown "
        "session.moe.offload.* configuration key: KEY'.",
        '"session.moe.offload.Mode": "auto"  (capital M)',
        "Spell the key exactly as ORT documents it (session.moe.offload.mode), or remove it.",
    ),
    "OFFLOAD-CFG-002": RuleDoc(
        "The prototype keys moe.cpu_offload.* of the early offload branch are refused by ORT 1.32.0: "
        "'Prototype configuration key KEY is discarded and not supported in QMoE offload'.",
        '"moe.cpu_offload.enable": "1"',
        "Use the session.moe.offload.* keys (q38 offload writes them), e.g. session.moe.offload.mode=auto.",
    ),
    "OFFLOAD-CFG-003": RuleDoc(
        "Each session.moe.offload.* value has a grammar ORT checks at session creation (modes "
        "disabled/auto/required, placements, byte budgets as decimal integers, 0/1 flags, paths, "
        "node_overrides lists); a value outside it fails with 'Invalid session.moe.offload.KEY "
        "value 'V'; ...' naming the accepted form.",
        '"session.moe.offload.mode": "yes"',
        "Use a value of the key's grammar (the message states it), e.g. mode=required or auto.",
    ),
    "OFFLOAD-CFG-004": RuleDoc(
        "device_expert_bytes and its older alias gpu_budget_bytes are one budget: when both are set "
        "ORT 1.32.0 requires them to be equal and refuses the session otherwise.",
        '"session.moe.offload.device_expert_bytes": "1000", "session.moe.offload.gpu_budget_bytes": "2000"',
        "Set only session.moe.offload.device_expert_bytes (or give both the same value).",
    ),
    "OFFLOAD-CFG-005": RuleDoc(
        "ep.cuda.moe_packed_gpu_experts (environment ORT_MOE_PACKED_GPU_EXPERTS) is parsed as a "
        "non-negative 32-bit integer; anything else fails with 'Invalid "
        "ep.cuda.moe_packed_gpu_experts / ORT_MOE_PACKED_GPU_EXPERTS value ...'.",
        '"ep.cuda.moe_packed_gpu_experts": "-1"',
        "Give a decimal integer from 0 to 2147483647, or drop the entry.",
    ),
    "OFFLOAD-ENV-001": RuleDoc(
        "When session.moe.offload.min_expert_weight is absent from the session's config entries, "
        "ORT 1.32.0 reads the environment variable ORT_QMOE_MIN_EXPERT_WEIGHT at session creation "
        "and parses it with the key's grammar (a float in [0, 1]); anything else fails the session "
        "with 'Invalid session.moe.offload.min_expert_weight value '<v>'; expected a float in "
        "[0, 1].'. An empty variable counts as unset, and a set session key (any value) wins: the "
        "variable is then not read. q38 check does not read the environment (a package has none); "
        "contracts.runner.check_environment checks one.",
        "ORT_QMOE_MIN_EXPERT_WEIGHT=abc in the environment of a process creating a session without "
        "session.moe.offload.min_expert_weight",
        "Set the variable to a float in [0, 1] (e.g. 0.1) or unset it, or set "
        "session.moe.offload.min_expert_weight in the session options (it takes precedence).",
    ),
    "OFFLOAD-ENV-002": RuleDoc(
        "When ep.cuda.moe_packed_gpu_experts is absent from the session's config entries, ORT 1.32.0 "
        "reads the environment variable ORT_MOE_PACKED_GPU_EXPERTS at session creation (on the CPU "
        "wheel too) and parses it as a non-negative 32-bit integer; anything else, an empty value "
        "included, fails the session with 'Invalid ep.cuda.moe_packed_gpu_experts / "
        "ORT_MOE_PACKED_GPU_EXPERTS value '<v>'; expected a non-negative 32-bit integer.'. A set "
        "session key wins. q38 check does not read the environment (a package has none); "
        "contracts.runner.check_environment checks one.",
        "ORT_MOE_PACKED_GPU_EXPERTS=abc (or -1, or 2147483648) in the environment of a process "
        "creating a session without ep.cuda.moe_packed_gpu_experts",
        "Set the variable to a decimal integer from 0 to 2147483647 or unset it, or set "
        "ep.cuda.moe_packed_gpu_experts in the session options (it takes precedence).",
    ),
    "OFFLOAD-SUBGRAPH-001": RuleDoc(
        "With session.moe.offload.mode=required ORT refuses a session whose MoE, QMoE or MoEPacked "
        "node sits inside an If/Loop/Scan body: the offload planner only handles main-graph nodes "
        "(checked on the CPU wheel too).",
        "Loop(...) with body { QMoE(...) }  and  session.moe.offload.mode=required",
        "Move the MoE node into the main graph, or use mode=auto (such nodes then stay resident).",
    ),
    "OFFLOAD-NODE-001": RuleDoc(
        "When the session is created on CUDA, ORT's offload planner examines every MoE candidate: "
        "in mode=required the first ineligible one (unsupported expert_weight_bits, quant layout, "
        "activation, missing shapes, router_weights wired, ...) fails the session naming the node "
        "and reason; in mode=auto it stays on the GPU, which q38 reports as a warning.",
        "QMoE(expert_weight_bits=2, ...) with session.moe.offload.mode=required",
        "Make the node eligible (the message names the reason: e.g. 4- or 8-bit experts, clear "
        "router_weights with q38 offload), or use mode=auto to keep it resident.",
    ),
    "OFFLOAD-TAIL-001": RuleDoc(
        "session.moe.offload.tail_substitution_threshold > 0 substitutes low-ranked experts; ORT "
        "requires min_rank < k on every eligible node, otherwise no expert could be substituted "
        "and the session is refused on CUDA.",
        "tail_substitution_threshold=0.1, min_rank=2 on a QMoE node with k=2",
        "Lower session.moe.offload.min_rank below the node's k, or set tail_substitution_threshold=0.",
    ),
    "ORT-OPSET-001": RuleDoc(
        "ORT refuses at model load a model without any opset import ('Missing opset in the model. "
        "All ModelProtos MUST have at least one entry ...'), a default-domain import below 1 (no "
        "operator resolves), and an import above what this onnxruntime supports ('ONNX Runtime "
        "only *guarantees* support for models stamped with official released onnx opset versions "
        "...').",
        'opset_import { domain: "" version: 0 }',
        "Stamp the graph with a released opset (e.g. 'ai.onnx' 21) that the installed onnxruntime supports.",
    ),
    "ORT-OPSET-002": RuleDoc(
        "An imported domain that onnxruntime registers no operator in is refused unless the "
        "session registers a custom-op library that provides it (the config's custom_ops_library "
        "/ libs).",
        'opset_import { domain: "com.example" version: 1 }  with no custom-op library configured',
        "Remove the unused import, or name the custom-op library in the config's session options.",
    ),
    "ORT-SCHEMA-001": RuleDoc(
        _SCHEMA_SRC + "A node whose op has no schema for its domain at that version fails with "
        "'No Op registered for OP with domain_version of N' (or 'Fatal error: DOMAIN:OP(-1) is "
        "not a registered function/op').",
        'opset_import { domain: "" version: 0 }  node: Gather(...)  -> No Op registered for Gather with domain_version of 0',
        "Use an op that exists at the imported opset (or raise the opset import to one that has it).",
    ),
    "ORT-SCHEMA-002": RuleDoc(
        _SCHEMA_SRC + "Each input's element type must be one of its type parameter's allowed "
        "types: 'Type Error: Type 'tensor(T)' of input parameter (X) of operator (OP) in node (N) "
        "is invalid.'",
        "Relu(x: tensor(int8)) at an opset whose Relu allows only float types",
        "Cast the input to an allowed type (the schema lists them) or use an op that accepts it.",
    ),
    "ORT-SCHEMA-003": RuleDoc(
        _SCHEMA_SRC + "An attribute the op's schema does not declare fails with 'Unrecognized "
        "attribute: NAME for operator OP'.",
        "Relu(x) with attribute alpha=0.1",
        "Remove the attribute, or use the op that declares it (LeakyRelu has alpha).",
    ),
    "ORT-SCHEMA-004": RuleDoc(
        _SCHEMA_SRC + "The number of inputs and outputs must lie within the schema's bounds "
        "(optional and variadic slots included), otherwise the node fails verification.",
        "Relu(a, b)  (Relu takes exactly one input)",
        "Give the op the number of inputs and outputs its schema declares.",
    ),
    "ORT-SCHEMA-005": RuleDoc(
        _SCHEMA_SRC + "All inputs and outputs bound to one type parameter must have one type: "
        "'Type Error: Type parameter (T) of Optype (OP) bound to different types ...'.",
        "Add(a: tensor(float), b: tensor(float16))",
        "Cast the inputs so every slot of the type parameter has the same element type.",
    ),
    "ORT-SCHEMA-006": RuleDoc(
        _SCHEMA_SRC + "Every attribute must have the type the schema declares (an int where a "
        "float is declared, a graph where a tensor is, a Constant without data), otherwise ORT "
        "refuses the node with its attribute type error.",
        "Gather(data, indices) with attribute axis given as a float (axis=1.0)",
        "Write the attribute with its declared type (axis as an INT).",
    ),
    "ORT-SCHEMA-007": RuleDoc(
        _SCHEMA_SRC + "A required attribute that is absent fails with 'Required attribute NAME "
        "is missing.'",
        "com.microsoft GroupQueryAttention(...) without num_heads",
        "Add the required attribute with its intended value.",
    ),
    "ORT-SCHEMA-008": RuleDoc(
        _SCHEMA_SRC + "An empty input or output name means 'absent' and is allowed only in an "
        "optional slot; in a required slot ORT refuses the node.",
        'MatMul("", w)  (empty first input)',
        "Wire a value into every required slot; leave only optional slots empty.",
    ),
    "ORT-SCHEMA-009": RuleDoc(
        _SCHEMA_SRC + "A graph output or value_info that declares a type different from the one "
        "the schema binds for the producing node fails with 'Type Error: Type (T) of output arg "
        "(Y) of node (N) does not match expected type (U).'",
        "y = Relu(x: tensor(float)) with value_info y: tensor(float16)",
        "Fix the declared type (or insert a Cast) so it matches what the op produces.",
    ),
    "ORT-SCHEMA-010": RuleDoc(
        _SCHEMA_SRC + "A node whose schema at the imported opset is deprecated is refused: 'Op "
        "registered for OP is deprecated in domain_version of N'.",
        'opset_import { domain: "" version: 10 }  node: Upsample(...)',
        "Replace the op with its successor (Upsample -> Resize) or import an opset where it is not deprecated.",
    ),
    "ORT-SCHEMA-011": RuleDoc(
        "A node of a domain onnxruntime does not know can only run if the session registers a "
        "custom-op library that provides it; otherwise ORT fails with 'Fatal error: DOMAIN:OP(-1) "
        "is not a registered function/op'.",
        'node { domain: "qwen38.plane" op_type: "Plane" }  with no library in the config',
        "Ship the custom-op library in libs/ and name it in the config (q38 build --lib-NAME), or replace the op.",
    ),
    "ORT-SHAPE-001": RuleDoc(
        "While resolving the graph ORT runs onnx's shape inference of each standard op on the "
        "shapes it infers for the inputs; incompatible MatMul / broadcast dims, a Reshape target "
        "that does not fit, Split sizes that do not sum, a bad Transpose perm or an axis out of "
        "range fail the session with the op's shape-inference error; so does an If whose two branches, "
        "or whose branches and node, disagree on the number of outputs.",
        "MatMul(a: [2, 3], b: [4, 5])",
        "Make the shapes agree (fix the producer, the initializer or the attribute named in the message).",
    ),
    "QSA-PSAI-001": RuleDoc(
        "ORT's PackedSparseAttentionIndexer schema checks its attributes and wiring at session "
        "creation: policy and compress_ratio values, state_capacity, the qsa/csa attribute groups, "
        "the inputs and outputs each policy needs, the key width and past_kv_buffer; a mismatch "
        "fails the node with the schema's message.",
        "PackedSparseAttentionIndexer(..., policy='topk', compress_ratio=0)",
        "Set the attributes and inputs the policy requires (the message names the one at fault).",
    ),
    "QSA-PSAI-002": RuleDoc(
        "With IndexShare (ORT 1.32.0) the indexer needs the state policy, inputs 18-21 given "
        "together, max_output_entries, the status output, consistent shapes and a positive "
        "selection budget; the schema refuses the node otherwise.",
        "PackedSparseAttentionIndexer with input 18 wired and inputs 19-21 empty",
        "Wire the IndexShare inputs 18-21 together with the state policy, or none of them.",
    ),
    "QSA-SAI-001": RuleDoc(
        "ORT's SparseAttentionIndexer schema checks its arity, policy and attribute rules, the "
        "inputs and outputs by policy, tensor ranks, the query width against head_size and the "
        "past_proj_buffer; the session fails with the schema's message.",
        "SparseAttentionIndexer(query: [B, S, 100]) with head_size=64",
        "Make the query width a multiple of head_size and wire the inputs the policy needs.",
    ),
    "QSA-DSA-001": RuleDoc(
        "ORT's DynamicSparseAttention schema requires num_heads > 0, kv_num_heads dividing "
        "num_heads and a rank-3 query; session creation fails otherwise.",
        "DynamicSparseAttention(num_heads=8, kv_num_heads=3, ...)",
        "Choose kv_num_heads dividing num_heads and feed a [batch, seq, hidden] query.",
    ),
    "QSA-MERGE-001": RuleDoc(
        "ORT 1.32.0's PackedSparseAttentionIndexerMerge schema checks the capacity, the policy "
        "and the inputs each policy needs.",
        "PackedSparseAttentionIndexerMerge(capacity=0, ...)",
        "Give a positive capacity and the inputs of the chosen policy.",
    ),
    "QSA-DSA-CUDA-001": RuleDoc(
        "The CUDA DynamicSparseAttention kernel constructor (dynamic_sparse_attention.cc) accepts "
        "only its supported modes, is_causal=1, a valid window and rotary_offset, and 0/1 flags; "
        "on a CUDA session the node fails to instantiate. The CPU wheel never checks it.",
        "DynamicSparseAttention(is_causal=0, ...) assigned to CUDA",
        "Use the supported mode and flags (is_causal=1) for nodes that run on CUDA.",
    ),
    "QSA-INDEXER-CUDA-001": RuleDoc(
        "The CUDA constructors of the QSA indexers require epsilon >= 0 ('OP: epsilon must be >= "
        "0, got E'); only a CUDA session checks it.",
        "PackedSparseAttentionIndexer(epsilon=-1e-6, ...) on CUDA",
        "Set epsilon to a non-negative value (the exporter's default is 1e-6).",
    ),
    "CCONV-SCHEMA-001": RuleDoc(
        "ORT's CausalConvWithState schema requires ndim 1-3, dilation >= 1, state_window 0-8, "
        "channels_last 0/1 (only with ndim 1) and the input / weight ranks that ndim implies; "
        "1.31.1 knows no extended attributes at all. Session creation fails on any EP.",
        "CausalConvWithState(input, weight, ..., dilation=0)",
        "Use dilation >= 1 and the attribute ranges of the installed ORT (drop extended attributes for 1.31.1).",
    ),
    "CCONV-SCHEMA-003": RuleDoc(
        "ORT 1.32.0's extended CausalConvWithState attributes (channels_last=1, ndim=1, "
        "state_window=0 combinations, channel slices, state_length >= (k-1) x dilation, rank-3 "
        "input) are validated by its schema; some combinations are accepted but inconsistent, "
        "which q38 reports as warnings.",
        "CausalConvWithState(channels_last=1, state_length=1) with a kernel of width 4",
        "Make state_length at least (k-1) x dilation and the channel slice fit the weight's channels.",
    ),
    "CCONV-CPU-001": RuleDoc(
        "The CPU CausalConvWithState kernel constructor supports only ndim=1, state_window=0, no "
        "extended options, activation none/silu/swish and dilation <= INT_MAX; a node assigned to "
        "the CPU EP outside that fails session creation.",
        "CausalConvWithState(activation='gelu', ...) on a cpu-variant graph",
        "Use activation none/silu/swish and ndim=1 on CPU graphs (or run the node on CUDA).",
    ),
    "CCONV-CUDA-001": RuleDoc(
        "The CUDA CausalConvWithState kernel supports only ndim=1 ('CUDA CausalConvWithState only "
        "supports ndim=1'), activation none/silu/swish and dilation <= INT_MAX.",
        "CausalConvWithState(ndim=2, ...) on a CUDA graph",
        "Use ndim=1 and a supported activation for CUDA nodes.",
    ),
    "CCONV-RUN-001": RuleDoc(
        "At run time the kernel reads the weight as depthwise [C, 1, k] with C the input's "
        "channels; another shape is not caught at session creation but fails (or reads wrong "
        "memory) on the first run.",
        "CausalConvWithState(input: [1, 64, T], weight: [32, 1, 4])",
        "Give the weight shape [C, 1, k] with C equal to the input's channel count.",
    ),
    "CCONV-RUN-002": RuleDoc(
        "At run time past_state must have the shape (k-1) x dilation implies: [B, C, (k-1)*d] "
        "channels-first, [B, (k-1)*d, C] channels-last, windowed state leading with its window; a "
        "mismatched state is only detected when the model runs.",
        "past_state: [1, 64, 2] for a kernel of width 4, dilation 1 (needs 3)",
        "Declare past_state with (k-1) x dilation history positions in the layout the node uses.",
    ),
    "VCCONV-SCHEMA-001": RuleDoc(
        "ORT's VarlenCausalConvWithState shape inference checks state_update_capacity, dilation, "
        "group_size / delta_offset, that kernel_delta and previous_mask come together (and with the "
        "dynamic attributes), dynamic mode's weight (C,1,2), kernel_delta and previous_mask shapes "
        "against total_tokens and channels, the input and weight ranks, cumulative_sequence_length "
        "and capture_count; the session fails otherwise (1.31.1 has a narrower schema).",
        "VarlenCausalConvWithState(group_size=2, ...) without the kernel_delta input",
        "Wire kernel_delta and previous_mask together with the dynamic attributes; keep the shapes "
        "ORT's message names.",
    ),
    "VCCONV-RUN-001": RuleDoc(
        "The CPU VarlenCausalConvWithState kernel has no dynamic mode: with group_size 1 and "
        "delta_offset 0 its constructor accepts a node whose kernel_delta is wired, and the first "
        "run fails ('CPU VarlenCausalConvWithState does not support dynamic grouped convolution "
        "(CUDA only)'). A warning: the session is created.",
        "VarlenCausalConvWithState(x, w, cu, , state, , kernel_delta, previous_mask) on a CPU graph",
        "Use the static form (no kernel_delta / previous_mask) on CPU graphs, or run the node on CUDA.",
    ),
    "VCCONV-CPU-001": RuleDoc(
        "The CPU VarlenCausalConvWithState kernel has no dynamic grouped mode ('CPU "
        "VarlenCausalConvWithState does not support dynamic grouped convolution (CUDA only)': the "
        "constructor refuses group_size / delta_offset, and a wired kernel_delta is refused on the "
        "first run) and supports activation none/silu/swish only.",
        "VarlenCausalConvWithState(dynamic grouped, ...) on a CPU graph",
        "Use the static form on CPU graphs, or run the node on CUDA.",
    ),
    "GDN-SCHEMA-001": RuleDoc(
        "GatedDeltaNet's shape inference (contrib schema) checks state_update_capacity, the "
        "key/value pairing, initial_state for packed QKV, tensor ranks, the packed width against "
        "the head counts and the tokens / batch dimensions; ORT's graph resolve fails otherwise.",
        "GatedDeltaNet(qkv packed with width 100, num_heads=3, head sizes of 32)",
        "Make the packed width equal the sum of the head widths and give the state the declared rank.",
    ),
    "GDN-CPU-001": RuleDoc(
        "The CPU GatedDeltaNet constructor accepts only its update_rule and gate_activation "
        "spellings, gate_lower_bound < 0, a supported beta_activation and chunk_size; a CPU "
        "session fails otherwise.",
        "GatedDeltaNet(gate_lower_bound=0.5, ...) on a CPU graph",
        "Use the supported spellings and a negative gate_lower_bound.",
    ),
    "CUDA-FALLBACK-001": RuleDoc(
        "A node of a graph the CUDA provider runs needs a CUDA kernel for its op, opset version and "
        "input types; without one ORT places it on the CPU EP (a copy between device and host on "
        "every run; with session.disable_cpu_ep_fallback=1 the session fails). The CUDA kernels come "
        "from the GPU suite's dump of the EP's registry (contracts/schemas/cuda-kernels-VERSION.json "
        "or the file Q38_CUDA_KERNELS names); without a dump the rule reports nothing.",
        "Relu on a CUDA graph with a dump that registers no CUDA Relu",
        "Use an op (or input type) the CUDA EP registers, or accept the fallback for that node.",
        "warning",
    ),
    "HC-SCHEMA-001": RuleDoc(
        "Hyper-connection shape inference requires PreMix num_branches > 0 dividing the flattened "
        "width (grouped rank >= 2) and LowRankMix num_branches > 0, rank >= 1 and a divisible "
        "width; graph resolve fails otherwise.",
        "HyperConnectionPreMix(x: [1, T, 100], num_branches=3)",
        "Choose num_branches dividing the hidden width (the synthetic model uses 4).",
    ),
    "GQA-SCHEMA-001": RuleDoc(
        "GroupQueryAttention's inference (bert_defs) requires a rank-3 query, a packed width "
        "divisible by num_heads + 2 x kv_num_heads and a rank-4 past_key given with past_value.",
        "GroupQueryAttention(query: [B, S, 100], num_heads=8, kv_num_heads=2) with packed QKV",
        "Make the packed width (num_heads + 2 kv_num_heads) x head_size and give past_key and past_value together.",
    ),
    "GQA-CPU-001": RuleDoc(
        "The CPU GroupQueryAttention constructor requires positive head counts, causal 0/1, a "
        "valid local window with a sliding-window cache, and a supported KV quantization type.",
        "GroupQueryAttention(num_heads=0, ...) on a CPU graph",
        "Use positive num_heads / kv_num_heads and the documented window and quantization settings.",
    ),
    "QMOE-SCHEMA-001": RuleDoc(
        "ORT 1.32.0's INT3 QMoE inference requires float16/bfloat16 activations, an integer "
        "quant_type with weights_prepacked=0 explicit, fused SwiGLU with equal FC1/FC3 bits and "
        "the packed INT3 weight layout (bytes sized by each fc's own width).",
        "QMoE(expert_weight_bits=3, activations float32, ...)",
        "Feed float16/bfloat16 activations and write the INT3 weights in the layout ORT expects.",
    ),
    "QMOE-CPU-001": RuleDoc(
        "The CPU QMoE constructor requires k >= 1, a known activation spelling, supported expert "
        "bits and block_size, weights_prepacked as ORT expects, no post-activation clipping, "
        "interleaved SwiGLU, and (1.32.0 shared kernel) its block / SwiGLU / optional-input "
        "limits; bfloat16 only there.",
        "QMoE(k=0, ...) on a CPU graph",
        "Use k >= 1 and the supported activation, bits and block size for CPU nodes.",
    ),
    "QMOE-CPU-002": RuleDoc(
        "ep.cpu.qmoe_deferred_scale must be '0' or '1' when a QMoE node runs on the CPU EP; ORT "
        "refuses the session otherwise.",
        '"ep.cpu.qmoe_deferred_scale": "yes"',
        "Set ep.cpu.qmoe_deferred_scale to '0' or '1', or remove it.",
    ),
    "CFG-VALUES-001": RuleDoc(
        "onnxruntime-genai passes provider options and session config entries to ORT as strings; "
        "a number or boolean in genai_config.json is not accepted by upstream GenAI.",
        '"provider_options": [{"cuda": {"enable_cuda_graph": 1}}]',
        'Write the value as a decimal string: "enable_cuda_graph": "1".',
    ),
    "CFG-PROFILE-001": RuleDoc(
        "The Qwen3.8 graph runtime selects a runtime profile by id; an empty id or two profiles "
        "with one id make the selection ambiguous.",
        '"runtime_profiles": [{"id": "p24"}, {"id": "p24"}]',
        "Give every runtime profile a distinct, non-empty id.",
    ),
    "CFG-PROFILE-002": RuleDoc(
        "Runtime profiles are chosen by device memory: their [minimum, maximum] device-memory "
        "ranges must not overlap, or one GPU matches two profiles.",
        "profile a: [20 GiB, 28 GiB], profile b: [24 GiB, 34 GiB]",
        "Make the ranges disjoint (e.g. [20, 24) and [24, 34] GiB).",
    ),
    "CFG-PREFILL-001": RuleDoc(
        "The prefill graph processes prompts in chunks: 0 < prefill.chunk <= kv_capacity, or the "
        "runtime cannot place a chunk in the KV cache.",
        '"prefill": {"chunk": 8192}  with kv_capacity 4096',
        "Choose a chunk between 1 and kv_capacity.",
    ),
    "CFG-LIB-001": RuleDoc(
        "Custom-op library paths in the config are loaded relative to the package; an absolute "
        "path or one that leaves the package ('..') loads a library the package does not carry.",
        '"custom_ops_library": "/usr/lib/libqwen38_plane.so"',
        "Ship the library in the package (libs/) and name it by a relative path.",
    ),
    "CFG-SURFACE-001": RuleDoc(
        "genai_config.json must match its strict surface: q38's v12b surface, or what "
        "onnxruntime-genai 0.18.0 accepts for builder packages; an unknown key, a wrong type or a "
        "missing required key is refused (the message names the key path).",
        '"model": {"decoder": {"sesion_options": {}}}  (misspelt key)',
        "Fix or remove the key the message names (docs/package-format.md lists the surface).",
    ),
    "CFG-SURFACE-002": RuleDoc(
        "A builder (genai) package's config may carry the keys the Qwen3.8 research builder writes "
        "(model.engram, model.decoder.ple_token_pad_id, the past_indexer_* / past_ple_* input "
        "names, fixed_indexer / fixed_ple state groups, mtp.index_share). q38 reads them, but "
        "released onnxruntime-genai 0.18.0 parses genai_config.json strictly and refuses an "
        "unknown key when it loads the model (its config reader has no handler for the key); q38 "
        "mirrors that key table and reports the first such key as 'onnxruntime-genai 0.18.0 refuses this config: "
        "genai_config.json: KEY.PATH: unknown key'. A warning: the package is valid for the "
        "research runtime, not for released GenAI.",
        '"model": {"decoder": {"ple_token_pad_id": 0, ...}}  (a research-builder key)',
        "Ship the package to the research runtime only, or export it with the released builder "
        "(no research keys) when released onnxruntime-genai must load it; --ignore CFG-SURFACE-002 "
        "or a baseline records the expectation.",
        "warning",
    ),
    "PKG-GRAPH-001": RuleDoc(
        "Every graph must load with q38.package.load_graph, as ORT must: a well-formed protobuf "
        "and graph, external data inside the package and within the data file's length.",
        "model.onnx whose initializer's external data offset + length lies past the end of model.onnx.data",
        "Rewrite the graph and its data together (q38 build / optimize do), or restore the truncated data file.",
    ),
    "PKG-EXTDATA-001": RuleDoc(
        "External-data locations are resolved relative to the graph's directory; ORT refuses an "
        "absolute location or one that escapes the package directory.",
        'initializer w: external_data location "../weights.bin"',
        "Keep data files next to the graph and refer to them by a relative name inside the package.",
    ),
    "PKG-SYMLINK-001": RuleDoc(
        "A symlink in the package that points outside it (or nowhere, or loops) makes the package "
        "depend on files it does not carry; consumers copying it get a broken package.",
        "libs/libx.so -> /opt/build/libx.so",
        "Replace the link with the file (q38 build --copy), or point it inside the package.",
    ),
    "PKG-HARDLINK-001": RuleDoc(
        "onnxruntime reads hard-linked external data, but onnx and onnx-ir refuse it when they "
        "load the model (a data file with more than one link may be written through elsewhere), "
        "so tools other than ORT cannot open the package.",
        "model.onnx.data with st_nlink 2 (q38 build --link hardlink)",
        "Build with --link auto or --copy, or copy the data file to break the link.",
        "warning",
    ),
    "PKG-LIB-001": RuleDoc(
        "A custom-op library the config names must exist in the package as a regular file; ORT's "
        "RegisterCustomOpsLibrary fails otherwise.",
        '"custom_ops_library": "libs/libqwen38_plane.so" with no such file',
        "Add the library to the package (q38 build --lib-NAME PATH) or remove the reference.",
    ),
    "PATH-FIELD-001": RuleDoc(
        "Every path field of the config (graph files, data files, profiles, libraries) must be a "
        "relative path: no absolute path, no '..', no NUL, backslash or invalid Unicode; readers "
        "on other machines resolve it against the package.",
        '"filename": "C:\\\\models\\\\model.onnx"',
        "Write a relative POSIX path inside the package (model.onnx).",
    ),
    "PATH-FIELD-002": RuleDoc(
        "Every path field must resolve inside the package, also through symlinks, and without a "
        "symlink loop.",
        '"filename": "model.onnx" where model.onnx -> ../other/model.onnx',
        "Place the file inside the package (or link to a file inside it).",
    ),
    "PATH-FIELD-003": RuleDoc(
        "Every path field must name an existing regular file: not a directory, FIFO, device or "
        "socket, which a reader would block on or fail to map.",
        '"filename": "graphs"  (a directory)',
        "Point the field at the file itself.",
    ),
    "PATH-FIELD-004": RuleDoc(
        "shared_initializers entries give offset and length as decimal strings; the range must "
        "lie inside their data_file, or onnxruntime-genai maps bytes the file does not have.",
        '"offset": "0x10", "length": "4096"  on a 1000-byte data file',
        "Write decimal offset / length within the data file's size.",
    ),
    "PATH-SPECIAL-001": RuleDoc(
        "A package holds only regular files, directories and symlinks; a FIFO, socket or device "
        "inside it blocks or misleads every tool that copies or hashes the package.",
        "mkfifo pkg/model.onnx.data",
        "Remove the special file and put the real file there.",
    ),
    "PKG-SHARED-001": RuleDoc(
        "onnxruntime-genai 0.18.0 shares initializers between graphs (builders/mtp.py): each "
        "shared_initializers entry must name an initializer of the same dtype and shape in every "
        "sharing graph, stored at the same in-range bytes of its data file.",
        "shared_initializers: embed_tokens shared by decoder and mtp, but mtp's has shape [V, 512] vs [V, 1024]",
        "Regenerate the sharing graph so the initializer matches, or drop it from shared_initializers.",
    ),
    "CFG-GRAPH-001": RuleDoc(
        "The decoder's declared per-layer state names (inputs / outputs templates in the config) "
        "must match its graph's state inputs and outputs; a graph state the config does not "
        "declare is an error, a declared name matching nothing a warning.",
        '"inputs": {"past_key_names": "past_key_%d"} with graph inputs past.%d.key',
        "Make the config's name templates match the graph's state input / output names.",
    ),
    "CFG-GRAPH-002": RuleDoc(
        "An expert-popularity profile (STRP v1) has one row per QMoE node (or decoder layer) and "
        "one column per expert of the graph it applies to; other dimensions mis-assign resident "
        "slots.",
        "expert-profile.bin with 12 layers x 64 experts for a graph of 48 QMoE nodes x 128 experts",
        "Regenerate the profile for this graph (q38 profile) or point the config at the right one.",
    ),
    "CFG-GRAPH-003": RuleDoc(
        "Each multi-draft sN graph verifies N rows (input_ids / position_ids width and the "
        "q38.verify_rows metadata) and takes the target graph's inputs.",
        "model_s3.onnx with input_ids [B, 2] (needs 3 rows)",
        "Regenerate the multi-draft graphs with q38 offload.",
    ),
    "ORT-MODEL-001": RuleDoc(
        "When onnxruntime reads a model (Model::Load, core/graph/model.cc) it compares the model's "
        "ir_version with the newest IR version its onnx build knows and refuses a newer one before "
        "any node is looked at: 'Unsupported model IR version: N, max supported IR version: M' "
        "(onnxruntime 1.31.1 reads up to 13, 1.32.0 up to 14).",
        "model.onnx with ir_version: 99",
        "Save the graph with an IR version the target onnxruntime reads (q38 synth --target-ort; "
        "onnx.helper.make_model(..., ir_version=13) for 1.31.1).",
    ),
    "ORT-MODEL-002": RuleDoc(
        "A ModelProto without an ir_version field is refused by onnxruntime's loader with "
        "'Missing model IR version.' before the graph is resolved.",
        "model.onnx whose ModelProto has no ir_version (field 1 absent)",
        "Write the model with onnx.save / onnx_ir.save, which always set ir_version.",
    ),
    "ORT-MODEL-003": RuleDoc(
        "Graph resolution defines each graph input once; a second input of the same name fails "
        "with 'Duplicate definition-site for (NAME).' when the session is created.",
        "graph inputs: input_ids, attention_mask, input_ids",
        "Rename or remove the duplicate graph input.",
    ),
    "ORT-MODEL-004": RuleDoc(
        "An initializer stored as external data carries location / offset / length fields; "
        "onnxruntime refuses unknown keys, an empty or absolute location, one that leaves the "
        "model's directory ('..'), a missing file, offsets and lengths that are not int64, a length "
        "other than the tensor's byte size, and a range past the end of the file.",
        'external_data { key: "location" value: "../weights.bin" }',
        "Keep data files next to the graph with relative locations; re-save with "
        "onnx.save(..., save_as_external_data=True) so offsets and lengths match the file.",
    ),
    "PKG-READ-001": RuleDoc(
        "A session opens every graph, external-data file and custom-op library it is given; a file "
        "the current user cannot read makes session creation fail with a permission error. q38 "
        "checks access (os.access R_OK) without reading any byte.",
        "model.onnx.data with mode 0000 (or owned by another user, mode 0600)",
        "Give the user running onnxruntime read permission on every file of the package (chmod a+r).",
    ),
    "PKG-TOKENIZER-001": RuleDoc(
        "onnxruntime-genai's og.Tokenizer(model) loads the package's tokenizer through "
        "onnxruntime-extensions from the config's directory (or model.tokenizer_dir below it): "
        "it opens tokenizer_config.json, then tokenizer.json, and fails without either ('Failed to "
        "open a json file: DIR/tokenizer_config.json', 'Invalid file: DIR/tokenizer.json'). The "
        "builder's save_processing writes both with the other tokenizer files; a package that "
        "carries a tokenizer without both still loads as a model, but no application can turn "
        "text into tokens. (A package with no tokenizer file at all is PKG-TOKENIZER-002, a "
        "warning.) Only builder (genai-surface) packages are asked: q38's own v12b packages are "
        "not GenAI models. package_manifest.json is deliberately not required, on either surface: "
        "neither onnxruntime nor onnxruntime-genai opens it (it is q38's provenance record: what "
        "wrote the package, from what, file digests), the builder writes none, and q38's readers "
        "treat it as optional (a present one is validated); without it q38 diff hashes the "
        "weights instead of trusting recorded digests.",
        "a builder package directory with genai_config.json, model.onnx, model.onnx.data and "
        "tokenizer_config.json, but no tokenizer.json",
        "Copy the tokenizer files the builder wrote (tokenizer.json, tokenizer_config.json and the "
        "others save_processing writes) next to genai_config.json, or save them with "
        "AutoTokenizer.from_pretrained(SRC).save_pretrained(PKG).",
    ),
    "PKG-TOKENIZER-002": RuleDoc(
        "A genai-surface package with no tokenizer file at all is a token-ids package: "
        "onnxruntime-genai loads it and generates from token ids (og.Generator.append_tokens), "
        "but og.Tokenizer fails on it ('Failed to open a json file: DIR/tokenizer_config.json'). "
        "q38 export-genai writes such packages on purpose (a v12b source has no tokenizer to "
        "carry). A warning: the package is valid for callers that bring token ids.",
        "the output of q38 export-genai: genai_config.json, model.onnx and its data, no tokenizer files",
        "Copy the model's tokenizer files (tokenizer.json, tokenizer_config.json, ...) next to "
        "genai_config.json when an application must encode text; --ignore PKG-TOKENIZER-002 or a "
        "baseline records a token-ids package as intended.",
        "warning",
    ),
    "PKG-FIT-001": RuleDoc(
        "A runtime profile is chosen for GPUs whose device memory covers what the decoder needs "
        "at that profile's context tier: the device-placed weights, the resident expert slots and "
        "the decoder state (KV caches, GDN recurrent and conv state, indexer caches) at the tier. "
        "Exact bytes from shapes and dtypes (q38 fit); a profile whose sum exceeds its budget "
        "fails when the session allocates (CUDA out of memory).",
        "runtime_profiles[0] for 20 GiB at 32K context whose resident slots alone take 19 GiB",
        "Lower the profile's resident slots (--total-resident-slots / --target-resident-slots) or "
        "its context tier, as the message says; q38 fit shows the breakdown.",
    ),
    "PKG-FIT-002": RuleDoc(
        "The experts that are not resident stay in host memory (cpu_mmap / host_mapped); a profile "
        "whose host bytes exceed its maximum_effective_host_memory_bytes selects a machine that "
        "cannot hold them.",
        "a profile with maximum_effective_host_memory_bytes 32 GiB and 60 GiB of host-placed experts",
        "Keep more experts resident, or raise maximum_effective_host_memory_bytes to what the "
        "package needs (q38 fit prints the host total).",
    ),
    **_NODE_CHECK_DOCS,
}
