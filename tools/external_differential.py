"""The external differential: q38's verdict against real onnxruntime sessions on graphs nobody here wrote.

Two corpora:

* ``onnx-node``: onnx's own node tests, the ``onnx/backend/test/data/node/*/model.onnx`` of the onnx
  1.20.0 wheel (the last wheel that ships them), read as a zip. The wheel is fetched once with
  ``pip download onnx==1.20.0 --no-deps --only-binary=:all:`` into the cache directory
  (``--cache``, default ``$Q38_CACHE_DIR`` / ``$XDG_CACHE_HOME/q38`` / ``~/.cache/q38``, then
  ``external-corpora/``) or taken from ``--onnx-wheel``.
* ``ort-ops``: graphs rebuilt from onnxruntime's own op tests (``tests/corpus/ort_op_graphs.py``).

Truth: a CPU ``InferenceSession`` of the graph is created or refused, in worker processes (a few
graphs abort the process: that is a refusal). Verdict: ``contracts.runner.check_graph`` for the
installed onnxruntime, error severity only. Per corpus, class (the op family or the node's op) and
version: agreement, refused-but-loads (q38 refuses a graph ORT loads: the gate's worst miss) and
passed-but-refused, with every disagreement's ORT text. Writes JSON (``--json``) and prints a
table; ``--merge A.json B.json`` prints the table of several versions' JSON side by side.

    python tools/external_differential.py --json .benchmarks/external-1.32.0.json
    python tools/external_differential.py --merge .benchmarks/external-*.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import zipfile
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

ONNX_NODE_WHEEL = "onnx==1.20.0"
_NODE_DIR = "onnx/backend/test/data/node/"
_TIMEOUT_S = 120
_ABORTED = "onnxruntime aborted the process (or hung) creating the session"


def cache_dir(given: str | None) -> Path:
    """Where the fetched wheel is kept: ``given``, else q38's cache directory + external-corpora/."""
    if given:
        return Path(given)
    base = os.environ.get("Q38_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                           os.path.expanduser("~/.cache"), "q38")  # fmt: skip
    return Path(base) / "external-corpora"


def onnx_node_wheel(cache: Path, wheel: str | None) -> Path:
    """The onnx 1.20.0 wheel: ``wheel`` if given, else the cached one, else fetched with pip download."""
    if wheel:
        return Path(wheel)
    found = sorted(cache.glob("onnx-1.20.0-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", ONNX_NODE_WHEEL, "--no-deps", "--only-binary=:all:",
                    "-d", str(cache), "-q"], check=True)  # fmt: skip
    return sorted(cache.glob("onnx-1.20.0-*.whl"))[0]


def onnx_node_graphs(wheel: Path) -> Iterator[tuple[str, str, bytes]]:
    """(class: the model's first op type, test name, model bytes) of every node test in ``wheel``."""
    import onnx  # deferred: sys.path is set up at import time of this script, below the stdlib imports

    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(n for n in zf.namelist() if n.startswith(_NODE_DIR) and n.endswith("/model.onnx")):
            data = zf.read(name)
            try:
                ops = [n.op_type for n in onnx.load_from_string(data).graph.node]
            except Exception:  # an unreadable model is judged all the same; its class says so
                ops = []
            test = name[len(_NODE_DIR):].split("/")[0]
            yield (ops[0] if len(set(ops)) == 1 else ("expanded" if test.endswith("_expanded") or "_expanded_" in test
                                                       else (ops[0] if ops else "unreadable"))), test, data  # fmt: skip


def _session_worker(conn: Connection) -> None:
    import onnxruntime as ort  # deferred: only the worker processes create sessions

    for key, data in iter(conn.recv, None):
        options = ort.SessionOptions()
        options.log_severity_level = 4
        try:
            ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises several pybind exception types
            text = str(exc).strip()
            conn.send((key, text.splitlines()[0][:400] if text else type(exc).__name__))
        else:
            conn.send((key, None))


@dataclass
class _Slot:
    """One worker process, its end of the pipe, and the graph it is on (None: idle)."""

    proc: BaseProcess
    conn: Connection
    key: str | None = None
    since: float = 0.0


def _start(ctx: BaseContext) -> _Slot:
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_session_worker, args=(theirs,), daemon=True)  # type: ignore[attr-defined]
    proc.start()
    return _Slot(proc, ours)


def ort_truth(items: list[tuple[str, bytes]], workers: int = 1) -> dict[str, str | None]:
    """Key -> None (a CPU session is created) or ORT's first error line, one session per graph in workers.

    A worker that dies (onnxruntime aborted the process) or hangs marks its graph refused and is replaced.
    """
    ctx = mp.get_context("spawn")
    pending = deque(items)
    slots = [_start(ctx) for _ in range(max(1, min(workers, len(items))))]
    found: dict[str, str | None] = {}
    while pending or any(s.key is not None for s in slots):
        for slot in slots:
            if slot.key is None and pending:
                slot.key, data = pending.popleft()
                slot.since = time.monotonic()
                slot.conn.send((slot.key, data))
        busy = [s for s in slots if s.key is not None]
        ready = set(wait([s.conn for s in busy], timeout=1.0))
        for index, slot in enumerate(slots):
            if slot.key is None:
                continue
            if slot.conn in ready:
                try:
                    key, error = slot.conn.recv()
                except (EOFError, OSError):  # it died while answering
                    key, error = slot.key, _ABORTED
                found[key] = error
                slot.key = None
            elif not slot.proc.is_alive() or time.monotonic() - slot.since > _TIMEOUT_S:
                slot.proc.kill()
                found[slot.key] = _ABORTED
                slots[index] = _start(ctx)
    for slot in slots:
        try:
            slot.conn.send(None)
        except OSError:  # already gone
            pass
        slot.proc.join(timeout=5)
    return found


def q38_refusal(data: bytes) -> str | None:
    """None when ``check_graph`` passes the graph (no error), else its first error as RULE: text."""
    import onnx  # deferred: sys.path is set up at import time of this script

    from contracts.runner import check_graph  # deferred: this repository on sys.path

    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # q38 check reads the file the same way: an unreadable graph is refused
        return f"PKG-GRAPH-001: {exc}"
    errors = [v for v in check_graph(model) if v.severity == "error"]
    return None if not errors else f"{errors[0].rule_id}: {errors[0].message}"


@dataclass
class Tally:
    """Agreement counts of one (corpus, class)."""

    total: int = 0
    agree: int = 0
    refused_but_loads: list[str] = field(default_factory=list)
    passed_but_refused: list[str] = field(default_factory=list)


def judge(corpus: str, graphs: Iterable[tuple[str, str, bytes]], workers: int) -> dict[str, Tally]:
    """Per class of ``corpus``: ORT's truth against q38's verdict, with each disagreement named."""
    listed = list(graphs)
    truth = ort_truth([(f"{cls}/{name}", data) for cls, name, data in listed], workers)
    tallies: dict[str, Tally] = {}
    for cls, name, data in listed:
        tally = tallies.setdefault(cls, Tally())
        error, refusal = truth[f"{cls}/{name}"], q38_refusal(data)
        tally.total += 1
        if (error is None) == (refusal is None):
            tally.agree += 1
        elif error is None:
            tally.refused_but_loads.append(f"{name}: {refusal}")
        else:
            tally.passed_but_refused.append(f"{name}: {error}")
    return tallies


def _row(label: str, tallies: Iterable[Tally]) -> str:
    listed = list(tallies)
    total, agree = sum(t.total for t in listed), sum(t.agree for t in listed)
    rbl, pbr = sum(len(t.refused_but_loads) for t in listed), sum(len(t.passed_but_refused) for t in listed)
    share = 100.0 * agree / total if total else 100.0
    return f"| {label} | {total} | {agree} ({share:.1f} %) | {rbl} | {pbr} |"


def table(reports: list[dict[str, object]]) -> str:
    """The markdown table of one or several versions' reports: per corpus, then per class."""
    lines = ["| corpus / class (onnxruntime) | graphs | agree | ORT loads, q38 refuses | ORT refuses, q38 passes |",
             "|---|---|---|---|---|"]  # fmt: skip
    for report in reports:
        version = report["onnxruntime"]
        corpora: dict[str, dict[str, dict[str, object]]] = report["corpora"]  # type: ignore[assignment]
        for corpus, classes in corpora.items():
            tallies = {cls: Tally(**vals) for cls, vals in classes.items()}  # type: ignore[arg-type]
            lines.append(_row(f"**{corpus}** ({version})", tallies.values()))
            for cls, tally in sorted(tallies.items()):
                if tally.agree != tally.total or corpus == "ort-ops":
                    lines.append(_row(f"  {corpus} / {cls} ({version})", [tally]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the differential for the installed onnxruntime (or merge reports); 1 on a refused graph that loads."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", choices=["onnx-node", "ort-ops"], help="default: both")
    parser.add_argument("--onnx-wheel", help="the onnx 1.20.0 wheel (default: cached, else pip download)")
    parser.add_argument("--cache", help="where the wheel is cached")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--merge", nargs="+", help="print the table of these reports, run nothing")
    args = parser.parse_args(argv)
    if args.merge:
        sys.stdout.write(table([json.loads(Path(p).read_text(encoding="utf-8")) for p in args.merge]) + "\n")
        return 0
    import onnxruntime as ort
    from corpus import ort_op_graphs

    corpora: dict[str, dict[str, Tally]] = {}
    for corpus in args.corpus or ["onnx-node", "ort-ops"]:
        graphs = (onnx_node_graphs(onnx_node_wheel(cache_dir(args.cache), args.onnx_wheel)) if corpus == "onnx-node"
                  else ort_op_graphs.graphs())  # fmt: skip
        corpora[corpus] = judge(corpus, graphs, args.workers)
    report = {"onnxruntime": ort.__version__,
              "corpora": {c: {cls: asdict(t) for cls, t in sorted(ts.items())} for c, ts in corpora.items()}}  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(table([report]) + "\n")
    for corpus, tallies in corpora.items():
        for cls, tally in sorted(tallies.items()):
            for line in tally.refused_but_loads:
                sys.stdout.write(f"REFUSED BUT LOADS {corpus}/{cls}: {line}\n")
    return 1 if any(t.refused_but_loads for ts in corpora.values() for t in ts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
