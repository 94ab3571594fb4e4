"""One root-cause error per missing or unreadable file (issue 37.3).

Deleting ``model.onnx.data`` from a package made ``check`` report 623 errors: the graph reader's
refusal of each graph that keeps data there, and the layout rule and ORT's loader rule once per
initializer. Guarded here: the check reports the file once, names it, which graphs refer to it
and how many dependent violations (of which rules) it stands for; every output format shows that
one error with the same count; the exit code stays 1; two missing files are two errors; a file
named by a single violation is left as it is; a file name that is the prefix of another
(``model.onnx`` / ``model.onnx.data``) does not capture the other's violations.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from contracts._rule import Violation
from contracts.root_cause import FileFault, fold_file_faults
from contracts.runner import check_package
from q38.cli import main


@pytest.fixture
def package(tiny_cpu_package: Path, tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    return pkg


def test_a_deleted_data_file_is_one_error_that_counts_what_it_folds(package: Path) -> None:
    (package / "model.onnx.data").unlink()
    report = check_package(package)
    assert len(report.errors) == 1, [(v.rule_id, v.message[:80]) for v in report.errors]
    (root,) = report.errors
    # every graph that keeps data there, then the file
    assert root.message.startswith("model.onnx (target), head_r2.onnx (head), prefill.onnx (prefill): "
                                   "external data 'model.onnx.data' does not exist (")  # fmt: skip
    counts = dict(re.findall(r"([A-Z][A-Z0-9-]+-\d{3}) x(\d+)", root.message))
    assert set(counts) == {"PKG-GRAPH-001", "PKG-EXTDATA-001", "ORT-MODEL-004"}
    assert int(counts["PKG-GRAPH-001"]) == 3  # one per graph
    assert root.folded == sum(int(n) for n in counts.values()) > 300
    assert f"{root.folded} dependent violation(s)" in root.message
    assert root.to_dict()["folded"] == root.folded


def test_two_missing_files_are_two_errors_and_a_lone_violation_is_kept(package: Path) -> None:
    (package / "model.onnx.data").unlink()
    (package / "head_r2.onnx.data").unlink()
    (package / "weights_pool.txt").unlink()
    errors = check_package(package).errors
    assert [v.message.split(" does not exist")[0].rsplit(" ", 1)[1] for v in errors if v.folded] == [
        "'model.onnx.data'", "'head_r2.onnx.data'"]  # fmt: skip
    (pool,) = [v for v in errors if not v.folded]  # one violation names the pool: nothing to fold
    assert pool.rule_id == "PATH-FIELD-003" and "'weights_pool.txt' does not exist" in pool.message
    assert len(errors) == 3


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github", "junit"])
def test_every_format_reports_the_one_root_cause(package: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    (package / "model.onnx.data").unlink()
    assert main(["check", str(package), "--format", fmt]) == 1
    out = capsys.readouterr().out
    assert out.count("external data 'model.onnx.data' does not exist") == 1, out[-2000:]
    assert "ORT-MODEL-004 x" in out and "External data path validation failed" not in out
    if fmt == "text":
        assert "FAIL: 1 error(s)" in out
    elif fmt == "json":
        (v,) = json.loads(out)["violations"]
        assert v["folded"] > 300
    elif fmt == "sarif":
        (result,) = json.loads(out)["runs"][0]["results"]
        assert result["properties"]["folded"] > 300
    elif fmt == "github":
        assert [line for line in out.splitlines() if line.startswith("::error")] == [out.strip()]
    else:
        assert out.count("<failure ") == 1


def test_a_file_name_does_not_claim_a_longer_name_it_is_the_prefix_of() -> None:
    fault = FileFault("model.onnx", ("model.onnx", "/p/model.onnx"), "does not exist")
    assert not fault.named_in("initializer 'w' external data location 'model.onnx.data' does not exist")
    assert not fault.named_in('path does not exist: "/p/model.onnx.data"')
    assert not fault.named_in("sub/model.onnx: bad")
    assert fault.named_in("model.decoder.filename: 'model.onnx' does not exist")
    found = [Violation("PATH-FIELD-003", "model.decoder.filename: 'model.onnx' does not exist"),
             Violation("PKG-EXTDATA-001", "initializer 'w' external data location 'model.onnx.data' does not exist"),
             Violation("PATH-FIELD-003", "model.qwen38_graph.target.filename: 'model.onnx' does not exist")]  # fmt: skip
    folded = fold_file_faults(found, [fault])
    assert [(v.rule_id, v.folded) for v in folded] == [("PATH-FIELD-003", 1), ("PKG-EXTDATA-001", 0)]
    assert folded[0].message.startswith("model.decoder.filename: 'model.onnx' does not exist")
