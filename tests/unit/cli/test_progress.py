"""The progress bar: drawn only on a terminal and only for work over the delay.

Invariants: a non-TTY stream (pipes, CI logs, --json consumers) gets nothing; a TTY gets a bar
after the delay and a cleared line at the end; quick work (under the delay) draws nothing.
"""

from __future__ import annotations

import io

from q38.progress import Progress


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
