"""Opening a v12b package (``q38.package.open_package``): its graph roles and its directory walk.

Invariants guarded here: every multidraft graph the config names (``s2``, ``s3``, ``s4``) is a
role of the package; an entry of the package that cannot even be examined, or is not a
regular file, directory or symlink, is refused in one line naming that entry; the package
writer writes UTF-8 text whatever the locale.
"""

from __future__ import annotations

import locale
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from support.as_nobody import as_nobody
from support.minipkg import build_layered_mini_package, build_mini_package, mini_config
from syrupy.assertion import SnapshotAssertion

from q38.errors import PackageError
from q38.package import ExpertProfile, PackageWriter, dumps_config, encode_profile, open_package

DRAFTS = {"s2": "model_s2.onnx", "s3": "model_s3.onnx", "s4": "model_s4.onnx"}


def _multidraft_package(dest: Path) -> Path:
    """The mini package with three multidraft graphs (copies of its target) named by its config."""
    pkg = build_mini_package(dest)
    for rel in DRAFTS.values():
        shutil.copyfile(pkg / "model.onnx", pkg / rel)
    (pkg / "genai_config.json").write_text(dumps_config(mini_config(multidraft=DRAFTS)), encoding="utf-8")
    return pkg


def test_every_multidraft_graph_is_a_role(tmp_path: Path) -> None:
    """Each of s2, s3 and s4 the config names is listed as a role, in order (commands walk the roles)."""
    pkg = _multidraft_package(tmp_path / "pkg")
    package = open_package(pkg)
    assert package.roles() == ["target", "head", "prefill", "s2", "s3", "s4"]
    assert [package.graph_path(role) for role in DRAFTS] == [pkg / rel for rel in DRAFTS.values()]


def test_an_entry_the_user_cannot_examine_is_named(tmp_path: Path) -> None:
    """A file inside a directory the user may list but not search (mode r--) is refused naming that file.

    Root examines every entry, so when the suite runs as root the open runs in a forked child that
    has dropped to ``nobody`` (support.as_nobody), in a world-traversable copy of the package.
    """
    top = Path(tempfile.mkdtemp(prefix="q38-tree-", dir="/tmp"))  # world-traversable, unlike tmp_path
    try:
        top.chmod(0o755)
        pkg = build_mini_package(top / "pkg")
        pkg.chmod(0o755)
        (pkg / "extra").mkdir()
        (pkg / "extra" / "x.bin").write_bytes(b"x")
        (pkg / "extra").chmod(0o744 if os.geteuid() == 0 else 0o644)  # others (nobody) / the owner: r, no x

        def run() -> str:
            try:
                open_package(pkg)
            except PackageError as exc:
                return str(exc)
            return "opened"

        # As root, once in this process too: every lazy import happens before the fork.
        result = run() if os.geteuid() != 0 else (run(), as_nobody(run))[1]
        assert result == f"{pkg}/extra/x.bin: permission denied", result
    finally:
        if (top / "pkg" / "extra").is_dir():
            (top / "pkg" / "extra").chmod(0o755)  # searchable again, so that it can be removed
        shutil.rmtree(top, ignore_errors=True)


def test_a_package_path_that_cannot_be_examined_is_named_with_the_reason(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A package path under a regular file (stat fails with ENOTDIR) is one line naming the path and why."""
    (tmp_path / "file").write_bytes(b"x")
    path = tmp_path / "file" / "pkg"
    with pytest.raises(PackageError) as info:
        open_package(path)
    assert messages_snapshot == str(info.value)


def test_a_package_without_a_prefill_graph_refuses_that_role_naming_the_package(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """Asking for the prefill graph of a package whose config names none is one PackageError line naming the package."""
    pkg = build_mini_package(tmp_path / "pkg")
    (pkg / "genai_config.json").write_text(dumps_config(mini_config(prefill=None)), encoding="utf-8")
    package = open_package(pkg)
    assert "prefill" not in package.roles()
    with pytest.raises(PackageError) as info:
        package.graph_path("prefill")
    assert messages_snapshot == str(info.value)


def test_a_layered_packages_head_graph_loads_with_its_data_inside_head(tmp_path: Path) -> None:
    """A layered package's head graph is checked against head/ (its own directory), so its data file there loads."""
    root = build_layered_mini_package(tmp_path / "layered")
    package = open_package(root)
    model = package.load("head")
    assert model.meta["q38.path"] == str(root / "head" / "head_r2.onnx")
    assert model.meta["q38.root"] == str(root / "head")
    assert list(model.graph.initializers) == ["w"]


def test_a_fifo_inside_the_package_is_refused_naming_that_entry(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A FIFO in the package is refused in one line naming it, so no command ever blocks reading it."""
    pkg = build_mini_package(tmp_path / "pkg")
    os.mkfifo(pkg / "pipe")
    with pytest.raises(PackageError) as info:
        open_package(pkg)
    assert messages_snapshot == str(info.value)


def test_a_directory_without_a_config_is_refused_as_not_a_package(tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """A directory with neither layout's config is one line naming it and both places a config was looked for."""
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(PackageError) as info:
        open_package(root)
    assert messages_snapshot == str(info.value)


def test_the_writer_writes_utf8_text_whatever_the_locale(tmp_path: Path) -> None:
    """``write_text`` stores UTF-8 bytes even under an ASCII (C) locale, so a config is the same file everywhere."""
    text = "caf\u00e9 \u2014 \u4e2d\n"
    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")  # open()'s default encoding is now ASCII (outside UTF-8 mode)
        with PackageWriter(tmp_path / "out") as writer:
            writer.write_text("notes.txt", text)
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
    assert (tmp_path / "out" / "notes.txt").read_bytes() == text.encode("utf-8")


def test_the_expert_profile_the_config_names_is_read_into_the_package(tmp_path: Path) -> None:
    """open_package reads the expert profile that ``qwen38_graph.expert_profile`` names and hands it to the
    caller (commands use its counts); a package naming none has no profile."""
    pkg = build_mini_package(tmp_path / "pkg")
    assert open_package(pkg).profile is None
    profile = ExpertProfile(np.arange(8, dtype=np.uint64).reshape(2, 4))
    (pkg / "expert-profile.bin").write_bytes(encode_profile(profile))
    (pkg / "genai_config.json").write_text(dumps_config(mini_config(expert_profile="expert-profile.bin")), encoding="utf-8")
    assert open_package(pkg).profile == profile
