"""Digests a manifest already holds (q38.package.io.hashing.KnownDigests): only sound records are trusted."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from q38.package import FileIdentity, KnownDigests


def test_a_record_without_a_digest_attribute_is_skipped_not_a_crash(tmp_path: Path) -> None:
    """add_manifest takes any record object (``Mapping[str, object]``): one with an identity but no
    ``sha256`` attribute at all holds no digest to trust, so it is skipped while a sound one is kept."""
    (tmp_path / "a.data").write_bytes(b"a")
    (tmp_path / "b.data").write_bytes(b"b")
    a, b = FileIdentity.of(tmp_path / "a.data"), FileIdentity.of(tmp_path / "b.data")
    records = {"a.data": SimpleNamespace(identity=a), "b.data": SimpleNamespace(identity=b, sha256="22" * 32)}
    known = KnownDigests()
    known.add_manifest(tmp_path, records)
    assert len(known) == 1
    assert (known.get(a), known.get(b)) == (None, "22" * 32)
