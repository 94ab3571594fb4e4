"""``python -m q38.benchgate run|compare``: the gate's command line (see :mod:`q38.benchgate`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from q38.benchgate.compare import DEFAULT_THRESHOLD, EXIT_REFUSED, GateResult, compare
from q38.benchgate.plot import write_plot
from q38.benchgate.runner import (
    DEFAULT_BASE_REFS,
    Plan,
    export_tree,
    head_sha,
    resolve_base,
    run_rounds,
)
from q38.benchgate.samples import GateError, SampleSet, load_report
from q38.benchgate.stats import MIN_ROUNDS

__all__ = ["DEFAULT_ROUNDS", "build_parser", "main"]

DEFAULT_ROUNDS = 10


def _emit(*lines: str) -> None:
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


def finish(result: GateResult, samples: SampleSet, out: Path) -> int:
    """Print the verdict; write samples.json, comparison.json and gate.png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    _emit(*result.lines)
    (out / "samples.json").write_text(json.dumps(samples.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    summary = {"exit_code": result.exit_code, "threshold": result.threshold, "lines": list(result.lines),
               "rows": [r.to_dict() for r in result.rows]}
    (out / "comparison.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    png = out / "gate.png"
    if write_plot(result, samples, png):
        _emit(f"plot: {png}")
    elif result.rows:
        _emit("plot: none (matplotlib is not installed; nox -s bench installs it)")
    return result.exit_code


def _processes(specs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, command = spec.partition("=")
        if not sep or not name.strip() or not command.strip():
            raise GateError(f"--process {spec!r}: expected NAME=COMMAND")
        out[name.strip()] = command.strip()
    return out


def cmd_run(args: argparse.Namespace) -> int:
    """``benchgate run``: measure base and head interleaved for ``--rounds`` rounds, then gate; exit 0/1."""
    repo, out = Path(args.repo).resolve(), Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.rounds < MIN_ROUNDS:
        raise GateError(f"--rounds {args.rounds}: at least {MIN_ROUNDS} rounds are needed to estimate the spread")
    refs = [args.base] if args.base else list(DEFAULT_BASE_REFS)
    sha, why = resolve_base(repo, refs, allow_head=bool(args.base))
    pytest_args = tuple(args.pytest_args)
    processes = _processes(args.process)
    if not pytest_args and not processes:
        pytest_args = ("tests/bench",)
    plan = Plan(repo, out, args.python, args.rounds, pytest_args, processes, args.process_repeat, args.clock)
    with tempfile.TemporaryDirectory(prefix="q38-bench-base-") as tmp:
        base_tree = None
        if sha is not None:
            base_tree = Path(tmp) / "tree"
            export_tree(repo, sha, base_tree)
        samples, notes = run_rounds(plan, base_tree)
    samples.base_sha, samples.base_ref, samples.head_sha = sha, why if sha else "", head_sha(repo)
    if sha is None:
        samples.base_note = why
    elif not samples.benchmarks:
        samples.base_note = f"base {why} = {sha[:12]} has no benchmarks, or its benchmark run failed"
    _emit(f"base: {why}" + (f" = {sha[:12]}" if sha else "") + f"; head: {(samples.head_sha or '?')[:12]}; "
          f"{args.rounds} interleaved rounds; clock: {args.clock}")
    result = compare(samples, threshold=args.threshold, fail_on_missing_baseline=args.fail_on_missing_baseline,
                     notes=tuple(notes))
    return finish(result, samples, out)


def cmd_compare(args: argparse.Namespace) -> int:
    """``benchgate compare``: gate saved samples (or per-round base/head reports) without measuring again."""
    if args.samples:
        samples = SampleSet.load(args.samples)
    else:
        if not args.base_json or len(args.base_json) != len(args.head_json or []):
            raise GateError("compare: give SAMPLES, or as many --base-json as --head-json reports (one per round)")
        samples = SampleSet.from_reports([load_report(p) for p in args.base_json],
                                         [load_report(p) for p in args.head_json])
    result = compare(samples, threshold=args.threshold, fail_on_missing_baseline=args.fail_on_missing_baseline)
    out = Path(args.out) if args.out else Path(args.samples or args.head_json[0]).parent
    return finish(result, samples, out)


def threshold(text: str) -> float:
    """``15%`` and ``15`` mean 15 %; ``0.15`` too (a fraction below 1)."""
    try:
        number = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"threshold {text!r}: expected e.g. 15% or 0.15") from None
    value = number / 100 if text.endswith("%") or number >= 1 else number
    if not 0 < value < 10:
        raise argparse.ArgumentTypeError(f"threshold {text!r}: expected e.g. 15% or 0.15")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m q38.benchgate`` parser: ``run`` (measure, then decide) and ``compare`` (decide again)."""
    p = argparse.ArgumentParser(prog="python -m q38.benchgate", description=(__doc__ or "").strip(),
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--threshold", type=threshold, default=DEFAULT_THRESHOLD,
                        help="a regression is a 95%% interval of the median ratio above 1 + this")
    common.add_argument("--fail-on-missing-baseline", action="store_true",
                        help="exit 3 instead of 0 when there is no baseline")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", parents=[common], help="benchmark base and head interleaved, then decide",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("--base", default=os.environ.get("Q38_BENCH_BASE") or None,
                   help="base ref (default: origin/main, else HEAD~1; HEAD itself when named; env Q38_BENCH_BASE)")
    r.add_argument("--repo", default=".", help="the head checkout")
    r.add_argument("--out", default=".benchmarks/gate", help="where samples, comparison and the plot go")
    r.add_argument("--python", default=sys.executable, help="interpreter with the test dependencies")
    r.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help=f"interleaved base/head rounds (at least {MIN_ROUNDS}; more narrow the interval)")
    r.add_argument("--process", action="append", default=[], metavar="NAME=COMMAND",
                   help="a whole-process benchmark: the time (--clock) of COMMAND run in each tree ({tmp}: a scratch "
                   "directory, {python}: the interpreter); repeatable")
    r.add_argument("--process-repeat", type=int, default=5, metavar="K",
                   help="runs of each --process command per round and side; the fastest is the round's sample")
    r.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="cpu: CPU time (the work done; a neighbour's load barely moves it); wall: elapsed time "
                   "(for benchmarks that wait on I/O or other processes)")
    r.add_argument("pytest_args", nargs="*", help="pytest arguments after -- (default: tests/bench without --process)")
    r.set_defaults(func=cmd_run)
    c = sub.add_parser("compare", parents=[common], help="decide again from recorded samples or reports",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    c.add_argument("samples", nargs="?", help="a samples.json written by run")
    c.add_argument("--base-json", nargs="+", help="base pytest-benchmark reports, one per round")
    c.add_argument("--head-json", nargs="+", help="head pytest-benchmark reports, paired with --base-json")
    c.add_argument("--out", default=None, help="where comparison.json and the plot go (default: next to the input)")
    c.set_defaults(func=cmd_compare)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand and return its exit code; a GateError is one stderr line and EXIT_REFUSED."""
    logging.basicConfig(level=logging.INFO, format="benchgate: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except GateError as exc:
        sys.stderr.write(f"benchgate: {exc}\n")
        return EXIT_REFUSED
