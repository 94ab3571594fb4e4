"""``python -m q38`` and the ``q38`` console script."""

from __future__ import annotations

import gc
import os
import sys

# One command per process over large object graphs: an onnx-ir model of a full package is
# millions of objects in reference cycles, and CPython's default collector thresholds
# (700, 10, 10) re-traverse that heap in full collections as it grows -- a quarter to a third of
# loading, rewriting and saving the graphs (measured on the full package, issue 14). A larger
# young generation keeps the cyclic collector running, only far less often; the modules imported
# at start-up are frozen out of every later collection (they live as long as the process).
GC_THRESHOLDS = (50_000, 20, 20)


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
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        # deferred: a Ctrl-C during this import is caught below (exit 130)
        from q38.cli import interrupt_exit_code, interrupted, main
    except KeyboardInterrupt:
        sys.stderr.write("q38: interrupted\n")
        _leave(130)
        raise  # pragma: no cover - _leave does not return
    gc.freeze()
    code = main(last_run=True)
    if interrupted():
        _leave(interrupt_exit_code())
    return code


if __name__ == "__main__":
    sys.exit(entry())
