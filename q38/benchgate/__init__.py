"""Release gate: base and head benchmarked on the same machine, in one job, with statistics.

``nox -s bench`` runs ``python -m q38.benchgate run``: the base ref (``--base``, default
origin/main, else HEAD~1; HEAD itself when named explicitly) is exported from git and measured
with the head, interleaved round by round (:mod:`q38.benchgate.runner`): pytest-benchmark
benchmarks (a call measured in-process) and whole-process benchmarks (``--process
NAME=COMMAND``). Per benchmark, the ratio of the medians over rounds has a paired bootstrap
95 % interval (:mod:`q38.benchgate.stats`); a regression is an interval above ``1 + threshold``,
an interval straddling it is inconclusive (more rounds decide).

Exit codes: 0 ok; 1 regression; 2 refused (machine or software differ: CPU model and arch,
ORT version, providers, GPU model, driver; hz_actual is ignored) or a usage error; 3 no
baseline with ``--fail-on-missing-baseline`` (else a NOTE and 0); 4 inconclusive.
Writes ``samples.json`` (``compare`` decides again from it), ``comparison.json`` and
``gate.png`` (:mod:`q38.benchgate.plot`). Standard library only; matplotlib for the plot.
"""

from __future__ import annotations

from q38.benchgate.compare import (
    DEFAULT_THRESHOLD,
    EXIT_INCONCLUSIVE,
    EXIT_NO_BASELINE,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_REGRESSION,
    GateResult,
    Row,
    compare,
)
from q38.benchgate.samples import (
    Benchmark,
    GateError,
    Report,
    SampleSet,
    identity_mismatches,
    load_report,
)
from q38.benchgate.stats import Estimate, estimate, verdict

__all__ = [
    "DEFAULT_THRESHOLD",
    "EXIT_INCONCLUSIVE",
    "EXIT_NO_BASELINE",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_REGRESSION",
    "Benchmark",
    "Estimate",
    "GateError",
    "GateResult",
    "Report",
    "Row",
    "SampleSet",
    "compare",
    "estimate",
    "identity_mismatches",
    "load_report",
    "verdict",
]
