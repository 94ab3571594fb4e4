"""The stale-staging sweep removes only what q38 provably wrote, and no name crashes it (issue 24.1).

A staging directory is ``.<dest>.q38-staging-<pid>-<8 hex>/`` holding the marker
``.q38-staging`` (written first) and the output ``tree/``. The sweep, run by every
:class:`StagedDirectory` in the same parent, removes one only when the name parses strictly
(ASCII digits, no leading zero, pid <= PID_MAX, 8 lowercase hex digits), the directory and the
marker are the user's own and no symlinks, the marker's bytes are exactly q38's for that name,
and the pid is dead. Everything else - a neighbour's name, hostile or very long names, digits
that ``str.isdigit`` accepts and ``int`` does not - is left alone, and the command succeeds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fsnap import tree_snapshot

from q38.cli import main
from q38.package.io.staging import (
    MARKER_NAME,
    PID_MAX,
    StagedDirectory,
    marker_text,
    parse_staging_name,
)

_DEAD_PID = 4_000_000  # above any default pid_max (4,194,304 is the limit); checked dead below


def _dead_pid() -> int:
    for pid in range(_DEAD_PID, _DEAD_PID + 1000):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            continue
    pytest.skip("no dead pid found")


def _staging(parent: Path, dest: str, pid: int, token: str = "deadbeef", *, marker: bytes | None = None) -> Path:
    d = parent / f".{dest}.q38-staging-{pid}-{token}"
    d.mkdir()
    (d / MARKER_NAME).write_bytes(marker_text(dest, pid, token) if marker is None else marker)
    (d / "tree").mkdir()
    (d / "tree" / "partial.bin").write_bytes(b"x" * 100)
    return d


def _run_staged(dest: Path) -> None:
    with StagedDirectory(dest) as staged:
        (staged.path / "ok").write_text("1")
        staged.commit()


def test_a_killed_writers_staging_is_swept_by_the_next_writer_to_any_destination_beside_it(tmp_path: Path) -> None:
    code = (
        "import os; from pathlib import Path; from q38.package import StagedDirectory;"
        f"s = StagedDirectory(Path({str(tmp_path / 'first')!r})).__enter__(); (s.path / 'x').write_text('y');"
        "os._exit(9)"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and ".first.q38-staging-" in left[0]
    assert sorted(os.listdir(tmp_path / left[0])) == [MARKER_NAME, "tree"]
    _run_staged(tmp_path / "second")  # another destination in the same directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["second"]
    assert sorted(os.listdir(tmp_path / "second")) == ["ok"]  # the marker never reaches the output


def _names(pid: int) -> dict[str, Callable[[Path], Path]]:
    """Foreign and hostile entries next to ``out``: none may be swept, none may crash the sweep."""

    def plain(name: str) -> Callable[[Path], Path]:
        def make(parent: Path) -> Path:
            (parent / name).mkdir()
            (parent / name / "keep").write_text("neighbour's")
            return parent / name

        return make

    def with_marker(name: str, dest: str, mpid: int, token: str, marker: bytes | None = None) -> Callable[[Path], Path]:
        def make(parent: Path) -> Path:
            d = parent / name
            d.mkdir()
            (d / MARKER_NAME).write_bytes(marker if marker is not None else marker_text(dest, mpid, token))
            return d

        return make

    def symlinked(parent: Path) -> Path:
        real = parent / "a-real-directory"
        real.mkdir()
        (real / MARKER_NAME).write_bytes(marker_text("out", pid, "cafebabe"))
        link = parent / f".out.q38-staging-{pid}-cafebabe"
        os.symlink(real.name, link)
        return link

    def a_file(parent: Path) -> Path:
        f = parent / f".out.q38-staging-{pid}-0000ffff"
        f.write_bytes(marker_text("out", pid, "0000ffff"))
        return f

    def marker_link(parent: Path) -> Path:
        d = parent / f".out.q38-staging-{pid}-feedface"
        d.mkdir()
        (parent / "elsewhere-marker").write_bytes(marker_text("out", pid, "feedface"))
        os.symlink("../elsewhere-marker", d / MARKER_NAME)
        return d

    return {
        "huge-pid": plain(".out.q38-staging-99999999999999999999-deadbeef"),
        "superscript-two": plain(".out.q38-staging-\u00b2-deadbeef"),
        "arabic-indic-digits": plain(".out.q38-staging-\u0661\u0662-deadbeef"),
        "fullwidth-digits": plain(".out.q38-staging-\uff11\uff12-deadbeef"),
        "leading-zero": with_marker(f".out.q38-staging-0{pid}-deadbeef", "out", pid, "deadbeef"),
        "pid-zero": plain(".out.q38-staging-0-deadbeef"),
        "negative": plain(".out.q38-staging--5-deadbeef"),
        "pid-above-max": with_marker(f".out.q38-staging-{PID_MAX + 1}-deadbeef", "out", PID_MAX + 1, "deadbeef"),
        "uppercase-hex": with_marker(f".out.q38-staging-{pid}-DEADBEEF", "out", pid, "DEADBEEF"),
        "short-token": plain(f".out.q38-staging-{pid}-dead"),
        "no-token": plain(f".out.q38-staging-{pid}"),
        "trailing-newline": plain(f".out.q38-staging-{pid}-deadbeef\n"),
        "very-long": plain("." + "o" * 200 + f".q38-staging-{pid}-deadbeef"),
        "very-long-digits": plain(".out.q38-staging-" + "9" * 220 + "-deadbeef"),
        "no-marker": plain(f".out.q38-staging-{pid}-deadbeef"),
        "wrong-marker": with_marker(f".out.q38-staging-{pid}-abcdef01", "out", pid, "abcdef01", b"not q38's\n"),
        "marker-of-another-name": with_marker(f".out.q38-staging-{pid}-abcdef02", "out", pid, "abcdef03"),
        "marker-is-a-symlink": marker_link,
        "staging-is-a-symlink": symlinked,
        "a-file-not-a-directory": a_file,
        "alive-pid": with_marker(f".out.q38-staging-{os.getpid()}-abcdef04", "out", os.getpid(), "abcdef04"),
    }


_CASES = sorted(_names(_DEAD_PID))


@pytest.mark.parametrize("case", _CASES)
def test_a_name_q38_cannot_prove_it_wrote_is_left_alone_and_never_crashes(case: str, tmp_path: Path) -> None:
    pid = _dead_pid()
    made = _names(pid)[case](tmp_path)
    before = tree_snapshot(tmp_path)
    _run_staged(tmp_path / "out")
    after = tree_snapshot(tmp_path)
    assert os.path.lexists(made)
    assert {k: v for k, v in after.items() if not k.startswith("out")} == before
    assert sorted(os.listdir(tmp_path / "out")) == ["ok"]


def test_a_foreign_owned_staging_directory_is_left_alone(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    pid = _dead_pid()
    d = _staging(tmp_path, "out", pid)
    os.chown(d, 65534, 65534)
    _run_staged(tmp_path / "out")
    assert d.is_dir() and (d / "tree" / "partial.bin").is_file()


def test_the_genuine_stale_one_is_swept_among_hostile_neighbours(tmp_path: Path) -> None:
    pid = _dead_pid()
    for make in _names(pid).values():
        make(tmp_path)
    genuine = _staging(tmp_path, "out", pid, "12345678")
    _run_staged(tmp_path / "out")
    assert not os.path.lexists(genuine)


def test_parse_staging_name_is_strict() -> None:
    assert parse_staging_name(".out.q38-staging-123-0123abcd") == ("out", 123, "0123abcd")
    assert parse_staging_name(".a.b.q38-staging-7-ffffffff") == ("a.b", 7, "ffffffff")
    for bad in (".out.q38-staging-\u00b2-deadbeef", ".out.q38-staging-99999999999999999999-deadbeef",
                ".out.q38-staging-0123-deadbeef", ".out.q38-staging-1-DEADBEEF", "out.q38-staging-1-deadbeef",
                ".out.q38-staging-1-deadbeef0", f".out.q38-staging-{PID_MAX + 1}-deadbeef", ".out.q38-staging--1-deadbeef"):  # fmt: skip
        assert parse_staging_name(bad) is None, bad


@pytest.mark.parametrize("name", [".out.q38-staging-99999999999999999999-deadbeef", ".out.q38-staging-\u00b2-deadbeef"])
def test_the_issues_names_next_to_a_destination_do_not_fail_a_command(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / name).mkdir()
    rc = main(["synth", str(tmp_path / "out"), "--preset", "tiny", "--variant", "cpu"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "internal error" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "out"])
