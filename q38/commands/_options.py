"""Option helpers shared by the subcommands (standard library only: ``--help`` imports this).

* :class:`HelpFormatter`: every option's help states its default (unless the text already
  does, or there is none to state) and its choices, so ``q38 CMD --help`` is the reference.
* :func:`comma_list`: list options take one comma-separated value (``--passes a,b``), so a
  list option can never swallow the positional arguments that follow it.
* :class:`OrtVersion`: every flag that names an onnxruntime release (``check --ort-version``,
  ``synth`` / ``optimize --target-ort``) takes only a release q38 has facts for.
* :func:`byte_size`: every size flag reads the same units (``24GiB``, ``24GB``, ``512MiB``).
* :func:`say_wrote`: a writing command's last line names what it wrote; with ``--json`` (or any
  machine-readable document on stdout) that line goes to stderr, so stdout stays parseable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from q38.errors import FlagError
from q38.ort_targets import ort_target
from q38.sizes import SIZE_EXAMPLES, parse_byte_size

__all__ = ["HelpFormatter", "OrtVersion", "byte_size", "comma_list", "nonneg_int", "positive_int", "say_wrote"]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, plus ``(default: X)`` and ``(choices: a, b)`` where they inform."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if text == argparse.SUPPRESS:
            return text
        extra = []
        # Choices show as {a,b} in the option's syntax unless a metavar hides them.
        if action.choices is not None and action.metavar is not None and "choices" not in text:
            extra.append("choices: " + ", ".join(str(c) for c in action.choices))
        default = action.default
        shown = not (
            default is None or default is False or default == [] or default == () or default == argparse.SUPPRESS
            or isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._CountAction))
        )
        if shown and action.option_strings and "default" not in text.lower():
            if isinstance(default, (list, tuple)):
                default = ",".join(str(d) for d in default)
            extra.append(f"default: {default}")
        if not extra:
            return text
        note = "; ".join(extra).replace("%", "%%")  # argparse %-formats help text
        return f"{text} ({note})" if text else note


def comma_list(item: Callable[[str], object] = str) -> Callable[[str], list[object]]:
    """An argparse ``type`` for ``a,b,c``: a non-empty list, each item through ``item``."""

    def parse(text: str) -> list[object]:
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(not p for p in parts):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        return [item(p) for p in parts]

    parse.__name__ = "comma-separated list"
    return parse


def _decimal(text: str, minimum: int, what: str) -> int:
    """``text`` as a plain ASCII decimal integer of at least ``minimum`` (argparse's error otherwise)."""
    try:
        value = int(text, 10) if text.isascii() and text.isdigit() else None
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
        value = None
    if value is None or value < minimum:
        raise argparse.ArgumentTypeError(f"expected a {what} decimal integer, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type``: a decimal integer >= 1 in ASCII digits (``²`` or ``-1`` are refused)."""
    return _decimal(text, 1, "positive")


def nonneg_int(text: str) -> int:
    """An argparse ``type``: a decimal integer >= 0 in ASCII digits."""
    return _decimal(text, 0, "non-negative")


class OrtVersion(argparse.Action):
    """An argparse action for a flag naming an onnxruntime release: one q38 has facts for, only.

    The one validator of ``check --ort-version`` and ``synth`` / ``optimize --target-ort``: the
    refusal is :func:`q38.ort_targets.ort_target`'s line, naming the flag and the known releases
    (``--ort-version banana`` judged a package by the rules of no release).
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        try:
            ort_target(str(values), flag=option_string or self.dest)
        except FlagError as exc:
            parser.error(str(exc))
        setattr(namespace, self.dest, values)


def byte_size(text: str) -> int:
    """An argparse ``type`` for a byte budget flag (``--*-bytes``): ``8GiB``, ``512MiB`` or a byte count.

    The flag's name says bytes, so a bare decimal stays a byte count (the documented form); any
    other text is read by :func:`q38.sizes.parse_byte_size`.
    """
    if text.isascii() and text.isdigit():
        return nonneg_int(text)
    try:
        return parse_byte_size(text, bare_is_bytes=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a size with a unit ({SIZE_EXAMPLES}); without a unit, "
                                         f"expected a non-negative decimal integer, got {text!r}") from exc


def say_wrote(command: str, what: str, *, machine: bool) -> None:
    """Print ``q38 COMMAND: wrote WHAT``: on stdout, or on stderr when stdout carries a document.

    ``machine``: stdout is a machine-readable document (``--json``, ``check --format sarif``):
    the line must not break it, so it goes to stderr.
    """
    print(f"q38 {command}: wrote {what}", file=sys.stderr if machine else sys.stdout, flush=True)
