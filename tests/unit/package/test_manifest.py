"""package_manifest.json: strict parsing, each refusal one line naming the file and the key path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import PackageError
from q38.package.manifest import (
    Manifest,
    dumps_manifest,
    parse_manifest,
    read_manifest,
    recorded_path,
)

SOURCE = "pkg/package_manifest.json"


def _identity(**over: object) -> dict[str, object]:
    return {"st_dev": 1, "st_ino": 2, "size": 3, "mtime_ns": 4, **over}


@pytest.mark.parametrize(
    "doc",
    [
        {"manifest_version": 1},
        {"manifest_version": 1, "command": 7},
        {"manifest_version": 1, "command": "build",
          "files": {"a.bin": {"link_mode": "copy", "identity": _identity(size=-1)}}},
        {"manifest_version": 1, "command": "build",
          "files": {"a.bin": {"link_mode": "copy", "identity": _identity(st_ino=1 << 64)}}},
        {"manifest_version": 1, "command": "build",
          "files": {"a.bin": {"link_mode": "copy", "identity": _identity(mtime_ns=True)}}},
        [],
        {"manifest_version": 1, "command": "build", "files": {"a.bin": {"link_mode": "copy", "identity": 5}}},
        {"manifest_version": 1, "command": "build",
          "files": {"a.bin": {"link_mode": "copy", "identity": {**_identity(), "extra": 1}}}},
        {"manifest_version": 1, "command": "build", "zzz": 1},
        {"manifest_version": 2, "command": "build"},
        {"manifest_version": 1, "command": "build", "files": []},
        {"manifest_version": 1, "command": "build", "files": {"a.bin": {"link_mode": "move"}}},
        {"manifest_version": 1, "command": "build", "files": {"a.bin": "copy"}},
        {"manifest_version": 1, "command": "build", "files": {"a.bin": {"link_mode": "copy", "mode": 1}}},
        {"manifest_version": 1, "command": "build", "files": {"a.bin": {"link_mode": "copy", "sha256": 1}}},
        {"manifest_version": 1, "command": "build", "files": {"a.bin": {"link_mode": "copy", "source": []}}},
        {"manifest_version": 1, "command": "build", "rewrites": {"fuse": True}},
        {"manifest_version": 1, "command": "build", "resident_slots": [1]},
        {"manifest_version": 1, "command": "build", "router_weights_cleared": -1},
        {"manifest_version": 1, "command": "build", "router_weights_cleared": True},
        {"manifest_version": 1, "command": "build", "sources": [1]},
        {"manifest_version": 1, "command": "build", "sources": {}},
        {"manifest_version": 1, "command": "build", "notes": [1]},
        {"manifest_version": 1, "command": "build", "notes": "one"},
        {"manifest_version": 1, "command": "build", "extra": []},
        {"manifest_version": 1, "command": "build", "q38_version": 1},
    ],
)  # fmt: skip
def test_a_refusal_names_the_file_and_the_key_path(doc: dict, messages_snapshot: SnapshotAssertion) -> None:
    with pytest.raises(PackageError) as info:
        parse_manifest(doc, source=SOURCE)
    assert messages_snapshot == str(info.value)


def test_an_identity_in_range_is_read() -> None:
    m = parse_manifest({"manifest_version": 1, "command": "build",
                        "files": {"a.bin": {"link_mode": "copy", "identity": _identity(st_ino=(1 << 64) - 1)}}},
                       source=SOURCE)  # fmt: skip
    ident = m.files["a.bin"].identity
    assert ident is not None and ident.to_dict() == _identity(st_ino=(1 << 64) - 1)
    assert m.command == "build"


def test_every_field_is_read_back_as_written() -> None:
    doc = {
        "manifest_version": 1, "q38_version": "9.9", "command": "offload",
        "sources": [{"path": "/src", "sha256": "ab"}],
        "files": {"a.bin": {"link_mode": "hardlink", "sha256": "cd", "source": "/src/a.bin", "identity": _identity()},
                  "b.json": {"link_mode": "write"}},
        "rewrites": {"fuse": 2}, "router_weights_cleared": 3, "resident_slots": {"node": 4},
        "notes": ["one", "two"], "extra": {"k": [1]},
    }  # fmt: skip
    m = parse_manifest(doc, source=SOURCE)
    assert (m.command, m.q38_version, m.notes, m.extra) == ("offload", "9.9", ("one", "two"), {"k": [1]})
    assert m.to_dict() == doc


def test_a_manifest_with_only_its_required_keys_reads_empty_defaults() -> None:
    """Absent optional keys read as empty values: no q38 version is invented for a manifest that names none."""
    m = parse_manifest({"manifest_version": 1, "command": "build"}, source=SOURCE)
    assert m == Manifest("build", q38_version="")
    assert m.to_dict()["q38_version"] == ""


def test_a_source_path_that_is_not_utf8_is_written_readable_with_its_exact_bytes() -> None:
    """A non-UTF-8 source path is written as ``\\xNN`` text plus its bytes in hex (which read back
    to the exact path); a UTF-8 one, and a value already under a ``_bytes_hex`` key, as they are."""
    raw = os.fsdecode(b"/src/caf\xe9")
    doc = Manifest("build", sources=({"path": raw, "sha256": "ab", "note_bytes_hex": "ff"},)).to_dict()
    assert doc["sources"] == [{"path": "/src/caf\\xe9", "path_bytes_hex": b"/src/caf\xe9".hex(), "sha256": "ab",
                               "note_bytes_hex": "ff"}]  # fmt: skip
    assert recorded_path(doc["sources"][0]) == raw


def test_a_manifest_that_is_no_regular_file_is_refused_naming_it_as_the_manifest(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """read_manifest's file-level refusal names the file's role (``manifest``) and its path."""
    path = tmp_path / "package_manifest.json"
    path.mkdir()
    with pytest.raises(PackageError) as info:
        read_manifest(path)
    assert messages_snapshot == str(info.value)


def test_a_value_json_cannot_carry_is_refused_on_write_naming_the_manifest_file(messages_snapshot: SnapshotAssertion) -> None:
    """dumps_manifest refuses an infinite ``extra`` value with a message naming package_manifest.json and the key path."""
    with pytest.raises(PackageError) as info:
        dumps_manifest(Manifest("build", extra={"k": float("inf")}))
    assert messages_snapshot == str(info.value)


def test_a_manifest_file_with_a_bad_key_is_refused_naming_its_path(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """read_manifest's content refusal names the file it read, so the user knows which manifest is broken."""
    path = tmp_path / "package_manifest.json"
    path.write_text('{"manifest_version": 1, "command": "build", "zzz": 1}')
    with pytest.raises(PackageError) as info:
        read_manifest(path)
    assert messages_snapshot == str(info.value)
