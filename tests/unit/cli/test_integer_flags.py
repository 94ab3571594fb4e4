"""Integer flags take plain ASCII decimals only: one argparse line and exit 2 otherwise.

``str.isdigit()`` accepts '²' and ``int()`` accepts '١' (Arabic-Indic one): neither is a number
a user typed on purpose, and '²' used to reach ``int()`` and fail there.
"""

from __future__ import annotations

import pytest

from q38.cli import main


@pytest.mark.parametrize(
    ("argv", "value", "what"),
    [
        (["fit", "PKG", "--batch"], "²", "positive"),
        (["fit", "PKG", "--batch"], "0", "positive"),
        (["profile", "PKG", "--tokens"], "١", "positive"),
        (["profile", "PKG", "--seed"], "-1", "non-negative"),
        (["offload", "OUT", "--from-package", "SRC", "--device-expert-bytes"], "1e3", "non-negative"),
        (["offload", "OUT", "--from-package", "SRC", "--min-slots-per-layer"], "²", "non-negative"),
    ],
)
def test_a_non_ascii_or_out_of_range_integer_flag_is_one_line_exit_2(
    argv: list[str], value: str, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2
    assert err[-1].endswith(f"expected a {what} decimal integer, got {value!r}")


@pytest.mark.parametrize("text", ["1", "42", "007"])
def test_plain_decimals_are_read(text: str) -> None:
    from q38.commands._options import nonneg_int, positive_int

    assert positive_int(text) == nonneg_int(text) == int(text)
