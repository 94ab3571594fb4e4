"""Reading a damaged package through the CLI: exit 2 and one line naming the file and problem.

One test per case of issue 2's acceptance: a truncated graph, a missing data file, a data
location `../outside.bin`, a malformed pool line, an unknown config key, a bad profile file.
`optimize` and `offload` refuse each with exit 2 and one line, and write nothing. `q38 check`
does the same for input it cannot read at all; damage that a contract rule covers (a missing or
escaping data file, an unknown config key) is reported as that rule's violation, exit 1.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from q38.cli import main


def _truncate_graph(pkg: Path) -> None:
    data = (pkg / "model.onnx").read_bytes()
    (pkg / "model.onnx").write_bytes(data[: len(data) // 3])


def _remove_data(pkg: Path) -> None:
    (pkg / "head_r2.onnx.data").unlink()


def _escape_location(pkg: Path) -> None:
    model = onnx.load(str(pkg / "head_r2.onnx"), load_external_data=False)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = "../outside.bin"
                break
        else:
            continue
        break
    (pkg / "head_r2.onnx").write_bytes(model.SerializeToString())
    shutil.copy(pkg / "head_r2.onnx.data", pkg.parent / "outside.bin")


def _bad_pool_line(pkg: Path) -> None:
    with open(pkg / "weights_pool.txt", "a", encoding="utf-8") as fh:
        fh.write("w9999 model.onnx.data 0 12 float16 2x2 somewhere\n")


def _unknown_config_key(pkg: Path) -> None:
    doc = json.loads((pkg / "genai_config.json").read_text())
    doc["model"]["decoder"]["surprise"] = 1
    (pkg / "genai_config.json").write_text(json.dumps(doc))


def _bad_profile(pkg: Path) -> None:
    doc = json.loads((pkg / "genai_config.json").read_text())
    doc["model"]["qwen38_graph"]["expert_profile"] = "expert-profile.bin"
    (pkg / "genai_config.json").write_text(json.dumps(doc))
    (pkg / "expert-profile.bin").write_bytes(b"STRX" + b"\0" * 12)


def _remove_pool(pkg: Path) -> None:
    (pkg / "weights_pool.txt").unlink()


def _config_a_directory(pkg: Path) -> None:
    (pkg / "genai_config.json").unlink()
    (pkg / "genai_config.json").mkdir()


CASES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "missing weights pool": (_remove_pool, "weights_pool.txt", "model.qwen38_graph.weights_pool: 'weights_pool.txt' does not exist"),
    "config a directory": (_config_a_directory, "genai_config.json", "config"),
    "truncated graph": (_truncate_graph, "model.onnx", "not a valid ONNX model (truncated or malformed protobuf)"),
    "missing data file": (_remove_data, "head_r2.onnx", "'head_r2.onnx.data' does not exist"),
    "escaping location": (_escape_location, "head_r2.onnx", "'../outside.bin' escapes the package directory"),
    "malformed pool line": (_bad_pool_line, "weights_pool.txt", "unknown placement 'somewhere'"),
    "unknown config key": (_unknown_config_key, "genai_config.json", "model.decoder.surprise: unknown key"),
    "bad profile": (_bad_profile, "expert-profile.bin", "bad magic b'STRX'"),
}


# Damage that `q38 check` reports as a violation of this rule (exit 1) rather than exit 2.
CHECK_RULES = {
    "missing data file": "PKG-",
    "escaping location": "PKG-",
    "unknown config key": "CFG-SURFACE-001",
    "missing weights pool": "PATH-FIELD-003",
}


@pytest.mark.parametrize("command", ["check", "optimize", "offload"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_damaged_package_is_one_line_exit_2(
    tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, command: str
) -> None:
    damage, filename, problem = CASES[case]
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    damage(pkg)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "out"
    argv = {
        "check": ["check", str(pkg)],
        "optimize": ["optimize", str(pkg), str(out)],
        "offload": ["offload", str(out), "--from-package", str(pkg), "--offload-mode", "auto"],
    }[command]
    if command == "check" and case in CHECK_RULES:
        assert main(argv) == 1
        rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(CHECK_RULES[case])]
        assert rows and any(filename in r and problem.split(": ")[0] in r for r in rows), rows
        return
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert filename in lines[0] and problem in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, no staging debris
