"""Fault injection for write steps: make the k-th filesystem write operation fail with an errno.

:class:`WriteFaults` wraps the write-side entry points a q38 command can reach (``open``/``io.open``
in a writing mode, ``os.open`` with a write flag, ``os.write``, ``os.link``, ``os.symlink``,
``os.replace``, ``os.rename``, ``os.copy_file_range``, ``os.mkdir``, ``os.truncate``,
``os.ftruncate``, and the staging commit ``q38.package.io.staging.rename_noreplace``) and counts calls; with ``fail_at=k`` the k-th call raises ``OSError(errno)``.
Install only around the command under test (``with faults.installed(): ...``): pytest's own files
must not be affected.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
from collections.abc import Callable, Iterator
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_OS_FUNCS = ("write", "link", "symlink", "replace", "rename", "copy_file_range", "mkdir", "truncate", "ftruncate")


class WriteFaults:
    def __init__(self, fail_at: int | None = None, err: int = 28) -> None:
        self.fail_at = fail_at
        self.err = err
        self.calls = 0
        self.log: list[str] = []
        self.fired: str | None = None

    def _step(self, what: str) -> None:
        self.calls += 1
        self.log.append(what)
        if self.fail_at is not None and self.calls == self.fail_at:
            self.fired = what
            raise OSError(self.err, os.strerror(self.err))

    def _wrap_open(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def fake(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if isinstance(mode, str) and any(c in mode for c in "wxa+"):
                self._step(f"open({mode}) {os.fspath(file) if not isinstance(file, int) else file}")
            return real(file, mode, *args, **kwargs)

        return fake

    def _wrap_os(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        if name == "open":
            def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
                if flags & _WRITE_FLAGS:
                    self._step(f"os.open {os.fspath(path)}")
                return real(path, flags, *args, **kwargs)

            return fake_open

        def fake(*args: Any, **kwargs: Any) -> Any:
            self._step(name if name == "rename_noreplace" else f"os.{name}")
            return real(*args, **kwargs)

        return fake

    @contextlib.contextmanager
    def installed(self) -> Iterator[WriteFaults]:
        saved: list[tuple[Any, str, Any]] = [(builtins, "open", builtins.open), (io, "open", io.open)]
        saved += [(os, name, getattr(os, name)) for name in ("open", *_OS_FUNCS)]
        from q38.package.io import staging

        saved.append((staging, "rename_noreplace", staging.rename_noreplace))
        try:
            builtins.open = self._wrap_open(saved[0][2])  # type: ignore[assignment]
            io.open = self._wrap_open(saved[1][2])  # type: ignore[assignment]
            for module, name, real in saved[2:]:
                setattr(module, name, self._wrap_os(name, real))
            yield self
        finally:
            for module, name, real in saved:
                setattr(module, name, real)
