"""Writes a synthetic package (flat or layered) or the unassembled source bundles."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import onnx

from q38._ops import BUILDER_ONNX_OPSET, GATED_DELTA_NET, IR_VERSION, ONNX_DOMAIN, ONNX_OPSET
from q38.errors import FlagError
from q38.ort_targets import OrtTarget, ort_target
from q38.package import StagedDirectory, dumps_config, dumps_manifest, parse_config
from q38.synth import package_files as pf
from q38.synth.builder_forms import write_builder_package
from q38.synth.graph import DataFile, ExtRef
from q38.synth.model import build_head, build_target
from q38.synth.package_files import LIB_HC, LIB_QSA
from q38.synth.spec import DEFAULT_CONTEXT, PREFILL_CHUNK, PRESETS, Spec, spec_for
from q38.synth.weights import Weights

__all__ = ["OPTIONS", "synthesize"]

OPTIONS = {
    "preset": PRESETS,
    "variant": ("faithful", "cpu"),
    "layout": ("flat", "layered"),
    "lineage": ("contrib", "custom"),
    "experts": ("int4", "nvfp4"),
    "exporter": ("research", "builder"),
    "linear_attn": ("gated_delta_net", "linear_attention"),
}
SHARED_WITH_HEAD = ("model.embed_tokens.weight", "model.norm.hc_gate.weight", "lm_head.weight")


def _check(
    preset: str,
    variant: str,
    layout: str,
    lineage: str,
    experts: str,
    weight_gb: float | None,
    context_length: int = DEFAULT_CONTEXT,
    exporter: str = "research",
) -> None:
    for flag, value in (
        ("exporter", exporter),
        ("preset", preset),
        ("variant", variant),
        ("layout", layout),
        ("lineage", lineage),
        ("experts", experts),
    ):
        if value not in OPTIONS[flag]:
            raise FlagError(f"--{flag} {value}: expected one of {', '.join(OPTIONS[flag])}")
    if experts == "nvfp4" and variant == "cpu":
        raise FlagError("--experts nvfp4 needs --variant faithful (NVFP4 QMoE has no CPU kernel)")
    if exporter == "builder" and layout != "flat":
        raise FlagError("--layout layered applies to --exporter research (the builder writes one folder)")
    if exporter == "builder" and experts != "int4":
        raise FlagError(f"--experts {experts} applies to --exporter research")
    if weight_gb is not None and preset != "large":
        raise FlagError("--weight-gb applies to --preset large only")
    if weight_gb is not None and not weight_gb > 0:
        raise FlagError(f"--weight-gb {weight_gb}: must be positive")
    if isinstance(context_length, bool) or not isinstance(context_length, int):
        raise FlagError(f"--context-length {context_length}: expected a whole number of tokens")
    if context_length <= 0:
        raise FlagError(f"--context-length {context_length}: must be positive")
    if context_length < PREFILL_CHUNK:
        raise FlagError(
            f"--context-length {context_length}: must be at least the prefill chunk ({PREFILL_CHUNK})"
        )


def _save(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString(deterministic=True))


def _graphs(
    d_target: Path,
    d_head: Path,
    s: Spec,
    seed: int,
    *,
    variant: str,
    experts: str,
    lineage: str,
    head_shares: bool,
) -> dict[str, ExtRef]:
    """Writes model.onnx(+data), prefill.onnx into d_target and head_r2.onnx(+data) into d_head.

    With ``head_shares`` the head's shared tensors point into ``model.onnx.data`` next to the head
    graph (same directory, or a hard link placed there by the caller); otherwise the head's own data
    file holds copies. Returns the shared tensors' refs (target file).
    """
    data = DataFile(d_target / "model.onnx.data", "model.onnx.data")
    w = Weights(seed, data, block=s.block_weights)
    try:
        _save(
            build_target(w, s, variant=variant, experts=experts, lineage=lineage, prefill=False),
            d_target / "model.onnx",
        )
        _save(
            build_target(w, s, variant=variant, experts=experts, lineage=lineage, prefill=True),
            d_target / "prefill.onnx",
        )
    finally:
        data.close()
    hdata = DataFile(d_head / "head_r2.onnx.data", "head_r2.onnx.data")
    own = Weights(seed ^ 0x5EED, hdata, block=s.block_weights)
    try:
        _save(
            build_head(w if head_shares else Weights(seed, hdata, block=s.block_weights), own, s), d_head / "head_r2.onnx"
        )
    finally:
        hdata.close()
    return {n: w.refs[n] for n in SHARED_WITH_HEAD}


def _pool(refs: dict[str, ExtRef]) -> str:
    return pf.pool_text(
        [
            (f"w{i:04d}", ref, f"target:{name},head:{name},prefill:{name}")
            for i, (name, ref) in enumerate(sorted(refs.items()))
        ]
    )


def _write_config(
    root: Path, s: Spec, variant: str, lineage: str, decoder: str = "model.onnx"
) -> None:
    # The dict goes through the strict parser: a synthetic config is a valid v12b config.
    cfg = parse_config(pf.config_dict(s, variant=variant, lineage=lineage, decoder=decoder))
    (root / "genai_config.json").write_text(dumps_config(cfg), encoding="utf-8")


def _finish(root: Path, notes: list[str]) -> None:
    (root / "package_manifest.json").write_text(dumps_manifest(pf.manifest(root, notes)), encoding="utf-8")


def _libs(root: Path) -> None:
    (root / "libs").mkdir()
    (root / "libs" / "libcustom_ops.so").write_bytes(LIB_QSA)


def _package(
    root: Path,
    s: Spec,
    seed: int,
    *,
    variant: str,
    layout: str,
    lineage: str,
    experts: str,
    notes: list[str],
) -> None:
    if layout == "flat":
        refs = _graphs(
            root, root, s, seed, variant=variant, experts=experts, lineage=lineage, head_shares=True
        )
        (root / "weights_pool.txt").write_text(_pool(refs), encoding="utf-8")
        _libs(root)
        _write_config(root, s, variant, lineage)
        _finish(root, notes)
        return
    tgt, head = root / "target", root / "head"
    tgt.mkdir()
    head.mkdir()
    refs = _graphs(
        tgt, head, s, seed, variant=variant, experts=experts, lineage=lineage, head_shares=False
    )
    for d in (tgt, head):
        (d / "weights_pool.txt").write_text(
            _pool(refs) if d is tgt else pf.pool_text([]), encoding="utf-8"
        )
        _libs(d)
        if d is tgt:  # the head package is configured by target/genai_config.json (fold.head_r2)
            _write_config(d, s, variant, lineage, decoder="model.onnx")
        _finish(d, notes)


def _bundles(root: Path, s: Spec, seed: int, *, variant: str, lineage: str, experts: str) -> None:
    tgt, head, pre = root / "target", root / "head", root / "prefill"
    for d in (tgt, head, pre):
        d.mkdir()
    _graphs(tgt, head, s, seed, variant=variant, experts=experts, lineage=lineage, head_shares=True)
    # head and prefill read the target's bytes through hard links (one inode, three names).
    os.link(tgt / "model.onnx.data", head / "model.onnx.data")
    os.link(tgt / "model.onnx.data", pre / "model.onnx.data")
    os.replace(tgt / "prefill.onnx", pre / "prefill.onnx")
    (tgt / "assets.v1").mkdir()
    (tgt / "assets.v1" / "README.txt").write_text("q38 synthetic bundle assets\n", encoding="utf-8")
    os.symlink("assets.v1", tgt / "assets", target_is_directory=True)
    qsa, hc = root / "libs" / "qsa", root / "libs" / "hc"
    qsa.mkdir(parents=True)
    hc.mkdir(parents=True)
    (qsa / "libcustom_ops.so.1").write_bytes(LIB_QSA)
    os.symlink("libcustom_ops.so.1", qsa / "libcustom_ops.so")
    (hc / "libcustom_ops.so").write_bytes(LIB_HC)


def _check_target(target: OrtTarget) -> None:
    """The IR version and opsets q38 writes are ones ``target`` loads (a q38 bug otherwise)."""
    opset = max(ONNX_OPSET, BUILDER_ONNX_OPSET)
    limit = target.opset_limit(ONNX_DOMAIN)
    if target.max_ir_version < IR_VERSION or (limit is not None and opset > limit):
        raise FlagError(f"--target-ort {target.version}: q38 writes IR version {IR_VERSION} / ai.onnx opset {opset}, "
                        f"onnxruntime {target.version} reads IR <= {target.max_ir_version}, opset <= {limit}")


def synthesize(
    out: Path,
    *,
    preset: str = "tiny",
    variant: str = "cpu",
    layout: str = "flat",
    lineage: str = "contrib",
    experts: str = "int4",
    seed: int = 0,
    bundles: bool = False,
    weight_gb: float | None = None,
    context_length: int = DEFAULT_CONTEXT,
    exporter: str = "research",
    weights_prepacked: bool = False,
    linear_attn: str | None = None,
    target_ort: str | None = None,
) -> Path:
    """Write a synthetic package (or, with ``bundles``, the source bundles) at ``out``.

    ``context_length`` sets ``model.context_length``, ``qwen38_graph.kv_capacity``,
    ``search.max_length`` and the rotary caches' length (at least the prefill chunk, 256).
    ``exporter="builder"`` writes the public builder's forms (``q38.synth.builder_forms``);
    ``weights_prepacked`` (builder only) sets QMoE ``weights_prepacked=1`` with SM80 expert bytes
    instead of omitting the attribute (raw bytes); ``linear_attn="linear_attention"`` (builder only)
    writes the 0.18.0 builder's LinearAttentionGate + LinearAttention layers instead of GatedDeltaNet.
    ``target_ort`` (``q38.ort_targets``) writes forms that onnxruntime release loads and runs: for
    1.31.1 GatedDeltaNet's decay / beta are cast to float32, the cpu variant's linear-attention layers
    become LinearAttentionGate + LinearAttention (1.31.1 has no CPU GatedDeltaNet kernel) and the builder's
    ``linear_attn`` defaults to ``linear_attention``; None keeps the newest release's forms.
    Deterministic: the same arguments give byte-identical files. ``out`` must not exist (one-line
    PackageError otherwise); the tree is built in a staging directory and renamed into place.
    """
    _check(preset, variant, layout, lineage, experts, weight_gb, context_length, exporter)
    if bundles and exporter == "builder":
        raise FlagError("--bundles applies to --exporter research")
    if weights_prepacked and exporter != "builder":
        raise FlagError("--weights-prepacked applies to --exporter builder")
    target = ort_target(target_ort) if target_ort is not None else None
    if linear_attn is None:
        no_gdn = target is not None and exporter == "builder" and not target.has_cpu_kernel(GATED_DELTA_NET)
        linear_attn = "linear_attention" if no_gdn else "gated_delta_net"
    if linear_attn not in OPTIONS["linear_attn"]:
        raise FlagError(f"--linear-attn {linear_attn}: expected one of {', '.join(OPTIONS['linear_attn'])}")
    if linear_attn != "gated_delta_net" and exporter != "builder":
        raise FlagError("--linear-attn applies to --exporter builder")
    if target is not None and exporter == "builder" and linear_attn == "gated_delta_net" and not target.gdn_gate_float16:
        raise FlagError(f"--linear-attn gated_delta_net: onnxruntime {target.version}'s GatedDeltaNet takes no "
                        "float16 decay / beta (the builder's form); use --linear-attn linear_attention")
    s = spec_for(preset, weight_gb, context_length)
    note = f"preset={preset} variant={variant} layout={layout} lineage={lineage} experts={experts} seed={seed}"
    if context_length != DEFAULT_CONTEXT:
        note += f" context_length={context_length}"
    if target is not None:
        _check_target(target)
        s = replace(s, ort_target=target.version)
        note += f" target_ort={target.version}"
    notes = [note]
    with StagedDirectory(Path(out)) as staged:
        root = staged.path
        if exporter == "builder":
            write_builder_package(
                root, s, seed, variant=variant, lineage=lineage, prepacked=weights_prepacked,
                linear_attn=linear_attn,
            )
        elif bundles:
            _bundles(root, s, seed, variant=variant, lineage=lineage, experts=experts)
        else:
            _package(
                root,
                s,
                seed,
                variant=variant,
                layout=layout,
                lineage=lineage,
                experts=experts,
                notes=notes,
            )
        staged.commit()
    return Path(out)
