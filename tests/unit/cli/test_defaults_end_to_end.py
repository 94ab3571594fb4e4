"""The defaults fit together: synth -> optimize -> export-genai -> generate, no option given.

Invariant guarded: a newcomer who types only the positional arguments gets a cpu package, an
optimized package for the runtime it can run (cpu), an onnxruntime-genai 0.18.0 model
directory, and generated tokens - each command exit 0, the tokens those of the unoptimized
package's export (the optimization keeps the model's numerics).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from q38.cli import main


def _tokens(capsys: pytest.CaptureFixture[str]) -> list[int]:
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("tokens: "))
    return [int(t) for t in line.split()[1:]]


@pytest.mark.slow
def test_synth_optimize_export_generate_with_every_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg, opt, exp, ref = (tmp_path / n for n in ("pkg", "opt", "exp", "ref"))
    assert main(["synth", str(pkg)]) == 0
    assert main(["optimize", str(pkg), str(opt)]) == 0
    summary = capsys.readouterr().out
    assert "(target cpu: the package is the cpu variant)" in summary
    assert main(["export-genai", str(opt), str(exp), "--generate", "6"]) == 0
    tokens = _tokens(capsys)
    assert len(tokens) == 6
    config = json.loads((exp / "genai_config.json").read_text())
    assert config["model"]["type"] == "qwen3_5_moe_text"
    assert main(["export-genai", str(pkg), str(ref), "--generate", "6"]) == 0
    assert _tokens(capsys) == tokens
