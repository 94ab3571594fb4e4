"""One link policy for build, optimize, offload and export-genai, checked with real onnx.

Invariants:
- after a default build, ``onnx.load`` (with external data) of the source and of the output both
  succeed: nothing is hard-linked, every file of both has one link;
- ``--link hardlink`` prints exactly one warning line naming the consequence, and the consequence
  is real: onnx refuses the source and the output while both exist, and loads the source again
  once the output is gone; ``q38 check`` flags the hard-linked output (PKG-HARDLINK-001) and not
  the default one;
- no byte of a linked file is read: with ``--link hardlink`` no data file is hashed or copied,
  and the manifest records identities without digests; ``--digest`` adds the digests;
- optimize, offload and export-genai take the same flags with the same outcome (default: private
  files; hardlink: one warning, shared inodes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from support.build_bundles import make_bundles

import q38.package.io.copying as copying
import q38.package.io.hashing as hashing
import q38.package.io.links as links
from q38.cli import main
from q38.package.io.links import HARDLINK_WARNING

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def plain_bundles(tmp_path: Path) -> dict[str, Path]:
    """The build-test bundles with the head's hard link replaced by a copy: every file nlink 1."""
    b = make_bundles(tmp_path / "src")
    shared = b["head"] / "model.onnx.data"
    shutil.copyfile(shared, tmp_path / "copy.data")
    os.replace(tmp_path / "copy.data", shared)
    return b


def _argv(b: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return ["build", os.fspath(out), "--target", os.fspath(b["target"]), "--head", os.fspath(b["head"]),
            "--prefill", os.fspath(b["prefill"]), *extra]


def _links(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): os.lstat(p).st_nlink for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def _onnx_load(path: Path) -> None:
    onnx.load(os.fspath(path))  # with external data: onnx's hard-link and symlink checks apply


GRAPHS = {"target": "model.onnx", "head": "head_r2.onnx", "prefill": "prefill.onnx"}


def test_after_a_default_build_onnx_loads_the_source_and_the_output(plain_bundles, tmp_path, capsys):
    out = tmp_path / "pkg"
    assert main(_argv(plain_bundles, out)) == 0
    assert capsys.readouterr().err == ""
    for role, name in GRAPHS.items():
        _onnx_load(plain_bundles[role] / name)
        _onnx_load(out / name)
    assert set(_links(out).values()) == {1}
    assert set(_links(plain_bundles["root"]).values()) == {1}
    assert main(["check", os.fspath(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "PKG-HARDLINK-001" not in {v["rule_id"] for v in report["violations"]}


def test_hardlink_warns_once_and_onnx_refuses_both_until_the_output_is_gone(plain_bundles, tmp_path, capsys):
    out = tmp_path / "pkg"
    proc = subprocess.run([sys.executable, "-m", "q38", *_argv(plain_bundles, out, "--link", "hardlink")],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.fspath(REPO)), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 1 and HARDLINK_WARNING in proc.stderr
    assert os.path.samefile(out / "model.onnx.data", plain_bundles["target"] / "model.onnx.data")
    for path in (plain_bundles["target"] / "model.onnx", out / "model.onnx"):
        with pytest.raises(Exception, match="hard link"):
            _onnx_load(path)
    assert main(["check", os.fspath(out), "--json"]) == 0  # a warning, not an error
    report = json.loads(capsys.readouterr().out)
    flagged = {v["message"].split(":")[0] for v in report["violations"] if v["rule_id"] == "PKG-HARDLINK-001"}
    assert {"model.onnx.data", "head_r2.onnx.data"} <= flagged
    shutil.rmtree(out)
    _onnx_load(plain_bundles["target"] / "model.onnx")


def test_no_byte_of_a_linked_file_is_read(bundles, tmp_path, monkeypatch):
    hashed: list[str] = []
    real_sha = hashing.sha256_file

    def spy(path):
        hashed.append(os.fspath(path))
        return real_sha(path)

    def no_copy(*a, **k):
        raise AssertionError("bytes were copied under --link hardlink")

    monkeypatch.setattr(links, "sha256_file", spy)
    monkeypatch.setattr("q38.assembly.assemble.sha256_file", spy)
    monkeypatch.setattr(copying, "copy_fd", no_copy)
    monkeypatch.setattr(links, "copy_fd", no_copy)
    out = tmp_path / "pkg"
    assert main(_argv(bundles, out, "--link", "hardlink")) == 0
    assert [h for h in hashed if h.endswith(".data")] == []  # only the small graph protos of the sources
    files = json.loads((out / "package_manifest.json").read_text())["files"]
    for rel in ("model.onnx.data", "head_r2.onnx.data", "prefill.onnx.data", "extras/readme.txt"):
        st = os.stat(out / rel)
        assert files[rel] == {"link_mode": "hardlink", "identity": {
            "st_dev": st.st_dev, "st_ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}}


def test_digest_on_request_for_linked_files(bundles, tmp_path):
    out = tmp_path / "pkg"
    assert main(_argv(bundles, out, "--link", "hardlink", "--digest")) == 0
    files = json.loads((out / "package_manifest.json").read_text())["files"]
    data = (bundles["target"] / "model.onnx.data").read_bytes()
    assert files["model.onnx.data"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert files["model.onnx.data"]["link_mode"] == "hardlink"


def test_copy_and_link_flags_contradicting_are_refused(bundles, tmp_path, capsys):
    assert main(_argv(bundles, tmp_path / "pkg", "--copy", "--link", "hardlink")) == 2
    assert "--copy contradicts --link hardlink" in capsys.readouterr().err
    assert not (tmp_path / "pkg").exists()


@pytest.fixture(scope="module")
def tiny_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("policy") / "pkg", preset="tiny", variant="cpu")


def _command(name: str, src: Path, out: Path) -> list[str]:
    if name == "optimize":
        return ["optimize", os.fspath(src), os.fspath(out), "--target", "cpu"]
    if name == "offload":
        return ["offload", os.fspath(out), "--from-package", os.fspath(src), "--offload-mode", "auto"]
    return ["export-genai", os.fspath(src), os.fspath(out)]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("command", ["optimize", pytest.param("offload", marks=pytest.mark.slow), "export-genai"])
def test_the_other_writers_share_the_policy(command, tiny_package, tmp_path, caplog):
    data = tiny_package / "model.onnx.data"
    links_before = os.stat(data).st_nlink
    out = tmp_path / "default"
    assert main(_command(command, tiny_package, out)) == 0
    assert HARDLINK_WARNING not in _warnings(caplog)
    placed = out / "model.onnx.data"
    assert os.stat(placed).st_nlink == 1 and not os.path.samefile(placed, data)
    assert os.stat(data).st_nlink == links_before
    hard = tmp_path / "hard"
    caplog.clear()
    assert main([*_command(command, tiny_package, hard), "--link", "hardlink"]) == 0
    assert _warnings(caplog).count(HARDLINK_WARNING) == 1
    assert os.path.samefile(hard / "model.onnx.data", data)
    shutil.rmtree(hard)
    assert os.stat(data).st_nlink == links_before


@pytest.mark.parametrize("flags", [(), ("--copy",), ("--link", "hardlink")])
def test_build_json_summary_counts_every_placed_file_by_its_link_mode(plain_bundles, tmp_path, capsys, flags):
    """``q38 build --json``: the packages written, and per link mode how many files were placed so."""
    out = tmp_path / "pkg"
    assert main(_argv(plain_bundles, out, "--json", *flags)) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["packages"] == [os.fspath(out)]
    modes = summary["link_modes"]
    assert modes and all(isinstance(n, int) and n > 0 for n in modes.values()), modes
    # Beside the placed files: "write" (graphs and configs written anew) and "symlink" (kept links).
    if flags == ("--copy",):
        assert set(modes) - {"write", "symlink"} == {"copy"}
    elif flags == ("--link", "hardlink"):
        assert "hardlink" in modes and "copy" not in modes
    assert sum(modes.values()) >= len(GRAPHS)  # at least the three graph files (and their data)
    # The bytes placed as copies: every weight file at least (the bulk of a package), never more
    # than the package holds; none when every file was linked.
    files = [p for p in out.rglob("*") if p.is_file() and not p.is_symlink()]
    weights = sum(p.stat().st_size for p in files if p.name.endswith(".data"))
    total = sum(p.stat().st_size for p in files)
    if "copy" not in modes:
        assert summary["bytes_copied"] == 0, modes
    elif not {"reflink", "hardlink"} & set(modes):  # every file placed by copying
        assert weights <= summary["bytes_copied"] <= total, (modes, summary)
    else:  # a filesystem that clones some files: the rest were copied
        assert 0 < summary["bytes_copied"] <= total, (modes, summary)
    assert isinstance(summary["pool_entries"], dict)
