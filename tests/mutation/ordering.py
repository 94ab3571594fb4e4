"""The order a mutant's tests run in: most targeted first (``mutmut_cli.py`` applies it).

mutmut hands a mutant's child the tests that called the mutated function, quickest first, and
stops at the first failure (``-x``). A kill therefore costs every test run before the failing
one, and the test that fails is usually one written for the mutated module: in contracts it was
often the slowest of ~80 ``check_package`` tests, run after all the others (minutes per kill).
The verdict is the same in any order; only the time to it changes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping


def module_of(function: str) -> str:
    """``contracts.qmoe`` for mutmut's ``contracts.qmoe.x__shared`` or ``...offload_nodes.xǁ_QMoEǁof``."""
    return function.rpartition(".x")[0] or function


def modules_hit(tests_by_function: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Test id -> how many modules of the mutated package its stats run called into."""
    modules: dict[str, set[str]] = defaultdict(set)
    for function, tests in tests_by_function.items():
        for test in tests:
            modules[test].add(module_of(function))
    return {test: len(found) for test, found in modules.items()}


def targeted_order(mutant: str, tests: Iterable[str], durations: Mapping[str, float],
                   hit: Mapping[str, int]) -> list[str]:
    """The tests of ``mutant`` (a mutmut name), most targeted first.

    First the tests in files named after the mutated module (``test_*config_graphs*.py`` for
    ``contracts.config_graphs``; a leading underscore of the module is ignored), quickest first;
    then the others by their duration times the number of the package's modules they call into
    (``hit``): a quick test of few modules before a slow end-to-end one, which exercises the
    mutated function only in passing. Ties keep the given order.
    """
    stem = module_of(mutant.partition("__mutmut_")[0]).rpartition(".")[2].strip("_")

    def key(test: str) -> tuple[bool, float]:
        named = stem in test.partition("::")[0].rpartition("/")[2]
        duration = durations.get(test, 0.0)
        return (not named, duration if named else duration * hit.get(test, 1))

    return sorted(tests, key=key)
