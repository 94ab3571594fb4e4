"""Package file-layout rules: where external data and libraries live, links, symlinks.

Sources: docs/package-format.md; reference/file-safety-facts.md (ORT refuses external data whose
canonical path escapes the model directory; onnx / onnx-ir refuse hard-linked or symlinked data
when they read it, ORT accepts hard links). The checks only ``os.lstat``/``os.stat`` and resolve
paths; nothing reads file contents.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path, PurePosixPath

from contracts._rule import Rule, RuleDoc, Violation
from contracts.package_view import GraphFile, PackageView

# GraphFile and PackageView live in contracts.package_view (what every package rule reads);
# named here too, where the package rules and their callers have always imported them.
__all__ = ["RULES", "GraphFile", "PackageView", "check_package_layout"]

_SRC = "docs/package-format.md; reference/file-safety-facts.md"


def _inside(root: Path, path: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _location_problem(graph: GraphFile, location: str) -> str | None:
    """Why ``location`` is not a safe external-data path of ``graph`` (None: it is).

    Resolved once per (graph, location), however many tensors share the file.
    """
    return _location_problem_cached(graph.path, graph.root, location)


@functools.lru_cache(maxsize=256)
def _location_problem_cached(graph_path: Path, graph_root: Path, location: str) -> str | None:
    pure = PurePosixPath(location)
    if not location or pure.is_absolute() or "\\" in location:
        return f"location {location!r} must be a relative path inside the package"
    if ".." in pure.parts:
        return f"location {location!r} escapes the package directory"
    named = graph_path.parent / location
    try:
        real = named.resolve(strict=True)
    except FileNotFoundError:
        return f"location {location!r} does not exist"
    except (OSError, RuntimeError):
        return f"location {location!r} cannot be resolved (symlink loop?)"
    if not _inside(graph_root.resolve(), real):
        return f"location {location!r} resolves to {os.fspath(real)!r}, outside the package directory"
    return None


def _check_external_data(view: PackageView) -> list[Violation]:
    found = []
    for graph in view.graphs:
        for name, location in graph.refs:
            problem = _location_problem(graph, location)
            if problem is not None:
                found.append(Violation("PKG-EXTDATA-001", f"initializer {name!r} external data {problem}", graph=graph.label))
    return found


def _check_symlinks(view: PackageView) -> list[Violation]:
    found = []
    root = view.root.resolve()
    for dirpath, dirnames, filenames in os.walk(view.root):
        for name in sorted([*dirnames, *filenames]):
            path = Path(dirpath) / name
            if not stat.S_ISLNK(os.lstat(path).st_mode):
                continue
            rel = path.relative_to(view.root).as_posix()
            try:
                real = path.resolve(strict=True)
            except (OSError, RuntimeError):
                found.append(Violation("PKG-SYMLINK-001", f"{rel}: dangling or looping symlink"))
                continue
            if not _inside(root, real):
                found.append(Violation("PKG-SYMLINK-001", f"{rel}: symlink escapes the package directory (-> {os.fspath(real)})"))
    return found


def _check_hard_links(view: PackageView) -> list[Violation]:
    found = []
    seen: set[Path] = set()
    for graph in view.graphs:
        for _name, location in graph.refs:
            path = graph.path.parent / location
            if path in seen or _location_problem(graph, location) is not None:
                continue
            seen.add(path)
            links = os.stat(path).st_nlink
            if links > 1:
                rel = os.path.relpath(path, view.root)
                found.append(Violation(
                    "PKG-HARDLINK-001",
                    f"{rel}: external data file has {links} hard links; onnxruntime accepts it, but "
                    "onnx / onnx-ir refuse hard-linked data when they read it",
                    graph=graph.label, severity="warning",
                ))  # fmt: skip
    return found


def _check_libraries(view: PackageView) -> list[Violation]:
    found = []
    root = view.root.resolve()
    for path, rel in view.libraries:
        pure = PurePosixPath(rel)
        if not rel or pure.is_absolute() or ".." in pure.parts:
            continue  # reported by CFG-LIB-001
        named = view.root / rel
        try:
            real = named.resolve(strict=True)
        except (OSError, RuntimeError):
            found.append(Violation("PKG-LIB-001", f"{path}: library {rel!r} does not exist in the package"))
            continue
        if not _inside(root, real):
            found.append(Violation("PKG-LIB-001", f"{path}: library {rel!r} resolves outside the package directory"))
        elif not stat.S_ISREG(os.stat(real).st_mode):
            found.append(Violation("PKG-LIB-001", f"{path}: library {rel!r} is not a regular file"))
    return found


def _opened_files(view: PackageView) -> list[tuple[str, Path, str]]:
    """(label, path, what) of every file a session over ``view`` opens, each once, in order."""
    out: list[tuple[str, Path, str]] = []
    seen: set[Path] = set()

    def add(label: str, path: Path, what: str) -> None:
        if path not in seen:
            seen.add(path)
            out.append((label, path, what))

    for graph in view.graphs:
        add(graph.label, graph.path, "graph")
        for name, location in graph.refs:
            if _location_problem(graph, location) is None:  # a bad location is PKG-EXTDATA-001's
                add(graph.label, graph.path.parent / location, f"external data of {name!r}")
    for _path, rel in view.libraries:
        pure = PurePosixPath(rel)
        if rel and not pure.is_absolute() and ".." not in pure.parts:
            add("", view.root / rel, "custom-op library")
    return out


def _check_readable(view: PackageView) -> list[Violation]:
    """Every file a session opens is readable by the current user: an access check, no byte read.

    ORT opens the graph, each external-data file and each custom-op library when the session is
    created; one the user cannot read fails that load, on whichever machine runs it.
    """
    found = []
    for label, path, what in _opened_files(view):
        try:
            if not os.path.exists(path) or os.access(path, os.R_OK):
                continue  # a missing file is another rule's
        except (OSError, ValueError):
            continue
        rel = os.path.relpath(path, view.root) if _inside(view.root, path) else os.fspath(path)
        found.append(Violation(
            "PKG-READ-001",
            f"{rel}: {what} is not readable by the current user (permission denied); onnxruntime "
            "cannot open it when the session is created",
            graph=label,
        ))  # fmt: skip
    return found


def _check_graph_loads(view: PackageView) -> list[Violation]:
    """PKG-GRAPH-001: the graph reader's own refusal, which no ORT-facing rule above names.

    That is external data out of range, a malformed protobuf or graph, duplicate names or
    undefined inputs.
    """
    return [Violation("PKG-GRAPH-001", g.load_error, graph=g.label) for g in view.graphs if g.load_error]


FAMILY = "layout"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES: tuple[Rule, ...] = (
    Rule("PKG-GRAPH-001", "every graph loads with q38.package.load_graph: well-formed protobuf and "
         "graph, external data inside the package and in range", "q38/package/graphs.py load_graph",
         "cpu-session", "package", _check_graph_loads, family=FAMILY, doc=RuleDoc(
        "Every graph must load with q38.package.load_graph, as ORT must: a well-formed protobuf "
        "and graph, external data inside the package and within the data file's length.",
        "model.onnx whose initializer's external data offset + length lies past the end of model.onnx.data",
        "Rewrite the graph and its data together (q38 build / optimize do), or restore the truncated data file.",
    )),
    Rule("PKG-EXTDATA-001", "external-data locations are relative and resolve inside the package",
         _SRC, "cpu-session", "package", _check_external_data, family=FAMILY, doc=RuleDoc(
        "External-data locations are resolved relative to the graph's directory; ORT refuses an "
        "absolute location or one that escapes the package directory.",
        'initializer w: external_data location "../weights.bin"',
        "Keep data files next to the graph and refer to them by a relative name inside the package.",
    )),
    Rule("PKG-SYMLINK-001", "no symlink in the package points outside it (or nowhere)", _SRC,
         "cpu-session", "package", _check_symlinks, family=FAMILY, doc=RuleDoc(
        "A symlink in the package that points outside it (or nowhere, or loops) makes the package "
        "depend on files it does not carry; consumers copying it get a broken package.",
        "libs/libx.so -> /opt/build/libx.so",
        "Replace the link with the file (q38 build --copy), or point it inside the package.",
    )),
    Rule("PKG-HARDLINK-001", "hard-linked external data is flagged (warning): onnx / onnx-ir "
         "consumers refuse it", _SRC, "run-time", "package", _check_hard_links, family=FAMILY, doc=RuleDoc(
        "onnxruntime reads hard-linked external data, but onnx and onnx-ir refuse it when they "
        "load the model (a data file with more than one link may be written through elsewhere), "
        "so tools other than ORT cannot open the package.",
        "model.onnx.data with st_nlink 2 (q38 build --link hardlink)",
        "Build with --link auto or --copy, or copy the data file to break the link.",
        "warning",
    )),
    Rule("PKG-LIB-001", "custom-op libraries exist inside the package", _SRC, "cpu-session",
         "package", _check_libraries, family=FAMILY, doc=RuleDoc(
        "A custom-op library the config names must exist in the package as a regular file; ORT's "
        "RegisterCustomOpsLibrary fails otherwise.",
        '"custom_ops_library": "libs/libqwen38_plane.so" with no such file',
        "Add the library to the package (q38 build --lib-NAME PATH) or remove the reference.",
    )),
    Rule("PKG-READ-001", "every file a session opens (graphs, external data, custom-op libraries) "
         "is readable by the current user (os.access, no bytes read)", _SRC, "cpu-session",
         "package", _check_readable, family=FAMILY, doc=RuleDoc(
        "A session opens every graph, external-data file and custom-op library it is given; a file "
        "the current user cannot read makes session creation fail with a permission error. q38 "
        "checks access (os.access R_OK) without reading any byte.",
        "model.onnx.data with mode 0000 (or owned by another user, mode 0600)",
        "Give the user running onnxruntime read permission on every file of the package (chmod a+r).",
    )),
)  # fmt: skip


def check_package_layout(view: PackageView) -> list[Violation]:
    """Every file-layout violation of ``view``."""
    _location_problem_cached.cache_clear()  # the files may have changed since the last check
    found: list[Violation] = []
    for rule in RULES:
        found.extend(rule.check_package(view))
    return found
