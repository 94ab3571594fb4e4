"""Graphs parsed once per command: the source gate's models handed on, the written ones judged in memory.

A writing command (optimize, offload, export-genai) runs the contract rules on its source before
it writes (the source gate), does its own work on the same graphs, and checks the staged output
just before it is renamed into place. Parsing a graph (onnx-ir's deserializer) is the dear part
of reading one; without this memo each graph was parsed three times per command. While a
:func:`graph_memo` block is active, :func:`q38.package.graphs.load_graph_refs` consults it:

* **recording** (the gate): every graph it loads is kept; a second load of the same file in the
  gate answers the kept model.
* after :meth:`GraphMemo.stop_recording` (the command's own work): the first load of a kept file
  takes the gate's model (the file's identity -- device, inode, size, mtime -- unchanged, its
  external references checked again) with its ``meta`` as loaded, so no rule's cached facts
  leak into the command; the model is the command's from then on (it may rewrite it). Later
  loads of that file parse it afresh.
* a writer that serialized a model it will not change again registers the bytes with
  :meth:`GraphMemo.keep_written`; in the output check (:meth:`GraphMemo.judge`) a load whose
  file holds exactly those bytes answers that model instead of deserializing them again. What is judged is what is on disk:
  the bytes are compared in full. A command that only read a model it took registers it with
  :meth:`GraphMemo.keep_unchanged`: a graph it placed unchanged is judged as that model.
* the contract runner keeps each model's graph-rule verdicts (:meth:`GraphMemo.verdict`): a model
  judged again under the same session entries and EPs (a graph the output holds twice, a graph
  placed unchanged) keeps its verdict; a model the command took has none until it is registered
  unchanged.

Outside a block nothing is kept: every load parses, as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = ["FileIdentity", "GraphMemo", "active_memo", "graph_memo"]

FileIdentity = tuple[int, int, int, int]
"""(st_dev, st_ino, st_size, st_mtime_ns) of a graph file, read from its open descriptor."""

MemoKey = tuple[str, str, bool]
"""(absolute graph path, absolute package root, check_structure) of one load."""


@dataclass
class _Kept:
    identity: FileIdentity
    model: ir.Model
    refs: list[Any]
    meta: dict[str, Any]
    data: bytes


@dataclass
class GraphMemo:
    """The models of one command (see the module docstring); made by :func:`graph_memo`."""

    recording: bool = True
    judging: bool = False
    """Set by :meth:`judge`: only the output check's loads are answered by written models."""
    _loaded: dict[MemoKey, _Kept] = field(default_factory=dict)
    _written: dict[bytes, ir.Model] = field(default_factory=dict)
    _taken: dict[int, tuple[ir.Model, bytes]] = field(default_factory=dict)
    _verdicts: dict[int, tuple[ir.Model, dict[Hashable, list[Any]]]] = field(default_factory=dict)
    _suspended: dict[int, tuple[ir.Model, dict[Hashable, list[Any]]]] = field(default_factory=dict)
    parsed: int = 0
    """Graphs parsed (deserialized) while this memo was active: what the tests and benchmarks count."""

    def take(self, key: MemoKey, identity: FileIdentity) -> tuple[ir.Model, list[Any]] | None:
        """The kept model of ``key`` if its file is unchanged, else None.

        While recording the model stays kept (the gate reads it again); afterwards it is handed
        over once, its ``meta`` restored to what the load left.
        """
        kept = self._loaded.get(key)
        if kept is None or kept.identity != identity:
            return None
        if self.recording:
            return kept.model, list(kept.refs)
        del self._loaded[key]
        verdicts = self._verdicts.pop(id(kept.model), None)
        if verdicts is not None:  # the command may rewrite it: its verdicts wait for keep_unchanged
            self._suspended[id(kept.model)] = verdicts
        kept.model.meta.clear()
        kept.model.meta.update(kept.meta)
        self._taken[id(kept.model)] = (kept.model, kept.data)
        return kept.model, list(kept.refs)

    def keep_loaded(
        self, key: MemoKey, identity: FileIdentity, model: ir.Model, refs: list[Any], data: bytes
    ) -> None:
        """Keep a model the gate just parsed from ``data`` (nothing is kept once recording stopped)."""
        if self.recording:
            self._loaded[key] = _Kept(identity, model, list(refs), dict(model.meta), data)

    def keep_unchanged(self, model: ir.Model) -> None:
        """``model``, taken from the gate, was not changed and will not be.

        A staged file holding the bytes the gate read (a graph placed unchanged) is then judged
        as ``model``: its source verdict, no parse.
        """
        taken = self._taken.pop(id(model), None)
        if taken is not None and taken[0] is model:
            self._written[taken[1]] = model
            verdicts = self._suspended.pop(id(model), None)
            if verdicts is not None and verdicts[0] is model:
                self._verdicts[id(model)] = verdicts  # unchanged: it keeps its source verdict

    def verdict(self, model: ir.Model, key: Hashable) -> list[Any] | None:
        """The graph rules' violations found on ``model`` under ``key`` (session entries, EPs ...) in this command.

        A model the command took from the gate has none until it is registered unchanged
        (:meth:`keep_unchanged`): the command may have rewritten it since.
        """
        found = self._verdicts.get(id(model))
        if found is None or found[0] is not model or key not in found[1]:
            return None
        return list(found[1][key])

    def keep_verdict(self, model: ir.Model, key: Hashable, violations: list[Any]) -> None:
        """Remember the graph rules' ``violations`` on ``model`` under ``key`` (see :meth:`verdict`)."""
        entry = self._verdicts.get(id(model))
        if entry is None or entry[0] is not model:
            entry = self._verdicts[id(model)] = (model, {})
        entry[1][key] = list(violations)

    def stop_recording(self) -> None:
        """The gate is done: from now on each kept model is handed to the command's first load of it."""
        self.recording = False

    def keep_written(self, model: ir.Model, data: bytes) -> None:
        """``data`` is ``model`` serialized, and its writer changes ``model`` no more."""
        self._written[data] = model

    @contextlib.contextmanager
    def judge(self) -> Iterator[None]:
        """The output check's block: its loads of files holding registered bytes answer those models.

        Outside it (the command's own loads) registered bytes are parsed as usual, so a command
        never gets back a model it handed over.
        """
        self.judging = True
        try:
            yield
        finally:
            self.judging = False

    def written(self, data: bytes) -> ir.Model | None:
        """In :meth:`judge`, the model a writer registered as serialized to exactly ``data``, ``meta`` cleared.

        The ``meta`` the command left (cached facts of a model it rewrote since) is dropped, as a
        fresh parse would have none.
        """
        model = self._written.get(data) if self.judging else None
        if model is not None:
            model.meta.clear()
        return model


_ACTIVE: list[GraphMemo] = []


def active_memo() -> GraphMemo | None:
    """The innermost active memo, or None outside a :func:`graph_memo` block."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def graph_memo() -> Iterator[GraphMemo]:
    """Keep the graphs loaded and written in the block (see the module docstring); dropped on leaving."""
    memo = GraphMemo()
    _ACTIVE.append(memo)
    try:
        yield memo
    finally:
        _ACTIVE.remove(memo)
        memo._loaded.clear()
        memo._written.clear()
        memo._taken.clear()
        memo._verdicts.clear()
        memo._suspended.clear()
