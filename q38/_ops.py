"""Domain and operator names, as constants, so that no module spells them by hand."""

from __future__ import annotations

from typing import Final

MS_DOMAIN: Final = "com.microsoft"
ONNX_DOMAIN: Final = ""
QWEN_FOLD_DOMAIN: Final = "qwen.fold"
MS_OPSET: Final = 1
ONNX_OPSET: Final = 21
IR_VERSION: Final = 10

# com.microsoft contrib operators used by Qwen3.8-Flash packages.
QMOE: Final = "QMoE"
MOE: Final = "MoE"
MOE_PACKED: Final = "MoEPacked"
QMOE_OFFLOAD: Final = "QMoEOffload"  # legacy operator of the old tool; never emitted
GATED_ADD: Final = "GatedAdd"
GATED_DELTA_NET: Final = "GatedDeltaNet"
GATED_RMS_NORM: Final = "GatedRMSNorm"
CAUSAL_CONV_WITH_STATE: Final = "CausalConvWithState"
VARLEN_CAUSAL_CONV_WITH_STATE: Final = "VarlenCausalConvWithState"
BRANCHWISE_RMS_NORM: Final = "BranchwiseRMSNorm"
SCALED_SILU: Final = "ScaledSiLU"
HC_PRE_MIX: Final = "HyperConnectionPreMix"
HC_POST_MIX: Final = "HyperConnectionPostMix"
HC_LOW_RANK_MIX: Final = "HyperConnectionLowRankMix"
RMS_NORM_ROTARY: Final = "RMSNormRotary"
SPARSE_ATTENTION_INDEXER: Final = "SparseAttentionIndexer"
PACKED_SPARSE_ATTENTION_INDEXER: Final = "PackedSparseAttentionIndexer"
PACKED_SPARSE_ATTENTION_INDEXER_MERGE: Final = "PackedSparseAttentionIndexerMerge"
DYNAMIC_SPARSE_ATTENTION: Final = "DynamicSparseAttention"
GROUP_QUERY_ATTENTION: Final = "GroupQueryAttention"
ROTARY_EMBEDDING: Final = "RotaryEmbedding"
SKIP_SIMPLIFIED_LAYER_NORM: Final = "SkipSimplifiedLayerNormalization"
MATMUL_NBITS: Final = "MatMulNBits"
MATMUL_FP8: Final = "MatMulBlockQuantizedFp8Weight"
PAGED_ATTENTION: Final = "PagedAttention"
FOLD_MID2: Final = "FoldMid2"  # qwen.fold domain, custom-op lineage only
SIMPLIFIED_LAYER_NORM: Final = "SimplifiedLayerNormalization"  # ai.onnx domain (ORT-only schema)
M_ROTARY_EMBEDDING: Final = "MRotaryEmbedding"
ENGRAM_GATE: Final = "EngramGate"
LINEAR_ATTENTION: Final = "LinearAttention"
LINEAR_ATTENTION_GATE: Final = "LinearAttentionGate"
NGRAM_HASH_MAPPING: Final = "NGramHashMapping"
GATHER_BLOCK_QUANTIZED: Final = "GatherBlockQuantized"
BUILDER_ONNX_OPSET: Final = 22  # the public builder writes ai.onnx opset 22
# Which ops have a CPU kernel is probed from the installed onnxruntime: q38.ort_kernels.
