"""Run every applicable contract on a package: the config, every graph, the file layout.

Used by ``q38 check`` and the tests. Reading goes through ``q38.package`` (``open_package``,
``load_graph``); a graph whose external data ``load_graph`` refuses is still examined (its
references are listed without reading any data) so that the layout rules can name the problem.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx_ir as ir

from contracts import (
    causal_conv,
    config_surface,
    offload_config,
    offload_nodes,
    ort_schema,
    package_layout,
    path_fields,
    qsa,
)
from contracts._rule import Rule, Violation
from contracts.package_layout import GraphFile, PackageView

__all__ = ["ALL_RULES", "CheckReport", "SessionResult", "check_package", "installed_ort_version"]

ALL_RULES: tuple[Rule, ...] = (
    *offload_config.RULES,
    *offload_nodes.RULES,
    *qsa.RULES,
    *ort_schema.RULES,
    *causal_conv.RULES,
    *config_surface.RULES,
    *package_layout.RULES,
    *path_fields.RULES,
)
_CONFIG = "genai_config.json"
_STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def installed_ort_version() -> str:
    """The installed onnxruntime version, or 1.32.0 (the reference) when it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return "1.32.0"
    return str(onnxruntime.__version__)


@dataclass(frozen=True)
class SessionResult:
    """One real ``InferenceSession`` attempt: status ``ok`` / ``failed`` / ``skipped``."""

    graph: str
    status: str
    message: str = ""


@dataclass
class CheckReport:
    """What ``check_package`` found."""

    package: str
    ort_version: str
    rules_checked: list[str] = field(default_factory=list)
    graphs: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    sessions: list[SessionResult] = field(default_factory=list)

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors and all(s.status != "failed" for s in self.sessions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "ort_version": self.ort_version,
            "ok": self.ok,
            "rules_checked": self.rules_checked,
            "graphs": self.graphs,
            "violations": [v.to_dict() for v in self.violations],
            "sessions": [{"graph": s.graph, "status": s.status, "message": s.message} for s in self.sessions],
        }


@dataclass
class _Graph:
    label: str
    path: Path
    root: Path
    model: ir.Model | None
    entries: dict[str, str]
    eps: frozenset[str]
    refs: tuple[tuple[str, str], ...] = ()
    load_error: str = ""


def _inside_package(root: Path, path: Path) -> None:
    """Refuse (one PackageError line) a path whose links loop or resolve outside ``root``."""
    from q38.errors import PackageError, UnsafePathError
    from q38.package.paths import resolve_inside

    try:
        resolve_inside(root, path.relative_to(root).as_posix(), what=str(path), must_exist=False)
    except UnsafePathError as exc:
        raise PackageError(str(exc)) from None
    except (OSError, RuntimeError):
        raise PackageError(f"{path}: symlink loop") from None


def _check_graph_path(root: Path, label: str, path: Path) -> None:
    """The config's graph file name stays inside the package, resolves, and names a file."""
    from q38.errors import PackageError

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


def _read_raw_config(root: Path) -> tuple[Path, dict[str, Any]]:
    from q38.errors import PackageError
    from q38.package.jsonio import read_json

    if not root.is_dir():
        raise PackageError(f"{root}: not a package directory")
    for candidate in (root / _CONFIG, root / "target" / _CONFIG):
        if not os.path.lexists(candidate):
            continue
        _inside_package(root, candidate)  # nothing is read through a link that leaves the package
        if candidate.is_dir():
            raise PackageError(f"{candidate}: is a directory, not a JSON file")
        data = read_json(candidate, what="config")  # strict JSON, bounded, regular files only
        if not isinstance(data, dict):
            raise PackageError(f"{candidate}: expected a JSON object")
        return candidate.parent, data
    raise PackageError(f"{root}: not a q38 package (no {_CONFIG}, no target/{_CONFIG})")


def _entries_of(so: Mapping[str, Any] | None) -> dict[str, str]:
    if not isinstance(so, Mapping):
        return {}
    out = {k: v for k, v in (so.get("config_entries") or {}).items() if isinstance(v, str)}
    out.update({k: v for k, v in so.items() if "." in k and isinstance(v, str)})
    return out


def _has_cuda(so: Mapping[str, Any] | None) -> bool:
    if not isinstance(so, Mapping):
        return False
    return any(isinstance(e, Mapping) and "cuda" in e for e in so.get("provider_options") or [])


def _graph_specs(tdir: Path, config: Mapping[str, Any]) -> list[tuple[str, Path, Mapping[str, Any] | None]]:
    """(label, graph path, session_options) for every graph the config names."""
    model = config.get("model", {})
    graph = model.get("qwen38_graph", {}) if isinstance(model, Mapping) else {}
    decoder = model.get("decoder", {}) if isinstance(model, Mapping) else {}
    dso = decoder.get("session_options") if isinstance(decoder, Mapping) else None
    layered = tdir.name == "target" and (tdir.parent / "head").is_dir()
    hdir = tdir.parent / "head" if layered else tdir
    specs: list[tuple[str, Path, Mapping[str, Any] | None]] = []
    target = (graph.get("target") or {}).get("filename") if isinstance(graph, Mapping) else None
    if isinstance(target, str):
        specs.append(("target", tdir / target, dso))
    head = ((graph.get("fold") or {}).get("head_r2") or {}) if isinstance(graph, Mapping) else {}
    if isinstance(head.get("filename"), str):
        specs.append(("head", hdir / head["filename"], head.get("session_options")))
    prefill = graph.get("prefill") if isinstance(graph, Mapping) else None
    if isinstance(prefill, Mapping) and isinstance(prefill.get("filename"), str):
        specs.append(("prefill", tdir / prefill["filename"], dso))
    for role, rel in sorted(((graph.get("multidraft") or {}) if isinstance(graph, Mapping) else {}).items()):
        if isinstance(rel, str):
            specs.append((role, tdir / rel, dso))
    return specs


def _overlay_entries(config: Mapping[str, Any], filename: str, default_file: str) -> list[dict[str, str]]:
    out = []
    for profile in config.get("runtime_profiles") or []:
        try:
            decoder = profile["overlay"]["model"]["decoder"]
        except (KeyError, TypeError):
            continue
        if decoder.get("filename", default_file) == filename and "session_options" in decoder:
            out.append(_entries_of(decoder["session_options"]))
    return out


def _load(label: str, path: Path, root: Path) -> tuple[ir.Model, tuple[tuple[str, str], ...], str]:
    """(model, external-data refs, load_graph's refusal or "")."""
    from q38.errors import GraphError, PackageError
    from q38.package import external_refs, load_graph

    problem = ""
    try:
        model = load_graph(path, root=root)
    except GraphError as exc:
        problem = str(exc)
        if not path.is_file():
            raise PackageError(f"{path}: {label} graph is missing or not a regular file ({problem})") from None
        try:  # examine the references without reading any data; the layout rules name the fault
            model = ir.load(path)
        except Exception:
            raise PackageError(problem) from None
    refs = tuple((r.name, r.location) for r in external_refs(model))
    return model, refs, problem


def _applicable(version: str) -> list[Rule]:
    return [r for r in ALL_RULES if r.applies(version)]


def _graph_rules(rules: Iterable[Rule], eps: frozenset[str]) -> list[Rule]:
    return [r for r in rules if r.surface == "graph" and (r.ep == "any" or r.ep in eps)]


def check_package(
    path: Path | str, *, ort_version: str | None = None, ort_sessions: bool = False
) -> CheckReport:
    """Run every contract that applies to ``ort_version`` (default: the installed one).

    Raises:
        PackageError: the package cannot be read at all (no/unreadable config, unreadable graph).
    """
    from q38.errors import PackageError
    from q38.package import open_package

    root = Path(path)
    version = ort_version or installed_ort_version()
    tdir, raw = _read_raw_config(root)
    rules = _applicable(version)
    report = CheckReport(package=str(root), ort_version=version, rules_checked=sorted({r.rule_id for r in rules}))
    report.violations.extend(config_surface.check_genai_config(raw))
    for block_path, so in config_surface.session_option_blocks(raw):
        entries = _entries_of(so)
        for rule in rules:
            if rule.surface == "session-config":
                report.violations.extend(v.at(graph=block_path) for v in rule.check(entries))

    variant = ((raw.get("model") or {}).get("qwen38_graph") or {}).get("variant", "faithful")
    decoder_file = str(((raw.get("model") or {}).get("decoder") or {}).get("filename", "model.onnx"))
    paths = path_fields.path_view(root, tdir, raw)
    report.violations.extend(path_fields.check_path_fields(paths))
    refused = path_fields.refused_graph_paths(paths)  # reported above; never opened
    graphs: list[_Graph] = []
    for label, gpath, gso in _graph_specs(tdir, raw):
        if gpath in refused:
            continue
        _check_graph_path(root, label, gpath)
        groot = gpath.parent
        model, refs, problem = _load(label, gpath, groot)
        eps = {"cuda"} if (_has_cuda(gso) or variant == "faithful") else set()
        if variant == "cpu" or not _has_cuda(gso):
            eps.add("cpu")
        entry_sets = [_entries_of(gso), *(_overlay_entries(raw, gpath.name, decoder_file) if label != "head" else [])]
        graphs.append(_Graph(label, gpath, groot, model, _entries_of(gso), frozenset(eps), refs, problem))
        report.graphs.append(label)
        for rule in _graph_rules(rules, frozenset(eps)):
            for entries in entry_sets:
                for v in rule.check(model, entries):
                    if v not in report.violations and v.at(graph=label) not in report.violations:
                        report.violations.append(v.at(graph=label))

    view = PackageView(
        root=root,
        graphs=tuple(GraphFile(g.label, g.path, root, g.refs, g.load_error) for g in graphs),
        libraries=tuple(_library_rel(root, tdir, p, rel) for p, rel in config_surface.library_paths(raw)),
    )
    report.violations.extend(package_layout.check_package_layout(view))
    try:
        open_package(root)
    except PackageError:
        if not report.errors:
            raise
    if ort_sessions:
        report.sessions.extend(_sessions(graphs, tdir))
    return report


def _library_rel(root: Path, tdir: Path, json_path: str, rel: str) -> tuple[str, str]:
    """Library paths are relative to the config's directory; the view wants them from ``root``."""
    if rel.startswith("/") or ".." in rel.split("/"):
        return json_path, rel
    return json_path, (tdir / rel).relative_to(root).as_posix()


_NOT_IMPL_OP = re.compile(r"(?:implementation for|kernel for com\.microsoft\.|kernel for )(\w+)\(")


def _sessions(graphs: list[_Graph], tdir: Path) -> list[SessionResult]:
    import onnxruntime as ort

    results = []
    for g in graphs:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        for key, value in g.entries.items():
            so.add_session_config_entry(key, value)
        custom = sorted({n.domain for n in (g.model.graph.all_nodes() if g.model else [])} - _STANDARD_DOMAINS)
        if custom:
            results.append(SessionResult(g.label, "skipped", f"custom-op domain(s) {', '.join(custom)} need their library"))
            continue
        try:
            ort.InferenceSession(str(g.path), so, providers=["CPUExecutionProvider"])
        except Exception as exc:
            text = " ".join(str(exc).split())
            if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text or "Failed to find kernel" in text:
                found = _NOT_IMPL_OP.search(text)
                op = found.group(1) if found else "an operator"
                results.append(SessionResult(g.label, "skipped", f"no CPU kernel for {op}"))
            else:
                results.append(SessionResult(g.label, "failed", text[:1000]))
            continue
        results.append(SessionResult(g.label, "ok"))
    return results
