"""Fail when a collected test ran in no shard of a sharded CPU suite; write the suite's durations.

CI runs ``nox -s cpu -- --splits N --group k --junitxml=junit-k.xml`` on N machines (pytest-split
picks each group from the stored ``.test_durations``). Nothing in pytest-split notices a test that
no group ran, or one that two groups ran: this script does. It collects the suite unsharded
(``python -m pytest --collect-only -q`` in this interpreter: run it in the suite's venv, ``nox -s
shard-union -- ...``) or reads the node ids from ``--collected FILE``, reads every JUnit XML given
(files or directories of ``*.xml``), and compares the two as JUnit names tests: pytest's
``classname`` and ``name`` of a node id (:func:`junit_key`). Exit 1, listing them, when a collected
test ran in no shard or in more than one, or a shard ran a test the collection lacks; 0 otherwise.

``--durations-out FILE`` also writes pytest-split's durations file (node id -> seconds, the JUnit
``time`` of each test: call, setup and teardown) from the reports -- the way ``.test_durations`` is
refreshed from a full run (``nox -s durations``) or from the shards themselves.

``python tools/shard_union.py REPORT... [--collected FILE] [--durations-out FILE] [-- PYTEST_ARGS]``;
PYTEST_ARGS replace the collected paths (default: pyproject's testpaths, the CPU suite).
Exit 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

MIN_SECONDS = 0.001  # the least duration written (JUnit rounds a quick test to 0.000)
LISTED = 20  # how many missing / repeated tests the report names (the counts are always complete)


def junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) pytest's junitxml writes for ``nodeid`` (its ``mangle_test_address``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def collect(pytest_args: list[str]) -> list[str]:
    """The node ids ``pytest --collect-only`` finds, unsharded (no xdist, no pytest-split groups)."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
           *pytest_args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if proc.returncode != 0 or not ids:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise RuntimeError(f"collecting the suite failed (exit {proc.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))
    return ids


def report_files(paths: list[Path]) -> list[Path]:
    """The JUnit XML files: each path itself, or the ``*.xml`` under a directory."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(p.rglob("*.xml"))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    if not files:
        raise FileNotFoundError(f"no JUnit XML under {' '.join(map(str, paths))}")
    return files


def read_report(path: Path) -> dict[tuple[str, str], float]:
    """The tests a JUnit report ran -> seconds (summed: a teardown error repeats a testcase)."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as err:
        raise ValueError(f"{path}: not a JUnit XML report ({err})") from err
    ran: dict[tuple[str, str], float] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        ran[key] = ran.get(key, 0.0) + float(case.get("time") or 0.0)
    return ran


def check(collected: list[str], reports: dict[Path, dict[tuple[str, str], float]]) -> list[str]:
    """The problems of a sharded run: collected tests in no shard or several, tests not collected."""
    keys = {junit_key(n): n for n in collected}
    runs = Counter(k for ran in reports.values() for k in ran)
    missing = [n for k, n in keys.items() if runs[k] == 0]
    repeated = [n for k, n in keys.items() if runs[k] > 1]
    unknown = sorted("::".join(k) for k in runs if k not in keys)
    problems = []
    for what, names in (("ran in no shard", missing), ("ran in more than one shard", repeated),
                        ("ran but are not in the collection", unknown)):
        if names:
            shown = "\n".join(f"  {n}" for n in names[:LISTED])
            more = f"\n  ... and {len(names) - LISTED} more" if len(names) > LISTED else ""
            problems.append(f"{len(names)} test(s) {what}:\n{shown}{more}")
    return problems


def durations(collected: list[str], reports: dict[Path, dict[tuple[str, str], float]]) -> dict[str, float]:
    """pytest-split's durations: each collected test that ran -> its seconds in the reports."""
    seconds: dict[tuple[str, str], float] = {}
    for ran in reports.values():
        for k, t in ran.items():
            seconds[k] = seconds.get(k, 0.0) + t
    # at least 1 ms each: pytest-split's duration_based_chunks fails on a suite whose durations are all 0
    return {n: max(round(seconds[junit_key(n)], 4), MIN_SECONDS) for n in sorted(collected) if junit_key(n) in seconds}


def _say(line: str, *, error: bool = False) -> None:
    (sys.stderr if error else sys.stdout).write(f"shard_union: {line}\n")


def main(argv: list[str] | None = None) -> int:
    """The command line (the module docstring): exit 0, 1 when a test ran in no shard or several, 2 on bad input."""
    argv = sys.argv[1:] if argv is None else argv
    pytest_args: list[str] = []
    if "--" in argv:
        argv, pytest_args = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    ap = argparse.ArgumentParser(prog="shard_union", description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", type=Path, help="the shards' JUnit XML files, or directories of them")
    ap.add_argument("--collected", type=Path, help="node ids, one a line (default: collect the suite here)")
    ap.add_argument("--durations-out", type=Path, help="write pytest-split's durations file from the reports")
    args = ap.parse_args(argv)
    try:
        reports = {f: read_report(f) for f in report_files(args.reports)}
        if args.collected:
            collected = [ln.strip() for ln in args.collected.read_text("utf-8").splitlines() if ln.strip()]
        else:
            collected = collect(pytest_args)
    except (OSError, ValueError, RuntimeError) as err:
        _say(f"error: {err}", error=True)
        return 2
    problems = check(collected, reports)
    ran = sum(len(r) for r in reports.values())
    _say(f"{len(collected)} collected test(s), {ran} run in {len(reports)} report(s)")
    if args.durations_out:
        table = durations(collected, reports)
        args.durations_out.write_text(json.dumps(table, indent=4, sort_keys=True) + "\n", "utf-8")
        _say(f"wrote the durations of {len(table)} test(s) to {args.durations_out}")
    for problem in problems:
        _say(problem, error=True)
    if not problems:
        _say("every collected test ran in exactly one shard")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
