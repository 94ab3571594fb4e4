"""The q38 command line: help without dependencies, one-line errors, exit codes.

Invariants: `q38 --help` and `q38 CMD --help` work where only the standard library imports
(onnx, onnx_ir, numpy, onnxruntime hidden); every user error is one stderr line and exit 2,
never a traceback; `python -m q38` is the same program.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from q38.cli import build_parser

REPO = Path(__file__).resolve().parents[3]

# A sitecustomize that makes the heavy dependencies unimportable, as on a bare machine.
_HIDE = textwrap.dedent(
    """
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"onnx", "onnx_ir", "numpy", "onnxruntime", "ml_dtypes", "onnxscript"}:
                raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
            return None
    sys.meta_path.insert(0, _Block())
    """
)


def _run(args: list[str], *, hide: bool = False, tmp_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    if hide:
        assert tmp_path is not None
        (tmp_path / "sitecustomize.py").write_text(_HIDE)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    return subprocess.run([sys.executable, "-m", "q38", *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def _commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)  # type: ignore[attr-defined]


def test_help_works_with_only_the_standard_library(tmp_path: Path) -> None:
    proc = _run(["--help"], hide=True, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "usage: q38" in proc.stdout
    for command in _commands():
        assert command in proc.stdout
    probe = _run(["synth", "--help"], hide=True, tmp_path=tmp_path)
    assert probe.returncode == 0, probe.stderr
    hidden = subprocess.run(
        [sys.executable, "-c", "import numpy"],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert hidden.returncode != 0 and "hidden by the test" in hidden.stderr


@pytest.mark.parametrize("command", _commands())
def test_every_subcommand_help_works_without_dependencies(tmp_path: Path, command: str) -> None:
    proc = _run([command, "--help"], hide=True, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"usage: q38 {command}" in proc.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
        (["synth"], "the following arguments are required"),
        (["synth", "OUT", "--preset", "huge"], "invalid choice: 'huge'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    proc = _run(args)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("usage:") and line.strip() and not line.startswith(" ")]
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr


def test_missing_dependency_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    proc = _run(["synth", str(tmp_path / "out")], hide=True, tmp_path=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "missing dependency" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("module", "text"),
    [
        ("onnxruntime_genai", "missing dependency 'onnxruntime_genai'; install it with q38's 'genai' extra (pip install '.[genai]')"),
        ("onnxruntime.capi", "missing dependency 'onnxruntime.capi'; install it with q38's 'cpu' extra (pip install '.[cpu]')"),
        ("onnx_ir", "missing dependency 'onnx_ir'; install q38 with its dependencies (pip install .)"),
    ],
)
def test_missing_dependency_names_the_extra_that_installs_it(module: str, text: str) -> None:
    import tomllib

    from q38.cli import OPTIONAL_EXTRAS, missing_dependency_text

    assert missing_dependency_text(module) == text
    extras = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, extra in OPTIONAL_EXTRAS.items():  # each named extra exists and installs that module's distribution
        assert any(req.replace("-", "_").startswith(name) for req in extras[extra]), (name, extras[extra])
