"""rename_noreplace: the commit of a staged tree never replaces what is at the destination.

Invariants: on this Linux (glibc >= 2.28) the rename is one ``renameat2(RENAME_NOREPLACE)``
call, without the check-then-rename fallback; onto a fresh path it moves the file; onto an
existing one (a file, an empty directory) it raises FileExistsError and moves nothing.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

import q38.package.io.staging as staging
from q38.errors import InternalError, PackageError
from q38.package.io.staging import StagedDirectory, rename_noreplace


@pytest.fixture
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    assert staging._RENAMEAT2 is not None, "glibc without renameat2: the fallback is all there is"

    def refuse(*_a, **_k):
        raise AssertionError("the check-then-rename fallback ran")

    monkeypatch.setattr(staging.os, "rename", refuse)


def test_a_rename_onto_a_fresh_path_moves_the_file(tmp_path: Path, no_fallback: None) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(b"staged")
    ino = src.stat().st_ino
    rename_noreplace(src, dst)
    assert not os.path.lexists(src)
    assert dst.read_bytes() == b"staged" and dst.stat().st_ino == ino


def test_a_rename_onto_an_existing_file_replaces_nothing(tmp_path: Path, no_fallback: None) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(b"staged")
    dst.write_bytes(b"user data")
    with pytest.raises(FileExistsError) as info:
        rename_noreplace(src, dst)
    assert info.value.errno == errno.EEXIST and info.value.filename == os.fspath(dst)
    assert src.read_bytes() == b"staged" and dst.read_bytes() == b"user data"


def test_a_staged_tree_never_replaces_an_empty_directory(tmp_path: Path, no_fallback: None) -> None:
    """Plain rename(2) would silently replace the empty directory; RENAME_NOREPLACE refuses."""
    src, dst = tmp_path / "staged", tmp_path / "out"
    src.mkdir()
    (src / "genai_config.json").write_text("{}")
    dst.mkdir()
    with pytest.raises(FileExistsError) as info:
        rename_noreplace(src, dst)
    assert info.value.errno == errno.EEXIST
    assert (src / "genai_config.json").read_text() == "{}"
    assert dst.is_dir() and not any(dst.iterdir())


@pytest.mark.parametrize("kind", ["file", "directory", "dangling symlink"])
def test_an_existing_destination_is_refused_saying_what_is_there(tmp_path: Path, kind: str, messages_snapshot: SnapshotAssertion) -> None:
    dest = tmp_path / "out"
    if kind == "file":
        dest.write_bytes(b"keep")
    elif kind == "directory":
        dest.mkdir()
    else:
        dest.symlink_to(tmp_path / "nowhere")
    with pytest.raises(PackageError) as info:
        staging.check_destination(dest, what="output")
    assert messages_snapshot == str(info.value)
    assert os.path.lexists(dest) and (kind != "file" or dest.read_bytes() == b"keep")


def test_a_destination_whose_parent_is_missing_is_refused(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    dest = tmp_path / "missing" / "out"
    with pytest.raises(PackageError) as info:
        staging.check_destination(dest)
    assert messages_snapshot == str(info.value)


@pytest.mark.parametrize("filename", ["/out/model.onnx.data", None], ids=["with-filename", "None"])
def test_an_os_error_inside_the_block_is_one_line_naming_the_file_it_has(tmp_path: Path, filename: str | None, messages_snapshot: SnapshotAssertion) -> None:
    """ENOSPC while writing the output: one PackageError line, ``(file)`` only where the error
    names one, and neither the destination nor the staging directory is left."""
    dest = tmp_path / "out"
    with pytest.raises(PackageError) as info, StagedDirectory(dest) as staged:
        (staged.path / "partial.bin").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device", *([filename] if filename else []))
    assert messages_snapshot == str(info.value)
    assert list(tmp_path.iterdir()) == []


def _killed_writers_staging(dest: Path) -> Path:
    """The staging directory a writer into ``dest`` left when it died before committing (its pid is gone)."""
    code = (
        "import os; from pathlib import Path; from q38.package import StagedDirectory;"
        f"StagedDirectory(Path({str(dest)!r})).__enter__(); os._exit(9)"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    (debris,) = dest.parent.iterdir()
    return debris


def test_the_sweep_of_a_killed_writers_staging_is_logged_naming_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The next writer removes a killed run's staging directory and says so (INFO, with its path)."""
    dest = tmp_path / "out"
    debris = _killed_writers_staging(dest)
    with caplog.at_level(logging.INFO, logger="q38.package.io.staging"), StagedDirectory(dest) as staged:
        staged.commit()
    assert [r.getMessage() for r in caplog.records] == [f"removing stale staging directory {debris}"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_without_renameat2_an_existing_destination_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check-then-rename fallback (a libc without renameat2) refuses the same way, naming ``dst``."""
    monkeypatch.setattr(staging, "_RENAMEAT2", None)
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(b"staged")
    dst.write_bytes(b"user data")
    with pytest.raises(FileExistsError) as info:
        rename_noreplace(src, dst)
    assert (info.value.errno, info.value.filename) == (errno.EEXIST, os.fspath(dst))
    assert src.read_bytes() == b"staged" and dst.read_bytes() == b"user data"


def test_a_staging_directory_that_cannot_be_set_up_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages_snapshot: SnapshotAssertion) -> None:
    """A failure writing the staging marker (ENOSPC) is one line, and the half-made staging
    directory next to the destination is removed."""
    def no_space(*_a: object) -> bytes:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(staging, "marker_text", no_space)
    dest = tmp_path / "out"
    staged = StagedDirectory(dest)
    with pytest.raises(PackageError) as info:
        staged.__enter__()
    assert messages_snapshot == str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_commit_outside_the_with_block_is_an_internal_error(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """Before the block is entered the staged path is the destination itself, and commit() is refused."""
    staged = StagedDirectory(tmp_path / "out")
    assert staged.path == tmp_path / "out"
    with pytest.raises(InternalError) as info:
        staged.commit()
    assert messages_snapshot == str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_committed_tree_stays_committed_when_its_staging_directory_cannot_be_removed(tmp_path: Path) -> None:
    """Removing the staging directory after the rename is best effort: here it has become a symlink
    (rmtree refuses one), and the commit still succeeds with the tree in place."""
    dest = tmp_path / "out"
    with StagedDirectory(dest) as staged:
        (staged.path / "genai_config.json").write_text("{}")
        assert staged.staging is not None
        moved = tmp_path / "moved"
        staged.staging.rename(moved)
        staged.staging.symlink_to(moved)
        staged.commit()
    assert staged.committed and (dest / "genai_config.json").read_text() == "{}"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give the marker file another owner")
def test_a_staging_directory_whose_marker_another_user_owns_is_never_swept(tmp_path: Path) -> None:
    """A dead writer's staging directory is removed only when its marker is ours too: one whose
    marker (exact bytes and all) belongs to another user is not provably q38's and stays."""
    dest = tmp_path / "out"
    debris = _killed_writers_staging(dest)
    os.chown(debris / staging.MARKER_NAME, 65534, 65534)
    with StagedDirectory(dest) as staged:
        staged.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([debris.name, "out"])


def test_a_staging_setup_failure_is_reported_even_when_its_directory_cannot_be_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages_snapshot: SnapshotAssertion) -> None:  # fmt: skip
    """Removing the half-made staging directory is best effort: here it has become a symlink
    (rmtree refuses one), and the user still sees the setup failure as one PackageError line."""
    dest = tmp_path / "out"

    def no_space(*_a: object) -> bytes:
        (made,) = tmp_path.iterdir()
        made.rename(tmp_path / "moved")
        made.symlink_to(tmp_path / "moved")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(staging, "marker_text", no_space)
    with pytest.raises(PackageError) as info:
        StagedDirectory(dest).__enter__()
    assert messages_snapshot == str(info.value)
    assert not os.path.lexists(dest)


def test_commit_after_the_with_block_or_a_second_time_is_an_internal_error(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """Once the block has ended (its staged tree removed) or the tree was committed, commit() is refused as misuse."""
    with StagedDirectory(tmp_path / "left") as left:
        pass
    with pytest.raises(InternalError) as info:
        left.commit()
    assert messages_snapshot == str(info.value)
    with StagedDirectory(tmp_path / "out") as staged:
        staged.commit()
        with pytest.raises(InternalError) as info:
            staged.commit()
    assert messages_snapshot == str(info.value)
    assert staged.committed and (tmp_path / "out").is_dir()


def test_a_live_writers_staging_directory_is_never_swept(tmp_path: Path) -> None:
    """Another writer that is still running keeps its staging directory while a second writer works next
    to it (sweeping it would destroy a write in progress)."""
    dest = tmp_path / "out"
    code = (
        "import sys; from pathlib import Path; from q38.package import StagedDirectory;"
        f"StagedDirectory(Path({str(dest)!r})).__enter__(); print('ready', flush=True); sys.stdin.read()"
    )
    writer = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        (live,) = tmp_path.iterdir()
        with StagedDirectory(tmp_path / "other") as staged:
            staged.commit()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "other"])
    finally:
        writer.communicate(timeout=30)
