"""Path-field rules: every file a package's config names is relative, inside, and a regular file.

GenAI and ORT open every path a config names relative to the config's directory: the graphs
(``model.decoder.filename``, ``model.mtp.filename``, ``model.engram.filename``, the qwen38
graph's target / head / prefill / multidraft files, runtime-profile overlays), the weights pool,
the expert profile and ``session.moe.offload.popularity_file``, custom-op libraries, and every
``shared_initializers`` entry's ``data_file``. A path that is absolute, climbs out with ``..``,
holds a NUL, leads out of the package through a symlink, or names a directory, FIFO or device is
a package that loads something other than what it shows (or hangs the loader). The fields and
the contract are ``q38.package.path_fields``' (the same code every q38 command runs before it
reads a package); these rules report its findings with rule ids.

Library fields that ``CFG-LIB-001`` / ``PKG-LIB-001`` already check (``custom_ops_library`` of
the decoder, head and overlay blocks, ``qwen38_graph.libraries``) are left to those rules, so one
fault is one violation.

The rules take a :class:`contracts.package_layout.PackageView` whose ``extra`` holds ``config``
(the raw ``genai_config.json`` document), ``config_dir`` and ``head_dir``; see :func:`path_view`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts._rule import Rule, RuleDoc, Violation
from contracts.config_surface import library_paths
from contracts.package_layout import PackageView

if TYPE_CHECKING:
    from q38.package.path_fields import Problem

__all__ = ["RULES", "check_path_fields", "path_view", "refused_graph_paths"]

_SRC = "docs/package-format.md; reference/file-safety-facts.md; q38/package/path_fields.py"
_RULE_OF = {"syntax": "PATH-FIELD-001", "escape": "PATH-FIELD-002", "file": "PATH-FIELD-003"}


def path_view(root: Path, config_dir: Path, config: Mapping[str, Any]) -> PackageView:
    """The view these rules read: ``root``, and the config document found in ``config_dir``."""
    layered = config_dir.name == "target" and (config_dir.parent / "head").is_dir()
    head_dir = config_dir.parent / "head" if layered else config_dir
    return PackageView(root=root, extra={"config": config, "config_dir": config_dir, "head_dir": head_dir})


def _problems(view: PackageView) -> list[Problem]:
    """Every path field of the view's config that breaks the contract, one problem each.

    Library paths that ``config_surface.library_paths`` already checks are left to that rule.
    """
    # deferred: pulls in numpy (q38.package.profile)
    from q38.package.path_fields import field_problem, path_fields

    config = view.extra.get("config")
    if not isinstance(config, Mapping):
        return []
    covered = {key for key, _rel in library_paths(config)}
    found = []
    for field in path_fields(config, config_dir=view.extra["config_dir"], head_dir=view.extra["head_dir"]):
        if field.kind == "library" and field.key in covered:
            continue
        problem = field_problem(field, root=view.root)
        if problem is not None:
            found.append(problem)
    return found


def _category_rule(category: str) -> Callable[[PackageView], list[Violation]]:
    def check(view: PackageView) -> list[Violation]:
        return [Violation(_RULE_OF[category], p.message) for p in _problems(view) if p.category == category]

    return check


def _check_shared_ranges(view: PackageView) -> list[Violation]:
    # deferred: pulls in numpy (q38.package.profile)
    from q38.package.path_fields import shared_initializer_ranges

    config = view.extra.get("config")
    if not isinstance(config, Mapping):
        return []
    return [Violation("PATH-FIELD-004", m) for m in shared_initializer_ranges(config, config_dir=view.extra["config_dir"])]


def _check_special_files(view: PackageView) -> list[Violation]:
    from q38.package.io.files import describe_mode  # deferred: pulls in numpy (q38.package.profile)

    found = []
    for dirpath, dirnames, filenames in os.walk(view.root, followlinks=False):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            path = Path(dirpath) / name
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                rel = path.relative_to(view.root).as_posix()
                found.append(Violation(
                    "PATH-SPECIAL-001",
                    f"{rel}: is {describe_mode(mode)}; a package holds only regular files, directories and symlinks "
                    "(a loader opening it would block or read without end)",
                ))  # fmt: skip
    return found


FAMILY = "layout"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES: tuple[Rule, ...] = (
    Rule("PATH-FIELD-001", "every path field is a relative path: no absolute path, no '..', no NUL, "
         "backslash or invalid Unicode", _SRC, "run-time", "package", _category_rule("syntax"), family=FAMILY, doc=RuleDoc(
        "Every path field of the config (graph files, data files, profiles, libraries) must be a "
        "relative path: no absolute path, no '..', no NUL, backslash or invalid Unicode; readers "
        "on other machines resolve it against the package.",
        '"filename": "C:\\\\models\\\\model.onnx"',
        "Write a relative POSIX path inside the package (model.onnx).",
    )),
    Rule("PATH-FIELD-002", "every path field resolves inside the package (no symlink out of it, no loop)",
         _SRC, "run-time", "package", _category_rule("escape"), family=FAMILY, doc=RuleDoc(
        "Every path field must resolve inside the package, also through symlinks, and without a "
        "symlink loop.",
        '"filename": "model.onnx" where model.onnx -> ../other/model.onnx',
        "Place the file inside the package (or link to a file inside it).",
    )),
    Rule("PATH-FIELD-003", "every path field names an existing regular file (not a directory, FIFO, "
         "device or socket)", _SRC, "run-time", "package", _category_rule("file"), family=FAMILY, doc=RuleDoc(
        "Every path field must name an existing regular file: not a directory, FIFO, device or "
        "socket, which a reader would block on or fail to map.",
        '"filename": "graphs"  (a directory)',
        "Point the field at the file itself.",
    )),
    Rule("PATH-FIELD-004", "shared_initializers offset / length are decimal and lie inside their data_file",
         _SRC, "run-time", "package", _check_shared_ranges, family=FAMILY, doc=RuleDoc(
        "shared_initializers entries give offset and length as decimal strings; the range must "
        "lie inside their data_file, or onnxruntime-genai maps bytes the file does not have.",
        '"offset": "0x10", "length": "4096"  on a 1000-byte data file',
        "Write decimal offset / length within the data file's size.",
    )),
    Rule("PATH-SPECIAL-001", "the package holds only regular files, directories and symlinks (no FIFO, "
         "socket or device)", _SRC, "run-time", "package", _check_special_files, family=FAMILY, doc=RuleDoc(
        "A package holds only regular files, directories and symlinks; a FIFO, socket or device "
        "inside it blocks or misleads every tool that copies or hashes the package.",
        "mkfifo pkg/model.onnx.data",
        "Remove the special file and put the real file there.",
    )),
)  # fmt: skip


def check_path_fields(view: PackageView) -> list[Violation]:
    """Every path-field violation of the package in ``view`` (see :func:`path_view`)."""
    found: list[Violation] = []
    for rule in RULES:
        found.extend(rule.check_package(view))
    return found


def refused_graph_paths(view: PackageView) -> set[Path]:
    """The graph files (as named, under their directory) whose path field breaks a rule here.

    The runner does not open them; the violation says why.
    """
    return {
        p.field.base / str(p.field.value)
        for p in _problems(view)
        if p.field.kind == "graph" and isinstance(p.field.value, str)
    }
