"""The progress bar: drawn only on a terminal and only for work over the delay.

Invariants: a non-TTY stream (pipes, CI logs, --json consumers) gets nothing; a TTY gets a bar
after the delay and a cleared line at the end; quick work (under the delay) draws nothing. Steps
with no count of their own (synth, check's contracts and sessions, export-genai's generation)
draw an elapsed-time line instead (``q38.progress.elapsed``).
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from q38.progress import Progress, elapsed


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nothing_is_drawn_on_a_pipe() -> None:
    stream = io.StringIO()
    with Progress(3, "work", stream=stream, delay=0.0) as bar:
        for _ in range(3):
            bar.advance()
    assert stream.getvalue() == ""


def test_a_terminal_gets_a_bar_and_a_clean_line_at_the_end() -> None:
    stream = _Tty()
    with Progress(4, "placing files", stream=stream, delay=0.0, width=8) as bar:
        bar.advance()
        bar.advance()
    text = stream.getvalue()
    assert "\rplacing files [##......] 1/4" in text
    assert "\rplacing files [####....] 2/4" in text
    assert text.endswith("\r\x1b[K")


def test_quick_work_under_the_delay_draws_nothing_even_on_a_terminal() -> None:
    stream = _Tty()
    with Progress(2, "quick", stream=stream, delay=60.0) as bar:
        bar.advance(2)
    assert stream.getvalue() == ""


def test_elapsed_draws_seconds_after_the_delay_on_a_terminal_only() -> None:
    tty, pipe, quick = _Tty(), io.StringIO(), _Tty()
    for stream in (tty, pipe):
        with elapsed("[1/8] synth", stream=stream, delay=0.2, every=0.1):
            time.sleep(0.6)
    with elapsed("quick", stream=quick, delay=60.0, every=0.05):
        time.sleep(0.2)
    assert "\r[1/8] synth ... 0 s" in tty.getvalue() and tty.getvalue().endswith("\r\x1b[K")
    assert pipe.getvalue() == ""
    assert quick.getvalue() == ""  # nothing drawn, nothing to clear


def _slower(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
    """The real ``module.name``, 1.3 s slower: a step long enough for its elapsed line."""
    real: Callable[..., Any] = getattr(module, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, slow)


@pytest.mark.parametrize("command", ["synth", "check", "export-genai"])
def test_steps_without_a_count_show_elapsed_time_on_a_terminal(
    command: str, tiny_cpu_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contracts.runner
    import q38.export_genai
    import q38.synth
    from q38.cli import main

    argv, slowed, label = {
        "synth": (["synth", str(tmp_path / "s")], (q38.synth, "synthesize"), "q38 synth: writing the tiny cpu package"),
        "check": (["check", str(tiny_cpu_package)], (contracts.runner, "check_package"),
                  f"q38 check {tiny_cpu_package}: contracts"),
        "export-genai": (["export-genai", str(tiny_cpu_package), str(tmp_path / "e"), "--generate", "1"],
                         (q38.export_genai, "generate_tokens"),
                         "q38 export-genai: generating 1 token(s) with onnxruntime-genai"),
    }[command]
    _slower(monkeypatch, *slowed)
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(argv) == 0
    assert f"\r{label} ... 1 s" in tty.getvalue(), tty.getvalue()
    assert tty.getvalue().endswith("\r\x1b[K")
