"""A signal never cuts short a C extension's module initialization; it waits until the init returns.

Why: a Ctrl-C landing inside ``onnx.onnx_cpp2py_export``'s pybind11 init crashed the process
with SIGSEGV -- no line, no exit 130 -- in about one ``q38 optimize`` run in 150 interrupted at a
random point of its first second (``tests/unit/faults/test_sigint.py``; a fresh-clone CI run hit
it). A C init is not written to survive a ``KeyboardInterrupt`` raised in the Python code it
calls, nor a system call of its own failing with ``EINTR``.

How: :class:`ExtensionGuard` is a meta-path finder that finds nothing itself: it asks the finders
after it and, when the spec they return loads a C extension (an ``ExtensionFileLoader``), wraps
that loader so that its ``create_module`` and ``exec_module`` run with the guarded signals blocked
in this thread (``pthread_sigmask``). A blocked signal stays pending and is delivered as the
outermost init returns, where q38's handler raises ``KeyboardInterrupt`` at a Python boundary. A
signal another thread takes runs the handler in this thread anyway, possibly inside the init:
the handler asks :func:`initializing` and, when true, calls :func:`defer_interrupt` instead of
raising; the guard then raises ``KeyboardInterrupt`` once the outermost init has returned. The
import that interrupt fails would free the half-imported module, which crashes pybind11's; the
guard keeps a reference to every module an init created, so none is ever freed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TypeVar

__all__ = ["ExtensionGuard", "defer_interrupt", "guarded_extension_imports", "initializing"]

_T = TypeVar("_T")

_depth = 0
_deferred = False
_KEPT: list[ModuleType] = []
"""Every module a guarded C init created. An interrupt raised once the init has returned fails
the import, which drops the module; freeing a pybind11 module (onnx's) crashes the process with
SIGSEGV. CPython never unloads an extension module anyway, so these live as long as it does."""
_MASK = getattr(signal, "pthread_sigmask", None)  # POSIX; elsewhere only the deferral applies


def initializing() -> bool:
    """Whether this thread is inside a guarded C extension's module initialization."""
    return _depth > 0


def defer_interrupt() -> None:
    """Have the guard raise ``KeyboardInterrupt`` once the outermost guarded init returns."""
    global _deferred
    _deferred = True


class _GuardedLoader(importlib.abc.Loader):
    """``inner`` (an ``ExtensionFileLoader``) with its two init steps run under the guard.

    After ``exec_module`` the module's ``__loader__`` and ``__spec__.loader`` name ``inner``
    again: the guard leaves no trace on the modules it loaded.
    """

    def __init__(self, inner: importlib.machinery.ExtensionFileLoader, signals: Sequence[int]) -> None:
        self.inner = inner
        self._signals = tuple(signals)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return _guarded(self._signals, lambda: _kept(self.inner.create_module(spec)))

    def exec_module(self, module: ModuleType) -> None:
        try:
            _guarded(self._signals, lambda: self.inner.exec_module(module))
        finally:
            module.__loader__ = self.inner
            if module.__spec__ is not None:
                module.__spec__.loader = self.inner


def _kept(module: ModuleType | None) -> ModuleType | None:
    """``module``, referenced for the life of the process (see ``_KEPT``)."""
    if module is not None:
        _KEPT.append(module)
    return module


def _guarded(signals: tuple[int, ...], step: Callable[[], _T]) -> _T:
    """``step()`` with ``signals`` blocked; the outermost call raises a deferred interrupt after it."""
    global _depth, _deferred
    blocked = _MASK(signal.SIG_BLOCK, signals) if _MASK is not None else None
    _depth += 1
    try:
        result = step()
    finally:
        _depth -= 1
        if _MASK is not None and blocked is not None:
            _MASK(signal.SIG_SETMASK, blocked)  # a signal held off is delivered here
        interrupt = _depth == 0 and _deferred
        if interrupt:
            _deferred = False
    if interrupt:
        raise KeyboardInterrupt
    return result


class ExtensionGuard(importlib.abc.MetaPathFinder):
    """The meta-path finder that puts every C extension's init under the guard (module docstring)."""

    def __init__(self, signals: Sequence[int]) -> None:
        self._signals = tuple(signals)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """The spec the finders after this one return, its loader guarded when it loads a C extension."""
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if isinstance(finder, ExtensionGuard) or find is None:  # a nested run's guard too: no recursion
                continue
            spec = find(fullname, path, target)
            if spec is None:
                continue
            if isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
                spec.loader = _GuardedLoader(spec.loader, self._signals)
            return spec  # type: ignore[no-any-return]
        return None


@contextmanager
def guarded_extension_imports(signals: Sequence[int]) -> Iterator[None]:
    """The guard first on ``sys.meta_path`` for the block (``signals``: those to hold off).

    Inside a block that already has one (a nested run), the outer guard is the only one.
    """
    global _deferred
    if any(isinstance(finder, ExtensionGuard) for finder in sys.meta_path):
        yield  # a run inside a run (q38 demo runs each step through the CLI): the outer guard holds
        return
    guard = ExtensionGuard(signals)
    _deferred = False
    sys.meta_path.insert(0, guard)
    try:
        yield
    finally:
        if guard in sys.meta_path:
            sys.meta_path.remove(guard)
