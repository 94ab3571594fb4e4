"""The v12b surface: q38's own packages (``model.type`` ``qwen38_flash_graph``), behind the package interface.

The typed config is :mod:`q38.package.v12b.config`, the strict reader :func:`q38.package.v12b.package.open_package`
(flat or layered, weights pool, manifest); this module adds what every command and ``q38 check``
ask of any surface (:class:`q38.package.interface.AnyPackage`, :class:`q38.package.interface.SurfaceReader`):
the graphs a (possibly broken) config document names, the EPs its graphs run on, its strict
config verdict, and the package's decode graphs for ``q38 profile``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from q38.errors import ConfigError
from q38.package.graph_ref import GraphRef
from q38.package.interface import StateLayout
from q38.package.io.links import LinkPolicy, Placer
from q38.package.session_options import provider_names, session_entries
from q38.package.step_graphs import DecodeGraphs, StepGraph
from q38.package.v12b.config import as_v12b_document, config_to_dict, parse_config
from q38.package.v12b.package import Package, open_package, source_placer
from q38.package.v12b.pool import read_pool

if TYPE_CHECKING:  # onnx_ir (and sympy through it) loads when a graph does
    import onnx_ir as ir

__all__ = ["READER", "V12bPackage", "V12bReader", "v12b_graph_refs"]


def _obj(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def v12b_graph_refs(root: Path, tdir: Path, doc: Mapping[str, Any]) -> list[GraphRef]:
    """Every graph a v12b document names: target, head, prefill, s2..s4, profile decoders.

    ``overlay_entries`` of a graph are the session entries runtime profiles apply to it (the
    profile's decoder file, by default the target graph; the head keeps its own options). A
    profile decoder that is no other graph's file is listed as ``profile:ID``.
    """
    doc = as_v12b_document(doc)  # a v12 document names its graphs under other keys
    model = _obj(doc.get("model"))
    graph = _obj(model.get("qwen38_graph"))
    decoder = _obj(model.get("decoder"))
    dso = decoder.get("session_options")
    layered = tdir != root and (root / "head").is_dir()
    hdir = root / "head" if layered else tdir
    specs: list[tuple[str, Path, str, object]] = []
    target = _obj(graph.get("target")).get("filename")
    if isinstance(target, str):
        specs.append(("target", tdir, target, dso))
    head = _obj(_obj(graph.get("fold")).get("head_r2"))
    if isinstance(head.get("filename"), str):
        specs.append(("head", hdir, head["filename"], head.get("session_options")))
    prefill = _obj(graph.get("prefill"))
    if isinstance(prefill.get("filename"), str):
        specs.append(("prefill", tdir, prefill["filename"], dso))
    for role, rel in sorted(_obj(graph.get("multidraft")).items()):
        if isinstance(rel, str):
            specs.append((role, tdir, rel, dso))
    decoder_file = str(decoder.get("filename", "model.onnx"))
    overlays: list[tuple[str, str, object, int]] = []
    profiles = doc.get("runtime_profiles")
    for i, profile in enumerate(profiles if isinstance(profiles, list) else []):
        over = _obj(_obj(_obj(_obj(profile).get("overlay")).get("model")).get("decoder"))
        filename = over.get("filename", decoder_file)
        if isinstance(filename, str):
            overlays.append((f"profile:{_obj(profile).get('id', i)}", filename, over.get("session_options"), i))
    refs = []
    for role, base, rel, so in specs:
        path = base / rel
        extra = tuple(
            session_entries(oso) for _pid, name, oso, _i in overlays if role != "head" and name == path.name and oso is not None
        )
        refs.append(GraphRef(role, path, _rel(root, path, rel), "model.qwen38_graph" if role != "head" else
                             "model.qwen38_graph.fold.head_r2", session_entries(so), provider_names(so), base, extra))  # fmt: skip
    # A profile whose decoder is a file no graph above is: a graph of its own (checked like the
    # target, with the decoder's options and the profile's overlay on them).
    listed = {ref.path for ref in refs}
    for pid, name, oso, i in overlays:
        path = tdir / name
        if path in listed:
            continue
        listed.add(path)
        refs.append(GraphRef(pid, path, _rel(root, path, name), f"runtime_profiles[{i}].overlay.model.decoder",
                             session_entries(dso), provider_names(dso), tdir,
                             (session_entries(oso),) if oso is not None else ()))  # fmt: skip
    return refs


def _rel(root: Path, path: Path, fallback: str) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return fallback


@dataclass(frozen=True)
class V12bPackage:
    """A v12b package seen through the package interface (``.package`` is the full model)."""

    package: Package
    surface: str = "v12b"

    @property
    def root(self) -> Path:
        """The package directory."""
        return self.package.root

    @property
    def config_path(self) -> Path:
        """The config file (``target/genai_config.json`` in a layered package)."""
        return self.package.target_dir / "genai_config.json"

    def graphs(self) -> list[GraphRef]:
        """Every graph the config names (target, head, prefill, s2..s4), with its session options."""
        pkg = self.package
        return v12b_graph_refs(pkg.root, pkg.target_dir, config_to_dict(pkg.config))

    def load(self, role: str) -> ir.Model:
        """One graph, without its external weights."""
        return self.package.load(role)

    def placer(self, link: LinkPolicy, *, digest: bool) -> Placer:
        """How a command places this package's unchanged files (its manifests' digests reused)."""
        return source_placer(self.package, link, digest=digest)

    def preferred_target(self) -> tuple[str, str]:
        """The runtime this package runs on (``cpu`` / ``cuda``) and why: its variant and providers."""
        pkg = self.package
        variant = pkg.config.model.qwen38_graph.variant
        if variant == "cpu":
            return "cpu", "the package is the cpu variant"
        providers = [p.name for p in pkg.config.model.decoder.session_options.provider_options]
        if "cuda" not in providers:
            return "cpu", "its session options name no CUDA provider"
        return "cuda", f"the package is the {variant} variant with a CUDA provider"

    def decode_graphs(self) -> DecodeGraphs:
        """The graph one decode step runs (the target), with its state-name templates."""
        pkg = self.package
        c = pkg.config
        decoder = c.model.decoder
        step = StepGraph("decoder", c.model.qwen38_graph.target, pkg.target_dir, pkg.load("target"),
                         decoder.inputs, decoder.outputs)  # fmt: skip
        return DecodeGraphs((step,), getattr(decoder, "head_size", None), int(c.model.vocab_size or 0))


class V12bReader:
    """The v12b surface's answers to what listings and ``q38 check`` ask of a config document."""

    name: Final = "v12b"

    def graph_refs(self, root: Path, config_dir: Path, document: Mapping[str, Any]) -> list[GraphRef]:
        """Every graph a v12b document names (tolerant of a broken document)."""
        return v12b_graph_refs(root, config_dir, document)

    def open(self, path: Path | str) -> V12bPackage:
        """The strict reader: one PackageError line for any problem."""
        return V12bPackage(open_package(path))

    def config_problem(self, document: Mapping[str, Any]) -> tuple[str, str] | None:
        """(severity, message) when the strict v12b parser refuses the document, else None."""
        try:
            parse_config(dict(document))
        except ConfigError as exc:
            return "error", str(exc)
        return None

    def graph_eps(self, document: Mapping[str, Any], providers: tuple[str, ...]) -> frozenset[str]:
        """The EPs a graph's kernel rules concern: by the package variant and the providers named."""
        model = as_v12b_document(document).get("model")
        graph = model.get("qwen38_graph") if isinstance(model, Mapping) else None
        variant = (graph if isinstance(graph, Mapping) else {}).get("variant", "faithful")
        cuda = "cuda" in providers
        eps = {"cuda"} if (cuda or variant == "faithful") else set()
        if variant == "cpu" or not cuda:
            eps.add("cpu")
        return frozenset(eps)

    def session_blocks(self, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> list[tuple[str, Mapping[str, Any]]]:
        """Session-option blocks beyond the common ones (none: v12b names them all in one place)."""
        return []

    def state_layout(self, config_dir: Path, document: Mapping[str, Any], graphs: Sequence[GraphRef]) -> StateLayout:
        """v12b: the MTP draft lives inside the target, prefill and head share its state; the pool places weights."""
        graph = _obj(_obj(as_v12b_document(document).get("model")).get("qwen38_graph"))
        name = graph.get("weights_pool")
        if not isinstance(name, str) or not (config_dir / name).is_file():
            return StateLayout()
        pool = read_pool(config_dir / name)
        return StateLayout(placements={(config_dir / e.file, e.offset): str(e.placement) for e in pool.entries})

    def rule_context(self, document: Mapping[str, Any], config_path: Path,
                     models: Mapping[str, ir.Model]) -> dict[str, Any]:  # fmt: skip
        """Extra facts the package rules read (none for v12b)."""
        return {}


READER: Final = V12bReader()
