"""One error per missing or unreadable file: the violations that only repeat it are folded into one.

A file the package refers to (a graph, an external-data file, the weights pool, a library, any
path field of the config) that is missing or unreadable breaks every rule that reads through it:
delete ``model.onnx.data`` and the graph reader refuses each graph that keeps data there
(``PKG-GRAPH-001``), the layout rule faults each initializer (``PKG-EXTDATA-001``) and ORT's
loader would too (``ORT-MODEL-004``), hundreds of violations for one cause. The user needs the
cause: :func:`fold_file_faults` keeps one violation per such file, the root cause, whose message
names the file, what is wrong with it, which graphs refer to it and how many dependent
violations (of which rules) were folded into it; :attr:`Violation.folded` carries the count for
the machine formats. The check still fails (the root is an error), only the repetition goes.

A violation depends on a file when its message names it (its package-relative path, its path as
a graph's external-data location spells it, or its absolute path) as a whole token. A file with a
single violation is left as it is: there is nothing to fold.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from contracts._rule import Violation
from contracts.package_layout import GraphFile, PackageView
from q38.errors import quote

__all__ = ["FileFault", "file_faults", "fold_file_faults", "package_faults"]

# Which of a file's violations becomes the root, first found first: the rules that are about the
# file itself before the rules that fail because of it.
_ROOT_PRIORITY = ("PKG-READ-001", "PATH-FIELD-003", "PKG-EXTDATA-001", "PKG-GRAPH-001", "ORT-MODEL-004")
# The rules whose message is about the file (not about one initializer kept in it).
_FILE_RULES = frozenset({"PKG-READ-001", "PATH-FIELD-003"})


@dataclass(frozen=True)
class FileFault:
    """A file the package refers to that a session could not read.

    ``rel``: its path from the package root; ``spellings``: every way a message may name it
    (``rel``, an external-data location relative to its graph, the absolute path); ``state``:
    ``does not exist`` or ``is not readable by the current user``.
    """

    rel: str
    spellings: tuple[str, ...]
    state: str
    data_of: tuple[str, ...] = ()  # the graphs that keep external data in it: "model.onnx (target)"

    def named_in(self, message: str) -> bool:
        """Whether ``message`` names this file as a whole token (``model.onnx`` is not in ``model.onnx.data``)."""
        return any(_token(s).search(message) for s in self.spellings)


def _token(spelling: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w./\\-])" + re.escape(spelling) + r"(?![\w.\\/-])")


def _state(path: Path) -> str | None:
    """What is wrong with ``path``: it does not exist, or the current user cannot read it.

    ``None`` for a readable file, and for what other rules judge and name better: a directory, a
    symlink (dangling, looping or escaping: PKG-SYMLINK-001, PATH-FIELD-002), a path below a
    directory that is not there or not a directory.
    """
    if os.path.islink(path):
        return None
    if not os.path.lexists(path):
        return "does not exist" if os.path.isdir(path.parent) and not os.path.islink(path.parent) else None
    if os.path.isfile(path) and not os.access(path, os.R_OK):
        return "is not readable by the current user"
    return None


def file_faults(root: Path, files: Iterable[tuple[Path, str, str]]) -> list[FileFault]:
    """The missing or unreadable ones of ``files``: (path, spelling, graph keeping data in it) triples.

    The spelling is how a graph or a config field named the file (or ""); the graph is
    ``model.onnx (target)`` for an external-data file, else "". Paths outside ``root`` are left to the rules that refuse them (an escape is its own fault).
    """
    spellings: dict[Path, list[str]] = {}
    users: dict[Path, list[str]] = {}
    for path, spelled, user in files:
        normal = Path(os.path.normpath(path))
        try:
            rel = normal.relative_to(os.path.normpath(root)).as_posix()
        except ValueError:
            continue
        names = spellings.setdefault(normal, [rel, str(normal)])
        if spelled and spelled not in names:
            names.append(spelled)
        if user and user not in users.setdefault(normal, []):
            users[normal].append(user)
    found = []
    for path, names in spellings.items():
        state = _state(path)
        if state is not None:
            found.append(FileFault(names[0], tuple(names), state, tuple(users.get(path, ()))))
    return found


def _root_of(group: Sequence[Violation]) -> Violation:
    for rule_id in _ROOT_PRIORITY:
        for v in group:
            if v.rule_id == rule_id and v.severity == "error":
                return v
    errors = [v for v in group if v.severity == "error"]
    return (errors or list(group))[0]


def _folded_message(fault: FileFault, root: Violation, group: Sequence[Violation]) -> str:
    dependents = [v for v in group if v is not root]
    counts = Counter(v.rule_id for v in dependents)
    listed = ", ".join(f"{rule_id} x{n}" for rule_id, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    graphs = list(dict.fromkeys(v.graph for v in group if v.graph))
    # a rule about the file itself says it best; one about an initializer in it names the file
    about_file = root.rule_id in _FILE_RULES or root.message.startswith(f"{fault.rel}:")
    if about_file:
        head = root.message
    elif fault.data_of:  # the graphs first, as their own rules' messages put them
        head = f"{', '.join(fault.data_of)}: external data {quote(fault.rel)} {fault.state}"
    else:
        head = f"{quote(fault.rel)} {fault.state}"
    where = f"; referred to by graph(s) {', '.join(graphs)}" if graphs and not fault.data_of else ""
    return f"{head}{where} ({len(dependents)} dependent violation(s) folded into this one: {listed})"


def fold_file_faults(violations: Sequence[Violation], faults: Sequence[FileFault]) -> list[Violation]:
    """``violations`` with each fault's violations folded into one root cause, in first-seen order.

    A violation that names several faulty files is folded into the first fault that names it.
    """
    owner: dict[int, int] = {}
    groups: dict[int, list[Violation]] = {}
    for i, v in enumerate(violations):
        for n, fault in enumerate(faults):
            if fault.named_in(v.message):
                owner[i] = n
                groups.setdefault(n, []).append(v)
                break
    out: list[Violation] = []
    emitted: set[int] = set()
    for i, v in enumerate(violations):
        f = owner.get(i)
        if f is None or len(groups[f]) < 2:
            out.append(v)
            continue
        if f in emitted:
            continue
        emitted.add(f)
        group = groups[f]
        root = _root_of(group)
        out.append(replace(root, message=_folded_message(faults[f], root, group), folded=len(group) - 1))
    return out


def package_faults(paths: PackageView, graphs: Iterable[GraphFile]) -> list[FileFault]:
    """The missing or unreadable files of a package: its graphs, their external data, its path fields.

    ``paths`` is :func:`contracts.path_fields.path_view`'s view (the config and its directories);
    ``graphs`` the graphs examined, with their external-data references.
    """
    # deferred: pulls in numpy (q38.package.profile), as contracts.path_fields does
    from q38.package.path_fields import path_fields

    files: list[tuple[Path, str, str]] = []
    for graph in graphs:
        files.append((graph.path, "", ""))
        user = f"{os.path.relpath(graph.path, paths.root)} ({graph.label})".replace(os.sep, "/")
        files.extend((graph.path.parent / location, location, user) for _name, location in graph.refs if location)
    config = paths.extra.get("config")
    if isinstance(config, Mapping):
        for field in path_fields(config, config_dir=paths.extra["config_dir"], head_dir=paths.extra["head_dir"]):
            if isinstance(field.value, str) and field.value and "\0" not in field.value:
                files.append((field.base / field.value, field.value, ""))
    return file_faults(paths.root, files)
