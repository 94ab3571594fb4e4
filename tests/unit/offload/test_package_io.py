"""What both converters share (``q38.offload.package_io``), seen through ``q38 offload``.

Invariants guarded:
- an unreadable ``--expert-profile`` is refused in one line that names the flag and the path
  (the user's own words for the file), exit 2, nothing written;
- on a terminal, the files the conversion carries over unchanged are placed under one progress
  bar labelled ``offload: placing files``.
"""

from __future__ import annotations

import functools
import io
import sys
from pathlib import Path

import pytest

import q38.progress
from q38.cli import main
from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions
from q38.package import LinkPolicy


class _Tty(io.StringIO):
    """A terminal stand-in: the progress bar draws only on a TTY."""

    def isatty(self) -> bool:
        return True


def test_an_unreadable_expert_profile_is_refused_naming_the_flag(tiny_cpu_package: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The profile refusal names ``--expert-profile`` and the path given, so the user knows which
    argument to fix; it comes before anything is written."""
    missing = tmp_path / "missing.strp"
    out = tmp_path / "out"
    code = main(["offload", str(out), "--from-package", str(tiny_cpu_package), "--offload-mode", "auto",
                 "--expert-profile", str(missing)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"q38 offload: error: --expert-profile {missing}: "), err
    assert not out.exists()


def test_unchanged_files_are_placed_under_a_labelled_progress_bar(tiny_cpu_package: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal shows which step the bytes belong to: the placement bar reads
    ``offload: placing files [...]`` (the bar is made to draw at once: the tiny package is quick)."""
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(q38.progress, "Progress", functools.partial(q38.progress.Progress, delay=0.0))
    convert_package(tiny_cpu_package, tmp_path / "out", OffloadOptions(mode="auto"), link=LinkPolicy.COPY)
    assert "\roffload: placing files [" in tty.getvalue(), tty.getvalue()[:300]
