"""A package as the onnxruntime-genai builder writes it: the "genai" surface.

The directory holds ``genai_config.json`` (an onnxruntime-genai 0.18.0 config, see
:mod:`q38.package.genai.config`), the graphs it names (``model.decoder.filename``, a separate
``mtp.onnx`` / ``engram.onnx``, drafters, vision / embedding graphs, pipeline stages, runtime
profile decoders), their external data, and tokenizer / processor files beside them. There is
no weights pool and no manifest: weights shared between graphs are the ``shared_initializers``
lists (checked by :mod:`q38.package.genai.shared_initializers`).

:func:`open_genai_package` validates the config the way GenAI does, the model type against the
decoder types the builder emits, every named graph file (inside the package, a regular file),
and every symlink in the tree; graphs are loaded on demand, without weight bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from q38.errors import PackageError, clip, quote
from q38.package.detect import CONFIG_FILENAME
from q38.package.genai.config import (
    BUILDER_MODEL_TYPES,
    GenaiConfig,
    dumps_genai_config,
    genai_config_to_dict,
    parse_genai_config,
    read_genai_config,
)
from q38.package.graph_ref import GraphRef
from q38.package.io.links import LinkPolicy, Placer
from q38.package.path_fields import check_path_fields
from q38.package.session_options import Provider, SessionBlock, read_session_options
from q38.package.step_graphs import DecodeGraphs, StepGraph
from q38.package.tree import check_tree, package_dirs, require_file

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = ["TOKENIZER_FILES", "EditedConfig", "GenaiPackage", "genai_graph_refs", "open_genai_package"]

# What the builder's save_processing writes next to the graphs (tokenizer / processor files).
TOKENIZER_FILES: Final = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
    "generation_config.json", "preprocessor_config.json", "processor_config.json",
    "video_preprocessor_config.json",
)  # fmt: skip
_GRAPH_SECTIONS: Final = ("decoder", "mtp", "engram", "draft", "dflash2", "dspark", "encoder",
                          "vision", "embedding", "speech", "joiner", "vad")  # fmt: skip


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _session_of(raw: object) -> SessionBlock | None:
    """A section's session options through the one (tolerant) reader; None when it has no block."""
    return read_session_options(raw) if isinstance(raw, dict) else None


def genai_graph_refs(root: Path, doc: dict[str, Any]) -> list[GraphRef]:
    """Every graph a genai-surface document names, decoder first; tolerant of a broken document.

    Roles: the section name (``decoder``, ``mtp``, ``engram``, ``vision``, ...), ``decoder.pipeline.ID``
    for pipeline stages, ``profile:ID`` for a runtime profile's alternate decoder. A graph section
    without its own ``session_options`` runs with the decoder's (GenAI's default).
    """
    model = _obj(doc.get("model"))
    decoder_so = _session_of(_obj(model.get("decoder")).get("session_options"))
    refs: list[GraphRef] = []
    seen: set[tuple[str, str]] = set()

    def add(role: str, section: str, filename: object, so: SessionBlock | None) -> None:
        if not isinstance(filename, str) or not filename or (role, filename) in seen:
            return
        seen.add((role, filename))
        used = so if so is not None else decoder_so
        refs.append(
            GraphRef(
                role=role,
                path=root / filename,
                rel=filename,
                section=section,
                session_entries=used.session_entries if used is not None else {},
                providers=used.provider_names if used is not None else (),
                root=root,
            )
        )

    for role in _GRAPH_SECTIONS:
        section = _obj(model.get(role))
        add(role, f"model.{role}", section.get("filename"), _session_of(section.get("session_options")))
    for owner in ("decoder", "vision"):
        pipeline = _obj(model.get(owner)).get("pipeline")
        stages = pipeline if isinstance(pipeline, list) else [pipeline]
        for stage in stages:
            for stage_id, spec in _obj(stage).items():
                spec = _obj(spec)
                add(f"{owner}.pipeline.{stage_id}", f"model.{owner}.pipeline.{stage_id}", spec.get("filename"),
                    _session_of(spec.get("session_options")))  # fmt: skip
    profiles = doc.get("runtime_profiles")
    for i, profile in enumerate(profiles if isinstance(profiles, list) else []):
        overlay = _obj(_obj(_obj(_obj(profile).get("overlay")).get("model")).get("decoder"))
        pid = _obj(profile).get("id", i)
        add(f"profile:{pid}", f"runtime_profiles[{i}].overlay.model.decoder", overlay.get("filename"), decoder_so)
    return refs


@dataclass(frozen=True)
class EditedConfig:
    """A config edited for a new package: the typed config, its text, and each graph file's entries."""

    config: GenaiConfig
    text: str
    entries_by_file: dict[str, dict[str, str]]


def _session_with(
    so: SessionBlock | None,
    entries: Mapping[str, str],
    drop_prefix: str,
    provider_options: Mapping[str, Mapping[str, str]],
) -> SessionBlock:
    """``so`` with ``entries`` (older ones under ``drop_prefix`` replaced) and the provider options merged."""
    so = so or SessionBlock()
    kept = {k: v for k, v in so.config_entries.items() if not k.startswith(drop_prefix)}
    providers = tuple(
        Provider(p.name, {**p.options, **provider_options[p.canonical]}, p.device_filtering_options)
        if p.canonical in provider_options else p
        for p in so.providers
    )
    return dataclasses.replace(so, config_entries={**kept, **dict(sorted(entries.items()))}, providers=providers)


@dataclass(frozen=True)
class GenaiPackage:
    """A builder package, read and validated; graphs are loaded on demand."""

    root: Path
    config: GenaiConfig
    surface: str = "genai"

    @property
    def config_path(self) -> Path:
        """``genai_config.json`` at the package root (the genai surface has one config, no layers)."""
        return self.root / CONFIG_FILENAME

    def graphs(self) -> list[GraphRef]:
        """Every graph the config names, in a fixed order (decoder first)."""
        return genai_graph_refs(self.root, genai_config_to_dict(self.config))

    def graph(self, role: str) -> GraphRef:
        """The graph of ``role`` (``decoder``, ``mtp``, ...); one PackageError line when the config names none."""
        for ref in self.graphs():
            if ref.role == role:
                return ref
        raise PackageError(f"{self.config_path}: the config names no {role} graph")

    def load(self, role: str) -> ir.Model:
        """Load one graph without its external weights (validated, hard-link tolerant)."""
        from q38.package.graphs import load_graph  # deferred: pulls in onnx (q38.package.graphs)

        return load_graph(self.graph(role).path, root=self.root)

    def placer(self, link: LinkPolicy, *, digest: bool) -> Placer:
        """How a command places this package's unchanged files (no manifest: nothing to reuse)."""
        return Placer(link, digest=digest)

    def preferred_target(self) -> tuple[str, str]:
        """The runtime this package runs on (``cpu`` / ``cuda``) and why: its decoder's providers."""
        decoder = self.graphs()[0]
        if "cuda" in decoder.providers:
            return "cuda", f"its {decoder.section}.session_options name the CUDA provider"
        return "cpu", f"its {decoder.section}.session_options name no CUDA provider"

    def decode_graphs(self) -> DecodeGraphs:
        """The decoder and, when enabled, the MTP graph it drafts with, with their state-name templates."""
        model = self.config.model
        d = model.decoder
        steps = [StepGraph("decoder", self.graph("decoder").rel, self.root, self.load("decoder"), d.inputs, d.outputs)]
        mtp = model.mtp
        hidden = "hidden_states"
        if mtp is not None and mtp.filename and mtp.enabled is not False:
            steps.append(StepGraph("mtp", self.graph("mtp").rel, self.root, self.load("mtp"), mtp.inputs, mtp.outputs))
            hidden = mtp.main_hidden_states or d.outputs.get("hidden_states", "hidden_states")
        return DecodeGraphs(tuple(steps), d.head_size, model.vocab_size or 0, hidden)

    def edit_sessions(
        self,
        entries: Mapping[str, Mapping[str, str]],
        *,
        drop_prefix: str,
        provider_options: Mapping[str, Mapping[str, str]],
        source: str,
    ) -> EditedConfig:
        """The config with new session config entries for some graph roles, re-parsed strictly.

        ``entries``: role (``decoder``, ``mtp``) -> entries to set; the role's existing entries
        starting with ``drop_prefix`` are replaced, the others kept. ``provider_options``:
        canonical provider name -> options merged into that provider where the session names it.
        A graph section without its own ``session_options`` runs with the decoder's (GenAI's
        default): its new block starts from those, so giving it its own entries changes nothing else.
        """
        cfg = self.config
        model = cfg.model
        decoder, mtp = model.decoder, model.mtp
        if "decoder" in entries:
            so = _session_with(decoder.session_options, entries["decoder"], drop_prefix, provider_options)
            decoder = dataclasses.replace(decoder, session_options=so)
        if mtp is not None and "mtp" in entries:
            base = mtp.session_options if mtp.session_options is not None else model.decoder.session_options
            mtp = dataclasses.replace(mtp, session_options=_session_with(base, entries["mtp"], drop_prefix,
                                                                         provider_options))  # fmt: skip
        edited = dataclasses.replace(cfg, model=dataclasses.replace(model, decoder=decoder, mtp=mtp))
        # The strict parse GenAI 0.18.0 runs (or the research builder's surface, as the source was).
        out = parse_genai_config(genai_config_to_dict(edited), source=source, research=bool(cfg.og_refusal))
        by_file = {
            section.filename: dict(section.session_options.config_entries)
            for section in out.graph_sections.values()
            if section.filename and section.session_options is not None
        }
        return EditedConfig(out, dumps_genai_config(out), by_file)

    def tokenizer_files(self) -> list[str]:
        """The tokenizer / processor files present at the top level (relative names)."""
        return [name for name in TOKENIZER_FILES if (self.root / name).is_file()]


def open_genai_package(path: Path | str, *, config: GenaiConfig | None = None) -> GenaiPackage:
    """Open and validate a builder package; any problem is one PackageError line.

    Checked before any graph is read: the tree (regular files, directories and symlinks that stay
    inside only), the config (GenAI 0.18.0's verdict, or the research builder's keys), the model
    type, every path field (:mod:`q38.package.path_fields`) and every graph the config names
    (inside the package, a regular file).

    Args:
        path: the package directory (``genai_config.json`` at its top level).
        config: the already parsed config, if the caller has it.

    """
    root = Path(path)
    layout, _dirs = package_dirs(root)
    if layout != "flat":
        raise PackageError(f"{clip(root)}: a genai package keeps {CONFIG_FILENAME} at its top level")
    check_tree(root)
    config_path = require_file(root, CONFIG_FILENAME, what=f"{clip(root)}: config")
    cfg = config if config is not None else read_genai_config(config_path)
    mtype = cfg.model.type
    if mtype not in BUILDER_MODEL_TYPES:
        raise PackageError(
            f"{clip(config_path)}: model.type {quote(mtype)} is not a decoder model type the onnxruntime-genai "
            "builder writes (e.g. qwen3_5_moe_text, qwen3_5_text, qwen4_exp_text, llama)"
        )
    doc = genai_config_to_dict(cfg)
    check_path_fields(doc, root=root, config_dir=root, source=clip(config_path))
    package = GenaiPackage(root=root, config=cfg)
    refs = package.graphs()
    if not any(r.role == "decoder" or r.role.startswith("decoder.pipeline.") for r in refs):
        raise PackageError(f"{clip(config_path)}: model.decoder.filename: required for a decoder package")
    for ref in refs:
        require_file(root, ref.rel, what=f"{clip(config_path)}: {ref.section}.filename")
    return package
