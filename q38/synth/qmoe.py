"""Int4 block quantization for QMoE experts and the CUTLASS SM80 mixed-GEMM byte layout.

``pack_sm80_int4`` is a numpy port of onnxruntime 1.32.0's private
``onnxruntime.quantization.cuda_quantizer._pack_weights_for_cuda_mixed_gemm`` (bits=4, arch 80) and
its ``_preprocess_weights_for_mixed_gemm_torch`` helper: permute_B_rows -> subbyte_transpose ->
interleave_column_major -> add_bias_and_interleave. ORT 1.32.0's CPU QMoE reads this layout when
``weights_prepacked=1`` (int4); raw bytes there give silently wrong numbers.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = [
    "dequantize_int4",
    "pack_sm80_int4",
    "pack_sm80_int4_steps",
    "quantize_int4",
    "reference_qmoe",
]

# permutation_map["16_4"] of the ORT packer (fp16 activations, 4-bit weights).
_PERM_16_4 = (0, 1, 8, 9, 16, 17, 24, 25, 2, 3, 10, 11, 18, 19, 26, 27,
              4, 5, 12, 13, 20, 21, 28, 29, 6, 7, 14, 15, 22, 23, 30, 31)  # fmt: skip


def quantize_int4(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric block int4 of ``w`` [N, K] along K: (raw codes, scales).

    Raw codes are uint8 [N, K/2], low nibble first, zero point 8; scales are fp16 [N, K/block].
    """
    n, k = w.shape
    blocks = w.astype(np.float32).reshape(n, k // block, block)
    amax = np.abs(blocks).max(axis=-1)
    scale = (np.maximum(amax, 1e-6) / 7.0).astype(np.float16)
    q = np.clip(np.rint(blocks / scale.astype(np.float32)[..., None]), -8, 7).astype(np.int16) + 8
    q = q.reshape(n, k).astype(np.uint8)
    raw = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return raw, scale


def dequantize_int4(raw: np.ndarray, scale: np.ndarray, block: int) -> np.ndarray:
    """Float32 [N, K] from raw [N, K/2] and scales [N, K/block]."""
    n = raw.shape[0]
    q = np.empty((n, raw.shape[1] * 2), dtype=np.float32)
    q[:, 0::2] = raw & 0x0F
    q[:, 1::2] = raw >> 4
    k = q.shape[1]
    w = (q - 8.0).reshape(n, k // block, block) * scale.astype(np.float32)[..., None]
    return w.reshape(n, k)


def _check_dims(n: int, k: int) -> None:
    if k % 64 or n % 16:
        raise ValueError(f"SM80 int4 packing needs K % 64 == 0 and N % 16 == 0, got N={n} K={k}")


def pack_sm80_int4_steps(raw: np.ndarray, n: int, k: int) -> np.ndarray:
    """The step-by-step port of ORT's packer (slow; the reference ``pack_sm80_int4`` must match)."""
    _check_dims(n, k)
    q = np.ascontiguousarray(raw, dtype=np.uint8)
    lead = q.shape[:-2]
    q = q.reshape(-1, n, k // 2)
    e = q.shape[0]
    unpacked = np.empty((e, n, k), dtype=np.int16)
    unpacked[:, :, 0::2] = q & 0x0F
    unpacked[:, :, 1::2] = q >> 4
    signed_t = (unpacked - 8).transpose(0, 2, 1)  # (E, K, N), zero point 8
    t = ((signed_t[:, :, 0::2] & 0x0F) | ((signed_t[:, :, 1::2] & 0x0F) << 4)).astype(np.uint8)
    rows, cols = k, n // 2
    # permute_B_rows_for_mixed_gemm (32 rows per MMA for 4-bit B)
    row_idx = np.array([(r // 32) * 32 + _PERM_16_4[r % 32] for r in range(rows)])
    t = t[:, row_idx, :]
    # subbyte_transpose: (K, N/2) nibbles -> (N, K/2) nibbles, stored with shape (K, N/2)
    low = (t & 0x0F).transpose(0, 2, 1)  # (E, C, R)
    high = (t >> 4).transpose(0, 2, 1)
    merged = np.stack([low, high], axis=2).reshape(e, 2 * cols, rows)  # (E, N, K)
    t = (merged[:, :, 0::2] + merged[:, :, 1::2] * 16).astype(np.uint8).reshape(e, rows, cols)
    # interleave_column_major_tensor (interleave 4, 64 rows per tile, 32 bytes per chunk)
    t = t.reshape(e, -1, 4, rows // 64, 32).transpose(0, 1, 3, 2, 4).reshape(e, rows, cols)
    # add_bias_and_interleave_quantized_tensor_inplace (4-bit)
    nib = np.stack([t & 0x0F, t >> 4], axis=-1).reshape(-1, 8)[:, [0, 2, 4, 6, 1, 3, 5, 7]]
    nib = nib.reshape(e, rows, 2 * cols).astype(np.int16)
    nib = np.where(nib > 7, nib - 8, nib + 8)
    out = (nib[:, :, 0::2] + nib[:, :, 1::2] * 16).astype(np.uint8)
    packed: np.ndarray = out.reshape(*lead, rows, cols)
    return packed


@lru_cache(maxsize=16)
def _nibble_source(n: int, k: int) -> np.ndarray:
    """For each packed nibble (low first), the raw nibble it copies (int64 [N*K]).

    The packer moves nibbles and maps each value v -> ((v - 8) & 15) ^ 8 == v, so it is a pure
    nibble permutation. Found by packing the raw nibble positions 4 bits at a time.
    """
    pos = np.arange(n * k, dtype=np.int64)
    src = np.zeros(n * k, dtype=np.int64)
    for shift in range(0, max(1, (n * k - 1).bit_length()), 4):
        nib = ((pos >> shift) & 15).astype(np.uint8)
        packed = pack_sm80_int4_steps((nib[0::2] | (nib[1::2] << 4)).reshape(n, k // 2), n, k)
        flat = packed.reshape(-1)
        src |= np.stack([flat & 15, flat >> 4], axis=-1).reshape(-1).astype(np.int64) << shift
    return src


# Within each 16-byte block the packer's permutation is this 4x8 -> 8x4 nibble transpose.
_BLOCK_TRANSPOSE = np.arange(32).reshape(4, 8).T.reshape(-1)


@lru_cache(maxsize=16)
def _blockwise(n: int, k: int) -> bool:
    """True when the permutation keeps every 16-byte block in place (a nibble transpose inside)."""
    src = _nibble_source(n, k).reshape(-1, 32)
    base = np.arange(0, n * k, 32)[:, None]
    return bool(np.array_equal(src, base + _BLOCK_TRANSPOSE))


def _pack_blocks(q: np.ndarray) -> np.ndarray:
    """The 4x8 -> 8x4 nibble transpose of every 16-byte block of ``q`` (uint8, size % 16 == 0).

    Input rows r0..r3 (4 bytes, 8 nibbles each) -> output byte 4j + 2h + p holds nibble 2j + h of
    rows 2p (low) and 2p + 1 (high).
    """
    r = q.reshape(-1).view("<u4").reshape(-1, 4)
    out = np.empty((r.shape[0], 4, 2, 2), dtype=np.uint8)
    lo4 = np.uint32(0x0F0F0F0F)
    for p in (0, 1):
        a, b = r[:, 2 * p], r[:, 2 * p + 1]
        low = (a & lo4) | ((b & lo4) << np.uint32(4))
        high = ((a >> np.uint32(4)) & lo4) | (b & np.uint32(0xF0F0F0F0))
        out[:, :, 0, p] = low.astype("<u4", copy=False).view(np.uint8).reshape(-1, 4)
        out[:, :, 1, p] = high.astype("<u4", copy=False).view(np.uint8).reshape(-1, 4)
    return out.reshape(-1)


def pack_sm80_int4(raw: np.ndarray, n: int, k: int) -> np.ndarray:
    """CUTLASS SM80 bytes (uint8 [..., K, N/2]) of raw ORT int4 storage [..., N, K/2] (batched).

    Byte-identical to ``pack_sm80_int4_steps``, computed as the equivalent nibble permutation.
    """
    _check_dims(n, k)
    q = np.ascontiguousarray(raw, dtype=np.uint8)
    lead = q.shape[:-2]
    if _blockwise(n, k):
        return _pack_blocks(q).reshape(*lead, k, n // 2)
    nib = np.empty((q.size // (n * k // 2), n * k), dtype=np.uint8)
    flat = q.reshape(nib.shape[0], -1)
    nib[:, 0::2] = flat & 15
    nib[:, 1::2] = flat >> 4
    p = np.take(nib, _nibble_source(n, k), axis=1)
    return (p[:, 0::2] | (p[:, 1::2] << 4)).reshape(*lead, k, n // 2)


def reference_qmoe(
    x: np.ndarray,
    router_logits: np.ndarray,
    w1: np.ndarray,
    w2: np.ndarray,
    k: int,
    router_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Float32 reference of ORT 1.32.0 CPU QMoE (int4, weights_prepacked=1, swiglu interleaved).

    x [T, H]; router_logits [T, E] (QMoE's ``router_probs`` input: ORT applies softmax to it);
    w1 [E, 2I, H] dequantized fc1 (rows gate/up interleaved); w2 [E, H, I] dequantized fc2.
    Top-k is chosen on softmax(router_logits). Without ``router_weights`` the k softmax values are
    renormalized; with it (the shared prepacked path) the k gathered ``router_weights`` values are
    used as they are, without renormalization (observed behaviour of ORT 1.32.0 CPU).
    """
    x = x.astype(np.float32)
    lg = router_logits.astype(np.float32)
    probs = np.exp(lg - lg.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.zeros((x.shape[0], w2.shape[1]), dtype=np.float32)
    for t in range(x.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:k]
        if router_weights is None:
            wts = probs[t, top] / probs[t, top].sum()
        else:
            wts = router_weights[t, top].astype(np.float32)
        for e, wt in zip(top, wts):
            h = w1[e].astype(np.float32) @ x[t]
            g, u = h[0::2], h[1::2]
            out[t] += wt * (w2[e].astype(np.float32) @ (g / (1.0 + np.exp(-g)) * u))
    return out
