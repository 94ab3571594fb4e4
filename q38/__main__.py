"""``python -m q38`` and the ``q38`` console script."""

from __future__ import annotations

import os
import sys


def _leave(code: int) -> None:
    """Exit at once with ``code`` after an interruption, skipping interpreter finalization.

    A Ctrl-C that lands inside a C extension's own ``PyRun_*`` call (pybind11 module code) makes
    CPython re-raise SIGINT at exit even though q38 handled it (exit status -2 instead of 130),
    and an extension whose import was cut short can crash while the interpreter tears down.
    q38 has already removed its staged output; flushing the two streams is all that is left.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def entry() -> int:
    """The console script: a Ctrl-C while the CLI itself is still being imported is one line too."""
    try:
        from q38.cli import interrupted, main
    except KeyboardInterrupt:
        sys.stderr.write("q38: interrupted\n")
        _leave(130)
        raise  # pragma: no cover - _leave does not return
    code = main()
    if interrupted():
        _leave(code)
    return code


if __name__ == "__main__":
    sys.exit(entry())
