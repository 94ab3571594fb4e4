"""contracts._installed: the installed onnxruntime's version, without importing it.

Invariants guarded:
- A module already imported answers with its own ``__version__``: no distribution's metadata is
  read (the loaded module is the one whose version matters, even where a ``.dist-info`` beside it
  says otherwise); one not imported is answered from the ``.dist-info`` that installed it, and it
  stays unimported; one no ``.dist-info`` names is imported and answers with its ``__version__``.
  A module neither importable nor imported is None.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

from contracts._installed import installed_version

_MODULE = "q38probe_loaded"


def _installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist: str = _MODULE) -> None:
    """``_MODULE`` importable from ``tmp_path``, installed by a distribution ``dist`` of version 1.2.3."""
    (tmp_path / _MODULE).mkdir()
    (tmp_path / _MODULE / "__init__.py").write_text('__version__ = "9.9.9-imported"\n')
    info = tmp_path / f"{dist}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "RECORD").write_text(f"{_MODULE}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()


@pytest.mark.parametrize("dist", [_MODULE, "Q38Probe_Loaded"])
def test_a_module_not_yet_imported_is_answered_from_its_dist_info(
        dist: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The ``.dist-info`` spells the name with ``_`` (the normalised form wheels write; any case)."""
    _installed(tmp_path, monkeypatch, dist)
    assert _MODULE not in sys.modules
    try:
        assert installed_version(_MODULE) == "1.2.3"
        assert _MODULE not in sys.modules
    finally:
        sys.modules.pop(_MODULE, None)


def test_an_imported_module_is_answered_from_its_own_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(tmp_path, monkeypatch)
    loaded = types.ModuleType(_MODULE)
    loaded.__version__ = "7.7.7"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, _MODULE, loaded)
    assert installed_version(_MODULE) == "7.7.7"
    unversioned = types.ModuleType("q38probe_unversioned")
    monkeypatch.setitem(sys.modules, "q38probe_unversioned", unversioned)
    assert installed_version("q38probe_unversioned") is None


def test_a_module_neither_importable_nor_imported_has_no_version() -> None:
    assert installed_version("q38_no_such_module") is None


def test_a_module_without_a_dist_info_is_answered_by_importing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """No ``.dist-info`` names the module (a source checkout on the path): its own ``__version__`` answers."""
    (tmp_path / _MODULE).mkdir()
    (tmp_path / _MODULE / "__init__.py").write_text('__version__ = "4.5.6"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        assert installed_version(_MODULE) == "4.5.6"
    finally:
        sys.modules.pop(_MODULE, None)
