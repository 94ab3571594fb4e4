"""The exact outcome lines of every guard case of the optimizer property tables on fixed examples.

Used by tests/unit/properties/test_optimizer_properties.py
(``test_every_guard_case_gives_its_recorded_outcome_on_each_candidate``). Keys are
``table/case`` (every variant of the case), ``table/case/family`` or ``table/case/family/variant``
(the most specific one present wins). Each value is ``Outcome.line()`` of every candidate, in the
pass's order: which guard declines (with its reason and values, as ``--explain`` prints it) and
which candidates fuse. Reviewed line by line when recorded; a change here is a behaviour change.
"""

from __future__ import annotations

OUTCOMES: dict[str, tuple[str, ...]] = {
    'rms/axes3': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/axes_attr': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/cache_capture': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/cache_width': (
        'rms_norm_rotary: /q/Concat: declined: cosine cache shape [6,8] is not [rows, 4]',
        'rms_norm_rotary: /k/Concat: declined: cosine cache shape [6,8] is not [rows, 4]',
    ),
    'rms/concat_axis': (
        'rms_norm_rotary: /q/Concat: declined: rotary Concat axis -2 is not the last axis',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/cos_input': (
        'rms_norm_rotary: /q/Concat: declined: cosine cache is not a constant initializer',
        'rms_norm_rotary: /k/Concat: declined: cosine cache is not a constant initializer',
    ),
    'rms/cos_sin_swapped': (
        'rms_norm_rotary: /q/Concat: declined: rotary products are not x1*cos - x2*sin and x2*cos + x1*sin',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/empty_names/alt0': (
        'rms_norm_rotary: <unnamed Concat #19>: fused',
        'rms_norm_rotary: <unnamed Concat #40>: fused',
    ),
    'rms/empty_names/alt1': (
        'rms_norm_rotary: <unnamed Concat #20>: fused',
        'rms_norm_rotary: <unnamed Concat #42>: fused',
    ),
    'rms/empty_names/com1': (
        'rms_norm_rotary: <unnamed Concat #19>: fused',
        'rms_norm_rotary: <unnamed Concat #40>: fused',
    ),
    'rms/end_max': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/eps_input': (
        'rms_norm_rotary: /q/Concat: declined: epsilon is not a constant scalar',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/eps_negative': (
        'rms_norm_rotary: /q/Concat: declined: epsilon -1.0132789611816406e-06 is not finite and nonnegative',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/flat_minus1': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/fp32': (
        'rms_norm_rotary: /q/Concat: declined: input dtype FLOAT is not float16/bfloat16',
        'rms_norm_rotary: /k/Concat: declined: input dtype FLOAT is not float16/bfloat16',
    ),
    'rms/gather_axis1': (
        'rms_norm_rotary: /q/Concat: declined: cosine is not Unsqueeze(Gather(cache, position_ids, axis=0), [2])',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/halves_of_two_tensors': (
        'rms_norm_rotary: /q/Concat: declined: the two rotary halves are not slices of one normalized tensor',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/heads_minus1': (
        'rms_norm_rotary: /q/Concat: declined: final Reshape shape [0, 0, 16] is not [0, 0, heads*head_size]',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/heads_minus1_known': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/input_consumer': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/input_rank3': (
        'rms_norm_rotary: /q/Concat: declined: input rank 3 is not 4 ([B,S,heads,head_size])',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/keepdims0': (
        'rms_norm_rotary: /q/Concat: declined: ReduceMean axes [-1] / keepdims is not the last axis with keepdims=1',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/none': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/norm_sub': (
        'rms_norm_rotary: /q/Concat: declined: normalization is not Div(r, rms) or Mul(r, Reciprocal(rms))',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/opset12': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/pos_broadcast_11': (
        "rms_norm_rotary: /q/Concat: declined: position ids shape [1,1] is not the input's [B, S] = [B, S]",
        "rms_norm_rotary: /k/Concat: declined: position ids shape [1,1] is not the input's [B, S] = [B, S]",
    ),
    'rms/pos_broadcast_1S': (
        "rms_norm_rotary: /q/Concat: declined: position ids shape [1,S] is not the input's [B, S] = [B, S]",
        "rms_norm_rotary: /k/Concat: declined: position ids shape [1,S] is not the input's [B, S] = [B, S]",
    ),
    'rms/pos_int32': (
        'rms_norm_rotary: /q/Concat: declined: position ids are not int64',
        'rms_norm_rotary: /k/Concat: declined: position ids are not int64',
    ),
    'rms/pos_rank3': (
        'rms_norm_rotary: /q/Concat: declined: position ids rank 3 is not 2 ([B, S])',
        'rms_norm_rotary: /k/Concat: declined: position ids rank 3 is not 2 ([B, S])',
    ),
    'rms/pos_static': (
        "rms_norm_rotary: /q/Concat: declined: position ids shape [2,3] is not the input's [B, S] = [2, 2]",
        "rms_norm_rotary: /k/Concat: declined: position ids shape [2,3] is not the input's [B, S] = [2, 2]",
    ),
    'rms/pow3/alt0': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/pow3/alt1': (
        'rms_norm_rotary: /q/Concat: declined: mean square is not ReduceMean(Pow(r, 2)) of the normalized input',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/pow3/com1': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/private_capture': (
        "rms_norm_rotary: /q/Concat: declined: intermediate 'v2_0' is captured by a subgraph",
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/private_consumer': (
        "rms_norm_rotary: /q/Concat: declined: intermediate 'v2_0' has another consumer (ReduceSum 'extra/v2_0/ReduceSum')",
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/private_output': (
        "rms_norm_rotary: /q/Concat: declined: intermediate 'v2_0' is a graph output",
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/product_of_unsliced': (
        'rms_norm_rotary: /q/Concat: declined: a rotary product is not Mul(Slice(x), Unsqueeze(cos|sin))',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/reduce_axes': (
        'rms_norm_rotary: /q/Concat: declined: ReduceMean axes [-2] / keepdims is not the last axis with keepdims=1',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/reduce_sum': (
        'rms_norm_rotary: /q/Concat: declined: mean square is not a ReduceMean',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/reshape_shape': (
        'rms_norm_rotary: /q/Concat: declined: final Reshape shape [0, -1, 16] is not [0, 0, heads*head_size]',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/rms_abs': (
        'rms_norm_rotary: /q/Concat: declined: rms is not Sqrt(Add(mean, epsilon))',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/rotary_out_consumer': (
        'rms_norm_rotary: /q/Concat: declined: rotary output is not consumed by exactly one flattening Reshape',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/scale_added': (
        'rms_norm_rotary: /q/Concat: declined: rotary input is not Mul(normalized, scale)',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/scale_capture': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/shared_capture': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/shared_consumer': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/sin_other_pos': (
        'rms_norm_rotary: /q/Concat: declined: cosine and sine are gathered with different position ids',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/slice_axes3': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/slice_axis': (
        'rms_norm_rotary: /q/Concat: declined: rotary Slices are not constant single-axis slices of the last axis',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/slice_end': (
        'rms_norm_rotary: /q/Concat: declined: rotary slices [0:5] and [4:8] are not the two halves of head_size 8 (only full-width non-interleaved rotary is fused)',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/slice_start': (
        'rms_norm_rotary: /q/Concat: declined: rotary slices [0:4] and [0:8] are not the two halves of head_size 8 (only full-width non-interleaved rotary is fused)',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/slice_step': (
        'rms_norm_rotary: /q/Concat: declined: rotary Slices are not constant single-axis slices of the last axis',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/slice_step1': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/square_abs': (
        'rms_norm_rotary: /q/Concat: declined: mean square is not ReduceMean(Mul(r, r) | Pow(r, 2))',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/square_of_other/alt0': (
        'rms_norm_rotary: /q/Concat: declined: mean square is not ReduceMean(Mul(r, r)) of the normalized input',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/square_of_other/alt1': (
        'rms_norm_rotary: /q/Concat: declined: mean square is not ReduceMean(Pow(r, 2)) of the normalized input',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/square_of_other/com1': (
        'rms_norm_rotary: /q/Concat: declined: mean square is not ReduceMean(Mul(r, r)) of the normalized input',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/sub_operand_add': (
        'rms_norm_rotary: /q/Concat: declined: rotary Sub / Add operands are not all Mul products',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/target_cpu': (
        'rms_norm_rotary: /q/Concat: declined: no CPU kernel for RMSNormRotary (target cpu)',
        'rms_norm_rotary: /k/Concat: declined: no CPU kernel for RMSNormRotary (target cpu)',
    ),
    'rms/unsq_axes': (
        'rms_norm_rotary: /q/Concat: declined: cosine is not Unsqueeze(Gather(cache, position_ids, axis=0), [2])',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/untyped': (
        'rms_norm_rotary: /q/Concat: declined: input dtype None is not float16/bfloat16',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/w_2d': (
        "rms_norm_rotary: /q/Concat: declined: RMS scale 'q_norm.weight' has shape [1, 8], expected [head_size]",
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/w_fp32': (
        'rms_norm_rotary: /q/Concat: fused',
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/w_input': (
        "rms_norm_rotary: /q/Concat: declined: RMS scale 'q_norm.weight' is not a constant initializer",
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'rms/w_overridable': (
        "rms_norm_rotary: /q/Concat: declined: RMS scale 'q_norm.weight' is not a constant initializer",
        'rms_norm_rotary: /k/Concat: fused',
    ),
    'se/empty_names': (
        'shared_expert: <unnamed MatMul #0>: fused',
    ),
    'se/gate_consumer': (
        'shared_expert: /mlp/shared/gate/MatMul: fused',
    ),
    'se/h_consumer': (
        'shared_expert: /mlp/shared/gate/MatMul: fused',
    ),
    'se/k_mismatch': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: projection weights disagree on the input width ['6', '7']",
    ),
    'se/none': (
        'shared_expert: /mlp/shared/gate/MatMul: fused',
    ),
    'se/proj_output/idx0': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: projection output 'v1_0' is a graph output",
    ),
    'se/proj_output/idx1': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: projection output 'v2_0' is a graph output",
    ),
    'se/proj_output/idx2': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: projection output 'v3_0' is a graph output",
    ),
    'se/sg_consumer': (
        'shared_expert: /mlp/shared/gate/MatMul: declined: 0 shared-gate MatMul -> Sigmoid projections read the input, not one',
    ),
    'se/sg_width2': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: shared-gate weight 'mlp.shared_expert_gate.weight' is not [H, 1]",
    ),
    'se/shared_weights': (
        'shared_expert: /mlp/shared/gate/MatMul: fused',
    ),
    'se/silu_twice': (
        'shared_expert: /mlp/shared/gate/MatMul: declined: SiLU output feeds 3 Mul nodes, not one up-projection product',
    ),
    'se/target_cpu': (
        'shared_expert: /mlp/shared/gate/MatMul: fused',
    ),
    'se/up_capture': (
        'shared_expert: /mlp/shared/gate/MatMul: fused',
    ),
    'se/w_3d/idx0': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: gate weight 'mlp.shared_expert.gate_proj.weight' is not 2-D",
    ),
    'se/w_3d/idx1': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: up weight 'mlp.shared_expert.up_proj.weight' is not 2-D",
    ),
    'se/w_3d/idx2': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: shared-gate weight 'mlp.shared_expert_gate.weight' is not 2-D",
    ),
    'se/w_fp32': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: projection weights have different dtypes ['FLOAT', 'FLOAT16']",
    ),
    'se/w_input/idx0': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: gate weight 'mlp.shared_expert.gate_proj.weight' is not a constant initializer",
    ),
    'se/w_input/idx1': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: up weight 'mlp.shared_expert.up_proj.weight' is not a constant initializer",
    ),
    'se/w_input/idx2': (
        "shared_expert: /mlp/shared/gate/MatMul: declined: shared-gate weight 'mlp.shared_expert_gate.weight' is not a constant initializer",
    ),
    'hc/down_3d': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: hyper-connection projection weights are not static 2-D tensors',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/down_input': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: a hyper-connection weight is not a constant initializer',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/down_reads_streams': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: down projection MatMul does not read the normalized streams',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/empty_names': (
        'hyper_connection: <unnamed HyperConnectionPreMix #5>: fused',
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix_1: fused',
    ),
    'hc/empty_names_extra_reader/idx0': (
        "hyper_connection: <unnamed HyperConnectionPreMix #5>: declined: intermediate 'v1_0' has another consumer (ReduceSum '')",
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/empty_names_extra_reader/idx1': (
        "hyper_connection: <unnamed HyperConnectionPreMix #5>: declined: intermediate 'v2_0' has another consumer (ReduceSum '')",
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/empty_names_extra_reader/idx2': (
        "hyper_connection: <unnamed HyperConnectionPreMix #5>: declined: intermediate 'v3_0' has another consumer (ReduceSum '')",
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/empty_names_extra_reader/idx3': (
        "hyper_connection: <unnamed HyperConnectionPreMix #5>: declined: intermediate 'v4_0' has another consumer (ReduceSum '')",
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/empty_names_extra_reader/idx4': (
        "hyper_connection: <unnamed HyperConnectionPreMix #5>: declined: intermediate 'v5_0' has another consumer (ReduceSum '')",
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/empty_names_extra_reader/idx5': (
        "hyper_connection: <unnamed HyperConnectionPreMix #5>: declined: intermediate 'v7_0' has another consumer (ReduceSum '')",
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/empty_names_extra_reader/idx6': (
        "hyper_connection: <unnamed HyperConnectionPreMix #5>: declined: intermediate 'v8_0' has another consumer (ReduceSum '')",
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/empty_names_extra_reader/idx7': (
        "hyper_connection: <unnamed HyperConnectionPreMix #5>: declined: intermediate 'v9_0' has another consumer (ReduceSum '')",
        'hyper_connection: <unnamed HyperConnectionPreMix #17>: fused',
        'hyper_connection: /HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/eps_none': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused',
    ),
    'hc/gate_mul_commuted': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused',
    ),
    'hc/gate_per_branch': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: PreMix gate is a per-branch Sigmoid(MatMul(hn, W)) with no low-rank ScaledSiLU projection (LowRankMix needs down -> ScaledSiLU -> up)',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/gate_tanh': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: PreMix gate is not Sigmoid(MatMul(...))',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/gdiv_input': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: gate_div / gate_mul are not constant scalars (gate_div != 0)',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/gdiv_zero': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: gate_div / gate_mul are not constant scalars (gate_div != 0)',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/inject_mul_not_div': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: inject projection is not Mul(Sigmoid(Div(inject, gate_div)), gate_mul)',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/inject_width/idx0/C1': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: inject weight '/l0/attn_hc.inject' shape [4, 2] is not (C*H, C) = [4, 1]",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/inject_width/idx0/C2': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: inject weight '/l0/attn_hc.inject' shape [8, 3] is not (C*H, C) = [8, 2]",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/nb_mismatch': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: num_branches is missing or differs between BranchwiseRMSNorm and PreMix',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/none': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused',
    ),
    'hc/norm_without_scale': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: BranchwiseRMSNorm has no scale',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/pg_capture': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused',
    ),
    'hc/post_gate_per_feature/idx0/C1': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape [B,S,1,4] is not provably (..., C)',
    ),
    'hc/post_gate_per_feature/idx0/C2': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape [B,S,2,4] is not provably (..., C)',
    ),
    'hc/pre_consumer': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused',
    ),
    'hc/premix_reads_streams': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: PreMix streams input is not a BranchwiseRMSNorm output',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_capture/idx0': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v1_0' is captured by a subgraph",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_capture/idx1': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v2_0' is captured by a subgraph",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_capture/idx2': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v3_0' is captured by a subgraph",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_capture/idx3': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v4_0' is captured by a subgraph",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_capture/idx4': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v5_0' is captured by a subgraph",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_capture/idx5': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v7_0' is captured by a subgraph",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_capture/idx6': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v8_0' is captured by a subgraph",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_capture/idx7': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v9_0' is captured by a subgraph",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_consumer/idx0': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v1_0' has another consumer (ReduceSum 'extra/v1_0/ReduceSum')",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_consumer/idx1': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v2_0' has another consumer (ReduceSum 'extra/v2_0/ReduceSum')",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_consumer/idx2': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v3_0' has another consumer (ReduceSum 'extra/v3_0/ReduceSum')",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_consumer/idx3': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v4_0' has another consumer (ReduceSum 'extra/v4_0/ReduceSum')",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_consumer/idx4': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v5_0' has another consumer (ReduceSum 'extra/v5_0/ReduceSum')",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_consumer/idx5': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v7_0' has another consumer (ReduceSum 'extra/v7_0/ReduceSum')",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_consumer/idx6': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v8_0' has another consumer (ReduceSum 'extra/v8_0/ReduceSum')",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_consumer/idx7': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v9_0' has another consumer (ReduceSum 'extra/v9_0/ReduceSum')",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_output/idx0': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v1_0' is a graph output",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_output/idx1': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v2_0' is a graph output",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_output/idx2': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v3_0' is a graph output",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_output/idx3': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v4_0' is a graph output",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_output/idx4': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v5_0' is a graph output",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_output/idx5': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v7_0' is a graph output",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_output/idx6': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v8_0' is a graph output",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/private_output/idx7': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: intermediate 'v9_0' is a graph output",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/reader_before_mix': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused',
    ),
    'hc/scale_2d/idx0/C1': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: norm scale '/l0/attn_hc.norm.weight' shape [1,4] is not the flattened (C*H) layout",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/scale_2d/idx0/C2': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: norm scale '/l0/attn_hc.norm.weight' shape [2,4] is not the flattened (C*H) layout",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/scale_fp32': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: weight '/l0/attn_hc.norm.weight' dtype FLOAT != streams dtype FLOAT16 (LowRankMix needs one T)",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/scale_input': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: a hyper-connection weight is not a constant initializer',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/scale_per_feature/idx0/C1': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused',
    ),
    'hc/scale_per_feature/idx0/C2': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: norm scale length 4 != C*H = 8',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/scale_per_feature_unknown_width/idx0/C1': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: fused',
    ),
    'hc/scale_per_feature_unknown_width/idx0/C2': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: norm scale '/l0/attn_hc.norm.weight' length 4 is not C*H = 8 (down rows)",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/silu_of_tanh': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: ScaledSiLU input is neither MatMul(hn, down) nor a Split of MatMul(hn, [down|inject])',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/silu_scale_input': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: ScaledSiLU uses a runtime scale input',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/streams_capture': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        "hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix output 'streams_1' is captured by a subgraph",
    ),
    'hc/target_cpu': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: no CPU kernel for HyperConnectionLowRankMix (target cpu)',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: declined: no CPU kernel for HyperConnectionLowRankMix (target cpu)',
    ),
    'hc/two_injects': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: 2 inject projection MatMuls read the normalized streams, not one',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/up_per_branch/idx0/C1': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: up weight '/l0/attn_hc.up' shape [3, 1] is not (R, C*H) = [3, 4] (per-feature gates)",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/up_per_branch/idx0/C2': (
        "hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: up weight '/l0/attn_hc.up' shape [3, 2] is not (R, C*H) = [3, 8] (per-feature gates)",
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'hc/up_reads_relu': (
        'hyper_connection: /l0/attn_hc/HyperConnectionPreMix: declined: up projection does not read a ScaledSiLU',
        'hyper_connection: /l0/mlp_hc/HyperConnectionPreMix: fused',
        'hyper_connection: /l0/mlp_hc/HyperConnectionLowRankMix: declined: PostMix post_mix shape None is not provably (..., C)',
    ),
    'conv/axis2': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/channels_last_attr': (
        'causal_conv_state: /conv/CausalConvWithState: declined: conv already uses channels_last=1',
    ),
    'conv/concat_axis1': (
        'causal_conv_state: /conv/CausalConvWithState: declined: carry Concat axis 1 is not the sequence axis',
    ),
    'conv/concat_not_x/channels_first': (
        "causal_conv_state: /conv/CausalConvWithState: declined: carry Concat does not append the conv's own input to its past state",
    ),
    'conv/concat_not_x/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: declined: first-token carry is not Concat(Slice(past,[1],[MAX]), Slice(x,[0],[1]))',
    ),
    'conv/concat_not_x/channels_last': (
        "causal_conv_state: /conv/CausalConvWithState: declined: carry Concat does not append the conv's own input to its past state",
    ),
    'conv/concat_swapped/channels_first': (
        'causal_conv_state: /conv/CausalConvWithState: declined: no Concat/Slice carry chain reads the past state',
    ),
    'conv/concat_swapped/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: declined: first-token carry is not Concat(Slice(past,[1],[MAX]), Slice(x,[0],[1]))',
    ),
    'conv/concat_swapped/channels_last': (
        'causal_conv_state: /conv/CausalConvWithState: declined: no Concat/Slice carry chain reads the past state',
    ),
    'conv/constant_node_args': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/dilation0': (
        'causal_conv_state: /conv/CausalConvWithState: declined: dilation=0 is not >= 1',
    ),
    'conv/dilation_mismatch/channels_first': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length 2 != (K-1)*dilation = 4',
    ),
    'conv/dilation_mismatch/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/dilation_mismatch/channels_last': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length 2 != (K-1)*dilation = 4',
    ),
    'conv/empty_names/channels_first': (
        'causal_conv_state: <unnamed CausalConvWithState #3>: fused',
    ),
    'conv/empty_names/first_token': (
        'causal_conv_state: <unnamed CausalConvWithState #4>: fused',
    ),
    'conv/empty_names/channels_last': (
        'causal_conv_state: <unnamed CausalConvWithState #2>: fused',
    ),
    'conv/end_big': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/extended': (
        'causal_conv_state: /conv/CausalConvWithState: declined: extended attribute state_length is set (CUDA-only path)',
    ),
    'conv/hist_wrong/channels_first/d1': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length 3 != (K-1)*dilation = 2',
    ),
    'conv/hist_wrong/channels_first/d2': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length 5 != (K-1)*dilation = 4',
    ),
    'conv/hist_wrong/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/hist_wrong/channels_last/d1': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length 3 != (K-1)*dilation = 2',
    ),
    'conv/hist_wrong/channels_last/d2': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length 5 != (K-1)*dilation = 4',
    ),
    'conv/ndim2': (
        'causal_conv_state: /conv/CausalConvWithState: declined: ndim=2 is not 1',
    ),
    'conv/no_past': (
        'causal_conv_state: /conv/CausalConvWithState: declined: conv has no past_state input (no state to carry)',
    ),
    'conv/none': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/pT_consumer/channels_first': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/pT_consumer/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/pT_consumer/channels_last': (
        "causal_conv_state: /conv/CausalConvWithState: declined: transpose 'v1_0' is not private to the conv and its carry",
    ),
    'conv/present_capture': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/private_capture/channels_first': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v2_0' is captured by a subgraph",
    ),
    'conv/private_capture/first_token': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v2_0' is captured by a subgraph",
    ),
    'conv/private_capture/channels_last': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v5_0' is captured by a subgraph",
    ),
    'conv/private_consumer/channels_first': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v2_0' has another consumer (ReduceSum 'extra/v2_0/ReduceSum')",
    ),
    'conv/private_consumer/first_token': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v2_0' has another consumer (ReduceSum 'extra/v2_0/ReduceSum')",
    ),
    'conv/private_consumer/channels_last': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v5_0' has another consumer (ReduceSum 'extra/v5_0/ReduceSum')",
    ),
    'conv/private_output/channels_first': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v2_0' is a graph output",
    ),
    'conv/private_output/first_token': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v2_0' is a graph output",
    ),
    'conv/private_output/channels_last': (
        "causal_conv_state: /conv/CausalConvWithState: declined: intermediate 'v5_0' is a graph output",
    ),
    'conv/slice_step/channels_first': (
        'causal_conv_state: /conv/CausalConvWithState: declined: carry Slice is not a constant trailing slice of the sequence axis',
    ),
    'conv/slice_step/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: declined: first-token carry is not Concat(Slice(past,[1],[MAX]), Slice(x,[0],[1]))',
    ),
    'conv/slice_step/channels_last': (
        'causal_conv_state: /conv/CausalConvWithState: declined: carry Slice is not a constant trailing slice of the sequence axis',
    ),
    'conv/state_consumed': (
        'causal_conv_state: /conv/CausalConvWithState: declined: present_state output already has consumers',
    ),
    'conv/state_not_transposed_back/channels_first': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/state_not_transposed_back/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/state_not_transposed_back/channels_last': (
        'causal_conv_state: /conv/CausalConvWithState: declined: carried state is not transposed back to channels-last',
    ),
    'conv/state_update': (
        'causal_conv_state: /conv/CausalConvWithState: declined: state_update output 2 is declared',
    ),
    'conv/state_window': (
        'causal_conv_state: /conv/CausalConvWithState: declined: non-default attribute state_window=2',
    ),
    'conv/tail_start2/channels_first/d1': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length -2 != (K-1)*dilation = 2',
    ),
    'conv/tail_start2/channels_first/d2': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length -2 != (K-1)*dilation = 4',
    ),
    'conv/tail_start2/first_token/d1': (
        'causal_conv_state: /conv/CausalConvWithState: declined: first-token carry does not keep (K-1)*dilation = 2 positions',
    ),
    'conv/tail_start2/first_token/d2': (
        'causal_conv_state: /conv/CausalConvWithState: declined: first-token carry does not keep (K-1)*dilation = 4 positions',
    ),
    'conv/tail_start2/channels_last/d1': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length -2 != (K-1)*dilation = 2',
    ),
    'conv/tail_start2/channels_last/d2': (
        'causal_conv_state: /conv/CausalConvWithState: declined: history length -2 != (K-1)*dilation = 4',
    ),
    'conv/target_cpu': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/two_slices/channels_first': (
        'causal_conv_state: /conv/CausalConvWithState: declined: carry history is not consumed by exactly one Slice',
    ),
    'conv/two_slices/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/two_slices/channels_last': (
        'causal_conv_state: /conv/CausalConvWithState: declined: carry history is not consumed by exactly one Slice',
    ),
    'conv/weight_2d': (
        'causal_conv_state: /conv/CausalConvWithState: declined: weight shape is not a static [C, 1, K]',
    ),
    'conv/x_consumer/channels_first': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/x_consumer/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/x_consumer/channels_last': (
        "causal_conv_state: /conv/CausalConvWithState: declined: transpose 'v2_0' is not private to the conv and its carry",
    ),
    'conv/y_consumer/channels_first': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/y_consumer/first_token': (
        'causal_conv_state: /conv/CausalConvWithState: fused',
    ),
    'conv/y_consumer/channels_last': (
        'causal_conv_state: /conv/CausalConvWithState: declined: conv output is not read by exactly one Transpose([0,2,1])',
    ),
    'fp8/act_fp32': (
        'fp8_head: /lm_head/MatMul: declined: activation dtype FLOAT is not float16/bfloat16',
    ),
    'fp8/capture': (
        "fp8_head: /lm_head/MatMul: declined: head output 'logits' is captured by a subgraph",
    ),
    'fp8/fused': (
        'fp8_head: /lm_head/MatMul: declined: already a fused FP8 projection',
    ),
    'fp8/mtp_name': (
        'fp8_head: /lm_head/MatMul: fused',
    ),
    'fp8/n_consumer': (
        'fp8_head: /lm_head/MatMul: fused',
    ),
    'fp8/nbits': (
        'fp8_head: /lm_head/MatMul: declined: head projection is already quantized (MatMulNBits); FP8 needs a float weight',
    ),
    'fp8/none': (
        'fp8_head: /lm_head/MatMul: fused',
    ),
    'fp8/not_logits': (
        "fp8_head: /lm_head/MatMul: declined: graph output 'next_embeds' is not a logits projection",
    ),
    'fp8/target_cpu': (
        'fp8_head: /lm_head/MatMul: declined: no CPU kernel for MatMulBlockQuantizedFp8Weight (target cpu)',
    ),
    'fp8/w_3d': (
        'fp8_head: /lm_head/MatMul: declined: head weight shape [1,16,8] is not a static [H, V]',
    ),
    'fp8/w_capture': (
        'fp8_head: /lm_head/MatMul: fused',
    ),
    'fp8/w_input': (
        'fp8_head: /lm_head/MatMul: declined: head weight is not a constant initializer',
    ),
    'fp8/w_int8': (
        'fp8_head: /lm_head/MatMul: declined: head weight dtype INT8 cannot be quantized',
    ),
    'fp8/width_mismatch': (
        'fp8_head: /lm_head/MatMul: declined: activation width 17 != weight rows 16',
    ),
}
