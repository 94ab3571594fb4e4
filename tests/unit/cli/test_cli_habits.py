"""CLI habits: defaults in --help, comma lists, global -v/-q, logging levels, error prefixes.

Invariants guarded:
* every option of every command whose default informs shows it in ``--help`` (``default``),
  and every option and positional has a help text;
* list options are comma lists: ``--passes a,b SRC OUT`` leaves SRC and OUT positional;
* ``-v`` / ``-q`` are accepted before and after the subcommand, and add up;
* ``optimize -v`` logs at least one INFO line per pass and graph and no DEBUG line; ``-vv`` adds
  q38 DEBUG lines and no third-party logger's; ``-vvv`` lets third-party debug through;
* argparse errors of a subcommand are prefixed by the subcommand (``q38 synth: error:``);
* ``export-genai`` refuses ``--prompt`` without ``--generate`` and writes nothing when
  generation fails; ``check --require-sessions`` needs ``--ort``;
* ``optimize`` without ``--target`` picks what the package runs, and says so.
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
from pathlib import Path

import pytest

from q38.cli import build_parser, configure_logging, main, verbosity
from q38.commands._options import HelpFormatter
from q38.commands.optimize import PASSES_HELP


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    return dict(build_parser().commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_every_help_states_defaults_and_every_option_is_explained(command: str) -> None:
    parser = _subparsers()[command]
    fmt = HelpFormatter(prog="q38")
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        name = action.option_strings or [action.dest]
        assert action.help, f"q38 {command} {name[0]}: no help text"
        text = fmt._get_help_string(action) or ""
        default = action.default
        trivial = default is None or default is False or default == [] or isinstance(action, argparse._CountAction)
        if action.option_strings and not trivial:
            assert "default" in text.lower(), f"q38 {command} {name[0]}: default {default!r} not in {text!r}"
        if action.option_strings and default is None and not isinstance(action, argparse._StoreTrueAction):
            assert "default" in text.lower() or "required" in text, f"q38 {command} {name[0]}: what happens without it?"
        if isinstance(action, argparse._CountAction):  # -v / -q: a count is not a default worth stating
            assert "default" not in text


def test_optimize_help_lists_the_real_pass_names() -> None:
    from q38.optimize.pipeline import PASS_NAMES

    assert ", ".join(PASS_NAMES) == PASSES_HELP


def test_verbosity_counts_flags_before_and_after_the_subcommand() -> None:
    parser = build_parser()
    assert verbosity(parser.parse_args(["-v", "diff", "a", "b"])) == 1
    assert verbosity(parser.parse_args(["diff", "a", "b", "-vv"])) == 2
    assert verbosity(parser.parse_args(["-v", "diff", "-v", "a", "b", "-v"])) == 3
    assert verbosity(parser.parse_args(["-q", "diff", "a", "b"])) == -1
    assert verbosity(parser.parse_args(["-v", "diff", "a", "b", "-q"])) == 0


def test_logging_levels_keep_third_party_loggers_quiet_until_vvv() -> None:
    try:
        configure_logging(2)
        assert logging.getLogger("q38.optimize").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("contracts.runner").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("onnx_ir.serde").isEnabledFor(logging.INFO)
        configure_logging(3)
        assert logging.getLogger("onnx_ir.serde").isEnabledFor(logging.DEBUG)
        configure_logging(-1)
        assert not logging.getLogger("q38").isEnabledFor(logging.WARNING)
        configure_logging(0)
        assert logging.getLogger("q38").isEnabledFor(logging.WARNING)
        assert not logging.getLogger("q38").isEnabledFor(logging.INFO)
    finally:
        configure_logging(0)


def test_optimize_v_logs_each_pass_and_graph_at_info_and_no_debug(
    tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from q38.optimize.pipeline import PASS_NAMES

    assert main(["-v", "optimize", str(tiny_cpu_package), str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert not [line for line in err if line.startswith("DEBUG")]
    graphs = {"qwen38_flash_target", "qwen38_flash_head_r2", "qwen38_flash_prefill"}
    for name in PASS_NAMES:
        for graph in graphs:
            assert any(re.match(rf"INFO q38\.\S+: pass {name} on graph {graph}: \d+ rewrite", line) for line in err), (name, graph)
    assert any(line.startswith("INFO q38.package.v12b.package: reading package ") for line in err)
    assert any(line.startswith("INFO q38.package.v12b.package: placed ") for line in err)
    assert any(line.startswith("INFO q38.package.graphs: reading graph ") for line in err)
    assert main(["optimize", str(tiny_cpu_package), str(tmp_path / "out2"), "-vv"]) == 0
    err = capsys.readouterr().err.splitlines()
    debug = [line for line in err if line.startswith("DEBUG")]
    assert debug and all(line.startswith("DEBUG q38.") for line in debug)
    configure_logging(0)


def test_comma_lists_leave_the_positionals_alone(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["optimize", "--passes", "shared_expert,causal_conv_state", str(tiny_cpu_package), str(out)]) == 0
    summary = capsys.readouterr().out
    assert "shared_expert=17" in summary and "causal_conv_state=12" in summary
    assert "rms_norm_rotary" not in summary and out.is_dir()
    assert main(["optimize", "--skip", "shared_expert", "--skip", "fp8_head", str(tiny_cpu_package), str(tmp_path / "o2")]) == 0
    assert "shared_expert" not in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["optimize", "--passes", "a,,b", str(tiny_cpu_package), str(tmp_path / "o3")])
    assert info.value.code == 2
    assert "q38 optimize: error: argument --passes: expected a comma-separated list, got 'a,,b'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["synth", "x", "--bogus"], "q38 synth: error: unrecognized arguments: --bogus"),
        (["optimize", "a", "b", "c"], "q38 optimize: error: unrecognized arguments: c"),
        (["check"], "q38 check: error: the following arguments are required: PKG"),
        (["bogus"], "q38: error: argument COMMAND: invalid choice: 'bogus'"),
    ],
)
def test_errors_name_the_subcommand(args: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and err.startswith(expected), err


def test_check_require_sessions_needs_ort(tiny_cpu_package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tiny_cpu_package), "--require-sessions"]) == 2
    assert capsys.readouterr().err == "q38 check: error: --require-sessions needs --ort (no session is created without it)\n"


def test_export_genai_refuses_prompt_without_generate(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["export-genai", str(tiny_cpu_package), str(out), "--prompt", "1,2"]) == 2
    assert capsys.readouterr().err == (
        "q38 export-genai: error: --prompt is only used with --generate N (nothing would be generated)\n"
    )
    assert not out.exists()


def test_export_genai_writes_nothing_when_generation_fails(
    tiny_cpu_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import q38.export_genai
    from q38.errors import ExportError

    def fail(model_dir: Path, prompt: list[int], n: int) -> list[int]:
        assert (Path(model_dir) / "genai_config.json").is_file()  # generation runs on the export
        raise ExportError(f"{model_dir}: generation failed (injected)")

    monkeypatch.setattr(q38.export_genai, "generate_tokens", fail)
    out = tmp_path / "out"
    assert main(["export-genai", str(tiny_cpu_package), str(out), "--generate", "4"]) == 2
    assert "generation failed (injected)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no OUT, no staging debris


@pytest.mark.parametrize(("fixture", "target", "why"), [
    ("tiny_cpu_package", "cpu", "the package is the cpu variant"),
    ("tiny_faithful_package", "cuda", "the package is the faithful variant with a CUDA provider"),
])
def test_optimize_target_defaults_to_what_the_package_runs(
    fixture: str, target: str, why: str, tmp_path: Path, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = request.getfixturevalue(fixture)
    assert main(["optimize", str(src), str(tmp_path / "out")]) == 0
    assert f"(target {target}: {why})" in capsys.readouterr().out
    if target == "cpu":  # a cpu package whose config names no CUDA provider is cpu too
        pkg = tmp_path / "pkg"
        shutil.copytree(src, pkg, symlinks=True)
        assert main(["optimize", str(pkg), str(tmp_path / "o2"), "--json"]) == 0
        assert '"target": "cpu"' in capsys.readouterr().out


def test_the_readme_command_table_lists_every_flag() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Commands"):readme.index("## Package format")]
    common = {"-h", "--help", "-v", "--verbose", "-q", "--quiet", "--json"}
    for command, parser in _subparsers().items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `q38 {command}"))
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            longest = max(action.option_strings, key=len, default=None)
            if longest and longest not in common:
                assert any(f"{lead}{longest}" in row for lead in ("`", " ", "[")), f"README: q38 {command} row lacks {longest}"
    assert "`--lib-NAME PATH`" in table
