"""A progress bar on stderr for work over about a second, only when stderr is a terminal.

Pipes, CI logs and ``--json`` consumers never see it: the bar draws nothing unless the stream is
a TTY, and nothing before ``delay`` seconds have passed, so quick commands stay silent.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``with Progress(total, "placing files") as bar: ... bar.advance()``."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        stream: TextIO | None = None,
        delay: float = 1.0,
        width: int = 30,
        unit: str = "",
    ) -> None:
        self.total = max(int(total), 0)
        self.label = label
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.width = width
        self.unit = unit  # "bytes": counts are drawn as MB / GB
        self._start = time.monotonic()
        self._drawn = False
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())

    def advance(self, n: int = 1) -> None:
        self.done = min(self.done + n, self.total) if self.total else self.done + n
        if self.enabled and time.monotonic() - self._start >= self.delay:
            self._draw()

    def _count(self, n: int) -> str:
        if self.unit != "bytes":
            return str(n)
        return f"{n / 1e9:.2f} GB" if n >= 10**9 else f"{n / 1e6:.1f} MB"

    def _draw(self) -> None:
        if self.total:
            filled = self.width * self.done // self.total
            bar = "#" * filled + "." * (self.width - filled)
            text = f"\r{self.label} [{bar}] {self._count(self.done)}/{self._count(self.total)}"
        else:
            text = f"\r{self.label} {self._count(self.done)}"
        self.stream.write(text)
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:  # leave the terminal on a clean line
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
