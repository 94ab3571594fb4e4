"""``q38 check MODEL.onnx``: every contract that applies to one graph, outside any package.

A user with a graph from any exporter asks "will this load on onnxruntime X's CPU (or CUDA) EP
with these session options?". The answer is the package check's, for one graph: the session-config
rules on the ``--session-option`` entries and every graph rule of the version
(:func:`contracts.runner.check_graph`) for a session on ``cpu`` or on ``cuda`` (which falls back to
the CPU EP). The report is a :class:`~contracts.runner.CheckReport`, so every output format works.

When the file is a graph of a package (an ancestor directory holds a package config that names
it), :func:`package_role` says which one: the package check runs it with the package's own session
options and providers, which a lone graph does not know.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contracts.cuda_kernels import cuda_kernels
from contracts.runner import (
    CheckReport,
    GraphCheck,
    applicable_rule_ids,
    check_graph,
    check_session_config,
    graph_rules_for,
    installed_ort_version,
    sessions_for_file,
)
from q38.errors import GraphError, PackageError
from q38.package import load_graph
from q38.package.surface import list_graphs

__all__ = ["PackageRole", "check_model", "cuda_facts_note", "package_role"]

_PROVIDERS = {"cpu": frozenset({"cpu"}), "cuda": frozenset({"cuda"})}
_SEARCH_DEPTH = 3  # a package graph sits in the package root, target/ or one layer below


@dataclass(frozen=True)
class PackageRole:
    """The package a graph file belongs to, and the role its config gives the file."""

    package: Path
    role: str
    section: str

    def note(self) -> str:
        """One line for the user: which package graph this is, and how to check it as one."""
        return (f"{self.role} graph ({self.section}) of the package {self.package}: "
                f"`q38 check {self.package}` checks it with the package's session options and providers")  # fmt: skip


def package_role(path: Path) -> PackageRole | None:
    """The package whose config names ``path`` as one of its graphs (None: a lone graph)."""
    target = path.resolve()
    directory = target.parent
    for _ in range(_SEARCH_DEPTH):
        try:
            listing = list_graphs(directory)
        except (PackageError, GraphError, OSError, ValueError):
            listing = None
        if listing is not None:
            for ref in listing.graphs:
                if os.path.realpath(ref.path) == str(target):
                    return PackageRole(directory, ref.role, ref.section)
        if directory.parent == directory:
            break
        directory = directory.parent
    return None


def cuda_facts_note(version: str) -> str:
    """Where the CUDA kernel facts of ``version`` come from, or that CUDA coverage is not probed."""
    facts = cuda_kernels(version)
    if facts is None:
        return f"CUDA kernel facts for onnxruntime {version}: none (CUDA coverage is not probed; no guess is made)"
    return f"CUDA kernel facts for onnxruntime {version}: {facts.provenance}"


def check_model(
    path: Path | str, *, provider: str = "cpu", entries: Mapping[str, str] | None = None,
    ort_version: str | None = None, ort_sessions: bool = False,
) -> CheckReport:  # fmt: skip
    """Check one graph file for a ``provider`` session with config ``entries``.

    Raises:
        PackageError: the file cannot be read as an ONNX graph (one line naming it), or an
            unknown provider.

    """
    file = Path(path)
    if provider not in _PROVIDERS:
        raise PackageError(f"{provider}: unknown provider (cpu or cuda)")
    if not file.is_file():
        raise PackageError(f"{file}: not a regular file")
    version = ort_version or installed_ort_version()
    try:
        model = load_graph(file, root=file.parent, check_structure=False)
    except GraphError as exc:
        # q38 check takes a package directory or one graph file: a file that is no graph is neither.
        detail = str(exc).removeprefix(f"{file}: ")
        raise PackageError(f"{file}: not a package directory, and {detail}") from None
    eps = _PROVIDERS[provider]
    role = package_role(file)
    label = role.role if role is not None else file.name
    report = CheckReport(package=str(file.parent), ort_version=version, surface="graph", config_file="",
                         rules_checked=applicable_rule_ids(version, frozenset({"graph", "session-config"})))  # fmt: skip
    config = dict(entries or {})
    report.violations.extend(check_session_config(config, ort_version=version))
    report.violations.extend(v.at(graph=label) for v in check_graph(model, entries=config, eps=eps, ort_version=version))
    report.graphs.append(label)
    report.graph_checks.append(GraphCheck(label, file.name, provider.upper(), len(graph_rules_for(version, eps))))
    if ort_sessions:
        report.sessions.extend(sessions_for_file(label, file, model, config, provider))
    return report
