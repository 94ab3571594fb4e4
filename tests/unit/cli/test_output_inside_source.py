"""No command writes its output inside its source package, named directly or through a symlink.

Invariant: optimize, offload and export-genai refuse such an output with one line and exit 2,
and the source package is byte-identical (no new directory, no staging debris inside it).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from q38.cli import main


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("via_symlink", [False, True])
@pytest.mark.parametrize("command", ["optimize", "offload", "export-genai"])
def test_output_inside_the_source_is_refused(
    tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, via_symlink: bool
) -> None:
    src = tmp_path / "src"
    shutil.copytree(tiny_cpu_package, src, symlinks=True)
    before = _tree(src)
    base = src
    if via_symlink:
        (tmp_path / "alias").symlink_to(src)
        base = tmp_path / "alias"
    out = base / "out"
    argv = {
        "optimize": ["optimize", str(src), str(out)],
        "offload": ["offload", str(out), "--from-package", str(src)],
        "export-genai": ["export-genai", str(src), str(out)],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the output must not be inside the source package" in err[0]
    assert _tree(src) == before
