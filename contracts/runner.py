"""Run every applicable contract on a package: the config, every graph, the file layout.

Used by ``q38 check`` and the tests. Both package surfaces are checked: q38's own (v12b) and the
onnxruntime-genai builder's (genai). The graphs come from ``q38.package.surface.list_graphs`` (every
graph the config names: v12b target/head/prefill/s2..s4; genai decoder/mtp/engram/..., runtime
profile decoders), with the session options and providers of each, read from the config
document so that a broken package is still examined in full. Graph files are read with
``q38.package.load_graph``; a graph whose external data it refuses is still examined (its
references are listed without reading any data) so that the layout rules can name the problem.
The strict reader of the package's surface runs last: if it refuses a package no rule faulted,
that refusal is the answer (exit 2).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from contracts import (
    attention,
    causal_conv,
    config_graphs,
    config_surface,
    cuda_kernels,
    gated_delta_net,
    hyper_connection,
    kernel_rules,
    matmul_nbits,
    model_load,
    offload_config,
    offload_nodes,
    package_layout,
    path_fields,
    profile_fit,
    qmoe,
    qsa,
    recurrent,
    root_cause,
    rotary,
    schema_rules,
    session_config,
    shared_initializers,
)
from contracts._graph import ModelLike, as_ir_model
from contracts._installed import installed_version
from contracts._rule import REFERENCE_ORT_VERSION, Rule, Violation
from contracts.package_layout import GraphFile, PackageView
from q38.errors import GraphError, PackageError
from q38.ort_kernels import cpu_kernels
from q38.package import external_refs, load_graph
from q38.package.detect import inside_package as inside
from q38.package.graph_memo import active_memo
from q38.package.graphs import quiet_deserializer
from q38.package.session_options import session_entries
from q38.package.surface import list_graphs

if TYPE_CHECKING:
    from q38.ort_kernels import MissingKernel
    from q38.package.surface import GraphListing

__all__ = [
    "ALL_RULES",
    "RULE_MODULES",
    "CheckReport",
    "GraphCheck",
    "SessionResult",
    "applicable_rule_ids",
    "check_environment",
    "check_graph",
    "check_package",
    "check_session_config",
    "graph_rules_for",
    "installed_ort_version",
    "sessions_for_file",
]

# The family modules, in catalogue order: each declares its ``FAMILY`` and its rules (``RULES``).
# The one list of rule modules; a new family module is one row here.
RULE_MODULES: tuple[ModuleType, ...] = (
    session_config,
    offload_config,
    offload_nodes,
    schema_rules,
    model_load,
    qsa,
    causal_conv,
    gated_delta_net,
    hyper_connection,
    attention,
    qmoe,
    matmul_nbits,
    rotary,
    recurrent,
    config_surface,
    package_layout,
    path_fields,
    shared_initializers,
    config_graphs,
    profile_fit,
    cuda_kernels,
    kernel_rules,
)
ALL_RULES: tuple[Rule, ...] = tuple(rule for module in RULE_MODULES for rule in module.RULES)
"""Every rule record, read from the family modules' ``RULES`` (each record carries its declaration)."""
_STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def installed_ort_version() -> str:
    """The installed onnxruntime version, or the reference version when it is not installed.

    Read without importing onnxruntime (:mod:`contracts._installed`): only ORT sessions need it.
    """
    return installed_version("onnxruntime") or REFERENCE_ORT_VERSION


@dataclass(frozen=True)
class SessionResult:
    """One real ``InferenceSession`` attempt: status ``ok`` / ``failed`` / ``skipped``."""

    graph: str
    status: str
    message: str = ""


@dataclass(frozen=True)
class GraphCheck:
    """One graph examined: its role, file (relative to the package), provider, rules run on it."""

    graph: str
    file: str
    provider: str
    rules: int

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON object (one ``graph_checks`` entry of the report document)."""
        return {"graph": self.graph, "file": self.file, "provider": self.provider, "rules": self.rules}


@dataclass
class CheckReport:
    """What ``check_package`` found."""

    package: str
    ort_version: str
    surface: str = "v12b"
    # The config file, relative to the package (where config violations point in SARIF).
    config_file: str = "genai_config.json"
    rules_checked: list[str] = field(default_factory=list)
    graphs: list[str] = field(default_factory=list)
    graph_checks: list[GraphCheck] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    sessions: list[SessionResult] = field(default_factory=list)

    @property
    def errors(self) -> list[Violation]:
        """The violations of severity ``error`` (warnings never fail a check)."""
        return [v for v in self.violations if v.severity == "error"]

    @property
    def ok(self) -> bool:
        """Whether the package passes: no error violation and no ORT session that failed."""
        return not self.errors and all(s.status != "failed" for s in self.sessions)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON document (``ok`` and every record included): the JSON output's base."""
        return {
            "package": self.package,
            "ort_version": self.ort_version,
            "surface": self.surface,
            "ok": self.ok,
            "rules_checked": self.rules_checked,
            "graphs": self.graphs,
            "graph_checks": [c.to_dict() for c in self.graph_checks],
            "violations": [v.to_dict() for v in self.violations],
            "sessions": [{"graph": s.graph, "status": s.status, "message": s.message} for s in self.sessions],
        }


@dataclass
class _Graph:
    label: str
    path: Path
    model: ir.Model | None
    entries: dict[str, str]
    eps: frozenset[str]
    refs: tuple[tuple[str, str], ...] = ()
    load_error: str = ""
    providers: tuple[str, ...] = ()


def _inside_package(root: Path, path: Path) -> None:
    """Refuse (one PackageError line) a path whose links loop or resolve outside ``root``."""
    inside(root, path)


def _check_graph_path(root: Path, label: str, path: Path) -> None:
    """The config's graph file name stays inside the package, resolves, and names a file."""
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        raise PackageError(f"{path}: {label} graph is an absolute path outside the package") from None
    if ".." in rel.split("/"):
        raise PackageError(f"{path}: {label} graph escapes the package")
    if os.path.lexists(path):
        _inside_package(root, path)
        if path.is_dir():
            raise PackageError(f"{path}: {label} graph is a directory, not a regular file")


def _load(label: str, path: Path, root: Path) -> tuple[ir.Model, tuple[tuple[str, str], ...], str]:
    """(model, external-data refs, load_graph's refusal or "")."""
    problem = ""
    try:
        model = load_graph(path, root=root)
    except GraphError as exc:
        problem = str(exc)
        if not path.is_file():
            raise PackageError(f"{path}: {label} graph is missing or not a regular file ({problem})") from None
        try:  # examine the references without reading any data; the layout rules name the fault
            with quiet_deserializer():  # the refusal above already names what onnx-ir would warn about
                model = ir.load(path)
        except Exception:
            raise PackageError(problem) from None
    refs = tuple((r.name, r.location) for r in external_refs(model))
    return model, refs, problem


def _applicable(version: str) -> list[Rule]:
    return [r for r in ALL_RULES if r.applies(version)]


def graph_rules_for(version: str, eps: frozenset[str]) -> list[Rule]:
    """The graph rules ``check_graph`` runs for onnxruntime ``version`` on a session of ``eps``."""
    return _graph_rules(_applicable(version), eps)


def applicable_rule_ids(version: str, kinds: frozenset[str]) -> list[str]:
    """The ids of the rules of ``kinds`` that apply to onnxruntime ``version``, sorted."""
    return sorted({r.rule_id for r in _applicable(version) if r.kind in kinds})


# A CUDA session falls back to the CPU EP: its kernel lookup is CUDA's then CPU's (ORT-KERNEL-002),
# not the CPU session's (ORT-KERNEL-001).
_CPU_SESSION_ONLY = frozenset({"ORT-KERNEL-001"})
# The partitioner's kernel lookup: after graph load, resolve and inference, before any constructor.
_KERNEL_LOOKUP = frozenset({"ORT-KERNEL-001", "ORT-KERNEL-002"})


def _graph_rules(rules: Iterable[Rule], eps: frozenset[str]) -> list[Rule]:
    return [r for r in rules if r.kind == "graph" and (r.ep == "any" or r.ep in eps)
            and not ("cuda" in eps and r.rule_id in _CPU_SESSION_ONLY)]  # fmt: skip


# Rules a graph whose session registers a custom-op library does not break: its library provides
# the domains onnxruntime does not know.
_CUSTOM_LIBRARY_RULES = frozenset({"ORT-SCHEMA-011", "ORT-OPSET-002"})


def check_session_config(entries: Mapping[str, str], *, ort_version: str | None = None) -> list[Violation]:
    """Every session-config rule of onnxruntime ``ort_version`` on one set of config entries."""
    version = ort_version or installed_ort_version()
    found: list[Violation] = []
    for rule in _applicable(version):
        if rule.kind == "session-config":
            found.extend(rule.check_session(dict(entries)))
    return found


def check_environment(
    env: Mapping[str, str], *, entries: Mapping[str, str] | None = None, ort_version: str | None = None
) -> list[Violation]:
    """Every environment rule of onnxruntime ``ort_version`` over the variables of ``env``.

    These are the variables (of e.g. ``os.environ``) ORT reads when it creates a session with
    config ``entries``. ``check_package`` does not run these: a package holds no environment, and the machine that
    checks it is not the one that runs it.
    """
    version = ort_version or installed_ort_version()
    found: list[Violation] = []
    for rule in _applicable(version):
        if rule.kind == "environment":
            found.extend(rule.check_environment(dict(env), dict(entries or {})))
    return found


def check_graph(
    model: ModelLike, *, entries: Mapping[str, str] | None = None, eps: frozenset[str] = frozenset({"cpu"}),
    ort_version: str | None = None, custom_library: bool = False,
) -> list[Violation]:  # fmt: skip
    """Every graph rule of onnxruntime ``ort_version`` on one model, as ``check_package`` runs them.

    The graph's session has config ``entries`` and runs on ``eps`` (``"cpu"``, ``"cuda"``);
    ``custom_library``: the session registers a custom-op library (unknown domains are its).
    A violation reported by several rule records is returned once.
    """
    version = ort_version or installed_ort_version()
    ir_model = as_ir_model(model)
    seen: set[Violation] = set()
    found: list[Violation] = []
    earlier = False  # an error ORT raises before it looks for kernels (load, resolve, inference)
    for rule in _graph_rules(_applicable(version), eps):
        if rule.part_of or (custom_library and rule.rule_id in _CUSTOM_LIBRARY_RULES):
            continue  # a per-check record: its parent's check reports its id
        for v in rule.check_graph(ir_model, dict(entries or {})):
            earlier = earlier or (v.severity == "error" and rule.enforced != "run-time" and v.rule_id not in _KERNEL_LOOKUP)
            if v not in seen:
                seen.add(v)
                found.append(v)
    if earlier:  # the session fails there first; the kernel lookup never runs
        found = [v for v in found if v.rule_id not in _KERNEL_LOOKUP]
    return found


def _graph_verdict(
    model: ir.Model, entries: Mapping[str, str], eps: frozenset[str], version: str, custom: bool
) -> list[Violation]:
    """``check_graph`` of ``model``, or its verdict of earlier in this command (``q38.package.graph_memo``)."""
    memo = active_memo()
    if memo is None:
        return check_graph(model, entries=entries, eps=eps, ort_version=version, custom_library=custom)
    key = (tuple(sorted(entries.items())), eps, version, custom)
    found = memo.verdict(model, key)
    if found is None:
        found = check_graph(model, entries=entries, eps=eps, ort_version=version, custom_library=custom)
        memo.keep_verdict(model, key, found)
    return found


def check_package(
    path: Path | str, *, ort_version: str | None = None, ort_sessions: bool = False
) -> CheckReport:
    """Run every contract that applies to ``ort_version`` (default: the installed one).

    Raises:
        PackageError: the package cannot be read at all (no/unreadable config, unreadable graph).

    """
    root = Path(path)
    version = ort_version or installed_ort_version()
    listing = list_graphs(root)
    tdir, raw = listing.config_dir, listing.document
    rules = _applicable(version)
    report = CheckReport(package=str(root), ort_version=version, surface=listing.surface,
                         rules_checked=sorted({r.rule_id for r in rules if r.kind != "environment"}))  # fmt: skip
    report.config_file = os.path.relpath(listing.config_path, root).replace(os.sep, "/")
    report.violations.extend(config_surface.check_genai_config(raw))
    for block_path, so in _session_blocks(listing):
        report.violations.extend(v.at(graph=block_path) for v in check_session_config(session_entries(so), ort_version=version))

    paths = path_fields.path_view(root, tdir, raw)
    report.violations.extend(path_fields.check_path_fields(paths))
    refused = path_fields.refused_graph_paths(paths)  # reported above; never opened
    custom = bool(config_surface.library_paths(raw))  # its library provides the unknown domains
    graphs: list[_Graph] = []
    for ref in listing.graphs:
        label, gpath = ref.role, ref.path
        if gpath in refused:
            continue
        _check_graph_path(root, label, gpath)
        groot = gpath.parent
        model, refs, problem = _load(label, gpath, groot)
        eps = listing.reader.graph_eps(raw, ref.providers)
        graphs.append(_Graph(label, gpath, model, dict(ref.session_entries), eps, refs, problem, ref.providers))
        report.graphs.append(label)
        applied = _graph_rules(rules, eps)
        seen: set[Violation] = set()
        for entries in (ref.session_entries, *ref.overlay_entries):
            for v in _graph_verdict(model, entries, eps, version, custom):
                found = v.at(graph=label)
                if found not in seen:
                    seen.add(found)
                    report.violations.append(found)
        report.graph_checks.append(GraphCheck(label, ref.rel, ref.provider, len(applied)))

    view = PackageView(
        root=root,
        graphs=tuple(GraphFile(g.label, g.path, root, g.refs, g.load_error) for g in graphs),
        libraries=tuple(_library_rel(root, tdir, p, rel) for p, rel in config_surface.library_paths(raw)),
        extra={**listing.reader.rule_context(raw, listing.config_path,
                                             {g.label: g.model for g in graphs if g.model is not None and not g.load_error}),
               "document": raw, "config_dir": tdir,
               "graph_models": {g.label: g.model for g in graphs if g.model is not None and not g.load_error},
               "model_headers": {g.label: model_load.read_header(g.path) for g in graphs}},
    )
    report.violations.extend(package_layout.check_package_layout(view))
    report.violations.extend(model_load.check_model_headers(view))
    report.violations.extend(shared_initializers.check_shared_initializers(view))
    report.violations.extend(config_graphs.check_config_graphs(view))
    report.violations.extend(profile_fit.check_profile_fit(view))
    # one error per missing or unreadable file, its dependents folded into it
    report.violations = root_cause.fold_file_faults(report.violations, root_cause.package_faults(paths, view.graphs))
    _open_strictly(listing, report)
    if ort_sessions:
        report.sessions.extend(_sessions(graphs, tdir))
    return report


def _session_blocks(listing: GraphListing) -> list[tuple[str, Mapping[str, Any]]]:
    """Every session_options object of the config: decoder, head, overlays, other graphs' own."""
    blocks = list(config_surface.session_option_blocks(listing.document))
    blocks.extend(listing.reader.session_blocks(listing.document, listing.graphs))
    return blocks


def _open_strictly(listing: GraphListing, report: CheckReport) -> None:
    """The surface's own reader; its refusal of a package no rule faulted is the answer."""
    try:
        listing.reader.open(listing.root)
    except PackageError:
        if not report.errors:
            raise


def _library_rel(root: Path, tdir: Path, json_path: str, rel: str) -> tuple[str, str]:
    """Library paths are relative to the config's directory; the view wants them from ``root``."""
    if rel.startswith("/") or ".." in rel.split("/"):
        return json_path, rel
    return json_path, (tdir / rel).relative_to(root).as_posix()


_NOT_IMPL_OP = re.compile(r"(?:implementation for|kernel for com\.microsoft\.|kernel for )(\w+)\(")


def _session_providers(g: _Graph, available: list[str]) -> tuple[list[str], str]:
    """(ORT providers to create ``g``'s session with, a note when that is not what the config names)."""
    if "cuda" in g.providers:
        if "CUDAExecutionProvider" in available:
            return ["CUDAExecutionProvider", "CPUExecutionProvider"], ""
        return ["CPUExecutionProvider"], "CPU session: the config names cuda, which this onnxruntime lacks"
    return ["CPUExecutionProvider"], ""


def _no_kernel_message(missing: list[MissingKernel]) -> str:
    """``op X has no CPU kernel`` (``... for bfloat16`` when X has kernels for other dtypes)."""
    names = list(dict.fromkeys(m.describe() for m in missing))
    first, rest = names[0], names[1:]
    also = f" (nor {', '.join(rest)})" if rest else ""
    if " for " in first:
        op, dtype = first.split(" for ", 1)
        return f"op {op} has no CPU kernel for {dtype}{also}"
    return f"op {first} has no CPU kernel{also}"


def sessions_for_file(label: str, path: Path, model: ir.Model, entries: Mapping[str, str],
                      provider: str) -> list[SessionResult]:  # fmt: skip
    """A real session of one graph file (``q38 check MODEL.onnx --ort``), as a package graph gets one."""
    eps = frozenset({provider})
    providers = ("cuda",) if provider == "cuda" else ()
    return _sessions([_Graph(label, path, model, dict(entries), eps, (), "", providers)], path.parent)


def _sessions(graphs: list[_Graph], tdir: Path) -> list[SessionResult]:
    import onnxruntime as ort  # deferred: heavy; only --ort sessions need it

    available = list(ort.get_available_providers())
    kernels = cpu_kernels()
    results = []
    for g in graphs:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        for key, value in g.entries.items():
            so.add_session_config_entry(key, value)
        nodes = list(g.model.graph.all_nodes()) if g.model else []
        custom = sorted({n.domain for n in nodes} - _STANDARD_DOMAINS)
        if custom:
            results.append(SessionResult(g.label, "skipped", f"custom-op domain(s) {', '.join(custom)} need their library"))
            continue
        providers, note = _session_providers(g, available)
        missing = kernels.missing(nodes) if providers[0] == "CPUExecutionProvider" else []
        if missing:  # known from the probed CPU-kernel table: no session attempt
            results.append(SessionResult(g.label, "skipped", _no_kernel_message(missing)))
            continue
        try:
            ort.InferenceSession(str(g.path), so, providers=providers)
        except Exception as exc:
            text = " ".join(str(exc).split())
            if "NOT_IMPLEMENTED" in text:  # ORT's status for "Failed to find kernel" / "Could not find an implementation"
                found = _NOT_IMPL_OP.search(text)
                message = f"op {found.group(1)} has no CPU kernel" if found else f"not implemented on CPU: {text[:300]}"
                results.append(SessionResult(g.label, "skipped", message))
            else:
                results.append(SessionResult(g.label, "failed", text[:1000]))
            continue
        results.append(SessionResult(g.label, "ok", note))
    return results
