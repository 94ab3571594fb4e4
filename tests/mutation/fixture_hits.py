"""pytest plugin for mutmut's stats run (loaded by ``tests/mutation/mutate.py``): shared fixtures count.

mutmut maps each mutated function to the tests that called it during its stats run, and judges a
mutant with those tests only. A fixture of module, class, package or session scope is set up once,
inside the first test that needs it, so every function its setup calls (``optimize_package`` in a
module fixture that optimizes a package once for several tests) is credited to that first test
alone: the other tests that read the fixture's result -- often the ones that would fail on the
mutant -- were never run against it. This plugin records the hits of each such fixture's setup and
credits them to every test that uses the fixture, so a mutant of code a shared fixture runs is
judged by all the tests that depend on it (each of them sets the fixture up again in the mutant's
own run).

It does nothing outside mutmut's stats run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

_KEY = "q38_fixture_hits"


def _stats_state() -> Any | None:
    try:
        from mutmut.mutation.trampoline import get_mutant_under_test
        from mutmut.state import state
    except ImportError:
        return None
    return state() if get_mutant_under_test() == "stats" else None


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Iterator[None]:
    state = _stats_state()
    if state is None or fixturedef.scope == "function":
        yield
        return
    outer, state._stats = state._stats, set()
    try:
        yield
    finally:
        hits, state._stats = state._stats, outer
        state._stats |= hits  # the test that set the fixture up keeps them too
        store = getattr(request.config, _KEY, None)
        if store is None:
            store = {}
            setattr(request.config, _KEY, store)
        store.setdefault(id(fixturedef), set()).update(hits)


def pytest_sessionfinish(session: Any) -> None:
    by_fixture: dict[int, set[str]] = getattr(session.config, _KEY, {})
    state = _stats_state()
    if not by_fixture or state is None:
        return
    for item in session.items:
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        for name in getattr(item, "fixturenames", ()):
            chain = defs.get(name)
            hits = by_fixture.get(id(chain[-1])) if chain else None
            for function in hits or ():
                state.tests_by_mangled_function_name[function].add(item.nodeid.removeprefix("mutants/"))
