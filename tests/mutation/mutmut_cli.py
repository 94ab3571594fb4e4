"""mutmut's command line with the two phases ``tests/mutation/mutate.py`` runs apart.

``python tests/mutation/mutmut_cli.py run ...`` is ``mutmut run ...`` except:

* ``Q38_MUTATE_STATS_ONLY=1``: stop once the mutants are generated and the stats (which test
  calls which function) are collected or loaded -- before any mutant runs. ``mutate.py`` edits the
  stats in between and then picks the mutants to judge from what was generated.
* ``Q38_MUTATE_SKIP_CLEAN=1``: skip mutmut's "clean tests" run. ``mutate.py`` sets it only when the
  stats phase of the same invocation has just run every selected test on the unmutated code
  (mutmut's stats run stops with an error when a test fails), so the clean run would repeat it.

Always: every test run of mutmut's parent process (the stats run, the clean run, the test listing,
the forced-fail check) happens in a forked child, as mutmut's fork-server runner does it, while the
mutants are still forked from the parent (its default runner). The parent therefore never imports
q38 or contracts, and each mutant's child imports them itself: a mutant of code that runs at
import time (``contracts``' rule factories) or whose result is cached in the process (the schema
registry) takes effect. Forked from a parent that had run the tests, the children inherited the
unmutated rules and caches. The third-party libraries are imported once here, before any fork.
(mutmut's fork server itself is not used: it never gets mutmut's sys.path, and every mutant then
fails to start, exit 255, which mutmut counts as a timeout -- a kill.)

Always, too: every ``.meta`` file (the verdicts, saved by mutmut after each mutant) is written to a
sibling and renamed into place, so a run killed at any moment leaves readable verdicts to resume from.

Always, too: a mutant's tests run most targeted first (``tests/mutation/ordering.py``), not only
quickest first as mutmut orders them; the verdict is the same, a kill comes sooner.

mutmut 3.8.1 is pinned (pyproject's ``mutation`` group); the hooks replace named methods.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

import mutmut.__main__ as mutmut_main
from mutmut.runners.harness import PytestRunner
from mutmut.state import state
from mutmut.workers.isolation import (
    ForkRunner,
    ForkServerRunner,
    MutantRunner,
    run_in_fork,
    run_in_fork_with_result,
)
from ordering import modules_hit, targeted_order  # tests/mutation, this script's directory

# Imported before any fork, so no child pays for them (onnx_ir alone is ~2 s with sympy); never
# q38, contracts or the tests.
PRELOAD = ("numpy", "ml_dtypes", "onnx", "onnxruntime", "onnx_ir")  # not pytest plugins: they must be rewritten


def _stop_after_stats(**_: Any) -> NoReturn:
    print("    stats collected; stopping before the mutants run (Q38_MUTATE_STATS_ONLY)")
    raise SystemExit(0)


def _no_clean_run(self: MutantRunner, tests: Any) -> int:
    print("    skipped: the stats run of this invocation ran these tests clean (Q38_MUTATE_SKIP_CLEAN)")
    return 0


@functools.cache
def _modules_hit() -> dict[str, int]:
    return modules_hit(state().tests_by_mangled_function_name)


def _targeted_runs() -> None:
    """Every mutant's tests in ``ordering.targeted_order`` (mutmut's child hands them over quickest first)."""
    run_tests = PytestRunner.run_tests

    def run(self: PytestRunner, *, mutant_name: str | None, tests: Iterable[str]) -> int:
        if not mutant_name:
            return run_tests(self, mutant_name=mutant_name, tests=tests)
        ordered = targeted_order(mutant_name, tests, state().duration_by_test, _modules_hit())
        try:
            return run_tests(self, mutant_name=mutant_name, tests=ordered)
        except Exception:
            # A mutant that breaks importing (a rule factory raising while conftest imports
            # contracts) makes pytest exit 4, and mutmut raises in the child. The child then left
            # through interpreter shutdown, where onnxruntime's static destructors wait on a
            # condition variable of the parent's threads forever (seen: pthread_cond_destroy
            # from exit()), until mutmut's timeout. It is an error of the mutant: pytest's 3.
            return 3

    PytestRunner.run_tests = run  # type: ignore[method-assign]


def _tests_in_children() -> None:
    """ForkRunner's own test runs, through ForkServerRunner's in-a-child versions of them."""
    ForkRunner._run_in_child = lambda self, op: run_in_fork_with_result(lambda: op(self.test_runner))  # type: ignore[attr-defined]
    ForkRunner._exit_code_from_child = lambda self, op: run_in_fork(lambda: op(self.test_runner))  # type: ignore[attr-defined]
    for name in ("collect_stats", "run_clean_tests", "run_forced_fail", "list_all_tests"):
        setattr(ForkRunner, name, getattr(ForkServerRunner, name))


def _atomic_saves() -> None:
    """mutmut's per-mutant verdict file (``.meta``), written whole or not at all.

    mutmut saves a source file's ``.meta`` after every mutant it judges, which is what makes a run
    resumable (``mutate.py`` continues from those verdicts); written in place, a run killed in the
    middle of that write (a time limit, a crash) left a truncated JSON file that no later run could
    read. Written to a sibling and renamed over the old one, it is always a complete file.
    """
    from mutmut.mutation.data import SourceFileMutationData

    save = SourceFileMutationData.save

    def atomic(self: SourceFileMutationData) -> None:
        final = Path(self.meta_path)
        self.meta_path = final.with_name(final.name + f".{os.getpid()}.tmp")
        try:
            save(self)
            os.replace(self.meta_path, final)
        finally:
            self.meta_path = final

    SourceFileMutationData.save = atomic  # type: ignore[method-assign]


def _print_diffs(names: list[str]) -> NoReturn:
    """``q38-diffs NAME ...``: every mutant's diff as ``mutmut show`` renders it, in one process."""
    import json

    from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant

    diffs = {name: get_diff_for_mutant(name, path=find_mutant(name).path) for name in names}
    print("Q38-DIFFS " + json.dumps(diffs))  # mutate.DIFFS_MARKER
    raise SystemExit(0)


if __name__ == "__main__":
    import importlib

    if sys.argv[1:2] == ["q38-diffs"]:  # mutate.DIFFS_COMMAND
        _print_diffs(sys.argv[2:])

    for module in PRELOAD:
        importlib.import_module(module)
    _tests_in_children()
    _targeted_runs()
    _atomic_saves()
    if os.environ.get("Q38_MUTATE_STATS_ONLY") == "1":
        mutmut_main.collect_source_file_mutation_data = _stop_after_stats  # type: ignore[assignment]
    if os.environ.get("Q38_MUTATE_SKIP_CLEAN") == "1":
        for runner in (ForkRunner, ForkServerRunner):  # process_isolation "fork" or "forkserver"
            runner.run_clean_tests = _no_clean_run  # type: ignore[method-assign]
    sys.argv[0] = "mutmut"
    sys.exit(mutmut_main.cli())
