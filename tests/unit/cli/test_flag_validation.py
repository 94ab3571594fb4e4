"""Flags are read exactly as written: known versions only, sizes with units, no prefixes, "did you mean".

Issue 37 item 1: ``check --ort-version banana`` judged a package by 61 rules of no release;
``--form json`` was taken as ``--format json`` (argparse prefix matching); ``--fromat json`` and
``offload o --from-pakage SRC`` named no suggestion. Each refusal is one line, exit 2.
"""

from __future__ import annotations

import pytest

from q38.cli import build_parser, main

KNOWN = "(known: 1.31.1, 1.32.0)"


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    assert exited.value.code == 2
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    return captured.err.rstrip("\n")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["check", "PKG", "--ort-version"], "--ort-version"),
        (["optimize", "SRC", "OUT", "--target-ort"], "--target-ort"),
        (["synth", "OUT", "--target-ort"], "--target-ort"),
    ],
)
@pytest.mark.parametrize("version", ["banana", "9.9.9", "1.30.0"])
def test_a_version_flag_takes_only_a_release_q38_has_facts_for(
    argv: list[str], flag: str, version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    command = argv[0]
    assert _refusal([*argv, version], capsys) == (
        f"q38 {command}: error: {flag} {version}: unknown onnxruntime version {KNOWN}")


@pytest.mark.parametrize("version", ["1.31.1", "1.32.0"])
def test_the_known_releases_are_read(version: str) -> None:
    parser = build_parser()
    assert parser.parse_args(["check", "PKG", "--ort-version", version]).ort_version == version
    assert parser.parse_args(["optimize", "S", "O", "--target-ort", version]).target_ort == version
    assert parser.parse_args(["synth", "O", "--target-ort", version]).target_ort == version


@pytest.mark.parametrize(
    ("value", "size"),
    [("8GiB", 8 << 30), ("512MiB", 512 << 20), ("2GB", 2 * 10**9), ("4096B", 4096), ("1000000", 1000000)],
)
@pytest.mark.parametrize("flag", ["--device-expert-bytes", "--host-expert-bytes"])
def test_offload_budgets_take_a_unit_or_the_documented_byte_count(flag: str, value: str, size: int) -> None:
    args = build_parser().parse_args(["offload", "OUT", "--from-package", "SRC", flag, value])
    assert getattr(args, flag[2:].replace("-", "_")) == size


def test_an_offload_budget_with_an_unknown_unit_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert _refusal(["offload", "OUT", "--from-package", "SRC", "--device-expert-bytes", "8GiX"], capsys) == (
        "q38 offload: error: argument --device-expert-bytes: expected a size with a unit (24GiB, 24GB, 512MiB or "
        "4096B); without a unit, expected a non-negative decimal integer, got '8GiX'")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # a prefix of a flag is no longer that flag
        (["check", "PKG", "--form", "json"],
         "q38 check: error: unrecognized arguments: --form json (did you mean --format?)"),
        (["check", "PKG", "--fromat", "json"],
         "q38 check: error: unrecognized arguments: --fromat json (did you mean --format?)"),
        (["check", "PKG", "--ort-versoin", "1.32.0", "--selcet", "X"],
         ("q38 check: error: unrecognized arguments: --ort-versoin 1.32.0 --selcet X "
         "(did you mean --ort-version for --ort-versoin, --select for --selcet?)")),
        (["offload", "o", "--from-pakage", "SRC"],
         ("q38 offload: error: the following arguments are required: --from-package "
         "(--from-pakage was given: did you mean --from-package?)")),
        (["chek", "PKG"],
         ("q38: error: argument COMMAND: invalid choice: 'chek' (did you mean 'check'?) (choose from 'synth', "
         "'build', 'optimize', 'offload', 'profile', 'fit', 'check', 'rules', 'explain', 'export-genai', 'diff', "
         "'demo')")),
        (["check", "PKG", "--format", "jsno"],
         ("q38 check: error: argument --format: invalid choice: 'jsno' (did you mean 'json'?) "
         "(choose from 'text', 'json', 'sarif', 'github', 'junit')")),
        (["check", "PKG", "--zzz"], "q38 check: error: unrecognized arguments: --zzz"),
        (["--vers"], "q38: error: the following arguments are required: COMMAND (--vers was given: did you mean --version?)"),
    ],
)
def test_a_mistyped_flag_or_command_names_the_closest_known_one(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _refusal(argv, capsys) == expected


def test_no_parser_matches_prefixes() -> None:
    parser = build_parser()
    parsers = [parser, *parser.commands.values()]  # type: ignore[attr-defined]
    assert all(p.allow_abbrev is False for p in parsers)
    # a whole flag and the repeated short flags still parse
    args = parser.parse_args(["check", "PKG", "--format", "json", "-vv"])
    assert args.output_format == "json" and args.verbose == 2
