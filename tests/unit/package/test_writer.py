"""Staged writing and file placement: nothing is lost, nothing half-written, sources untouched.

Invariants: an existing destination (file, directory, dangling symlink) is refused before
anything is written; a failure inside the writer leaves no destination and no staging debris;
a stale staging directory of a dead process is swept by the next run; hard links fall back to
a copy across filesystems (a real EXDEV via /dev/shm); library symlinks are resolved.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.minipkg import build_mini_package

from q38.errors import PackageError
from q38.package import (
    LinkPolicy,
    PackageWriter,
    StagedDirectory,
    open_package,
    place_file,
)


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("kind", ["dir", "file", "dangling"])
def test_existing_destination_is_refused_before_writing(tmp_path: Path, kind: str) -> None:
    dest = tmp_path / "out"
    if kind == "dir":
        dest.mkdir()
    elif kind == "file":
        dest.write_text("x")
    else:
        dest.symlink_to(tmp_path / "nowhere")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(PackageError, match="refusing to overwrite"), PackageWriter(dest):
        raise AssertionError("must not get here")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_failure_inside_the_writer_leaves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"), PackageWriter(dest) as w:
        w.write_text("a.txt", "partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_stale_staging_of_a_killed_process_is_swept(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    code = (
        "import os, sys; from pathlib import Path; from q38.package import StagedDirectory;"
        f"s = StagedDirectory(Path({str(dest)!r})).__enter__(); (s.path / 'x').write_text('y');"
        "os._exit(9)"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    debris = [p for p in tmp_path.iterdir() if ".q38-staging-" in p.name]
    assert len(debris) == 1
    with StagedDirectory(dest) as staged:
        (staged.path / "ok").write_text("1")
        staged.commit()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (dest / "ok").read_text() == "1"


def test_hard_link_falls_back_to_copy_across_filesystems(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a separate filesystem for a real EXDEV")
    src = tmp_path / "w.bin"
    src.write_bytes(os.urandom(4096))
    with StagedDirectory(shm / f"q38-test-{os.getpid()}-{tmp_path.name}") as staged:
        assert place_file(src, staged.path / "auto.bin", LinkPolicy.AUTO) == "copy"
        with pytest.raises(PackageError, match=r"--link hardlink: cannot hardlink .*: Invalid cross-device link \(errno EXDEV\)"):
            place_file(src, staged.path / "hl.bin", LinkPolicy.HARDLINK)
        assert (staged.path / "auto.bin").read_bytes() == src.read_bytes()
    assert src.stat().st_nlink == 1


def test_auto_never_hard_links_and_resolves_symlinks(tmp_path: Path) -> None:
    real = tmp_path / "libx.so.1"
    real.write_bytes(b"\x7fELF" + b"\0" * 60)
    (tmp_path / "libx.so").symlink_to("libx.so.1")
    out = tmp_path / "out"
    out.mkdir()
    mode = place_file(tmp_path / "libx.so", out / "libx.so", LinkPolicy.AUTO)
    assert mode in ("reflink", "copy")  # a clone where the filesystem can, else a copy
    assert real.stat().st_nlink == 1 and (out / "libx.so").stat().st_ino != real.stat().st_ino
    assert not (out / "libx.so").is_symlink()
    assert (out / "libx.so").read_bytes() == real.read_bytes()
    assert place_file(tmp_path / "libx.so", out / "copy.so", LinkPolicy.COPY) == "copy"
    assert (out / "copy.so").stat().st_ino != real.stat().st_ino


def test_open_package_reads_a_written_package_and_leaves_it_unchanged(tmp_path: Path) -> None:
    pkg = build_mini_package(tmp_path / "pkg")
    before = _tree_hash(pkg)
    package = open_package(pkg)
    assert package.layout == "flat"
    assert package.roles() == ["target", "head", "prefill"]
    assert [e.pool_id for e in package.pool.entries] == ["w0000", "w0001"]
    for role in package.roles():
        assert package.load(role).graph.node(0).op_type == "MatMul"
    assert _tree_hash(pkg) == before


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: (p / "genai_config.json").write_text('{"model": {"foo": 1}}'), "genai_config.json: model.foo: unknown key"),
        (lambda p: (p / "genai_config.json").write_text("{"), "genai_config.json: invalid JSON at line 1"),
        (lambda p: (p / "weights_pool.txt").write_text("w0 model.onnx.data 0\n"), "weights_pool.txt:1: expected"),
        (lambda p: (p / "head_r2.onnx").unlink(), "head_r2.filename: 'head_r2.onnx' does not exist"),
        (lambda p: (p / "weights_pool.txt").write_text("w0 gone.bin 0 4 float 1 device\n"), "pool entry 'w0': 'gone.bin' does not exist"),
        (lambda p: (p / "prefill.onnx").unlink() or (p / "prefill.onnx").mkdir(), "prefill.filename: 'prefill.onnx' is a directory"),
    ],
)
def test_malformed_packages_are_one_line_errors(tmp_path: Path, damage, message: str) -> None:
    pkg = build_mini_package(tmp_path / "pkg")
    damage(pkg)
    with pytest.raises(PackageError) as info:
        open_package(pkg)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_file_placed_under_its_own_policy_reuses_the_writers_known_digests(tmp_path: Path) -> None:
    """An explicit policy (an ``outside`` file's copy) still takes the digests the source manifest
    holds, as the writer's own placements do: the record carries the known digest, not a new hash."""
    from q38.package.io.hashing import FileIdentity, KnownDigests
    from q38.package.io.links import LinkPolicy, Placer

    src = tmp_path / "w.bin"
    src.write_bytes(b"weights")
    known = KnownDigests()
    known.add(FileIdentity.of(src), "ab" * 32)  # not the bytes' digest: only reuse can give it
    with PackageWriter(tmp_path / "out", Placer(LinkPolicy.HARDLINK, known=known)) as w:
        assert str(w.place(src, "w.bin", LinkPolicy.COPY)) == "copy"
        record = w.records["w.bin"]
    assert record.sha256 == "ab" * 32


def test_a_file_placed_under_its_own_policy_is_digested_under_the_writers_digest(tmp_path: Path) -> None:
    """``--digest`` holds for an explicit policy too: the record of a file the writer copies while
    its placer hard-links carries the sha256 of its bytes."""
    from q38.package.io.links import Placer

    src = tmp_path / "w.bin"
    src.write_bytes(b"weights")
    with PackageWriter(tmp_path / "out", Placer(LinkPolicy.HARDLINK, digest=True)) as w:
        assert str(w.place(src, "w.bin", LinkPolicy.COPY)) == "copy"
        record = w.records["w.bin"]
    assert record.sha256 == hashlib.sha256(b"weights").hexdigest()
    assert (tmp_path / "out" / "w.bin").read_bytes() == b"weights" and src.stat().st_nlink == 1


def test_a_writer_without_a_placer_places_under_auto_and_logs_each_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``PackageWriter(dest)`` places under ``auto`` (a clone or a copy, never a hard link), and
    says at INFO what it put where: ``placed <rel> (<mode> of <src>)``, ``wrote <rel>``."""
    src = tmp_path / "w.bin"
    src.write_bytes(b"weights")
    with caplog.at_level(logging.INFO, logger="q38.package.v12b.package"), PackageWriter(tmp_path / "out") as w:
        assert w.placer.policy is LinkPolicy.AUTO
        mode = w.place(src, "sub/w.bin")
        w.write_text("a.txt", "text")
        w.write_bytes("b.bin", b"bytes")
    assert mode in ("reflink", "copy") and src.stat().st_nlink == 1
    assert w.link_modes == {"sub/w.bin": mode, "a.txt": "write", "b.bin": "write"}
    assert [r.getMessage() for r in caplog.records if r.name == "q38.package.v12b.package"] == [
        f"placed sub/w.bin ({mode} of {src})", "wrote a.txt", "wrote b.bin"]  # fmt: skip
    out = tmp_path / "out"
    assert [(out / rel).read_bytes() for rel in ("sub/w.bin", "a.txt", "b.bin")] == [b"weights", b"text", b"bytes"]
