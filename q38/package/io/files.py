"""One way to open a package file: regular files only, never blocking, size-bounded reads.

Every small file q38 parses (config, pool, manifest, expert profile, CLI-given inputs) is read
through :func:`read_bounded`, and every file q38 opens for reading goes through
:func:`open_regular`:

* the open is ``O_NONBLOCK`` (a FIFO planted where a pool belongs must not block the command
  forever: opening a FIFO without a writer returns at once instead of waiting), ``O_CLOEXEC``,
  and ``O_NOFOLLOW`` where the caller has already resolved the path's links;
* the opened descriptor is ``fstat``-ed and must be a regular file (a FIFO, a character device
  such as ``/dev/zero``, a socket or a directory is refused before one byte is read);
* a read is bounded by a limit per file kind (:data:`CONFIG_LIMIT`, :data:`POOL_LIMIT`, ...),
  stated in the error, checked both on ``st_size`` and while reading (a file that grows);
* every ``OSError`` becomes one line naming the path and the errno text.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Final

from q38.errors import PackageError, Q38Error, clip

__all__ = [
    "CONFIG_LIMIT",
    "GRAPH_LIMIT",
    "MANIFEST_LIMIT",
    "POOL_LIMIT",
    "PROFILE_LIMIT",
    "TEXT_LIMIT",
    "describe_mode",
    "format_size",
    "open_regular",
    "os_problem",
    "read_bounded",
    "read_text_bounded",
    "require_regular",
]

MiB: Final = 1 << 20
# genai_config.json: real configs are a few KB; 4 MiB leaves room for long profile lists.
CONFIG_LIMIT: Final = 4 * MiB
# weights_pool.txt: ~150 bytes a tensor; 16 MiB is ~100k pooled tensors.
POOL_LIMIT: Final = 16 * MiB
# package_manifest.json: one record (with sha256) per file; 16 MiB is ~100k files.
MANIFEST_LIMIT: Final = 16 * MiB
# expert-profile.bin (STRP v1): 16-byte header + 8 bytes a (layer, expert) cell; 16 MiB is
# 2 M cells, 40x a 48-layer x 1024-expert model.
PROFILE_LIMIT: Final = 16 * MiB
# Any other small text file q38 parses (bench reports, fixtures' metadata).
TEXT_LIMIT: Final = 16 * MiB
# An .onnx protobuf: protobuf itself cannot parse more than 2 GiB.
GRAPH_LIMIT: Final = 2 << 30

_READ_CHUNK: Final = 1 * MiB
_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symlink"),
)


def describe_mode(mode: int) -> str:
    """What kind of file ``st_mode`` describes ("a FIFO (named pipe)", "a directory", ...)."""
    for test, text in _KINDS:
        if test(mode):
            return text
    return "a regular file" if stat.S_ISREG(mode) else f"a special file (mode {oct(mode)})"


def format_size(size: int) -> str:
    """``4194304`` -> ``"4 MiB"``; sizes that are not whole MiB/KiB stay in bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"


def os_problem(exc: OSError) -> str:
    """The errno text of ``exc`` in q38's words ("does not exist", "permission denied", ...)."""
    code = exc.errno
    if code == errno.ENOENT:
        return "does not exist"
    if code == errno.ELOOP:
        return "is a symlink loop (or a symlink where none may be followed)"
    if code == errno.ENAMETOOLONG:
        return "file name too long"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if code == errno.EISDIR:
        return "is a directory, expected a file"
    if code == errno.ENOTDIR:
        return "a parent of it is not a directory"
    name = errno.errorcode.get(code or 0, "")
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


def _label(path: str | os.PathLike[str], what: str) -> str:
    shown = clip(os.fspath(path))
    return f"{what} {shown}" if what else shown


def require_regular(
    st: os.stat_result, path: str | os.PathLike[str], *, what: str, error: type[Q38Error] = PackageError
) -> None:
    """Refuse (``error``) a stat result that is not a regular file, naming its kind."""
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{_label(path, what)}: is {describe_mode(st.st_mode)}, not a regular file (refusing to read it)")


def open_regular(
    path: str | os.PathLike[str],
    *,
    what: str,
    nofollow: bool = False,
    error: type[Q38Error] = PackageError,
) -> int:
    """Open ``path`` read-only and return the descriptor of a regular file; the caller closes it.

    Args:
        path: the file.
        what: what the file is to the user, for the message ("config", "--expert-profile", ...).
        nofollow: the caller resolved the path's links already: refuse a symlink as the last
            component (``O_NOFOLLOW``) instead of following a link swapped in meanwhile.
        error: the :class:`Q38Error` subclass to raise (default :class:`PackageError`).

    Raises:
        error: the path does not exist, cannot be opened, or is not a regular file (a FIFO, a
            device, a socket, a directory) - one line naming the path.

    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if nofollow else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and nofollow and os.path.islink(path):
            raise error(f"{_label(path, what)}: is a symlink (refusing to follow it)") from None
        raise error(f"{_label(path, what)}: {os_problem(exc)}") from None
    except ValueError:  # an embedded NUL byte in the path
        raise error(f"{_label(path, what)}: invalid path (contains a NUL byte)") from None
    try:
        require_regular(os.fstat(fd), path, what=what, error=error)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(
    path: str | os.PathLike[str],
    *,
    what: str,
    limit: int,
    nofollow: bool = False,
    error: type[Q38Error] = PackageError,
) -> bytes:
    """The bytes of the regular file ``path``, refusing files larger than ``limit``.

    Raises:
        error: as :func:`open_regular`, or the file holds more than ``limit`` bytes (the limit
            is stated), or reading fails (the errno text is stated).

    """
    fd = open_regular(path, what=what, nofollow=nofollow, error=error)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise error(
                f"{_label(path, what)}: {size} bytes is larger than the {format_size(limit)} limit for this file"
            )
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(_READ_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise error(f"{_label(path, what)}: larger than the {format_size(limit)} limit for this file")
    except OSError as exc:
        raise error(f"{_label(path, what)}: cannot read: {os_problem(exc)}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text_bounded(
    path: Path, *, what: str, limit: int, error: type[Q38Error] = PackageError
) -> str:
    """:func:`read_bounded` decoded as UTF-8; a decoding failure names the byte offset."""
    data = read_bounded(path, what=what, limit=limit, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{_label(path, what)}: not UTF-8 text (byte {exc.start})") from None
