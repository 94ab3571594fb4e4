"""pytest plugin for mutmut runs (loaded by ``tests/mutation/mutate.py``): import-time code counts.

mutmut maps each mutated function to the tests that called it during its stats run, and judges a
mutant with those tests only. A function called while a module is imported -- a rule factory
such as ``contracts.schema_rules._rules`` building ``RULES`` -- is hit before any test starts,
and mutmut credits that hit to whichever test happens to run first: its mutants were judged by
one unrelated test. This plugin imports every module of the mutated package once the tests are
collected (so all import-time calls happen then, not inside some test), takes those hits away
from the first test and credits them to every selected test: a mutant of import-time code is
judged by the whole selection, as it changes what every test sees.

Caches filled on first use are the same case: ``contracts.schema_registry`` builds each version's
registry once (``functools.cache``) and parses each op's schemas and CPU kernel rows once per
registry, inside whichever test resolves them first -- mutmut credited ``Registry.__init__`` to
2 of 1,144 tests, so its mutants were judged by tests that read no kernel. :data:`WARM_UPS` fills
such caches right after the imports, so their hits are credited to every test too.

It does nothing outside mutmut's stats run (``Q38_MUTATE_PACKAGE`` names the package).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from typing import Any

_KEY = "q38_import_time_hits"


def _stats_state() -> Any | None:
    try:
        from mutmut.mutation.trampoline import get_mutant_under_test
        from mutmut.state import state
    except ImportError:
        return None
    return state() if get_mutant_under_test() == "stats" else None


def _import_all(package: str) -> None:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(getattr(root, "__path__", []), prefix=f"{package}."):
        importlib.import_module(info.name)


def _warm_contracts() -> None:
    """Every committed registry, every op's schemas and CPU kernel rows (0.2 s)."""
    from contracts.schema_registry import available_versions, registry_for

    for version in available_versions():
        registry = registry_for(version)
        for domain, name in list(registry._lines):
            registry.schemas(domain, name)
            registry.cpu_kernels(domain, name)


# Package -> what fills its lazily built, process-wide caches (run after the imports).
WARM_UPS: dict[str, Callable[[], None]] = {"contracts": _warm_contracts}


def pytest_collection_finish(session: Any) -> None:
    package = os.environ.get("Q38_MUTATE_PACKAGE", "").replace("/", ".")
    state = _stats_state()
    if state is None or not package:
        return
    _import_all(package)
    warm = WARM_UPS.get(package)
    if warm is not None:
        warm()
    setattr(session.config, _KEY, set(state._stats))
    state._stats.clear()


def pytest_sessionfinish(session: Any) -> None:
    names = getattr(session.config, _KEY, None)
    state = _stats_state()
    if not names or state is None:
        return
    ids = {item.nodeid.removeprefix("mutants/") for item in session.items}
    for name in names:
        state.tests_by_mangled_function_name[name].update(ids)
