"""What a command imports before it works (issue 27, item 4). Times are benchmarked, not asserted here.

``nox -s bench`` measures ``q38 check`` of the tiny preset next to ``python -c "import onnx"``
(the floor: the contracts read graphs through onnx-ir, which needs onnx). These tests pin the
behaviour that keeps it there, each in a fresh interpreter:

- ``q38 check`` of a tiny package (no ``--ort``) exits 0 without importing sympy (onnx-ir imports
  it eagerly; :mod:`q38._deferred` defers it) or onnxruntime (its version is read from the
  installed distribution's metadata, :mod:`contracts._installed`);
- ``q38 check --ort`` still imports onnxruntime and opens sessions;
- a deferred sympy is the real sympy the first time it is used: onnx-ir's symbolic dim
  arithmetic works through the stand-in, and ``import sympy`` afterwards gives a working module;
- the installed version read from metadata is the one ``onnxruntime.__version__`` reports.
- that metadata is found under a ``.dist-info`` name spelling the module with ``_`` (any case),
  and the module is not imported to read it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contracts._installed import installed_version


def _child(code: str) -> Any:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


_CHECK = """
import contextlib, io, json, sys
from q38.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main({argv!r})
print(json.dumps({{"rc": rc, "out": out.getvalue(),
                  "loaded": sorted(m for m in ("sympy.core", "onnxruntime", "onnx_ir") if m in sys.modules)}}))
"""


def test_check_of_a_tiny_package_imports_neither_sympy_nor_onnxruntime(tiny_cpu_package: Path) -> None:
    got = _child(_CHECK.format(argv=["check", str(tiny_cpu_package)]))
    import onnxruntime

    assert got["rc"] == 0
    assert f": onnxruntime {onnxruntime.__version__}, " in got["out"]  # the version, read without importing it
    assert got["loaded"] == ["onnx_ir"]


@pytest.mark.slow
def test_check_with_ort_sessions_still_imports_onnxruntime(tiny_cpu_package: Path) -> None:
    got = _child(_CHECK.format(argv=["check", str(tiny_cpu_package), "--ort"]))
    assert got["rc"] == 0
    assert "sessions: 3 ok, 0 failed, 0 SKIPPED" in got["out"]
    assert "onnxruntime" in got["loaded"]


@pytest.mark.slow
def test_a_deferred_sympy_loads_when_onnx_ir_first_uses_it() -> None:
    got = _child("""
import json, sys
from q38._deferred import DeferredModule, defer_sympy
deferred = defer_sympy()
import onnx_ir as ir
before = "sympy.core" in sys.modules
stand_in = type(sys.modules["sympy"]).__name__
dim = ir.SymbolicDim("N") * 2 + 1
import sympy
expr = sympy.Max(sympy.Symbol("a"), 3)
print(json.dumps({"deferred": list(deferred), "before": before, "stand_in": stand_in, "dim": str(dim),
                  "after": "sympy.core" in sys.modules, "expr": str(expr), "again": list(defer_sympy())}))
""")
    assert got["deferred"] == ["sympy", "onnx_ir._symbolic_shapes"]
    assert (got["before"], got["stand_in"]) == (False, "DeferredModule")
    assert got["dim"] == "2*N + 1"
    assert got["after"] is True and got["expr"] == "Max(3, a)"
    assert got["again"] == []  # once onnx-ir is imported nothing is deferred


@pytest.mark.slow
def test_nothing_is_deferred_once_onnx_ir_is_imported() -> None:
    got = _child("""
import json, sys
import onnx_ir
from q38._deferred import defer_sympy
print(json.dumps({"deferred": list(defer_sympy()), "type": type(sys.modules["sympy"]).__name__}))
""")
    assert got == {"deferred": [], "type": "module"}


def test_the_installed_version_is_the_one_onnxruntime_reports() -> None:
    import onnxruntime

    assert installed_version("onnxruntime") == onnxruntime.__version__
    assert installed_version("q38_no_such_module") is None


def test_the_version_is_read_without_importing_onnxruntime() -> None:
    got = _child("""
import json, sys
from contracts._installed import installed_version
print(json.dumps({"version": installed_version(), "loaded": "onnxruntime" in sys.modules}))
""")
    import onnxruntime

    assert got == {"version": onnxruntime.__version__, "loaded": False}
