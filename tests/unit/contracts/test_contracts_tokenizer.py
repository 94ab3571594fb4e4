"""PKG-TOKENIZER-001 / -002: a builder package carries the files og.Tokenizer opens (issue 37.6).

A builder (genai-surface) package without ``tokenizer.json`` passed ``check``, and
onnxruntime-genai then failed on ``og.Tokenizer`` (``Invalid file: .../tokenizer.json``).
Guarded, against real onnxruntime-genai 0.18.0: the synthetic builder package's tokenizer loads
and the package checks clean; with either tokenizer file removed og.Tokenizer fails naming it and
``check`` fails (exit 1) naming it; with no tokenizer file at all (a token-ids package, what
``q38 export-genai`` writes) og.Tokenizer fails too, and check warns (exit 0); tokenizer files
moved below ``model.tokenizer_dir`` load and pass; q38's own v12b packages are not asked; a
missing ``package_manifest.json`` fails neither surface (deliberately, see the rule's docs).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.contracts_testkit import needs_fp16_gates

from contracts.catalogue import entry
from contracts.runner import check_package
from q38.cli import main

og: Any = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai 0.18.0 is a test dependency")
# The synthetic builder package (fp16 GatedDeltaNet gates) loads in og and passes check on 1.32.0 only.
pytestmark = needs_fp16_gates


@pytest.fixture
def package(tiny_builder_cpu_package: Path, tmp_path: Path) -> Iterator[Path]:
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_builder_cpu_package, pkg, symlinks=True)
    yield pkg


def _tokenizer_error(pkg: Path) -> str | None:
    """og.Tokenizer's refusal of the package (None when it loads and encodes)."""
    config = og.Config(str(pkg))
    config.clear_providers()
    try:
        tokenizer = og.Tokenizer(og.Model(config))
    except Exception as exc:
        return str(exc)
    assert len(tokenizer.encode("hello")) > 0
    return None


def _tokenizer_violations(pkg: Path) -> list[str]:
    return [v.message for v in check_package(pkg).violations if v.rule_id == "PKG-TOKENIZER-001"]


def test_a_builder_package_with_its_tokenizer_passes(package: Path) -> None:
    assert _tokenizer_error(package) is None
    assert _tokenizer_violations(package) == []


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_missing_tokenizer_file_fails_check_as_it_fails_og(
    package: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (package / name).unlink()
    error = _tokenizer_error(package)
    assert error is not None and name in error
    (message,) = _tokenizer_violations(package)
    assert message.startswith(f"{name}: missing")
    assert main(["check", str(package)]) == 1
    assert "PKG-TOKENIZER-001" in capsys.readouterr().out


def test_a_package_without_any_tokenizer_is_a_token_ids_package_check_warns_about(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (package / name).unlink()
    error = _tokenizer_error(package)
    assert error is not None and "tokenizer_config.json" in error
    report = check_package(package)
    (found,) = [v for v in report.violations if v.rule_id.startswith("PKG-TOKENIZER-")]
    assert (found.rule_id, found.severity) == ("PKG-TOKENIZER-002", "warning")
    assert report.ok and main(["check", str(package)]) == 0
    assert "PKG-TOKENIZER-002" in capsys.readouterr().out


def test_tokenizer_files_below_tokenizer_dir_are_where_og_looks(package: Path) -> None:
    (package / "tok").mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (package / name).rename(package / "tok" / name)
    found = [v.rule_id for v in check_package(package).violations]
    assert "PKG-TOKENIZER-002" in found  # not in the config's directory, and no tokenizer_dir names them
    doc = json.loads((package / "genai_config.json").read_text())
    doc["model"]["tokenizer_dir"] = "tok"
    (package / "genai_config.json").write_text(json.dumps(doc, indent=2))
    assert _tokenizer_error(package) is None
    assert _tokenizer_violations(package) == []
    (package / "tok" / "tokenizer.json").unlink()
    (message,) = _tokenizer_violations(package)
    assert message.startswith("tok/tokenizer.json: missing")


def test_v12b_packages_are_not_asked_and_no_surface_needs_a_manifest(
    tiny_cpu_package: Path, package: Path, tmp_path: Path
) -> None:
    v12b = tmp_path / "v12b"
    shutil.copytree(tiny_cpu_package, v12b, symlinks=True)
    assert not any(v12b.glob("tokenizer*.json"))
    (v12b / "package_manifest.json").unlink()
    assert check_package(v12b).ok
    assert not (package / "package_manifest.json").exists()  # the builder writes none
    assert check_package(package).ok
    assert "package_manifest.json is deliberately not required" in entry("PKG-TOKENIZER-001").explanation
