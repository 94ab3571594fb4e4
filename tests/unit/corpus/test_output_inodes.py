"""No output shares an inode with a file outside the command's own inputs (issue 13 acceptance).

Each writing command runs (as a real child process) on inputs that hold symlinks, and an
``outside/`` directory beside them holds files those links - or the command line - point at. The
test walks the output and compares every entry's ``(st_dev, st_ino)`` with those of every file
*lexically inside* the inputs (symlinks not followed): an output file may be a fresh file, or a
hard link / reflink of an input, never the inode of a file outside them. A hard link to such a
file would let a later in-place write to the package modify it (``/etc/passwd`` in the issue).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.forkrun import ForkServer

from q38.package.io.elf import shared_object_header


def _identities(root: Path) -> dict[tuple[int, int], str]:
    """(dev, ino) -> relative path of every regular file under ``root``, links not followed."""
    out: dict[tuple[int, int], str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                out[(st.st_dev, st.st_ino)] = path.relative_to(root).as_posix()
    return out


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    srv = ForkServer()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from q38.synth import synthesize

    base = tmp_path_factory.mktemp("inodes")
    bundles = synthesize(base / "bundles", preset="tiny", variant="cpu", seed=0, bundles=True)
    package = synthesize(base / "package", preset="tiny", variant="cpu", seed=0)
    return {"bundles": bundles, "package": package}


def _outside_lib(case: Path) -> Path:
    outside = case / "outside"
    outside.mkdir()
    secret = outside / "libsecret.so"
    secret.write_bytes(shared_object_header() + b"not really a library, but a file outside every input\n")
    return secret


def _setup(kind: str, trees: dict[str, Path], case: Path) -> tuple[list[str], list[Path], Path]:
    """(argv without OUT, input directories, the outside file) for one scenario."""
    secret = _outside_lib(case)
    if kind.startswith("build"):
        src = case / "src"
        shutil.copytree(trees["bundles"], src, symlinks=True)
        lib = case / "given" / "libcustom_ops.so"
        lib.parent.mkdir()
        os.symlink(secret, lib)  # the --lib path is a symlink to a file outside the bundles
        link = kind.split("-", 1)[1]
        argv = ["build", "{out}", "--target", str(src / "target"), "--head", str(src / "head"),
                "--prefill", str(src / "prefill"), "--lib-qsa", str(lib), "--link", link]  # fmt: skip
        return argv, [src], secret
    src = case / "pkg"
    shutil.copytree(trees["package"], src, symlinks=True)
    # An inside symlink (allowed) next to the real file: placing it must not escape either.
    os.symlink("libcustom_ops.so", src / "libs" / "libalias.so")
    if kind == "optimize":
        return ["optimize", str(src), "{out}"], [src], secret
    if kind == "offload":
        return ["offload", "{out}", "--from-package", str(src), "--offload-mode", "auto", "--link", "auto"], [src], secret
    return ["export-genai", str(src), "{out}", "--link", "hardlink"], [src], secret


# build's --lib path is a symlink to a file outside every bundle: with any --link policy the
# resolved file is placed by copy (issue 13.4), never as the outside file's inode.
SCENARIOS = ("build-auto", "build-hardlink", "build-copy", "optimize", "offload", "export-genai")


@pytest.mark.parametrize("kind", SCENARIOS)
def test_no_output_shares_an_inode_with_a_file_outside_the_inputs(
    kind: str, trees: dict[str, Path], server: ForkServer, tmp_path: Path
) -> None:
    case = tmp_path / "case"
    case.mkdir()
    argv, inputs, secret = _setup(kind, trees, case)
    work = tmp_path / "w"
    work.mkdir()
    out = work / "out"
    argv = [a.replace("{out}", str(out)) for a in argv]
    result = server.run(argv, cwd=work, scratch=tmp_path / "s", timeout=120)
    assert not result.timed_out
    assert result.rc == 0, result.stderr[-2000:]
    inside: dict[tuple[int, int], str] = {}
    for root in inputs:
        inside.update(_identities(root))
    secret_id = (os.stat(secret).st_dev, os.stat(secret).st_ino)
    assert os.stat(secret).st_nlink == 1, "a file outside the inputs gained a hard link"
    produced = _identities(out)
    assert produced, "the command wrote nothing"
    for ident, rel in produced.items():
        assert ident != secret_id, f"{rel} is the inode of {secret} (outside the inputs)"
        nlink = os.lstat(out / rel).st_nlink
        if nlink > 1:
            assert ident in inside, f"{rel} has {nlink} links but is no input's inode: it is shared with a file outside"
    if kind.startswith("build"):  # the library was placed (by copy), not dropped
        libs = [rel for rel in produced.values() if rel.endswith("/libcustom_ops.so") or rel == "libcustom_ops.so"]
        assert libs, sorted(produced.values())
        assert all((out / rel).read_bytes() == secret.read_bytes() for rel in libs)
