"""One way to open a package file (q38.package.io.files) and bounded messages (q38.errors).

In-process, real files: a FIFO without a writer, ``/dev/zero``, a socket, a directory, a symlink,
a ``/proc`` file whose ``st_size`` is 0 but whose content is not. Each refusal is one line naming
the path and the kind; a FIFO never blocks (the test would hang, the suite's timeout ends it).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import LINE_LIMIT, ProfileError, Q38Error, bound_line, clip, quote
from q38.package.io.files import (
    PROFILE_LIMIT,
    describe_mode,
    format_size,
    open_regular,
    os_problem,
    read_bounded,
    read_text_bounded,
)


def _refused(path: str | Path, **kw: object) -> str:
    with pytest.raises(ProfileError) as info:
        read_bounded(path, what="--expert-profile", limit=kw.pop("limit", PROFILE_LIMIT), error=ProfileError, **kw)  # type: ignore[arg-type]
    return str(info.value)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "prof.fifo"
    os.mkfifo(fifo)
    assert _refused(fifo) == f"--expert-profile {fifo}: is a FIFO (named pipe), not a regular file (refusing to read it)"


def test_devices_sockets_and_directories_are_refused(tmp_path: Path) -> None:
    assert _refused("/dev/zero") == "--expert-profile /dev/zero: is a character device, not a regular file (refusing to read it)"
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.close()
    # A socket cannot be open()ed at all (ENXIO): still one line with the path.
    assert _refused(sock_path).startswith(f"--expert-profile {sock_path}: ")
    assert _refused(tmp_path) == f"--expert-profile {tmp_path}: is a directory, not a regular file (refusing to read it)"
    (tmp_path / "zero").symlink_to("/dev/zero")
    assert _refused(tmp_path / "zero").endswith(": is a character device, not a regular file (refusing to read it)")


def test_nofollow_refuses_a_symlink_and_missing_or_nul_paths_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "real.bin").write_bytes(b"x")
    (tmp_path / "link.bin").symlink_to("real.bin")
    assert read_bounded(tmp_path / "link.bin", what="f", limit=10) == b"x"
    assert _refused(tmp_path / "link.bin", nofollow=True).endswith("link.bin: is a symlink (refusing to follow it)")
    assert _refused(tmp_path / "nope.bin").endswith("nope.bin: does not exist")
    assert _refused(f"{tmp_path}/a\x00b").endswith("a\\x00b: invalid path (contains a NUL byte)")
    (tmp_path / "loop").symlink_to("loop")
    assert _refused(tmp_path / "loop").endswith("loop: is a symlink loop (or a symlink where none may be followed)")


def test_the_limit_is_checked_on_st_size_and_while_reading(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"a" * 101)
    assert _refused(path, limit=100) == f"--expert-profile {path}: 101 bytes is larger than the 100 bytes limit for this file"
    path.write_bytes(b"a" * 100)
    assert read_bounded(path, what="f", limit=100) == b"a" * 100
    # /proc files report st_size 0: only the bounded read loop can stop them.
    status = Path("/proc/self/status")
    assert os.stat(status).st_size == 0 and len(status.read_bytes()) > 100
    assert _refused(status, limit=100) == "--expert-profile /proc/self/status: larger than the 100 bytes limit for this file"


def test_text_must_be_utf8(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """Text that is not UTF-8 is refused naming what the file is, its path and the first bad byte."""
    path = tmp_path / "t.txt"
    path.write_bytes(b"ok\n\xfe")
    with pytest.raises(Q38Error) as info:
        read_text_bounded(path, what="pool", limit=100)
    assert messages_snapshot == str(info.value)


def test_open_regular_closes_what_it_refuses(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        with pytest.raises(Q38Error):
            open_regular(tmp_path, what="d")
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize(("code", "text"), [
    (errno.ENOENT, "does not exist"), (errno.EACCES, "permission denied"), (errno.EPERM, "permission denied"),
    (errno.ENAMETOOLONG, "file name too long"), (errno.EISDIR, "is a directory, expected a file"),
    (errno.ENOTDIR, "a parent of it is not a directory"), (errno.ENOSPC, "No space left on device (ENOSPC)"),
])  # fmt: skip
def test_os_problem_words(code: int, text: str) -> None:
    assert os_problem(OSError(code, os.strerror(code))) == text


@pytest.mark.parametrize(("size", "text"), [
    (1 << 30, "1 GiB"), (3 << 30, "3 GiB"), (1 << 20, "1 MiB"), (1536 << 20, "1536 MiB"), (1 << 10, "1 KiB"),
    ((1 << 20) + (1 << 10), "1025 KiB"), (1023, "1023 bytes"), ((1 << 20) + 1, "1048577 bytes"), (0, "0 bytes"),
])  # fmt: skip
def test_format_size_names_the_largest_whole_unit(size: int, text: str) -> None:
    """Limits in messages read as whole units: exactly one GiB is "1 GiB", never "1024 MiB"."""
    assert format_size(size) == text


def test_quote_is_bounded_in_size_and_work() -> None:
    assert quote("abc") == "'abc'"
    big = quote("q" * 50_000_000)
    assert big.startswith("'" + "q" * 100) and big.endswith("... (50000000 chars)") and len(big) < 160
    assert quote(b"\x00" * 1000).endswith("... (1000 bytes)")
    huge = 10**5000 - 1  # str() of it raises ValueError in CPython
    assert quote(huge) in ("<integer of about 5000 digits>", "<integer of about 5001 digits>")
    assert quote(2**64) == "18446744073709551616"
    assert len(quote({"k": ["x" * 10_000] * 100})) <= 123


def test_clip_keeps_head_and_tail_and_escapes_controls() -> None:
    path = "/a" + "/b" * 5000 + "/model.onnx"
    shown = clip(path)
    assert shown.startswith("/a/b") and shown.endswith(f"/model.onnx ({len(path)} chars)") and len(shown) < 200
    assert clip("x\ny\x1b") == "x\\ny\\x1b"


def test_every_error_is_one_bounded_line_that_keeps_its_tail() -> None:
    message = "q38: " + "v" * 10_000_000 + "\nsecond line: permission denied"
    line = bound_line(message)
    assert "\n" not in line and len(line) <= LINE_LIMIT + 5
    assert line.startswith("q38: vvv") and line.endswith("permission denied")
    assert f"(message cut, {len(message)} chars)" in line
    assert str(Q38Error(message)) == line
    assert bound_line("a\n  b\tc") == "a b c"


def test_a_file_whose_size_is_unknown_is_read_no_further_than_one_byte_past_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A /proc-like file reports st_size 0: the read loop asks for at most ``limit + 1`` bytes in all,
    so a huge or endless file costs no more memory than the limit (here 1 MiB + 10 over a 3 MiB file)."""
    path = tmp_path / "endless"
    path.write_bytes(b"a" * (3 << 20))
    real_fstat, real_read = os.fstat, os.read
    asked: list[int] = []

    class _NoSize:
        def __init__(self, st: os.stat_result) -> None:
            self.st_mode, self.st_size = st.st_mode, 0

    def read(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "fstat", lambda fd: _NoSize(real_fstat(fd)))
    monkeypatch.setattr(os, "read", read)
    limit = (1 << 20) + 10
    with pytest.raises(Q38Error, match="endless: larger than the 1048586 bytes limit for this file"):
        read_bounded(path, what="f", limit=limit)
    assert sum(asked) == limit + 1


def test_describe_mode_names_a_regular_file_and_an_unknown_file_type_with_its_mode() -> None:
    """A regular file's mode reads "a regular file"; a file type no test knows is "a special file" with its mode in octal."""
    assert describe_mode(stat.S_IFREG | 0o644) == "a regular file"
    assert describe_mode(0o644) == "a special file (mode 0o644)"


def test_a_regular_file_that_fails_while_being_read_is_one_line_naming_it() -> None:
    """/proc/self/mem opens as a regular file but reading offset 0 fails (EIO): the refusal is the
    caller's error class naming what the file is, its path and the errno, not a crash."""
    assert _refused("/proc/self/mem") == "--expert-profile /proc/self/mem: cannot read: Input/output error (EIO)"
