"""``q38 export-genai`` of a package the onnxruntime-genai builder wrote (the genai surface).

Such a package is already a GenAI model directory, so the export passes it through: every
graph, external-data file, tokenizer / processor file and any other file is placed unchanged
(the shared placement policy: :class:`q38.package.Placer`), and ``genai_config.json`` is
rewritten only where onnxruntime-genai 0.18.0 on CPU needs it:

* ``provider_options`` naming CUDA (or any other EP) are dropped (``--provider cpu``);
* ``runtime_profiles`` are dropped: 0.18.0 refuses to create a model with them on CPU
  ("runtime_profiles require CUDA to be the primary execution provider");
* both ``shared_initializers`` lists are dropped: 0.18.0 fails on CPU with them ("GetMemoryInfo
  for CPU should not be used"); each graph's own external-data reference already names the
  same bytes, so the weights are unchanged;
* ``model.type`` ``qwen4_exp_text`` (the Qwen3.8 builder's; 0.18.0 says "Unsupported
  model_type") becomes ``qwen3_5_moe_text``, the hybrid decoder 0.18.0 runs.

When none of these applies the config is copied byte for byte; otherwise it is written by the
deterministic writer.

What 0.18.0 cannot run is refused or dropped, never silently kept:

* a decoder with an op the installed onnxruntime has no CPU kernel for, or a config with keys
  0.18.0 refuses (the research builder's engram / indexer / PLE names), is refused: one line,
  exit 2, nothing written;
* an ``mtp.onnx`` with such an op is dropped: the ``model.mtp`` section goes, ``mtp.onnx`` and
  the data files only it references are not written, and a warning names the op. MTP is a
  speculative drafter: the decoder alone generates the same greedy tokens.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

import onnx_ir as ir

from q38.errors import ExportError, quote
from q38.export_plan import ExportPlan

if TYPE_CHECKING:
    from q38.package.genai.config import GenaiConfig
    from q38.package.genai.package import GenaiPackage
    from q38.package.io.links import LinkPolicy
    from q38.package.session_options import SessionBlock

__all__ = ["plan_builder_export"]

_LOG = logging.getLogger(__name__)
RESEARCH_TYPE: Final = "qwen4_exp_text"
CPU_TYPE: Final = "qwen3_5_moe_text"


def _missing_kernels(model: ir.Model) -> list[str]:
    """``op X`` descriptions of the nodes the installed onnxruntime cannot run on CPU."""
    from q38.ort_kernels import cpu_kernels  # deferred: pulls in numpy (q38.package.profile)

    custom = sorted({n.domain for n in model.graph.all_nodes() if n.domain not in ("", "ai.onnx", "com.microsoft")})
    if custom:
        return [f"custom-op domain {quote(d)}" for d in custom]
    return list(dict.fromkeys(f"op {m.describe()}" for m in cpu_kernels().missing(model.graph.all_nodes())))


def _cpu_session_options(so: SessionBlock) -> SessionBlock:
    """``so`` with only its CPU provider entries (a CPU export names no other EP)."""
    return replace(so, providers=tuple(p for p in so.providers if p.canonical == "CPU"))


def _rewrite(pkg: GenaiPackage, provider: str, dropped_mtp: bool) -> tuple[GenaiConfig, list[str]]:
    """The 0.18.0-loadable config of ``pkg`` and one line per change made."""
    cfg = pkg.config
    m = cfg.model
    notes: list[str] = []
    decoder, mtp = m.decoder, m.mtp
    if provider == "cpu":
        for name, section in (("decoder", decoder), ("mtp", mtp)):
            so = getattr(section, "session_options", None)
            if so is not None and any(p.canonical != "CPU" for p in so.providers):
                names = ", ".join(p.name for p in so.providers if p.canonical != "CPU")
                notes.append(f"model.{name}.session_options.provider_options: dropped {names} (CPU export)")
        decoder = replace(decoder, session_options=_cpu_session_options(decoder.session_options)) if decoder.session_options else decoder
        if mtp is not None and mtp.session_options is not None:
            mtp = replace(mtp, session_options=_cpu_session_options(mtp.session_options))
    if dropped_mtp:
        mtp = None
    if decoder.shared_initializers or (mtp is not None and mtp.shared_initializers):
        notes.append("model.decoder/mtp.shared_initializers: dropped (onnxruntime-genai 0.18.0 on CPU: "
                     "'GetMemoryInfo for CPU should not be used'; each graph's own data reference names the same bytes)")  # fmt: skip
        decoder = replace(decoder, shared_initializers=())
        mtp = replace(mtp, shared_initializers=()) if mtp is not None else None
    mtype = m.type
    if mtype == RESEARCH_TYPE:
        notes.append(f"model.type: {RESEARCH_TYPE} -> {CPU_TYPE} (0.18.0 has no {RESEARCH_TYPE})")
        mtype = CPU_TYPE
    profiles = cfg.runtime_profiles
    if profiles and provider == "cpu":
        notes.append(f"runtime_profiles: dropped {len(profiles)} (0.18.0 creates them only with CUDA)")
        profiles = ()
    model = replace(m, type=mtype, decoder=decoder, mtp=mtp)
    return replace(cfg, model=model, runtime_profiles=profiles), notes


def _check_loadable(pkg: GenaiPackage) -> None:
    """Refuse a builder package onnxruntime-genai 0.18.0 cannot load at all (ExportError).

    That is a research-builder key 0.18.0 refuses, a model type with no text decoder, or an
    engram section; what 0.18.0 merely lacks is rewritten by :func:`_rewrite` instead.
    """
    # deferred: pulls in numpy (q38.package.genai.schema)
    from q38.package.genai.config import OG_MODEL_TYPES

    cfg = pkg.config
    if cfg.og_refusal:
        raise ExportError(f"{cfg.og_refusal.split(': ', 1)[-1]} (a Qwen3.8 research-builder key; onnxruntime-genai "
                          "0.18.0 refuses the config, and its graphs need the state it names)")  # fmt: skip
    mtype = cfg.model.type
    if mtype not in OG_MODEL_TYPES and mtype != RESEARCH_TYPE:
        raise ExportError(
            f"{pkg.config_path}: model.type {quote(mtype)}: onnxruntime-genai 0.18.0 creates no text decoder for it "
            "(og.Model: 'Unsupported model_type' or a vision / audio pipeline)"
        )
    if cfg.model.engram is not None:
        raise ExportError(f"{pkg.config_path}: model.engram: onnxruntime-genai 0.18.0 has no engram section")


def plan_builder_export(pkg: GenaiPackage, *, link: LinkPolicy, provider: str, digest: bool) -> ExportPlan:
    """The export of the builder package ``pkg`` (see the module docstring); nothing is written.

    Raises:
        ExportError / PackageError: one line naming the file, node or key at fault.

    """
    from q38.package import load_graph  # deferred: pulls in numpy (q38.package.profile)

    # deferred: pulls in numpy (q38.package.genai.schema)
    from q38.package.genai.config import dumps_genai_config

    src = pkg.root
    _check_loadable(pkg)
    refs = {r.role: r for r in pkg.graphs()}
    models = {role: load_graph(ref.path, root=pkg.root) for role, ref in refs.items()}
    if provider == "cpu":
        missing = _missing_kernels(models["decoder"])
        if missing:
            raise ExportError(f"{refs['decoder'].path}: {missing[0]} has no CPU kernel in the installed onnxruntime; "
                              "onnxruntime-genai cannot run this decoder on CPU")  # fmt: skip
    skip: set[str] = set()
    dropped: list[str] = []
    dropped_mtp = False
    if "mtp" in models and provider == "cpu":
        missing = _missing_kernels(models["mtp"])
        if missing:
            dropped_mtp = True
            kept = _referenced_files(models, pkg.root, exclude="mtp")
            skip = {refs["mtp"].rel} | (_referenced_files({"mtp": models["mtp"]}, pkg.root) - kept)
            why = f"{missing[0]} has no CPU kernel"
            dropped.append(f"model.mtp ({refs['mtp'].rel}): {why}")
            _LOG.warning("%s: dropping model.mtp (%s: %s); the decoder alone generates the same greedy tokens",
                         src, refs["mtp"].rel, why)  # fmt: skip
    config, rewrites = _rewrite(pkg, provider, dropped_mtp)
    for line in rewrites:
        _LOG.info("%s: %s", src, line)
    text = dumps_genai_config(config) if rewrites or dropped_mtp else None  # else: copied as it is
    sources = {}
    root = pkg.root.resolve()
    for path in sorted(p for p in pkg.root.rglob("*") if not p.is_dir()):
        rel = path.relative_to(pkg.root).as_posix()
        if not path.resolve().is_relative_to(root):  # nothing outside the input lands in the output
            raise ExportError(f"{path}: a link to {quote(str(path.resolve()))}, outside the package")
        if rel not in skip and not (rel == "genai_config.json" and text is not None):
            # the config is never linked: a later edit of the export must not reach the source
            sources[rel] = (path, rel == "genai_config.json")
    return ExportPlan(refs["decoder"].rel, sources, text, pkg.placer(link, digest=digest),
                      rewrites=tuple(rewrites), dropped=tuple(dropped))  # fmt: skip


def _referenced_files(models: dict[str, ir.Model], root: Path, *, exclude: str = "") -> set[str]:
    """The data files (relative to ``root``) the graphs' external tensors name."""
    from q38.package.graphs import external_refs  # deferred: pulls in numpy (q38.package.graphs)

    files = set()
    for role, model in models.items():
        if role == exclude:
            continue
        base = Path(str(model.meta.get("q38.path", root / "x"))).parent
        for ref in external_refs(model):
            files.add((base / ref.location).relative_to(root).as_posix())
    return files
