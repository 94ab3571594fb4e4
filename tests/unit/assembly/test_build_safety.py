"""Safety rules of ``q38 build`` (issue 3, rules 1-7): each test fails on a naive builder.

Invariants:
- refusals happen before anything is written: existing destination, dangling symlink at the
  destination, a later destination of a layered build that exists, a destination inside a source
  reached through a symlink, two libraries with one basename, the reserved libqwen38_plane.so,
  escaping symlinks, a bad provider option;
- the same library file named twice is fine; library symlinks are resolved to a loadable file;
- directory symlinks are kept as symlinks (not traversed, no duplicated files);
- an explicit --link hardlink across filesystems fails cleanly; a failure or interrupt in the
  middle of writing leaves no destination and no staging debris.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from support.build_bundles import LIB_A_BYTES

import q38.assembly.assemble as assemble
import q38.package.io.links as links
from q38.assembly import BuildRequest, LinkPolicy, build_package
from q38.errors import BuildError, FlagError, Q38Error
from q38.package.io.staging import STAGING_MARK


def _req(b, out, **kw):
    kw.setdefault("prefill", b["prefill"])
    return BuildRequest(out=out, target=b["target"], head=b["head"], **kw)


def _no_debris(parent: Path) -> None:
    assert not [p.name for p in parent.iterdir() if STAGING_MARK in p.name]


def test_existing_destination_is_refused_and_kept(bundles, tmp_path):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "old.txt").write_text("keep")
    with pytest.raises(BuildError, match="destination exists"):
        build_package(_req(bundles, out))
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    _no_debris(tmp_path)


def test_dangling_symlink_destination_is_refused(bundles, tmp_path):
    out = tmp_path / "pkg"
    os.symlink(tmp_path / "nowhere", out)
    with pytest.raises(BuildError, match="dangling symlink"):
        build_package(_req(bundles, out))
    assert not (tmp_path / "nowhere").exists()
    _no_debris(tmp_path)


def test_layered_later_destination_collision_writes_nothing(bundles, tmp_path):
    out = tmp_path / "out"
    (out / "head").mkdir(parents=True)
    with pytest.raises(BuildError, match="head: destination exists"):
        build_package(_req(bundles, out, layout="layered"))
    assert sorted(p.name for p in out.iterdir()) == ["head"]  # no out/target written first


def test_destination_inside_a_source_through_a_symlink_is_refused(bundles, tmp_path):
    alias = tmp_path / "alias"
    os.symlink(bundles["target"], alias)
    with pytest.raises(BuildError, match="inside the source"):
        build_package(_req(bundles, alias / "pkg"))
    assert not (bundles["target"] / "pkg").exists()


def test_two_libraries_with_one_basename_are_refused(bundles, tmp_path):
    libs = (("qsa", os.fspath(bundles["lib_a"])), ("hc", os.fspath(bundles["lib_b"])))
    for layout in ("folded", "layered"):
        with pytest.raises(BuildError, match=r"basename 'libcustom_ops.so' is also used by --lib-qsa"):
            build_package(_req(bundles, tmp_path / layout, libs=libs, layout=layout))
        assert not (tmp_path / layout).exists()


def test_reserved_plane_library_is_refused(bundles, tmp_path):
    plane = tmp_path / "libqwen38_plane.so"
    plane.write_bytes(b"x")
    with pytest.raises(BuildError, match="reserved"):
        build_package(_req(bundles, tmp_path / "pkg", libs=(("plane", os.fspath(plane)),)))
    assert not (tmp_path / "pkg").exists()


def test_same_library_named_twice_is_fine_and_its_symlink_is_resolved(bundles, tmp_path):
    lib = os.fspath(bundles["lib_a"])
    build_package(_req(bundles, tmp_path / "pkg", libs=(("qsa", lib), ("qsa2", lib)), link=LinkPolicy.COPY))
    placed = tmp_path / "pkg" / "libs" / "libcustom_ops.so"
    assert not placed.is_symlink() and placed.read_bytes() == LIB_A_BYTES
    assert sorted(os.listdir(placed.parent)) == ["libcustom_ops.so"]


def test_directory_symlinks_are_preserved_not_traversed(bundles, tmp_path):
    pkg = tmp_path / "pkg"
    build_package(_req(bundles, pkg))
    assert os.readlink(pkg / "extras_link") == "extras"
    assert os.readlink(pkg / "readme.link") == "extras/readme.txt"
    assert (pkg / "readme.link").read_text() == "bundle extra\n"
    assert not (pkg / "extras_link").resolve().is_relative_to(bundles["root"])


@pytest.mark.parametrize("text", ["../../outside", "/etc/passwd"])
def test_escaping_symlinks_are_refused(bundles, tmp_path, text):
    os.symlink(text, bundles["head"] / "escape")
    try:
        with pytest.raises(BuildError, match="would escape the package"):
            build_package(_req(bundles, tmp_path / "pkg"))
    finally:
        os.unlink(bundles["head"] / "escape")
    assert not (tmp_path / "pkg").exists()
    _no_debris(tmp_path)


@pytest.mark.parametrize(
    ("provider", "options", "message"),
    [
        ("cpu", ("gpu_mem_limit=1",), "--cuda-option needs --provider cuda"),
        ("cuda", ("gpu_mem_limit=lots",), "expected an integer"),
        ("cuda", ("no_such_option=1",), "unknown CUDA provider option"),
        ("cuda", ("enable_cuda_graph=maybe",), "expected 0/1/true/false"),
    ],
)
def test_provider_is_checked_before_anything_is_written(bundles, tmp_path, monkeypatch, provider, options, message):
    monkeypatch.setattr(assemble, "read_source", lambda *a: pytest.fail("graphs read before the provider check"))
    with pytest.raises(FlagError, match=message):
        build_package(_req(bundles, tmp_path / "pkg", provider=provider, cuda_options=options))
    assert not (tmp_path / "pkg").exists()


def test_explicit_hardlink_across_filesystems_fails_without_debris(bundles):
    if os.stat("/dev/shm").st_dev == os.stat(bundles["root"]).st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the sources here")
    tmp = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        with pytest.raises(Q38Error, match=r"cannot hardlink .*EXDEV"):
            build_package(_req(bundles, tmp / "pkg", link=LinkPolicy.HARDLINK))
        assert os.listdir(tmp) == []
    finally:
        shutil.rmtree(tmp)


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failure_midway_leaves_no_destination_and_no_debris(bundles, tmp_path, monkeypatch, exc):
    real = links.place
    calls = []

    def flaky(src, dst, policy, **kw):
        calls.append(dst)
        if len(calls) == 3:
            raise exc
        return real(src, dst, policy, **kw)

    monkeypatch.setattr(links, "place", flaky)
    # An OSError becomes one PackageError line ("... nothing was written"); ^C stays itself.
    with pytest.raises(Q38Error if isinstance(exc, OSError) else KeyboardInterrupt):
        build_package(_req(bundles, tmp_path / "pkg"))
    assert len(calls) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_failure_in_the_second_layered_package_removes_the_first(bundles, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    real = assemble._write
    seen = []

    def second_fails(root, pkg, *a, **kw):
        seen.append(pkg.rel)
        if pkg.rel == "head":
            raise BuildError("injected")
        return real(root, pkg, *a, **kw)

    monkeypatch.setattr(assemble, "_write", second_fails)
    with pytest.raises(BuildError, match="injected"):
        build_package(_req(bundles, out, layout="layered"))
    assert seen == ["target", "head"]
    assert os.listdir(out) == []


def test_bundle_path_collision_with_different_bytes_is_refused(bundles, tmp_path):
    (bundles["head"] / "extras").mkdir()
    (bundles["head"] / "extras" / "readme.txt").write_text("other\n")
    try:
        with pytest.raises(BuildError, match=r"extras/readme\.txt: the target and head bundles"):
            build_package(_req(bundles, tmp_path / "pkg"))
    finally:
        shutil.rmtree(bundles["head"] / "extras")
    assert not (tmp_path / "pkg").exists()


def test_every_refusal_is_one_line(bundles, tmp_path):
    (tmp_path / "pkg").mkdir()
    with pytest.raises(Q38Error) as info:
        build_package(_req(bundles, tmp_path / "pkg"))
    assert "\n" not in str(info.value)
