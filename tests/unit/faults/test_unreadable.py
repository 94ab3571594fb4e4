"""PKG-READ-001: ``check`` finds every file a session would open that the user cannot read (issue 24.4).

ORT opens the graph, each external-data file and each custom-op library when a session is
created; one the current user cannot read fails that load. The rule is an access check
(``os.access``), no byte read. Root reads everything, so when the suite runs as root the check
runs in a forked child that has dropped to ``nobody`` (every import done before the fork: the
interpreter's own files may be unreadable to ``nobody``); otherwise in-process after a chmod.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.as_nobody import as_nobody, nobody_can_read

import contracts
from contracts.runner import check_package
from q38.errors import Q38Error


@pytest.fixture
def package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from q38.synth import synthesize

    src = synthesize(tmp_path_factory.mktemp("unreadable") / "pkg", preset="tiny", variant="cpu", seed=0)
    # A world-traversable copy (pytest's own temporary root is private to its owner).
    top = Path(tempfile.mkdtemp(prefix="q38-unreadable-", dir="/tmp"))
    try:
        top.chmod(0o755)
        pkg = top / "pkg"
        shutil.copytree(src, pkg, symlinks=True)
        for dirpath, dirnames, filenames in os.walk(pkg):
            for name in dirnames:
                os.chmod(Path(dirpath) / name, 0o755)
            for name in filenames:
                if not os.path.islink(Path(dirpath) / name):
                    os.chmod(Path(dirpath) / name, 0o644)
        yield pkg
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _violations(pkg: Path) -> list[tuple[str, str, str]]:
    """check_package's violations as the current user, or as ``nobody`` when that is root."""
    if os.geteuid() != 0:
        return [(v.rule_id, v.message, v.graph) for v in check_package(pkg).violations]
    check_package(pkg)  # every lazy import done here, before the fork
    schemas = Path(contracts.__file__).parent / "schemas"
    if not nobody_can_read(schemas):  # a checkout under a private (0700) folder: nobody cannot read the schemas
        pytest.skip(f"nobody cannot read {schemas}: the checkout's folders are private")

    def run() -> object:
        try:
            return [(v.rule_id, v.message, v.graph) for v in check_package(pkg).violations]
        except Q38Error as exc:
            return {"error": str(exc)}

    result = as_nobody(run)
    if isinstance(result, dict):
        raise Q38Error(result["error"])
    assert isinstance(result, list), result
    return [tuple(v) for v in result]  # type: ignore[misc]


@pytest.mark.parametrize(("rel", "what", "graph"), [
    ("model.onnx.data", "external data of", "target"),
    ("head_r2.onnx.data", "external data of", "head"),
])  # fmt: skip
def test_a_file_the_session_opens_that_the_user_cannot_read_fails_check(package: Path, rel: str, what: str, graph: str) -> None:
    assert [v for v in _violations(package) if v[0] == "PKG-READ-001"] == []
    (package / rel).chmod(0o200 if os.geteuid() != 0 else 0o600)  # root's 0o600: unreadable to nobody
    found = [v for v in _violations(package) if v[0] == "PKG-READ-001"]
    assert len(found) == 1, found
    _, message, where = found[0]
    assert message.startswith(f"{rel}: {what}") and "not readable by the current user" in message
    assert where == graph
    (package / rel).chmod(0o644)
    assert [v for v in _violations(package) if v[0] == "PKG-READ-001"] == []


def test_an_unreadable_graph_is_one_error_naming_it(package: Path) -> None:
    (package / "model.onnx").chmod(0o200 if os.geteuid() != 0 else 0o600)
    with pytest.raises(Q38Error, match=r"model\.onnx: permission denied"):
        _violations(package)
