"""Run a check as another user: root reads every file, so an unreadable-file test drops to nobody."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

NOBODY = 65534


def nobody_can_read(path: Path) -> bool:
    """Whether nobody can reach ``path`` (every parent searchable by others) and read it."""
    parents = [*reversed(path.resolve().parents), path.resolve()]
    searchable = all(os.stat(p).st_mode & stat.S_IXOTH for p in parents if p.is_dir())
    return searchable and bool(os.stat(path).st_mode & stat.S_IROTH)


def as_nobody(run: Callable[[], object]) -> object:
    """``run()`` in a forked child that has dropped to nobody (uid/gid 65534); its JSON result comes back.

    An exception in the child comes back as the string "Type: text" (the caller's assertion then
    shows it). Do every lazy import before calling: the child should only read the package.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            payload: object = run()
        except BaseException as exc:
            payload = f"{type(exc).__name__}: {exc}"
        os.write(write_end, json.dumps(payload).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 1 << 16):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    return json.loads(data)
