"""Output tree of ``q38 synth``: determinism, bundles, flags.

Invariants: same arguments give byte-identical trees (same files, bytes, link structure); a
different seed changes the bytes; bundles hold target/head data as one inode (hard link), a
relative directory symlink inside target/, libs/qsa/libcustom_ops.so -> libcustom_ops.so.1 and a
same-basename library in libs/hc with different bytes; bad flags and an existing OUT exit 2 with
one line; the config parses with q38.package.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from q38.cli import main
from q38.synth import synthesize


def _tree(root: Path) -> dict[str, tuple[str, bytes]]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p).encode())
        elif p.is_file():
            out[rel] = ("file", p.read_bytes())
        else:
            out[rel] = ("dir", b"")
    return out


@pytest.mark.parametrize(
    "kw", [{}, {"bundles": True}, {"layout": "layered", "lineage": "custom", "variant": "faithful"}]
)
def test_deterministic(tmp_path: Path, kw: dict[str, object]) -> None:
    a = _tree(synthesize(tmp_path / "a", seed=3, **kw))  # type: ignore[arg-type]
    b = _tree(synthesize(tmp_path / "b", seed=3, **kw))  # type: ignore[arg-type]
    assert a == b
    c = _tree(synthesize(tmp_path / "c", seed=4, **kw))  # type: ignore[arg-type]
    assert a.keys() == c.keys() and a != c


def test_bundles_links(tmp_path: Path) -> None:
    # Fresh bundles: the shared tiny_bundles fixture gains hard links from builds (--link auto).
    tiny_bundles = synthesize(tmp_path / "bundles", preset="tiny", variant="cpu", bundles=True)
    t, h, p = (tiny_bundles / d / "model.onnx.data" for d in ("target", "head", "prefill"))
    assert os.stat(t).st_ino == os.stat(h).st_ino == os.stat(p).st_ino
    assert os.stat(t).st_nlink == 3
    assets = tiny_bundles / "target" / "assets"
    assert assets.is_symlink() and os.readlink(assets) == "assets.v1" and assets.is_dir()
    lib = tiny_bundles / "libs" / "qsa" / "libcustom_ops.so"
    assert lib.is_symlink() and os.readlink(lib) == "libcustom_ops.so.1"
    other = tiny_bundles / "libs" / "hc" / "libcustom_ops.so"
    assert other.is_file() and not other.is_symlink() and other.read_bytes() != lib.read_bytes()
    assert (tiny_bundles / "head" / "head_r2.onnx").is_file() and (
        tiny_bundles / "prefill" / "prefill.onnx"
    ).is_file()


def test_config_parses(tiny_cpu_package: Path) -> None:
    from q38.package import read_config

    cfg = read_config(tiny_cpu_package / "genai_config.json")
    assert cfg is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--experts", "nvfp4"],
            "q38 synth: error: --experts nvfp4 needs --variant faithful (NVFP4 QMoE has no CPU kernel)",
        ),
        (["--weight-gb", "1"], "q38 synth: error: --weight-gb applies to --preset large only"),
    ],
)
def test_bad_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["synth", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.strip() == message and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_existing_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out").mkdir()
    assert main(["synth", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("q38 synth: error: ")
        and str(tmp_path / "out") in err
        and err.count("\n") == 1
    )
    assert list(tmp_path.iterdir()) == [tmp_path / "out"]


def test_argparse_choice_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as ei:
        main(["synth", str(tmp_path / "o"), "--variant", "bogus"])
    assert ei.value.code == 2
