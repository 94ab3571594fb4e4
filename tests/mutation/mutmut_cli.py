"""mutmut's command line with the two phases ``tests/mutation/mutate.py`` runs apart.

``python tests/mutation/mutmut_cli.py run ...`` is ``mutmut run ...`` except:

* ``Q38_MUTATE_STATS_ONLY=1``: stop once the mutants are generated and the stats (which test
  calls which function) are collected or loaded -- before any mutant runs. ``mutate.py`` edits the
  stats in between and then picks the mutants to judge from what was generated.
* ``Q38_MUTATE_SKIP_CLEAN=1``: skip mutmut's "clean tests" run. ``mutate.py`` sets it only when the
  stats phase of the same invocation has just run every selected test on the unmutated code
  (mutmut's stats run stops with an error when a test fails), so the clean run would repeat it.

mutmut 3.8.1 is pinned (pyproject's ``mutation`` group); both hooks replace one named function.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import mutmut.__main__ as mutmut_main
from mutmut.workers.isolation import ForkRunner, ForkServerRunner, MutantRunner


def _stop_after_stats(**_: Any) -> NoReturn:
    print("    stats collected; stopping before the mutants run (Q38_MUTATE_STATS_ONLY)")
    raise SystemExit(0)


def _no_clean_run(self: MutantRunner, tests: Any) -> int:
    print("    skipped: the stats run of this invocation ran these tests clean (Q38_MUTATE_SKIP_CLEAN)")
    return 0


if __name__ == "__main__":
    if os.environ.get("Q38_MUTATE_STATS_ONLY") == "1":
        mutmut_main.collect_source_file_mutation_data = _stop_after_stats  # type: ignore[assignment]
    if os.environ.get("Q38_MUTATE_SKIP_CLEAN") == "1":
        for runner in (ForkRunner, ForkServerRunner):  # process_isolation "fork" or "forkserver"
            runner.run_clean_tests = _no_clean_run  # type: ignore[method-assign]
    sys.argv[0] = "mutmut"
    sys.exit(mutmut_main.cli())
