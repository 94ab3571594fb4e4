"""write_file_atomic: the one writer of single files (check --output, baselines, profile files, caches).

Invariants: the file appears whole or not at all; ``replace=False`` never replaces an existing
file (FileExistsError, the old bytes kept); ``replace=True`` replaces it; a failure at any step
(the sync, the rename) leaves neither the file nor its temporary beside it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import q38.package.io.staging as staging
from q38.package.io.staging import write_file_atomic


def test_a_new_file_holds_exactly_the_bytes(tmp_path: Path) -> None:
    write_file_atomic(tmp_path / "a.bin", b"\x00STRP\xff", replace=False)
    assert (tmp_path / "a.bin").read_bytes() == b"\x00STRP\xff"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_without_replace_an_existing_file_is_kept_and_refused(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"old")
    with pytest.raises(FileExistsError):
        write_file_atomic(tmp_path / "a.bin", b"new", replace=False)
    assert (tmp_path / "a.bin").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_with_replace_an_existing_file_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"old")
    write_file_atomic(tmp_path / "a.bin", b"new", replace=True)
    assert (tmp_path / "a.bin").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


@pytest.mark.parametrize("replace", [True, False])
def test_a_failed_sync_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replace: bool) -> None:
    def fail(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(staging.os, "fsync", fail)
    with pytest.raises(OSError, match="No space left"):
        write_file_atomic(tmp_path / "a.bin", b"x", replace=replace)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.bin").write_bytes(b"old")

    def fail(src: object, dst: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(staging.os, "replace", fail)
    with pytest.raises(OSError, match="Input/output"):
        write_file_atomic(tmp_path / "a.bin", b"new", replace=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]
    assert (tmp_path / "a.bin").read_bytes() == b"old"


def test_a_relative_path_in_the_working_directory_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_file_atomic(Path("rel.json"), b"{}", replace=False)
    assert os.listdir(tmp_path) == ["rel.json"]
