"""Defer the import of sympy, which onnx-ir imports eagerly but q38 rarely needs.

onnx-ir 1.1 imports sympy at module level (``onnx_ir._core`` and ``onnx_ir._symbolic_shapes``,
for arithmetic on symbolic dims), and sympy's import costs more CPU than onnx's own (measured:
``import onnx_ir`` ~3x ``import onnx``), while ``q38 check`` of a package never does symbolic
dim arithmetic. :func:`defer_sympy` puts stand-ins for ``sympy`` and
``onnx_ir._symbolic_shapes`` in ``sys.modules``: ``import sympy`` then binds the stand-in, and
the real module is imported the first time one of its attributes is read (TensorFlow's
``LazyLoader`` pattern: a ``types.ModuleType`` whose ``__getattr__`` imports and then takes the
real module's namespace). Behaviour is unchanged -- a command that does need sympy pays for it
when it first uses it.

Only the CLI calls this (once per process, before a command's imports): a library importer of
q38 keeps Python's ordinary import semantics.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from typing import Final

__all__ = ["DEFERRED_MODULES", "DeferredModule", "defer_sympy"]

DEFERRED_MODULES: Final = ("sympy", "onnx_ir._symbolic_shapes")
"""What :func:`defer_sympy` defers: sympy, and the onnx-ir module that reads sympy's names at import."""


class DeferredModule(types.ModuleType):
    """Stands in ``sys.modules`` for a module until one of its attributes is first read.

    The stand-in carries the real module's spec (so ``import name`` finds it initialised and does
    not touch it); any other attribute imports the real module, copies its namespace into the
    stand-in (so names bound to the stand-in keep working at normal speed) and returns the value.
    """

    def __init__(self, spec: importlib.machinery.ModuleSpec) -> None:
        super().__init__(spec.name)
        self.__spec__ = spec
        self.__loader__ = spec.loader

    def __getattr__(self, attr: str) -> object:
        real = self._q38_load()
        return getattr(real, attr)

    def _q38_load(self) -> types.ModuleType:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]  # the import below runs the real module and registers it
        real = importlib.import_module(name)
        self.__dict__.update({k: v for k, v in real.__dict__.items() if k not in ("__spec__", "__loader__")})
        self.__dict__["__spec__"], self.__dict__["__loader__"] = real.__spec__, real.__loader__
        return real


def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of ``name`` without importing it (nor, for a submodule, its package).

    None when it cannot be found (not installed, or an import hook refuses it: the command's own
    import then reports the missing dependency).
    """
    parent = name.rpartition(".")[0]
    try:
        if not parent:
            return importlib.util.find_spec(name)
        package = importlib.util.find_spec(parent)
        if package is None or package.submodule_search_locations is None:
            return None
        return importlib.machinery.PathFinder.find_spec(name, list(package.submodule_search_locations))
    except (ImportError, ValueError):
        return None


def defer_sympy() -> tuple[str, ...]:
    """Put :class:`DeferredModule` stand-ins for :data:`DEFERRED_MODULES` in ``sys.modules``.

    Does nothing once onnx-ir or sympy is imported (their importers already hold the real
    modules) or where a module is not installed. Returns the names deferred.
    """
    if any(m in sys.modules for m in ("onnx_ir", *DEFERRED_MODULES)):
        return ()
    specs = [spec for spec in map(_spec, DEFERRED_MODULES) if spec is not None]
    if len(specs) != len(DEFERRED_MODULES):
        return ()
    for spec in specs:
        sys.modules[spec.name] = DeferredModule(spec)
    return DEFERRED_MODULES
