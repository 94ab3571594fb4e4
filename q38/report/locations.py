"""Where a result points: the package file and the logical place inside it.

* a graph violation: the graph's ``.onnx`` file (from the report's graph checks), the node name
  as a logical location (``graph/node``), or the graph itself when no node is named;
* a config violation: ``genai_config.json`` (the package's config file) and the key path the
  violation names (its ``graph`` field for a session_options block, or the dotted path that
  starts its message);
* a file-layout violation whose message starts with a package file (``libs/x.so: ...``,
  ``model.onnx.data: ...``): that file (and its graph as the logical location).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from contracts._rule import Violation

if TYPE_CHECKING:
    from contracts.runner import CheckReport

__all__ = ["Location", "artifact_uri", "locate", "package_prefix"]


@dataclass(frozen=True)
class Location:
    """Where one result points: a package file and, optionally, a logical place inside it.

    ``file``: the artifact, relative to the package root (posix); ``logical``: the node or key
    path inside it (``""``: none); ``kind``: the SARIF logical-location kind of ``logical``.
    """

    file: str
    logical: str = ""
    kind: str = ""


_KEY_PATH = re.compile(r"^([A-Za-z_][\w\-]*(?:\.[\w\-]+|\[\d+\])+):\s")
_FILE_PREFIX = re.compile(r"^([\w][\w.\-]*(?:/[\w.\-]+)*):\s")


def _graph_files(report: CheckReport) -> dict[str, str]:
    return {c.graph: c.file for c in getattr(report, "graph_checks", ())}


def locate(report: CheckReport, v: Violation) -> Location:
    """The :class:`Location` of ``v`` in ``report``'s package."""
    config = str(getattr(report, "config_file", "") or "genai_config.json")
    files = _graph_files(report)
    if v.graph in files and v.node:
        return Location(files[v.graph], f"{v.graph}/{v.node}", "element")
    head = _FILE_PREFIX.match(v.message)
    if head and os.path.lexists(Path(report.package) / head.group(1)):
        return Location(head.group(1), v.graph, "module") if v.graph in files else Location(head.group(1))
    if v.graph in files:
        return Location(files[v.graph], v.graph, "module")
    key = _KEY_PATH.match(v.message)
    if key and not key.group(1).endswith(".json"):
        return Location(config, key.group(1), "property")
    if v.graph:
        return Location(config, v.graph, "property")
    return Location(config)


def package_prefix(package: str) -> str:
    """The package directory as a posix path prefix for artifact URIs (``""``: the working directory).

    Relative to the working directory when the package is inside it (what GitHub code scanning
    resolves against the repository root), else absolute.
    """
    here = Path.cwd().resolve()
    root = Path(package).resolve()
    try:
        rel = root.relative_to(here).as_posix()
    except ValueError:
        return root.as_posix() + "/"
    return "" if rel == "." else rel + "/"


def artifact_uri(prefix: str, file: str) -> str:
    """A SARIF ``artifactLocation.uri`` for ``prefix + file`` (see :func:`package_prefix`).

    A percent-encoded relative reference, or a ``file://`` URI when the path is absolute.
    """
    path = prefix + file
    if path.startswith("/"):
        return Path(path).as_uri()
    return urllib.parse.quote(path)
