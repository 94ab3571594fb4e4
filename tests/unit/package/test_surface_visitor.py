"""A capability's per-surface behaviour is a ``SurfaceVisitor``: ``visit`` picks the method from the
opened package's type (v12b, genai), and any other surface gets ``other``."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import stub_surface

from q38.package import AnyPackage, GenaiPackage, SurfaceVisitor, V12bPackage, open_any, visit


class _Names(SurfaceVisitor[str]):
    def v12b(self, package: V12bPackage) -> str:
        return f"v12b:{package.package.layout}"

    def genai(self, package: GenaiPackage) -> str:
        return f"genai:{package.config.model.type}"

    def other(self, package: AnyPackage) -> str:
        return f"other:{package.surface}"


class _OnlyOther(SurfaceVisitor[str]):
    def other(self, package: AnyPackage) -> str:
        return f"other:{package.surface}"


def test_visit_calls_the_method_of_the_package_surface(tiny_cpu_package: Path, tiny_builder_cpu_package: Path) -> None:
    assert visit(open_any(tiny_cpu_package), _Names()) == "v12b:flat"
    genai = open_any(tiny_builder_cpu_package)
    assert isinstance(genai, GenaiPackage)
    assert visit(genai, _Names()) == f"genai:{genai.config.model.type}"


def test_a_surface_without_its_own_method_gets_other(tiny_cpu_package: Path, tiny_builder_cpu_package: Path,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert visit(open_any(tiny_cpu_package), _OnlyOther()) == "other:v12b"
    assert visit(open_any(tiny_builder_cpu_package), _OnlyOther()) == "other:genai"
    stub_surface.install(monkeypatch)
    stub = stub_surface.write_stub_package(tiny_builder_cpu_package, tmp_path / "stub")
    assert visit(open_any(stub), _Names()) == "other:stub"


def test_a_visitor_without_other_names_itself_and_the_surface(tiny_cpu_package: Path) -> None:
    class _NoDefault(SurfaceVisitor[str]):
        pass

    with pytest.raises(NotImplementedError, match="_NoDefault has no plan for a v12b package"):
        visit(open_any(tiny_cpu_package), _NoDefault())
