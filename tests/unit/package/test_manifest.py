"""package_manifest.json: strict parsing, each refusal one line naming the file and the key path."""

from __future__ import annotations

import pytest

from q38.errors import PackageError
from q38.package.manifest import parse_manifest

SOURCE = "pkg/package_manifest.json"


def _identity(**over: object) -> dict[str, object]:
    return {"st_dev": 1, "st_ino": 2, "size": 3, "mtime_ns": 4, **over}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"manifest_version": 1}, "command: expected a string"),
        ({"manifest_version": 1, "command": 7}, "command: expected a string"),
        ({"manifest_version": 1, "command": "build",
          "files": {"a.bin": {"link_mode": "copy", "identity": _identity(size=-1)}}},
         "files.a.bin.identity.size: expected an integer in [0, 2**64)"),
        ({"manifest_version": 1, "command": "build",
          "files": {"a.bin": {"link_mode": "copy", "identity": _identity(st_ino=1 << 64)}}},
         "files.a.bin.identity.st_ino: expected an integer in [0, 2**64)"),
        ({"manifest_version": 1, "command": "build",
          "files": {"a.bin": {"link_mode": "copy", "identity": _identity(mtime_ns=True)}}},
         "files.a.bin.identity.mtime_ns: expected an integer in [0, 2**64)"),
    ],
)  # fmt: skip
def test_a_refusal_names_the_file_and_the_key_path(doc: dict, message: str) -> None:
    with pytest.raises(PackageError) as info:
        parse_manifest(doc, source=SOURCE)
    assert str(info.value) == f"{SOURCE}: {message}"


def test_an_identity_in_range_is_read() -> None:
    m = parse_manifest({"manifest_version": 1, "command": "build",
                        "files": {"a.bin": {"link_mode": "copy", "identity": _identity(st_ino=(1 << 64) - 1)}}},
                       source=SOURCE)  # fmt: skip
    ident = m.files["a.bin"].identity
    assert ident is not None and ident.to_dict() == _identity(st_ino=(1 << 64) - 1)
    assert m.command == "build"
