"""The layer contract covers every module (issue 36, item 5).

Invariants guarded:
- Every top-level module and package of ``q38/`` and ``contracts/`` is named in a layer of the
  import-linter layers contract (``pyproject.toml``), so ``lint-imports`` checks all of them: a
  new module outside every layer fails here.
- ``docs/architecture.md``'s layer table names the same modules as the contract.
- Every module and subpackage of ``q38/package/`` is in a layer of the package's own contract
  (v12b and genai independent of each other, file I/O at the bottom).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]


def _layer_modules(container: str = "") -> list[str]:
    config = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c["type"] == "layers" and c.get("containers", [""]) == [container])  # fmt: skip
    return [name.strip() for layer in contract["layers"] for name in re.split(r"[:|]", layer)]


def _top_level(package: str) -> set[str]:
    found = set()
    for path in (_ROOT / package).iterdir():
        if path.suffix == ".py" and path.stem != "__init__":
            found.add(f"{package}.{path.stem}")
        elif path.is_dir() and (path / "__init__.py").is_file():
            found.add(f"{package}.{path.name}")
    return found


def test_every_module_of_q38_and_contracts_is_in_a_layer() -> None:
    layered = _layer_modules()
    assert len(layered) == len(set(layered)), "a module named in two layers"
    covered = set(layered)
    missing = sorted(m for m in _top_level("q38") if m not in covered)
    assert not missing, f"modules in no layer of pyproject.toml's layers contract: {missing}"
    assert "contracts" in covered  # the whole contracts package is one layer


def test_the_architecture_doc_names_every_layered_module() -> None:
    doc = (_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc.split("## Layers", 1)[1].splitlines()
    table = "\n".join(line for line in section[: next(i for i, x in enumerate(section) if x.startswith("A second"))] if line.startswith("|"))
    named = set(re.findall(r"`([\w/.*]+)`", table))
    for module in _layer_modules():
        path = module.replace(".", "/")
        assert any(n.removesuffix(".py").rstrip("/*") == path for n in named), module


def test_every_module_of_the_package_layer_is_in_a_layer_of_its_own_contract() -> None:
    layered = _layer_modules("q38.package")
    assert len(layered) == len(set(layered)), "a module named in two layers"
    modules = {m.rsplit(".", 1)[-1] for m in _top_level("q38/package")}
    assert modules - set(layered) == set(), "q38/package modules in no layer of the q38.package contract"
    assert set(layered) - modules == set(), "layers naming no module of q38/package"
