"""Preset dimensions of the synthetic Qwen3.8-Flash model (docs/synthetic-model.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "DEFAULT_CONTEXT",
    "PREFILL_CHUNK",
    "PRESETS",
    "SLICE",
    "SLICE_FULL_LAYERS",
    "Spec",
    "spec_for",
]

DEFAULT_CONTEXT = 4096  # model.context_length and qwen38_graph.kv_capacity unless --context-length
PREFILL_CHUNK = 256  # qwen38_graph.prefill.chunk; --context-length must be at least this


# Bytes of one routed int4 expert: fc1 + fc2 weights and fp16 scales.
def _expert_bytes(h: int, i: int, block: int) -> int:
    return (2 * i * h) // 2 + (h * i) // 2 + 2 * (2 * i * (h // block) + h * (i // block))


@dataclass(frozen=True)
class Spec:
    """The dimensions of one synthetic model: every graph, weight file and config is built from them.

    Frozen so a preset is shared safely; :func:`spec_for` derives variants with
    ``dataclasses.replace``. The defaults are the ``tiny`` preset's; the goldens depend on them.
    """

    preset: str
    layers: int
    hidden: int = 64
    hc: int = 4
    vocab: int = 512
    experts: int = 8
    top_k: int = 2
    moe_inter: int = 64
    shared_inter: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_size: int = 16
    gdn_hk: int = 2
    gdn_hv: int = 4
    gdn_dk: int = 16
    gdn_dv: int = 16
    conv_k: int = 4
    idx_heads: int = 2
    idx_dim: int = 16
    compress_ratio: int = 4
    token_budget: int = 32
    hc_rank: int = 32
    block: int = 32
    context: int = DEFAULT_CONTEXT
    eps: float = 1e-6
    # Builder forms only (docs/synthetic-model.md, "builder exporter"): partial interleaved MRoPE,
    # the PLE / Engram layer and the MTP head's FP8 experts.
    rotary_dim: int = 8  # partial_rotary_factor 0.5 of head_size 16
    mrope_section: tuple[int, ...] = (2, 1, 1)  # sums to rotary_dim / 2
    ple_layer: int = 1  # 0-based (the checkpoint's ple_layer_ids = [2] is 1-based)
    ngram: int = 3  # max_ngram_size; also the PLE conv's dilation
    ngram_heads: int = 2  # n_head_per_ngram
    ngram_head_vocab: int = 64  # rows per n-gram head in the Engram table
    ple_head_dim: int = 16  # embedding width per n-gram head
    fp8_block: int = 128
    # --target-ort: the onnxruntime release the graphs must load and run in (q38.ort_targets);
    # None writes the forms of the newest release q38 mirrors (1.32.0), as before the flag.
    ort_target: str | None = None
    # Large tensors from q38.synth.blockgen (>= 1 GB/s) instead of numpy's per-element draws: the
    # large and slice presets only, so the tiny / full goldens keep their bytes.
    block_weights: bool = False

    @property
    def streams(self) -> int:
        """Width of the hyper-connection residual: ``hc`` parallel streams of ``hidden`` each."""
        return self.hc * self.hidden

    @property
    def conv_dim(self) -> int:
        """Channels of a GDN layer's causal conv: q and k (``gdn_hk`` x ``gdn_dk`` each) plus v."""
        return 2 * self.gdn_hk * self.gdn_dk + self.gdn_hv * self.gdn_dv

    @property
    def qsa_layers(self) -> tuple[int, ...]:
        """The layers with QSA attention (every fourth, see :meth:`is_qsa`); the others are GDN."""
        return tuple(i for i in range(self.layers) if i % 4 == 3)

    def is_qsa(self, i: int) -> bool:
        """Whether layer ``i`` is a QSA attention layer: the 3 GDN + 1 QSA pattern repeats per 4 layers."""
        return i % 4 == 3

    @property
    def ngram_total_heads(self) -> int:
        """Engram lookup heads over all n-gram orders 2..``ngram`` (``ngram_heads`` per order)."""
        return (self.ngram - 1) * self.ngram_heads

    @property
    def ple_dim(self) -> int:
        """Width of the PLE layer's concatenated n-gram embeddings (one ``ple_head_dim`` per head)."""
        return self.ngram_total_heads * self.ple_head_dim


PRESETS = ("tiny", "full", "large", "slice")

# The real model's dimensions (shared/reference/qwen38-graph-structure.md §1.2; docs/synthetic-model.md
# "slice preset" says which are unverified). The slice has them with 1 x (3 GDN + 1 QSA) layers, so
# the GPU suite can time a decode step and extrapolate per layer to the real 48 (SLICE_FULL_LAYERS).
SLICE_FULL_LAYERS = 48
# Values marked unverified come from a third-party fixture or are assumed (docs/synthetic-model.md).
SLICE = Spec(
    "slice",
    4,
    hidden=2560,  # from qkv_z_proj (2560, 16384) and the vocabulary projection
    hc=4,  # streams 10240 = conv channels
    heads=24,
    kv_heads=2,
    head_size=256,
    gdn_hk=16,
    gdn_dk=128,
    gdn_hv=48,
    gdn_dv=128,
    idx_heads=4,
    idx_dim=128,
    experts=512,
    top_k=10,  # unverified (third-party fixture)
    moe_inter=640,  # unverified (third-party fixture)
    shared_inter=640,  # unverified (not in the references; taken equal to moe_inter)
    hc_rank=320,  # unverified (third-party fixture)
    token_budget=2048,  # unverified (third-party fixture)
    compress_ratio=4,  # unverified (third-party fixture)
    vocab=32768,  # reduced: the real 248320 would add 2.5 GB of embedding + lm_head
    rotary_dim=64,  # unverified (partial rotary factor 0.25 assumed)
    mrope_section=(11, 11, 10),  # sums to rotary_dim / 2; unverified
    block_weights=True,
)


def spec_for(preset: str, weight_gb: float | None = None, context: int = DEFAULT_CONTEXT) -> Spec:
    """The :class:`Spec` of a named preset (one of :data:`PRESETS`) with ``context`` as its context length.

    ``weight_gb`` sizes only the ``large`` preset (its expert count is chosen so the routed
    experts total about that many GB; default 2); an unknown preset raises ValueError.
    """
    return replace(_preset(preset, weight_gb), context=context)


def _preset(preset: str, weight_gb: float | None) -> Spec:
    if preset == "tiny":
        return Spec("tiny", 8)
    if preset == "full":
        return Spec("full", 48)
    if preset == "large":
        gb = 2.0 if weight_gb is None else weight_gb
        base = Spec("large", 48)
        per = _expert_bytes(base.hidden, base.moe_inter, base.block) * (base.layers + 1)
        experts = max(base.top_k, round(gb * 1e9 / per))
        return Spec("large", 48, experts=experts, block_weights=True)
    if preset == "slice":
        return SLICE
    raise ValueError(preset)
