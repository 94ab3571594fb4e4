"""Genai-surface packages for tests: the committed builder fixtures and their broken copies.

``real_package_dirs()`` lists every package under ``tests/fixtures/real/`` (exports of the
released onnxruntime-genai 0.18.0 builder) plus the directories named by ``Q38_REAL_EXPORTS``
(``os.pathsep``-separated roots of more exports, e.g. other checkpoints). ``copy_package`` makes
a private, writable copy; ``edit_genai_config`` rewrites its config the way a user would.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["FIXTURES", "builder_packages", "copy_package", "edit_genai_config", "real_package_dirs"]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def real_package_dirs() -> list[Path]:
    roots = [FIXTURES, *(Path(p) for p in os.environ.get("Q38_REAL_EXPORTS", "").split(os.pathsep) if p)]
    found: list[Path] = []
    for root in roots:
        if root.is_dir():
            found.extend(sorted(p.parent for p in root.rglob("genai_config.json")))
    return found


def copy_package(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def edit_genai_config(pkg: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = pkg / "genai_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=4, ensure_ascii=False), encoding="utf-8")


def builder_packages(base: Path, v12b_cpu_package: Path) -> list[Path]:
    """Every genai package a test can have: the real ones, ``q38 export-genai`` of a synthetic cpu
    package, and ``q38 synth --exporter builder`` (cpu and faithful variants) under ``base``."""
    from q38.cli import main
    from q38.synth import synthesize

    exported = base / "exported"
    assert main(["export-genai", str(v12b_cpu_package), str(exported), "--link", "copy"]) == 0
    synth = [synthesize(base / f"builder-{v}", preset="tiny", variant=v, exporter="builder") for v in ("cpu", "faithful")]
    return [*real_package_dirs(), exported, *synth]
