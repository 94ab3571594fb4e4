""""Did you mean" for a mistyped command, choice or flag (standard library only: ``--help`` imports this).

argparse names what it could not read but not what the user meant: ``--fromat json`` is an
"unrecognized argument", and ``offload OUT --from-pakage SRC`` only says that ``--from-package``
is required. :func:`suggest` appends the closest known spelling (:mod:`difflib`) to such a message,
so the one error line says both what was wrong and how to write it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

__all__ = ["suggest"]

_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)$")
_UNRECOGNIZED = "unrecognized arguments: "
_REQUIRED = "the following arguments are required: "


def _closest(word: str, known: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, sorted(set(known)), n=1, cutoff=0.6)
    return found[0] if found else None


def _unknown_flags(argv: Sequence[str], options: Iterable[str]) -> list[str]:
    """The ``--flag`` tokens of ``argv`` (before a ``--``) that are no option of the parser."""
    known = set(options)
    unknown = []
    for token in argv:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if name.startswith("--") and len(name) > 2 and name not in known:
            unknown.append(name)
    return unknown


def _did_you_mean(pairs: Sequence[tuple[str, str]]) -> str:
    if len(pairs) == 1:
        return f"did you mean {pairs[0][1]}?"
    return "did you mean " + ", ".join(f"{near} for {flag}" for flag, near in pairs) + "?"


def suggest(message: str, argv: Sequence[str], options: Iterable[str]) -> str:
    """``message`` (an argparse error) with a "did you mean" where a known spelling is close.

    ``argv``: the arguments the parser read; ``options``: its option strings. Handles an invalid
    choice (a command or a ``choices`` value), unrecognized flags, and a required option reported
    missing because it was mistyped. Returns ``message`` unchanged when nothing is close.
    """
    options = sorted(set(options))
    choice = _INVALID_CHOICE.search(message)
    if choice is not None:
        choices = re.findall(r"'([^']*)'", choice.group("choices"))
        near = _closest(choice.group("given"), choices)
        if near is None:
            return message
        # The hint goes before the list of choices: a long line is cut at its end.
        cut = choice.start("choices") - len(" (choose from ")
        return f"{message[:cut]} (did you mean {near!r}?){message[cut:]}"
    if message.startswith(_UNRECOGNIZED):
        pairs = [(flag, near) for flag in _unknown_flags(message[len(_UNRECOGNIZED):].split(), options)
                 if (near := _closest(flag, options)) is not None]  # fmt: skip
        return f"{message} ({_did_you_mean(pairs)})" if pairs else message
    if message.startswith(_REQUIRED):
        required = [r for r in message[len(_REQUIRED):].split(", ") if r.startswith("-")]
        unknown = _unknown_flags(argv, options)
        pairs = [(flag, near) for flag in unknown if (near := _closest(flag, required)) is not None]
        if not pairs:  # not a mistyped required option: perhaps another mistyped one (--vers)
            pairs = [(flag, near) for flag in unknown if (near := _closest(flag, options)) is not None]
        given = ", ".join(flag for flag, _ in pairs)
        return f"{message} ({given} was given: {_did_you_mean(pairs)})" if pairs else message
    return message
