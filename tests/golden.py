"""Goldens: a syrupy extension that stores the canonical, reviewable JSON of graphs and packages.

The canonical forms are q38's own (:mod:`q38.canonical`, shared with ``q38 diff``):
``canonical_graph`` for a ``.onnx`` path / ``onnx.ModelProto`` / ``onnx_ir.Model`` and
``canonical_package`` for a package directory, written by :func:`q38.canonical.dumps` (a value on
one line when it fits 160 characters, else one member per line: a changed attribute is one
short changed line). This module adds what only goldens need:

* **Storage.** One JSON file per snapshot under ``goldens/<test_module>/<test>[<name>].json``
  (``goldens/`` at the pytest root directory). Snapshots of one module whose canonical forms are
  identical are stored once: the file whose name sorts first holds the form, each other one is a
  reference (``{"format": "q38-golden-ref", "same_as": "<file>"}``) that reads as that form.
  References are made at the end of an updating run (:func:`share_identical`); a file that is
  rewritten or deleted first gives its old form to the files that referred to it, so a golden
  never changes meaning without its own test having run.
* **Failure message.** The golden file, the differences as ``q38 diff`` lines, the first
  differing node in full on both sides, and the command that updates goldens.
* **Session rules** (:class:`GoldenPlugin`): unused goldens fail a run in which every test
  passed (syrupy's default, also under pytest-xdist); a run that already fails for another
  reason does not call goldens "unused" (the failing tests never reached theirs) and deletes
  nothing. Tests that use a golden fixture get the ``golden`` marker; ``--goldens-only`` skips
  every other test, which keeps syrupy's unused-golden cleanup working (``nox -s goldens``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension
from syrupy.location import PyTestLocation

from q38.canonical import VERSION, canonical_graph, canonical_package, dumps
from q38.canonical.normalize import Normalizer
from q38.diff import Difference, diff_graph, diff_tree, node_keys

__all__ = [
    "GOLDENS_DIRNAME",
    "REF_FORMAT",
    "VERSION",
    "GoldenPlugin",
    "GraphGoldenExtension",
    "MessagesGoldenExtension",
    "Normalizer",
    "PackageGoldenExtension",
    "add_options",
    "canonical_graph",
    "canonical_messages",
    "canonical_package",
    "dumps",
    "golden_assertion",
    "share_identical",
]

GOLDENS_DIRNAME: Final = "goldens"
REF_FORMAT: Final = "q38-golden-ref"
UPDATE_COMMAND: Final = "nox -s goldens"
MESSAGES_FORMAT: Final = "q38-messages"
GOLDEN_FIXTURES: Final = frozenset({"graph_snapshot", "package_snapshot", "messages_snapshot"})
MAX_DIFF_LINES: Final = 20


# --------------------------------------------------------------------------- shared storage


def _ref_text(target: str) -> str:
    return dumps({"format": REF_FORMAT, "version": VERSION, "same_as": target})


def _ref_target(text: str) -> str | None:
    """The file a reference names, or None when ``text`` is a golden in full."""
    if f'"format": "{REF_FORMAT}"' not in text[:200]:
        return None
    try:
        target = json.loads(text).get("same_as")
    except ValueError:
        return None
    return target if isinstance(target, str) and "/" not in target and target.endswith(".json") else None


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Serializes golden writes in one directory across pytest-xdist workers (outside goldens/)."""
    key = hashlib.sha256(os.fsencode(os.path.realpath(directory))).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"q38-goldens-{key}.lock"
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _release_referrers(path: Path) -> None:
    """Before ``path`` changes or goes: every reference to it gets its current form in full."""
    if not path.is_file():
        return
    old = path.read_text(encoding="utf-8")
    if _ref_target(old) is not None:
        return
    for other in sorted(path.parent.glob("*.json")):
        if other != path and _ref_target(other.read_text(encoding="utf-8")) == path.name:
            _write_atomic(other, old)


def resolve(path: Path) -> str | None:
    """The golden text ``path`` stands for (following its reference), or None if there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    target = _ref_target(text)
    if target is None:
        return text
    try:
        resolved = (path.parent / target).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return None if _ref_target(resolved) is not None else resolved


def share_identical(directory: Path) -> int:
    """Stores each canonical form of ``directory`` once; returns how many files became references."""
    made = 0
    with _directory_lock(directory):
        groups: dict[str, list[Path]] = {}
        for path in sorted(directory.glob("*.json")):
            text = resolve(path)
            if text is not None:
                groups.setdefault(text, []).append(path)
        for text, paths in groups.items():
            owner, *others = paths  # the first name in sort order holds the form
            if owner.read_text(encoding="utf-8") != text:
                _write_atomic(owner, text)
            for other in others:
                ref = _ref_text(owner.name)
                if other.read_text(encoding="utf-8") != ref:
                    _write_atomic(other, ref)
                    made += 1
    return made


# --------------------------------------------------------------------------- failure message


def _first_node(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The first node (in golden order) that differs, on each side (None where it is absent)."""
    na, nb = a.get("nodes") or [], b.get("nodes") or []
    by_b = dict(zip(node_keys(nb), nb))
    for key, node in zip(node_keys(na), na):
        other = by_b.get(key)
        if other != node:
            return node, other
    keys_a = set(node_keys(na))
    for key, node in zip(node_keys(nb), nb):
        if key not in keys_a:
            return None, node
    return None, None


def _indented(title: str, value: Any) -> list[str]:
    return [title, *("    " + line for line in dumps(value).splitlines())]


def explain(golden_text: str, actual_text: str, *, location: str) -> list[str]:
    """The lines a failing golden assertion shows (see the module docstring)."""
    lines = [f"golden {location} differs from this run:"]
    try:
        golden, actual = json.loads(golden_text), json.loads(actual_text)
    except ValueError:
        golden = actual = None
    diffs: list[Difference] = []
    name = Path(location.split(" (same as ")[0]).name
    if isinstance(golden, dict) and isinstance(actual, dict):
        if golden.get("format") == "q38-graph" and actual.get("format") == "q38-graph":
            diffs = list(diff_graph(name, golden, actual))
        else:
            diffs = list(diff_tree(name, golden, actual))
    if diffs:
        lines.extend(d.line() for d in diffs[:MAX_DIFF_LINES])
        if len(diffs) > MAX_DIFF_LINES:
            lines.append(f"  ... and {len(diffs) - MAX_DIFF_LINES} more difference(s)")
    else:
        lines.append("  (the texts differ; the canonical forms do not parse or compare equal)")
    if isinstance(golden, dict) and isinstance(actual, dict) and golden.get("format") == "q38-graph":
        before, after = _first_node(golden, actual)
        if before is not None:
            lines.extend(_indented("first differing node, in the golden:", before))
        if after is not None:
            lines.extend(_indented("and in this run:" if before is not None else "first differing node, new in this run:", after))
    lines.append(f"if this change is intended: {UPDATE_COMMAND} (then review `git diff --stat goldens/`)")
    return lines


# --------------------------------------------------------------------------- syrupy extensions


class GoldenExtension(JSONSnapshotExtension):
    """Base: one JSON file per snapshot under ``<rootdir>/goldens/<test_module>/``."""

    canonicalize: Callable[[Any], Any] = staticmethod(lambda data: data)

    def __init__(self) -> None:
        super().__init__()
        self._last_location: str | None = None
        self._last_ref: str | None = None

    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        root = Path(test_location.item.config.rootpath)
        return str(root / GOLDENS_DIRNAME / test_location.basename)

    def serialize(self, data: Any, *, exclude: Any = None, include: Any = None, matcher: Any = None) -> str:
        return dumps(type(self).canonicalize(data))

    def read_snapshot_data_from_location(self, *, snapshot_location: str, snapshot_name: str, session_id: str) -> Any:
        self._last_location = snapshot_location
        with contextlib.suppress(OSError):
            self._last_ref = _ref_target(Path(snapshot_location).read_text(encoding="utf-8"))
        return resolve(Path(snapshot_location))

    @classmethod
    def write_snapshot_collection(cls, *, snapshot_collection: Any, name_order: Any = None) -> None:
        path = Path(snapshot_collection.location)
        data = next(iter(snapshot_collection)).data
        with _directory_lock(path.parent):
            _release_referrers(path)
            _write_atomic(path, data)

    def delete_snapshots(self, *, snapshot_location: str, snapshot_names: set[str]) -> None:
        path = Path(snapshot_location)
        with _directory_lock(path.parent):
            _release_referrers(path)
            path.unlink(missing_ok=True)

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        location = self._last_location or "(unknown golden)"
        with contextlib.suppress(ValueError):
            location = os.path.relpath(location)
        if self._last_ref:
            location += f" (same as {self._last_ref})"
        yield from explain(str(snapshot_data), str(serialized_data), location=location)


class GraphGoldenExtension(GoldenExtension):
    """Graphs: a ``.onnx`` path, ``onnx.ModelProto`` or ``onnx_ir.Model`` -> canonical JSON."""

    canonicalize = staticmethod(canonical_graph)


class PackageGoldenExtension(GoldenExtension):
    """Packages: a package directory -> canonical config + pool + manifest + inventory JSON."""

    canonicalize = staticmethod(canonical_package)


def canonical_messages(data: object, temp_root: str | None = None) -> dict[str, Any]:
    """q38's own wording as a reviewable map: case -> message (one line, or the lines in order).

    ``data`` is one message (``str``), the lines of one case (a list or tuple of ``str``) or a
    mapping of case -> either; the cases are sorted. Anything else is a test bug, refused here
    rather than stored as its ``repr``. A path under ``temp_root`` (pytest's base temporary
    directory) reads ``<tmp>/...`` with the test's own directory name left out, so the golden
    names what the message says, not where this run happened to put it.
    """
    masked = re.compile(re.escape(temp_root.rstrip("/")) + r"/[\w.-]+") if temp_root else None

    def mask(text: str) -> str:
        return masked.sub("<tmp>", text) if masked else text

    def lines(value: object, where: str) -> str | list[str]:
        if isinstance(value, str):
            return mask(value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return [mask(v) for v in value]
        raise TypeError(f"messages_snapshot: {where} is {type(value).__name__}, not a message or a list of messages")

    if isinstance(data, Mapping):
        messages: object = {str(k): lines(v, f"case {k!r}") for k, v in sorted(data.items(), key=lambda kv: str(kv[0]))}
    else:
        messages = lines(data, "the value")
    return {"format": MESSAGES_FORMAT, "messages": messages}


class MessagesGoldenExtension(GoldenExtension):
    """q38's wording (refusals, declines, explain lines): case -> message, as reviewable JSON.

    Where q38 owns a sentence, the snapshot is its reviewed text: a reworded message fails the
    test with the changed line, and ``nox -s goldens`` rewrites it for review as a whole.
    Texts onnxruntime owns stay exact pins in the tests.
    """

    temp_root: str | None = None  # pytest's base temporary directory, set by the fixture

    def serialize(self, data: Any, *, exclude: Any = None, include: Any = None, matcher: Any = None) -> str:
        return dumps(canonical_messages(data, type(self).temp_root))


class GoldenAssertion(SnapshotAssertion):
    """A snapshot assertion whose repr is its name, not the golden's text.

    pytest shows a failing test's arguments; syrupy's repr of a fixture is the whole stored
    snapshot (thousands of lines for a graph), which buries the failure message.
    """

    def __repr__(self) -> str:
        return f"<golden {self.extension_class.__name__}>"


def golden_assertion(snapshot: SnapshotAssertion, extension_class: type[GoldenExtension]) -> GoldenAssertion:
    """``snapshot`` (syrupy's fixture) bound to ``extension_class``, as a :class:`GoldenAssertion`."""
    base = snapshot.use_extension(extension_class)
    return GoldenAssertion(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init})


# --------------------------------------------------------------------------- session rules


def add_options(parser: pytest.Parser) -> None:
    """``--goldens-only``: run only the tests that use a golden fixture (skip the others)."""
    parser.addoption(
        "--goldens-only",
        action="store_true",
        default=False,
        help="skip every test that does not use graph_snapshot / package_snapshot / messages_snapshot (nox -s goldens)",
    )


class GoldenPlugin:
    """The session rules of the module docstring; registered by the tests' conftest."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.note: str | None = None
        config.addinivalue_line("markers", "golden: uses a golden fixture (added automatically)")

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        only = bool(self.config.getoption("goldens_only", False))
        skip = pytest.mark.skip(reason="not a golden test (--goldens-only)")
        for item in items:
            if GOLDEN_FIXTURES & set(getattr(item, "fixturenames", ())):
                item.add_marker("golden")
            elif only:
                item.add_marker(skip)

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Iterator[None]:
        controller = not hasattr(self.config, "workerinput")
        if controller and exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            # The tests that failed never reached their later goldens: those are not unused,
            # and nothing may be deleted on their account.
            self.config.option.disable_unused_snapshots = True
            self.note = (
                "goldens: the unused-golden check is skipped because this run failed "
                f"(exit {int(exitstatus)}); it runs when every test passes"
            )
        result = yield
        if controller and self.config.getoption("update_snapshots", False):
            root = Path(self.config.rootpath) / GOLDENS_DIRNAME
            if root.is_dir():
                for directory in sorted(p for p in root.iterdir() if p.is_dir()):
                    share_identical(directory)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Iterator[None]:
        if not self.note:
            return (yield)
        # syrupy reports the skipped check as if --snapshot-disable-unused had been given; the
        # note below says what happened instead.
        write_line = terminalreporter.write_line

        def without_disable_notice(line: str, **kwargs: Any) -> None:
            if "--snapshot-disable-unused" not in line:
                write_line(line, **kwargs)

        terminalreporter.write_line = without_disable_notice
        try:
            result = yield
        finally:
            terminalreporter.write_line = write_line
        write_line(self.note)
        return result
