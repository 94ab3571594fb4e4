"""Libraries and provider options of ``q38 build`` (issue 13.4, issue 16's assembly survivors).

Invariants:
- a ``--lib`` file must be an ELF shared object for this platform (magic, class, byte order,
  ET_DYN): a symlink to /etc/passwd, a script, an executable is refused naming the file, exit 2;
- a ``--lib`` path is resolved; a resolved file outside the source bundles is copied, whatever
  ``--link`` says: a symlink to a system library never puts its inode into the output; a
  library inside a bundle follows the link policy (hard-linked under ``--link hardlink``);
- a ``--lib`` symlink that resolves to ``libqwen38_plane.so`` is refused like the name itself;
- a bundle file at ``libs/<basename>`` never silently wins over a different ``--lib`` file; the
  same file given both ways is placed once;
- ``--lib-NAME`` names are ``[A-Za-z0-9_.-]+`` (a newline or '/' is refused, one line, exit 2);
- CUDA option values are checked against their C type before anything is written (size_t,
  int, bool, enum).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from q38.assembly import BuildRequest, LinkPolicy, build_package
from q38.cli import main
from q38.errors import BuildError, FlagError
from q38.package.io.elf import shared_object_header


def _req(b: dict[str, Path], out: Path, **kw) -> BuildRequest:
    return BuildRequest(out=out, target=b["target"], head=b["head"], prefill=b["prefill"], **kw)


def _inodes(root: Path) -> set[tuple[int, int]]:
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.lstat(Path(dirpath) / name)
            out.add((st.st_dev, st.st_ino))
    return out


@pytest.mark.parametrize("link", [LinkPolicy.AUTO, LinkPolicy.HARDLINK, LinkPolicy.COPY])
def test_a_library_symlink_to_a_file_outside_the_bundles_is_copied_never_linked(bundles, tmp_path, link):
    outside = tmp_path / "system" / "libsystem.so"
    outside.parent.mkdir()
    outside.write_bytes(shared_object_header() + b"a library outside every bundle")
    evil = tmp_path / "evil"
    evil.mkdir()
    os.symlink(outside, evil / "libcustom_ops.so")
    before = os.stat(outside)
    out = tmp_path / "pkg"
    build_package(_req(bundles, out, libs=(("qsa", os.fspath(evil / "libcustom_ops.so")),), link=link))
    placed = out / "libs" / "libcustom_ops.so"
    assert not placed.is_symlink() and placed.read_bytes() == outside.read_bytes()
    after = os.stat(outside)
    assert (after.st_ino, after.st_nlink) == (before.st_ino, before.st_nlink)
    assert (before.st_dev, before.st_ino) not in _inodes(out)
    import json

    rec = json.loads((out / "package_manifest.json").read_text())["files"]["libs/libcustom_ops.so"]
    assert rec["link_mode"] == "copy" and rec["identity"]["st_ino"] == os.stat(placed).st_ino


def _elf(cls: int = 0, data: int = 0, e_type: int = 3) -> bytes:
    head = bytearray(shared_object_header())
    if cls:
        head[4] = cls
    if data:
        head[5] = data
    order = "little" if head[5] == 1 else "big"
    head[16:18] = e_type.to_bytes(2, order)
    return bytes(head) + b"payload"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"-> /etc/passwd\): not an ELF shared object \(no ELF magic\)"),
        (b"#!/bin/sh\necho hi\n", r"not an ELF shared object \(no ELF magic\)"),
        (b"", r"not an ELF shared object \(no ELF magic\)"),
        (b"\x7fELF\x02\x01", r"truncated ELF header"),
        (_elf(e_type=2), r"type ET_EXEC \(an executable\), not a shared object \(ET_DYN\)"),
        (_elf(e_type=1), r"type ET_REL \(an object file\)"),
        (_elf(cls=1), r"class 32-bit, this platform is 64-bit"),
        (_elf(data=2), r"big byte order, this platform is little-endian"),
    ],
    ids=["symlink-to-etc-passwd", "script", "empty", "truncated", "executable", "object", "class32", "big-endian"],
)
def test_a_library_that_is_not_a_shared_object_is_refused_naming_it(bundles, tmp_path, capsys, content, message):
    lib = tmp_path / "given" / "libcustom_ops.so"
    lib.parent.mkdir()
    if content is None:
        os.symlink("/etc/passwd", lib)
    else:
        lib.write_bytes(content)
    out = tmp_path / "pkg"
    argv = ["build", os.fspath(out), "--target", os.fspath(bundles["target"]), "--head",
            os.fspath(bundles["head"]), "--lib-qsa", os.fspath(lib)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("q38 build: error: --lib-qsa ")
    assert os.fspath(lib) in err and re.search(message, err), err
    assert "a library must be a shared object for this platform" in err
    assert not os.path.lexists(out) and sorted(os.listdir(tmp_path)) == ["given", "src"]


def test_a_library_inside_a_bundle_follows_the_link_policy(bundles, tmp_path):
    lib = bundles["target"] / "libs" / "libinbundle.so"
    lib.parent.mkdir()
    lib.write_bytes(shared_object_header() + b"in bundle")
    try:
        out = tmp_path / "pkg"
        build_package(_req(bundles, out, libs=(("qsa", os.fspath(lib)),), link=LinkPolicy.HARDLINK))
        assert os.path.samefile(out / "libs" / "libinbundle.so", lib)  # the bundle's own file, asked to link
    finally:
        lib.unlink()
        lib.parent.rmdir()


def test_a_library_symlink_resolving_to_the_reserved_plane_is_refused(bundles, tmp_path):
    real = tmp_path / "libqwen38_plane.so"
    real.write_bytes(shared_object_header() + b"plane")
    alias = tmp_path / "libinnocent.so"
    os.symlink(real.name, alias)
    with pytest.raises(BuildError, match=r"libqwen38_plane\.so is reserved"):
        build_package(_req(bundles, tmp_path / "pkg", libs=(("qsa", os.fspath(alias)),)))
    assert not (tmp_path / "pkg").exists()


def test_a_bundle_file_at_libs_basename_does_not_win_over_another_lib(bundles, tmp_path):
    own = bundles["target"] / "libs" / "libcustom_ops.so"
    own.parent.mkdir()
    own.write_bytes(shared_object_header() + b"the bundle's own copy")
    try:
        with pytest.raises(BuildError, match=r"--lib-qsa: libs/libcustom_ops\.so is also a file of the source bundles"):
            build_package(_req(bundles, tmp_path / "pkg", libs=(("qsa", os.fspath(bundles["lib_b"])),)))
        assert not (tmp_path / "pkg").exists()
        # the bundle's own file named as the library: fine, placed once, and it is that file
        out = tmp_path / "same"
        build_package(_req(bundles, out, libs=(("qsa", os.fspath(own)),)))
        assert (out / "libs" / "libcustom_ops.so").read_bytes() == shared_object_header() + b"the bundle's own copy"
        assert sorted(os.listdir(out / "libs")) == ["libcustom_ops.so"]
    finally:
        own.unlink()
        own.parent.rmdir()


@pytest.mark.parametrize("name", ["qsa\n", "q/sa", "qs a", "q=sa", ""])
def test_library_names_are_identifiers(bundles, tmp_path, name):
    with pytest.raises(FlagError, match="invalid library name"):
        build_package(_req(bundles, tmp_path / "pkg", libs=((name, os.fspath(bundles["lib_a"])),)))
    assert not (tmp_path / "pkg").exists()


def test_library_name_with_a_newline_is_one_line_exit_2(bundles, tmp_path, capsys):
    argv = ["build", os.fspath(tmp_path / "pkg"), "--target", os.fspath(bundles["target"]), "--head",
            os.fspath(bundles["head"]), f"--lib-qsa\nevil={bundles['lib_a']}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid library name" in err and "'qsa\\nevil'" in err
    assert not (tmp_path / "pkg").exists()


@pytest.mark.parametrize("name", ["qsa", "qsa.v2", "hc-1", "A_b"])
def test_identifier_library_names_are_accepted(bundles, tmp_path, name):
    out = tmp_path / "pkg"
    build_package(_req(bundles, out, libs=((name, os.fspath(bundles["lib_a"])),)))
    import json

    assert json.loads((out / "genai_config.json").read_text())["model"]["qwen38_graph"]["libraries"] == {
        name: "libs/libcustom_ops.so"
    }


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("gpu_mem_limit=99999999999999999999999", "out of range for size_t"),
        ("gpu_mem_limit=18446744073709551616", "out of range for size_t"),
        ("gpu_mem_limit=" + "9" * 5000, "out of range for size_t"),
        ("gpu_mem_limit=-1", "must not be negative"),
        ("device_id=2147483648", "out of range for int"),
        ("device_id=1.5", r"expected an integer \(int\)"),
        ("enable_cuda_graph=2", "expected 0/1/true/false"),
        ("arena_extend_strategy=kBogus", "expected one of kNextPowerOfTwo, kSameAsRequested"),
    ],
)
def test_cuda_option_values_are_checked_against_their_type(bundles, tmp_path, option, message):
    with pytest.raises(FlagError, match=message) as info:
        build_package(_req(bundles, tmp_path / "pkg", provider="cuda", cuda_options=(option,)))
    assert len(str(info.value)) < 400
    assert not (tmp_path / "pkg").exists()


def test_cuda_option_extremes_that_fit_are_written_as_decimal_strings(bundles, tmp_path):
    import json

    out = tmp_path / "pkg"
    build_package(_req(bundles, out, provider="cuda",
                       cuda_options=("gpu_mem_limit=18446744073709551615", "device_id=2147483647")))
    po = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]["session_options"]["provider_options"]
    assert po == [{"cuda": {"device_id": "2147483647", "gpu_mem_limit": "18446744073709551615"}}]


def test_a_cuda_option_literal_of_exactly_80_characters_is_still_read(bundles, tmp_path):
    """80 characters is the longest literal parsed (underscores as digit separators count): 1, 78
    underscores and 0 is ten; one character more is refused unparsed (test above)."""
    import json

    out = tmp_path / "pkg"
    build_package(_req(bundles, out, provider="cuda", cuda_options=("device_id=1" + "_" * 78 + "0",)))
    po = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]["session_options"]["provider_options"]
    assert po == [{"cuda": {"device_id": "10"}}]
