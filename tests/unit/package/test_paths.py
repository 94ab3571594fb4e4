"""Relative paths written in package files: what ``safe_relpath`` accepts, normalizes and refuses.

Invariant: a path is accepted only when it names something inside the package (relative, no
``..``, no NUL or backslash, valid Unicode, no leading or trailing blanks); each refusal is one
line naming the field and the path.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import UnsafePathError
from q38.package.io.paths import resolve_inside, safe_relpath

WHAT = "genai_config.json: model.decoder.filename"


@pytest.mark.parametrize(("rel", "normalized"), [
    ("model.onnx", "model.onnx"), ("sub/model.onnx", "sub/model.onnx"), ("./sub//model.onnx", "sub/model.onnx"),
    ("a b.onnx", "a b.onnx"), ("é.onnx", "é.onnx"),
])  # fmt: skip
def test_a_path_inside_the_package_is_accepted_normalized(rel: str, normalized: str) -> None:
    assert safe_relpath(rel, what=WHAT) == normalized


@pytest.mark.parametrize("rel", [
    "", " model.onnx", "model.onnx\n",
    ".", "./",
    "a\x00b", "sub\\model.onnx",
    "\ud800.onnx",
    "/etc/passwd",
    "../model.onnx",
    "sub/../../x",
], ids=["empty", "leading-blank", "trailing-newline", "dot", "dot-slash", "nul", "backslash", "lone-surrogate",
        "absolute", "parent", "parent-via-sub"])  # fmt: skip
def test_a_path_that_could_leave_the_package_or_name_nothing_is_refused(rel: str, messages_snapshot: SnapshotAssertion) -> None:
    with pytest.raises(UnsafePathError) as info:
        safe_relpath(rel, what=WHAT)
    assert messages_snapshot == str(info.value)


def test_a_value_that_is_not_a_string_is_refused(messages_snapshot: SnapshotAssertion) -> None:
    with pytest.raises(UnsafePathError) as info:
        safe_relpath(7, what=WHAT)  # type: ignore[arg-type]
    assert messages_snapshot == str(info.value)


def test_a_symlink_that_leads_out_is_refused_naming_where_it_resolves(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """resolve_inside follows links: a name inside the package whose link leads out is refused,
    naming the resolved target; one that stays inside is returned as named."""
    root = tmp_path / "pkg"
    root.mkdir()
    (tmp_path / "outside.onnx").write_bytes(b"x")
    (root / "model.onnx").symlink_to(tmp_path / "outside.onnx")
    (root / "inner.onnx").write_bytes(b"x")
    (root / "alias.onnx").symlink_to("inner.onnx")
    assert resolve_inside(root, "alias.onnx", what=WHAT) == root / "alias.onnx"
    with pytest.raises(UnsafePathError) as info:
        resolve_inside(root, "model.onnx", what=WHAT)
    assert messages_snapshot == str(info.value)


def test_a_path_through_a_regular_file_is_refused_naming_the_path(tmp_path: Path) -> None:
    """resolve_inside refuses a name that cannot be resolved (a file used as a directory), naming the path."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "model.onnx").write_bytes(b"x")
    with pytest.raises(UnsafePathError) as info:
        resolve_inside(root, "model.onnx/data.bin", what=WHAT)
    assert str(info.value).startswith(f"{WHAT}: cannot resolve 'model.onnx/data.bin': ")
