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
from pathlib import Path, PurePosixPath

from contracts._rule import Rule, RuleDoc, Violation
from contracts.package_view import GraphFile, PackageView

# GraphFile and PackageView live in contracts.package_view (what every package rule reads);
# named here too, where the package rules and their callers have always imported them.
__all__ = ["RULES", "TOKENIZER_FILES", "GraphFile", "PackageView", "check_package_layout"]

_SRC = "docs/package-format.md; reference/file-safety-facts.md"
_TOKENIZER_SRC = ("onnxruntime-genai 0.18.0 src/models/model.cpp (Tokenizer: OrtxCreateTokenizer on the "
                  "tokenizer directory); docs/package-format.md")


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
    Rule("PKG-TOKENIZER-001", "a builder (genai-surface) package that carries tokenizer files has "
         "tokenizer_config.json and tokenizer.json where og.Tokenizer opens them (the config's directory "
         "or model.tokenizer_dir)", _TOKENIZER_SRC, "run-time", "package", _check_tokenizer, family=FAMILY, doc=RuleDoc(
        "onnxruntime-genai's og.Tokenizer(model) loads the package's tokenizer through "
        "onnxruntime-extensions from the config's directory (or model.tokenizer_dir below it): "
        "it opens tokenizer_config.json, then tokenizer.json, and fails without either ('Failed to "
        "open a json file: DIR/tokenizer_config.json', 'Invalid file: DIR/tokenizer.json'). The "
        "builder's save_processing writes both with the other tokenizer files; a package that "
        "carries a tokenizer without both still loads as a model, but no application can turn "
        "text into tokens. (A package with no tokenizer file at all is PKG-TOKENIZER-002, a "
        "warning.) Only builder (genai-surface) packages are asked: q38's own v12b packages are "
        "not GenAI models. package_manifest.json is deliberately not required, on either surface: "
        "neither onnxruntime nor onnxruntime-genai opens it (it is q38's provenance record: what "
        "wrote the package, from what, file digests), the builder writes none, and q38's readers "
        "treat it as optional (a present one is validated); without it q38 diff hashes the "
        "weights instead of trusting recorded digests.",
        "a builder package directory with genai_config.json, model.onnx, model.onnx.data and "
        "tokenizer_config.json, but no tokenizer.json",
        "Copy the tokenizer files the builder wrote (tokenizer.json, tokenizer_config.json and the "
        "others save_processing writes) next to genai_config.json, or save them with "
        "AutoTokenizer.from_pretrained(SRC).save_pretrained(PKG).",
    )),
    Rule("PKG-TOKENIZER-002", "a builder (genai-surface) package without any tokenizer file is flagged "
         "(warning): onnxruntime-genai generates from its token ids, og.Tokenizer fails", _TOKENIZER_SRC,
         "run-time", "package", _check_tokenizer, part_of="PKG-TOKENIZER-001", family=FAMILY, doc=RuleDoc(
        "A genai-surface package with no tokenizer file at all is a token-ids package: "
        "onnxruntime-genai loads it and generates from token ids (og.Generator.append_tokens), "
        "but og.Tokenizer fails on it ('Failed to open a json file: DIR/tokenizer_config.json'). "
        "q38 export-genai writes such packages on purpose (a v12b source has no tokenizer to "
        "carry). A warning: the package is valid for callers that bring token ids.",
        "the output of q38 export-genai: genai_config.json, model.onnx and its data, no tokenizer files",
        "Copy the model's tokenizer files (tokenizer.json, tokenizer_config.json, ...) next to "
        "genai_config.json when an application must encode text; --ignore PKG-TOKENIZER-002 or a "
        "baseline records a token-ids package as intended.",
        "warning",
    )),
)  # fmt: skip


def check_package_layout(view: PackageView) -> list[Violation]:
    """Every file-layout violation of ``view``."""
    _location_problem_cached.cache_clear()  # the files may have changed since the last check
    found: list[Violation] = []
    for rule in RULES:
        if not rule.part_of:  # a per-check record: its parent's check reports its id
            found.extend(rule.check_package(view))
    return found
