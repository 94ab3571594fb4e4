"""The link policy and the copy engine, on real filesystems.

Invariants:
- ``auto`` = a reflink where the filesystem clones (a real XFS loop image), else a copy (ext4
  here, and across filesystems: a real tmpfs, EXDEV); never a hard link; ``hardlink`` only when
  asked, with one warning per command;
- a placed file is recorded by identity with no digest: no byte of a linked or cloned file is
  read, a copy is the kernel's copy_file_range; ``--digest`` digests a copy in the same pass
  (read once, hash and write) and a linked file by reading it; a digest a source manifest holds
  is reused while the identity matches, dropped (or, with ``--digest``, recomputed) once it does not;
- the kernel copy falls back for real: copy_file_range -> sendfile (EXDEV onto tmpfs) -> read/write
  (forced), bytes identical each time;
- ENOSPC on a tiny tmpfs fails as one PackageError and leaves nothing at the destination;
- the source is never modified, and its link count never grows under ``auto`` / ``copy``.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
from pathlib import Path

import pytest
from support.filesystems import reflink_works, tmpfs, xfs_reflink
from syrupy.assertion import SnapshotAssertion

import q38.package.io.copying as copying
import q38.package.io.links as links
from q38.errors import PackageError
from q38.package.io.hashing import FileIdentity, KnownDigests
from q38.package.io.links import HARDLINK_WARNING, LinkPolicy, Placer, place, place_file

SIZE = (3 << 20) + 12345  # several hash buffers' worth plus a ragged tail


def _write_src(path: Path) -> Path:
    path.write_bytes(os.urandom(SIZE))
    path.chmod(0o640)
    return path


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return _write_src(tmp_path / "src.bin")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_private_copy(src: Path, dst: Path) -> None:
    assert dst.read_bytes() == src.read_bytes()
    assert os.stat(src).st_nlink == 1 and os.stat(dst).st_nlink == 1
    assert not os.path.samefile(src, dst)
    assert os.stat(dst).st_mode & 0o777 == 0o640


def test_auto_here_clones_or_copies_and_never_links(src: Path, tmp_path: Path) -> None:
    placed = place(src, tmp_path / "dst", LinkPolicy.AUTO)
    _assert_private_copy(src, tmp_path / "dst")
    assert placed.identity == FileIdentity.of(tmp_path / "dst")
    if reflink_works(tmp_path, tmp_path):
        assert (placed.mode, placed.sha256) == ("reflink", None)
    else:  # ext4: no reflink; a kernel copy, no byte in user space, no digest
        assert (placed.mode, placed.method, placed.sha256) == ("copy", "copy_file_range", None)
    digested = place(src, tmp_path / "digested", LinkPolicy.AUTO, digest=True)
    if digested.mode == "copy":  # --digest: hashed in the same pass as the copy
        assert (digested.method, digested.sha256) == ("read_hash_write", _sha(src))
    else:
        assert digested.sha256 == _sha(src)
    _assert_private_copy(src, tmp_path / "digested")


def test_auto_on_a_reflink_filesystem_clones_without_reading_a_byte(tmp_path: Path, monkeypatch) -> None:
    with xfs_reflink(tmp_path / "xfs.img", tmp_path / "xfs") as fs:
        s = _write_src(fs / "src.bin")
        before = s.read_bytes()

        def no_read(*a, **k):
            raise AssertionError("a byte was read on the reflink path")

        monkeypatch.setattr(copying, "_read_hash_write", no_read)
        monkeypatch.setattr(links, "sha256_file", no_read)
        placed = place(s, fs / "dst", LinkPolicy.AUTO)
        assert (placed.mode, placed.sha256, placed.method) == ("reflink", None, None)
        assert placed.identity == FileIdentity.of(fs / "dst") and placed.identity.st_ino != os.stat(s).st_ino
        _assert_private_copy(s, fs / "dst")
        with open(fs / "dst", "r+b") as fh:  # copy-on-write: editing the clone leaves the source
            fh.write(b"changed")
        assert s.read_bytes() == before
        assert place(s, fs / "explicit", LinkPolicy.REFLINK).mode == "reflink"
        monkeypatch.undo()
        digested = place(s, fs / "digested", LinkPolicy.AUTO, digest=True)
        assert (digested.mode, digested.sha256) == ("reflink", hashlib.sha256(before).hexdigest())


def test_explicit_reflink_where_it_is_impossible_fails_and_leaves_nothing(src: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(links.fcntl, "ioctl", lambda *a: (_ for _ in ()).throw(OSError(errno.EOPNOTSUPP, "Operation not supported")))
    with pytest.raises(PackageError, match=r"--link reflink: cannot reflink .*(ENOTSUP|EOPNOTSUPP)"):
        place(src, tmp_path / "dst", LinkPolicy.REFLINK)
    assert not os.path.lexists(tmp_path / "dst")
    # auto falls back to a copy on the same refusal
    assert place_file(src, tmp_path / "dst", LinkPolicy.AUTO) == "copy"
    _assert_private_copy(src, tmp_path / "dst")


def test_hardlink_only_when_asked_with_one_warning(src: Path, tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        placer = Placer(LinkPolicy.HARDLINK)
        first, second = placer.place(src, tmp_path / "a"), placer.place(src, tmp_path / "b")
    assert [r.getMessage() for r in caplog.records] == [HARDLINK_WARNING]
    assert "onnx and onnx-ir refuse" in HARDLINK_WARNING and "neither the source nor the output" in HARDLINK_WARNING
    assert first.mode == second.mode == "hardlink" and os.stat(src).st_nlink == 3
    assert first.identity.st_ino == os.stat(src).st_ino and first.sha256 is None
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        Placer(LinkPolicy.AUTO).place(src, tmp_path / "c")
    assert caplog.records == []


def test_outside_files_are_copied_even_under_hardlink(src: Path, tmp_path: Path) -> None:
    placed = Placer(LinkPolicy.HARDLINK).place(src, tmp_path / "lib.so", outside=True)
    assert placed.mode == "copy" and placed.sha256 is None
    digested = Placer(LinkPolicy.HARDLINK, digest=True).place(src, tmp_path / "lib2.so", outside=True)
    assert digested.mode == "copy" and digested.sha256 == _sha(src)
    _assert_private_copy(src, tmp_path / "lib.so")


def test_a_placer_counts_the_bytes_it_copied_and_not_those_it_linked(src: Path, tmp_path: Path) -> None:
    """``bytes_copied`` sums only copies (what a command reports as copied): a hard link adds nothing, each copy its size."""
    placer = Placer(LinkPolicy.HARDLINK)
    assert placer.place(src, tmp_path / "linked").mode == "hardlink"
    assert placer.bytes_copied == 0
    placer.place(src, tmp_path / "lib.so", outside=True)
    placer.place(src, tmp_path / "lib2.so", outside=True)
    assert placer.bytes_copied == 2 * SIZE


def test_a_known_digest_is_reused_and_a_stale_one_recomputed(src: Path, tmp_path: Path, monkeypatch) -> None:
    known = KnownDigests()
    known.add(FileIdentity.of(src), "ab" * 32)  # not src's digest: reuse must not recompute it
    placed = place(src, tmp_path / "reused", LinkPolicy.COPY, known=known)
    assert (placed.sha256, placed.digest_reused) == ("ab" * 32, True)
    assert (tmp_path / "reused").read_bytes() == src.read_bytes()
    os.utime(src, ns=(1, 1))  # same bytes, another mtime: the recorded identity no longer holds
    again = place(src, tmp_path / "stale", LinkPolicy.COPY, known=known)
    assert (again.sha256, again.digest_reused, again.method) == (None, False, "copy_file_range")
    hashed = place(src, tmp_path / "hashed", LinkPolicy.COPY, known=known, digest=True)
    assert (hashed.sha256, hashed.digest_reused, hashed.method) == (_sha(src), False, "read_hash_write")


def test_known_digests_from_a_manifest_only_where_the_identity_matches(tmp_path: Path) -> None:
    from q38.package.manifest import FileRecord

    a, b = tmp_path / "a.data", tmp_path / "b.data"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    records = {
        "a.data": FileRecord("copy", "11" * 32, identity=FileIdentity.of(a)),
        "b.data": FileRecord("copy", "22" * 32, identity=FileIdentity.of(b)),
        "gone.data": FileRecord("copy", "33" * 32, identity=FileIdentity.of(b)),
        "nodigest.data": FileRecord("hardlink", None, identity=FileIdentity.of(a)),
    }
    b.write_bytes(b"rewritten")
    known = KnownDigests()
    known.add_manifest(tmp_path, records)
    assert len(known) == 1 and known.get(FileIdentity.of(a)) == "11" * 32


def test_a_written_files_digest_is_trusted_up_to_its_manifests_mtime(tmp_path: Path) -> None:
    """A record without an identity (a file the writer wrote) is trusted while the file was last
    modified no later than the manifest, the same nanosecond included; a later write, or anything
    but a regular file, is hashed again."""
    from q38.package.manifest import FileRecord

    written = 1_700_000_000_123_456_789
    for name, mtime in (("same.onnx", written), ("older.onnx", written - 1), ("newer.onnx", written + 1)):
        (tmp_path / name).write_bytes(name.encode())
        os.utime(tmp_path / name, ns=(mtime, mtime))
    (tmp_path / "link.onnx").symlink_to("same.onnx")
    os.utime(tmp_path / "link.onnx", ns=(written, written), follow_symlinks=False)
    records = {name: FileRecord("write", f"{i}{i}" * 32) for i, name in enumerate(("same.onnx", "older.onnx", "newer.onnx", "link.onnx"))}
    known = KnownDigests()
    known.add_manifest(tmp_path, records, manifest_mtime_ns=written)
    assert len(known) == 2
    assert known.get(FileIdentity.of(tmp_path / "same.onnx")) == "00" * 32
    assert known.get(FileIdentity.of(tmp_path / "older.onnx")) == "11" * 32


def test_copy_falls_back_to_sendfile_across_filesystems(src: Path, tmp_path: Path) -> None:
    known = KnownDigests()
    known.add(FileIdentity.of(src), _sha(src))  # known digest: the kernel copy path
    with tmpfs(tmp_path / "mnt") as fs:
        placed = place(src, fs / "dst", LinkPolicy.AUTO, known=known)
        # copy_file_range between ext4 and tmpfs is EXDEV on this kernel: sendfile did it
        assert (placed.mode, placed.method) == ("copy", "sendfile" if os.stat(fs).st_dev != os.stat(src).st_dev else "copy_file_range")
        _assert_private_copy(src, fs / "dst")
        with pytest.raises(PackageError, match=r"--link hardlink: cannot hardlink .*EXDEV"):
            place(src, fs / "hard", LinkPolicy.HARDLINK)
        assert not os.path.lexists(fs / "hard")


@pytest.mark.parametrize("err", [errno.ENOSYS, errno.EINVAL, errno.EXDEV])
def test_copy_falls_back_to_read_write_when_the_kernel_refuses(src: Path, tmp_path: Path, monkeypatch, err: int) -> None:
    calls: list[str] = []

    def refuse(name: str):
        def fn(*a, **k):
            calls.append(name)
            raise OSError(err, os.strerror(err))

        return fn

    monkeypatch.setattr(copying.os, "copy_file_range", refuse("copy_file_range"))
    monkeypatch.setattr(copying.os, "sendfile", refuse("sendfile"))
    known = KnownDigests()
    known.add(FileIdentity.of(src), _sha(src))
    progress: list[int] = []
    placed = place(src, tmp_path / "dst", LinkPolicy.COPY, known=known, on_bytes=progress.append)
    assert placed.method == "read_write" and calls == ["copy_file_range", "sendfile"]
    assert sum(progress) == SIZE  # the progress bar counts every byte the user-space copy moved
    _assert_private_copy(src, tmp_path / "dst")


def test_copy_engine_picks_up_where_the_kernel_copy_stopped(src: Path, tmp_path: Path, monkeypatch) -> None:
    real = os.copy_file_range
    state = {"n": 0}

    def once_then_refuse(s, d, count, offs, offd):
        state["n"] += 1
        if state["n"] > 1:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(s, d, min(count, 1 << 20), offs, offd)

    monkeypatch.setattr(copying.os, "copy_file_range", once_then_refuse)
    with open(src, "rb") as s, open(tmp_path / "dst", "xb") as d:
        method, sha = copying.copy_fd(s.fileno(), d.fileno(), SIZE)
    assert (method, sha) == ("sendfile", None)
    assert (tmp_path / "dst").read_bytes() == src.read_bytes()


def test_a_partial_kernel_copy_continues_at_the_offsets_it_reached(src: Path, tmp_path: Path, monkeypatch) -> None:
    """copy_file_range may move fewer bytes than asked: the next request starts that many bytes
    further into both files, so a range copied at offsets in several requests is the source's range."""
    real = os.copy_file_range
    requests: list[tuple[int | None, int | None]] = []

    def at_most_1mib(s, d, count, offs, offd):
        requests.append((offs, offd))
        return real(s, d, min(count, 1 << 20), offs, offd)

    monkeypatch.setattr(copying.os, "copy_file_range", at_most_1mib)
    so, do, length = (2 << 20) + 4097, 8192, (1 << 20) + 5000
    with open(src, "rb") as s, open(tmp_path / "dst", "xb") as d:
        assert copying.copy_range(s.fileno(), d.fileno(), length, src_offset=so, dst_offset=do) == ("copy_file_range", length)
    assert requests == [(so, do), (so + (1 << 20), do + (1 << 20))]
    assert (tmp_path / "dst").read_bytes()[do:] == src.read_bytes()[so : so + length]


@pytest.mark.parametrize(("digest", "kernel"), [(False, True), (False, False), (True, True)])
def test_a_source_shorter_than_its_size_is_a_short_copy_eio(src: Path, tmp_path: Path, monkeypatch, digest: bool, kernel: bool, messages_snapshot: SnapshotAssertion) -> None:
    """The source ended before the size the caller stat'ed (a file truncated meanwhile): EIO, saying how far it got,
    whichever engine copied (the kernel's, the read/write fallback, the hashing copy)."""
    if not kernel:
        def refuse(*a, **k):
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

        monkeypatch.setattr(copying.os, "copy_file_range", refuse)
        monkeypatch.setattr(copying.os, "sendfile", refuse)
    with open(src, "rb") as s, open(tmp_path / "dst", "xb") as d, pytest.raises(OSError) as info:
        copying.copy_fd(s.fileno(), d.fileno(), SIZE + 100, digest=digest)
    assert info.value.errno == errno.EIO
    assert messages_snapshot == str(info.value)


@pytest.mark.parametrize("digest", [False, True])
def test_an_empty_copy_reads_nothing_from_its_source(tmp_path: Path, digest: bool) -> None:
    """Zero bytes need no read: an empty copy succeeds even from a descriptor that cannot be read at
    an offset (a pipe), with the sha256 of nothing under ``digest``; the destination stays empty."""
    r, w = os.pipe()
    try:
        with open(tmp_path / "dst", "xb") as d:
            got = copying.copy_fd(r, d.fileno(), 0, digest=digest)
    finally:
        os.close(r)
        os.close(w)
    assert got == (("read_hash_write", hashlib.sha256(b"").hexdigest()) if digest else ("copy_file_range", None))
    assert (tmp_path / "dst").read_bytes() == b""


def test_the_hashing_copy_of_several_buffers_moves_and_counts_each_byte_once(tmp_path: Path) -> None:
    """Above one hash buffer the read / hash / write pipeline runs: the copy and its sha256 are the
    source's, and progress adds up to the file's size (never more: a copy that re-read a buffer
    would report it twice)."""
    src = tmp_path / "big.bin"
    data = os.urandom(2 * copying.HASH_BUFFER + 99)
    src.write_bytes(data)
    progress: list[int] = []

    def count(n: int) -> None:
        progress.append(n)
        assert sum(progress) <= len(data), "progress past the end of the file"

    with open(src, "rb") as s, open(tmp_path / "dst", "xb") as d:
        method, sha = copying.copy_fd(s.fileno(), d.fileno(), len(data), digest=True, on_bytes=count)
    assert (method, sha) == ("read_hash_write", hashlib.sha256(data).hexdigest())
    assert sum(progress) == len(data) and len(progress) == 3
    assert (tmp_path / "dst").read_bytes() == data


def test_a_placers_own_digests_are_reused_when_none_were_given(src: Path, tmp_path: Path) -> None:
    """``Placer(policy)`` without ``known`` starts an empty set of digests of its own: a digest
    added to it later is reused by its placements, not recomputed."""
    placer = Placer(LinkPolicy.COPY)
    assert len(placer.known) == 0
    placer.known.add(FileIdentity.of(src), "ab" * 32)  # not src's digest: only reuse can give it
    placed = placer.place(src, tmp_path / "dst")
    assert (placed.sha256, placed.digest_reused) == ("ab" * 32, True)
    assert Placer(LinkPolicy.COPY).known is not placer.known  # one set per placer, never shared


def test_a_write_failure_in_the_hashing_copy_fails_cleanly(tmp_path: Path, monkeypatch) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(2 * copying.HASH_BUFFER + 99))
    real = os.pwrite
    state = {"n": 0}

    def enospc_second(fd, data, offset):  # the second buffer of a 3-buffer copy
        state["n"] += 1
        if state["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(copying.os, "pwrite", enospc_second)
    with pytest.raises(PackageError, match="No space left on device"):
        place(src, tmp_path / "dst", LinkPolicy.COPY, digest=True)  # --digest: the hashing copy
    assert not os.path.lexists(tmp_path / "dst")
    assert os.stat(src).st_nlink == 1


def test_enospc_on_a_tiny_tmpfs_leaves_nothing(src: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "tiny", size="1m") as fs:
        for policy in (LinkPolicy.AUTO, LinkPolicy.COPY):
            with pytest.raises(PackageError, match="No space left on device"):
                place(src, fs / "dst", policy)
            assert os.listdir(fs) == []
        assert os.statvfs(fs).f_bfree == os.statvfs(fs).f_blocks  # no blocks held by debris


def test_preallocation_reserves_the_whole_file(tmp_path: Path) -> None:
    """Where the filesystem preallocates, every non-empty file is, a 1-byte one too; an empty one is left as it is."""
    with open(tmp_path / "f", "xb") as fh:
        if not copying.preallocate(fh.fileno(), 8 << 20):
            pytest.skip("this filesystem does not preallocate")
        st = os.fstat(fh.fileno())
    assert st.st_size == 8 << 20 and st.st_blocks * 512 >= 8 << 20
    with open(tmp_path / "one", "xb") as fh:
        assert copying.preallocate(fh.fileno(), 0) is False and os.fstat(fh.fileno()).st_size == 0
        assert copying.preallocate(fh.fileno(), 1) is True
        st = os.fstat(fh.fileno())
    assert st.st_size == 1 and st.st_blocks > 0


def test_the_source_must_be_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(PackageError, match="not a regular file"):
        place(fifo, tmp_path / "dst", LinkPolicy.AUTO)  # O_NONBLOCK: refused, not blocked on
    assert not os.path.lexists(tmp_path / "dst")


def test_a_missing_source_is_one_line_naming_the_path_given(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A source that cannot be opened is refused as a PackageError naming the path the caller gave and the reason."""
    missing = tmp_path / "gone.bin"
    with pytest.raises(PackageError) as info:
        place(missing, tmp_path / "dst", LinkPolicy.AUTO)
    assert messages_snapshot == str(info.value)
    assert not os.path.lexists(tmp_path / "dst")


def test_copy_range_at_offsets_falls_back_across_filesystems(src: Path, tmp_path: Path) -> None:
    """The offload's aligned-file moves: a byte range at an offset, onto another filesystem."""
    data = src.read_bytes()
    with tmpfs(tmp_path / "mnt") as fs, open(src, "rb") as s, open(fs / "dst", "xb") as d:
        method, n = copying.copy_range(s.fileno(), d.fileno(), 1000, src_offset=4097, dst_offset=8192)
        assert n == 1000 and method == ("sendfile" if os.stat(fs).st_dev != os.stat(src).st_dev else "copy_file_range")
        short = copying.copy_range(s.fileno(), d.fileno(), 1000, src_offset=SIZE - 10, dst_offset=0)
        d.flush()
        got = (fs / "dst").read_bytes()
    assert got[8192:9192] == data[4097:5097] and got[10:8192] == b"\0" * 8182
    assert short[1] == 10  # the source ended: fewer bytes, the caller reports it


@pytest.mark.parametrize("policy", [LinkPolicy.HARDLINK, LinkPolicy.COPY, LinkPolicy.AUTO])
def test_place_resolves_a_symlinked_source_to_a_regular_file(tmp_path: Path, policy: LinkPolicy) -> None:
    """``place`` owns the symlink rule (its docstring): a source that is a relative symlink
    (``libx.so -> libx.so.1``, as library folders hold them) lands as a loadable regular file with
    the target's bytes -- never as a copy of the link, which would dangle in the destination
    folder -- and under ``hardlink`` it is the target's inode."""
    lib = tmp_path / "lib"
    lib.mkdir()
    real = _write_src(lib / "libx.so.1")
    os.symlink("libx.so.1", lib / "libx.so")
    out = tmp_path / "out"
    out.mkdir()
    placed = place(lib / "libx.so", out / "libx.so", policy)
    dst = out / "libx.so"
    assert not dst.is_symlink() and dst.is_file()
    assert dst.read_bytes() == real.read_bytes()
    assert os.path.samefile(dst, real) is (policy is LinkPolicy.HARDLINK)
    assert placed.identity == FileIdentity.of_stat(os.lstat(dst))


@pytest.mark.parametrize(("code", "shown"), [(errno.EMLINK, "EMLINK"), (999, "999")])
def test_a_failed_placement_names_the_errno_even_one_without_a_name(tmp_path: Path, monkeypatch, code: int, shown: str, messages_snapshot: SnapshotAssertion) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"abc")

    def refuse(*_a, **_k):
        raise OSError(code, "refused")

    monkeypatch.setattr(links.os, "link", refuse)
    with pytest.raises(PackageError) as info:
        place(source, tmp_path / "dst.bin", LinkPolicy.HARDLINK)
    assert messages_snapshot == str(info.value)
    assert not os.path.lexists(tmp_path / "dst.bin")


def test_copy_file_makes_an_independent_copy_and_never_replaces(src: Path, tmp_path: Path) -> None:
    from q38.package.io.links import copy_file

    dst = tmp_path / "copied.bin"
    copy_file(src, dst)
    assert dst.read_bytes() == src.read_bytes() and dst.stat().st_ino != src.stat().st_ino
    before = src.read_bytes()
    dst.write_bytes(b"changed")
    assert src.read_bytes() == before  # a copy, not a link
    with pytest.raises(PackageError, match=r"^--link copy: cannot copy .* File exists \(errno EEXIST\)$"):
        copy_file(src, dst)
    assert dst.read_bytes() == b"changed"
