"""Two bundles that provide one path: a folded build holds it once, or refuses before writing.

``q38 build`` folds the head (and prefill) bundles into the target's tree. A path both bundles ship
(a README, a tokenizer file, a symlink, a directory) is one file in the package. Invariants:
- the same bytes in two different files (two inodes) merge into one file with those bytes;
- the same size with other bytes is refused, naming the path, and nothing is written;
- a file in one bundle and a directory (or symlink) in the other is refused;
- two symlinks with the same target merge; with different targets they are refused;
- the source bundles never change (their digest is taken once the test has edited them).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.build_bundles import make_bundles, tree_digest

from q38.assembly import BuildRequest, build_package
from q38.errors import BuildError
from q38.package.io.staging import STAGING_MARK


@pytest.fixture
def src(tmp_path: Path) -> dict[str, Path]:
    """The build tests' bundles, to be edited by the test before it builds."""
    return make_bundles(tmp_path / "src")


def _build(b: dict[str, Path], out: Path) -> None:
    before = tree_digest(b["root"])
    try:
        build_package(BuildRequest(out=out, target=b["target"], head=b["head"], prefill=b["prefill"]))
    finally:
        assert tree_digest(b["root"]) == before, "a source file was modified"


def _refused(b: dict[str, Path], tmp_path: Path, rel: str) -> None:
    out = tmp_path / "pkg"
    with pytest.raises(BuildError, match=f"{rel}: the .* bundles both provide this path with different contents"):
        _build(b, out)
    assert not out.exists()
    assert not [p.name for p in tmp_path.iterdir() if STAGING_MARK in p.name]


def test_equal_bytes_in_two_files_merge_into_one(src: dict[str, Path], tmp_path: Path) -> None:
    for role in ("target", "head"):
        (src[role] / "NOTICE.txt").write_bytes(b"same notice\n")  # two inodes, one content
    out = tmp_path / "pkg"
    _build(src, out)
    assert (out / "NOTICE.txt").read_bytes() == b"same notice\n"


def test_same_size_other_bytes_is_refused(src: dict[str, Path], tmp_path: Path) -> None:
    (src["target"] / "NOTICE.txt").write_bytes(b"target notice\n")
    (src["head"] / "NOTICE.txt").write_bytes(b"head   notice\n")  # same length, other bytes
    _refused(src, tmp_path, "NOTICE.txt")


@pytest.mark.parametrize("other", ["dir", "symlink"])
def test_a_file_against_another_kind_is_refused(other: str, src: dict[str, Path], tmp_path: Path) -> None:
    (src["target"] / "shared").write_bytes(b"a file\n")
    if other == "dir":
        (src["head"] / "shared").mkdir()
        (src["head"] / "shared" / "inside.txt").write_bytes(b"x")
    else:
        (src["head"] / "data.txt").write_bytes(b"a file\n")
        os.symlink("data.txt", src["head"] / "shared")
    _refused(src, tmp_path, "shared")


def test_two_symlinks_merge_when_their_targets_agree(src: dict[str, Path], tmp_path: Path) -> None:
    os.symlink("extras/readme.txt", src["head"] / "readme.link")  # the target bundle has the same link
    (src["head"] / "extras").mkdir()
    (src["head"] / "extras" / "readme.txt").write_text("bundle extra\n")
    out = tmp_path / "pkg"
    _build(src, out)
    assert os.readlink(out / "readme.link") == "extras/readme.txt"
    assert (out / "readme.link").read_text() == "bundle extra\n"


def test_two_symlinks_with_other_targets_are_refused(src: dict[str, Path], tmp_path: Path) -> None:
    (src["head"] / "other.txt").write_text("other\n")
    os.symlink("other.txt", src["head"] / "readme.link")  # the target's points at extras/readme.txt
    _refused(src, tmp_path, "readme.link")
