"""Package file-layout rules: where external data and libraries live, links, symlinks, tokenizer files.

Sources: docs/package-format.md; reference/file-safety-facts.md (ORT refuses external data whose
canonical path escapes the model directory; onnx / onnx-ir refuse hard-linked or symlinked data
when they read it, ORT accepts hard links). The checks only ``os.lstat``/``os.stat`` and resolve
paths; nothing reads file contents.
"""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from contracts._rule import Rule, Violation

__all__ = ["RULES", "TOKENIZER_FILES", "GraphFile", "PackageView", "check_package_layout"]

_SRC = "docs/package-format.md; reference/file-safety-facts.md"
_TOKENIZER_SRC = ("onnxruntime-genai 0.18.0 src/models/model.cpp (Tokenizer: OrtxCreateTokenizer on the "
                  "tokenizer directory); docs/package-format.md")


@dataclass(frozen=True)
class GraphFile:
    """One graph of a package: its label, path and the directory that bounds its data."""

    label: str
    path: Path
    root: Path
    refs: tuple[tuple[str, str], ...]  # (initializer name, external-data location)
    load_error: str = ""  # why q38.package.load_graph refused the graph ("" when it loaded)


@dataclass(frozen=True)
class PackageView:
    """What the layout rules look at: the package root, its graphs and named libraries."""

    root: Path
    graphs: tuple[GraphFile, ...] = ()
    libraries: tuple[tuple[str, str], ...] = ()  # (JSON path, relative path)
    extra: dict[str, Any] = field(default_factory=dict)


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


# What onnxruntime-genai 0.18.0's og.Tokenizer opens (onnxruntime-extensions' JSON tokenizer), in
# its order: the first one missing is its refusal ("Failed to open a json file: DIR/tokenizer_config.json",
# then "Invalid file: DIR/tokenizer.json").
TOKENIZER_FILES: tuple[str, ...] = ("tokenizer_config.json", "tokenizer.json")
# Files that only a tokenizer brings (the builder's save_processing writes them with the two above).
_TOKENIZER_COMPANIONS = ("special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
                         "tokenizer.model", "chat_template.jinja", "chat_template.json")  # fmt: skip


def _check_tokenizer(view: PackageView) -> list[Violation]:
    """PKG-TOKENIZER-001 / -002: a builder (genai-surface) package carries the files og.Tokenizer opens.

    They are read from the config's directory, or ``model.tokenizer_dir`` below it when the
    config names one. A package that carries tokenizer files but not both of these is broken
    (001, an error); one that carries none is a token-ids package (002, a warning: what
    ``q38 export-genai`` writes, by design). q38's own (v12b) packages are not GenAI models.
    """
    # deferred: q38.package's __init__ pulls in onnx / onnx-ir; q38 rules and --help list this rule without it
    from q38.package.detect import is_genai_document

    document = view.extra.get("document")
    config_dir = view.extra.get("config_dir")
    if not is_genai_document(document) or not isinstance(config_dir, Path):
        return []
    model = document.get("model") if isinstance(document, dict) else None
    named = model.get("tokenizer_dir") if isinstance(model, dict) else None
    tdir = config_dir / named if isinstance(named, str) and named and "\0" not in named else config_dir
    where = os.path.relpath(tdir, view.root).replace(os.sep, "/")
    missing = [name for name in TOKENIZER_FILES if not (tdir / name).is_file()]
    if not missing:
        return []
    shown = " and ".join(name if where == "." else f"{where}/{name}" for name in missing)
    opens = f"it opens {' and '.join(TOKENIZER_FILES)} in {'the config directory' if where == '.' else where + '/'}"
    if len(missing) < len(TOKENIZER_FILES) or any((tdir / n).is_file() for n in _TOKENIZER_COMPANIONS):
        return [Violation("PKG-TOKENIZER-001",
                          f"{shown}: missing; onnxruntime-genai's og.Tokenizer fails on this package ({opens})")]
    return [Violation(
        "PKG-TOKENIZER-002",
        f"{shown}: missing, and no other tokenizer file: a token-ids package (onnxruntime-genai generates "
        f"from token ids; og.Tokenizer fails: {opens})",
        severity="warning",
    )]  # fmt: skip


RULES: tuple[Rule, ...] = (
    Rule("PKG-GRAPH-001", "every graph loads with q38.package.load_graph: well-formed protobuf and "
         "graph, external data inside the package and in range", "q38/package/graphs.py load_graph",
         "cpu-session", "package", _check_graph_loads),
    Rule("PKG-EXTDATA-001", "external-data locations are relative and resolve inside the package",
         _SRC, "cpu-session", "package", _check_external_data),
    Rule("PKG-SYMLINK-001", "no symlink in the package points outside it (or nowhere)", _SRC,
         "cpu-session", "package", _check_symlinks),
    Rule("PKG-HARDLINK-001", "hard-linked external data is flagged (warning): onnx / onnx-ir "
         "consumers refuse it", _SRC, "run-time", "package", _check_hard_links),
    Rule("PKG-LIB-001", "custom-op libraries exist inside the package", _SRC, "cpu-session",
         "package", _check_libraries),
    Rule("PKG-READ-001", "every file a session opens (graphs, external data, custom-op libraries) "
         "is readable by the current user (os.access, no bytes read)", _SRC, "cpu-session",
         "package", _check_readable),
    Rule("PKG-TOKENIZER-001", "a builder (genai-surface) package that carries tokenizer files has "
         "tokenizer_config.json and tokenizer.json where og.Tokenizer opens them (the config's directory "
         "or model.tokenizer_dir)", _TOKENIZER_SRC, "run-time", "package", _check_tokenizer),
    Rule("PKG-TOKENIZER-002", "a builder (genai-surface) package without any tokenizer file is flagged "
         "(warning): onnxruntime-genai generates from its token ids, og.Tokenizer fails", _TOKENIZER_SRC,
         "run-time", "package", _check_tokenizer, part_of="PKG-TOKENIZER-001"),
)  # fmt: skip


def check_package_layout(view: PackageView) -> list[Violation]:
    """Every file-layout violation of ``view``."""
    _location_problem_cached.cache_clear()  # the files may have changed since the last check
    found: list[Violation] = []
    for rule in RULES:
        if not rule.part_of:  # a per-check record: its parent's check reports its id
            found.extend(rule.check(view))
    return found
