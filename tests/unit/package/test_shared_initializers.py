"""``shared_initializers`` entries (q38.package.genai.shared_initializers): the byte range must fit its data file."""

from __future__ import annotations

from pathlib import Path

import pytest

from q38.package.genai.config import SharedInitializer
from q38.package.genai.shared_initializers import shared_initializer_problems


@pytest.mark.parametrize(("offset", "problem"), [
    ("0", None),
    ("8", "bytes [8, 24) lie past the end of 'w.bin' (16 bytes)"),
])  # fmt: skip
def test_a_range_whose_end_passes_the_data_files_end_is_refused(tmp_path: Path, offset: str, problem: str | None) -> None:
    """A 16-byte range fits a 16-byte file at offset 0; at offset 8 its end (24) lies past the file
    (its start does not), and the problem names the range, the file and the file's size."""
    (tmp_path / "w.bin").write_bytes(bytes(16))
    entry = SharedInitializer(name="w", data_file="w.bin", offset=offset, length="16", data_type=1, shape=(4,))
    got = shared_initializer_problems(tmp_path, {"decoder": (entry,)}, {})
    assert got == ([] if problem is None else [("model.decoder.shared_initializers[0]", problem)])
