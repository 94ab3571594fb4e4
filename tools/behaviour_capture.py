"""Capture what every q38 command does on the real fixtures and both surfaces, and compare two captures.

A refactoring that claims "behaviour unchanged" runs this on the tree before and after it::

    python tools/behaviour_capture.py capture --tree OLD_CHECKOUT OUT_BEFORE
    python tools/behaviour_capture.py capture --tree .            OUT_AFTER
    python tools/behaviour_capture.py compare OUT_BEFORE OUT_AFTER

``--synth-args '--seed 7'`` runs the same scenarios on synthetic packages of another seed (or
preset, lineage): inputs the refactoring was not written around.

``capture`` runs each scenario (``python -m q38 ARGS`` with ``--tree`` first on ``PYTHONPATH``)
in a fresh scratch directory and records its exit code, stdout and stderr (the scratch path
replaced by ``<TMP>``); the packages the scenarios write stay under ``OUT/work``. ``compare``
says which scenarios differ in exit code or output, and runs ``q38 diff`` (the ``--tree`` of
the second capture) on every package both captures wrote: exit 0 when everything is equal.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real"
REAL_PACKAGES = ("int4-cpu", "int4-cpu-mtp", "fp16-cuda-gdn", "fp16-cuda-paged", "int4-cuda-prepacked")

# (name, argv, packages it writes). ``{W}`` is the capture's work directory; ``{R}`` the real fixtures.
SCENARIOS: list[tuple[str, list[str], list[str]]] = [
    ("help", ["--help"], []),
    ("synth-tiny-cpu", ["synth", "{W}/cpu", "--variant", "cpu"], ["cpu"]),
    ("synth-tiny-faithful", ["synth", "{W}/faithful"], ["faithful"]),
    ("synth-layered", ["synth", "{W}/layered", "--layout", "layered", "--variant", "cpu"], ["layered"]),
    ("synth-builder", ["synth", "{W}/builder", "--exporter", "builder", "--variant", "cpu"], ["builder"]),
    ("synth-bundles", ["synth", "{W}/bundles", "--bundles"], []),
    ("build-layered", ["build", "{W}/built", "--target", "{W}/bundles/target", "--head", "{W}/bundles/head",
                       "--prefill", "{W}/bundles/prefill"], ["built"]),
    ("rules", ["rules"], []),
    ("rules-json", ["rules", "--json"], []),
    ("explain", ["explain", "ORT-MODEL-004"], []),
    ("explain-unknown", ["explain", "NOPE-001"], []),
    ("check-cpu", ["check", "{W}/cpu"], []),
    ("check-cpu-json", ["check", "{W}/cpu", "--format", "json"], []),
    ("check-faithful-sarif", ["check", "{W}/faithful", "--format", "sarif"], []),
    ("check-layered", ["check", "{W}/layered", "--ort-version", "1.31.1"], []),
    ("check-builder", ["check", "{W}/builder"], []),
    ("check-bad-version", ["check", "{W}/cpu", "--ort-version", "banana"], []),
    ("check-model", ["check", "{R}/int4-cpu/model.onnx"], []),
    ("optimize-cpu", ["optimize", "{W}/cpu", "{W}/cpu-opt", "--target", "cpu", "--json"], ["cpu-opt"]),
    ("optimize-faithful", ["optimize", "{W}/faithful", "{W}/faithful-opt", "--explain"], ["faithful-opt"]),
    ("optimize-layered", ["optimize", "{W}/layered", "{W}/layered-opt", "--target", "cpu"], ["layered-opt"]),
    ("optimize-builder", ["optimize", "{W}/builder", "{W}/builder-opt", "--target", "cpu"], ["builder-opt"]),
    ("optimize-exists", ["optimize", "{W}/cpu", "{W}/cpu"], []),
    ("offload-cpu", ["offload", "{W}/cpu-off", "--from-package", "{W}/cpu", "--target-resident-slots", "2"],
     ["cpu-off"]),
    ("offload-faithful", ["offload", "{W}/faithful-off", "--from-package", "{W}/faithful", "--json"],
     ["faithful-off"]),
    ("offload-builder", ["offload", "{W}/builder-off", "--from-package", "{W}/builder"], ["builder-off"]),
    ("offload-typo", ["offload", "{W}/x", "--from-pakage", "{W}/cpu"], []),
    ("fit-cpu", ["fit", "{W}/cpu", "--gpu", "24GiB", "--context", "4096,32k"], []),
    ("fit-json", ["fit", "{W}/faithful-off", "--json"], []),
    ("fit-no-unit", ["fit", "{W}/cpu", "--gpu", "24"], []),
    ("export-cpu", ["export-genai", "{W}/cpu", "{W}/cpu-export"], ["cpu-export"]),
    ("export-builder", ["export-genai", "{W}/builder", "{W}/builder-export"], ["builder-export"]),
    ("export-faithful", ["export-genai", "{W}/faithful", "{W}/faithful-export"], []),
    ("diff-opt", ["diff", "{W}/cpu", "{W}/cpu-opt"], []),
    ("diff-json", ["diff", "{W}/faithful", "{W}/faithful-opt", "--json"], []),
    ("profile-cpu", ["profile", "{W}/cpu", "-o", "{W}/cpu.strp", "--prompt-count", "2", "--tokens", "3",
                     "--json"], []),
    ("missing-dir", ["check", "{W}/nowhere"], []),
]
for _name in REAL_PACKAGES:
    SCENARIOS += [
        (f"check-real-{_name}", ["check", f"{{R}}/{_name}", "--format", "json"], []),
        (f"optimize-real-{_name}", ["optimize", f"{{R}}/{_name}", f"{{W}}/{_name}-opt", "--target", "cpu"],
         [f"{_name}-opt"]),
        (f"offload-real-{_name}", ["offload", f"{{W}}/{_name}-off", "--from-package", f"{{R}}/{_name}"],
         [f"{_name}-off"]),
        (f"fit-real-{_name}", ["fit", f"{{R}}/{_name}", "--gpu", "24GiB"], []),
        (f"export-real-{_name}", ["export-genai", f"{{R}}/{_name}", f"{{W}}/{_name}-export"], [f"{_name}-export"]),
    ]


def _run(tree: Path, argv: list[str], work: Path, synth: list[str]) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "100", "NO_COLOR": "1", "Q38_NO_PROGRESS": "1"}
    env.pop("CI", None)
    args = [a.replace("{W}", str(work)).replace("{R}", str(REAL)) for a in argv]
    if args[0] == "synth":
        args += synth
    proc = subprocess.run([sys.executable, "-m", "q38", *args], capture_output=True, text=True, env=env,
                          cwd=work, timeout=600, check=False)  # fmt: skip

    def norm(text: str) -> str:
        return text.replace(str(work), "<TMP>").replace(str(REAL), "<REAL>").replace(str(tree.resolve()), "<TREE>")

    return {"argv": argv, "rc": proc.returncode, "stdout": norm(proc.stdout), "stderr": norm(proc.stderr)}


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


def capture(tree: Path, out: Path, synth: list[str]) -> int:
    """Run every scenario with ``tree``'s q38 and write ``out/transcript.json``.

    ``synth``: extra ``q38 synth`` flags for every synthesized package (another ``--seed``,
    ``--preset``, ``--lineage``), so the same scenarios run on inputs of another shape.
    """
    work = out / "work"
    work.mkdir(parents=True)
    records = {}
    for name, argv, writes in SCENARIOS:
        records[name] = {**_run(tree, argv, work, synth), "writes": writes}
        sys.stderr.write(f"{name}: rc {records[name]['rc']}\n")
    (out / "transcript.json").write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    return 0


def _timeless(value: object) -> object:
    """``value`` with measured durations (``"seconds": 0.27``) blanked: they differ run to run."""
    return re.sub(r'"seconds": [0-9.e+-]+', '"seconds": <S>', value) if isinstance(value, str) else value


def compare(before: Path, after: Path, tree: Path) -> int:
    """Exit 0 when both captures agree in every scenario and every written package is equal."""
    a = json.loads((before / "transcript.json").read_text())
    b = json.loads((after / "transcript.json").read_text())
    differ = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            _say(f"{name}: only in {'after' if name in b else 'before'}")
            differ += 1
            continue
        for key in ("rc", "stdout", "stderr"):
            if _timeless(a[name][key]) != _timeless(b[name][key]):
                _say(f"{name}: {key} differs\n  before: {str(a[name][key])[:400]!r}\n  after:  {str(b[name][key])[:400]!r}")
                differ += 1
        for pkg in a[name]["writes"]:
            pa, pb = before / "work" / pkg, after / "work" / pkg
            if pa.exists() != pb.exists():
                _say(f"{name}: package {pkg} written only {'after' if pb.exists() else 'before'}")
                differ += 1
                continue
            if not pa.exists():
                continue
            env = {**os.environ, "PYTHONPATH": str(tree)}
            proc = subprocess.run([sys.executable, "-m", "q38", "diff", str(pa), str(pb)], capture_output=True,
                                  text=True, env=env, check=False)  # fmt: skip
            if proc.returncode != 0:
                _say(f"{name}: q38 diff {pkg} exit {proc.returncode}\n{proc.stdout[:2000]}{proc.stderr[:500]}")
                differ += 1
    _say(f"{len(set(a) | set(b))} scenarios compared, {differ} difference(s)")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    """``capture --tree DIR OUT`` or ``compare BEFORE AFTER [--tree DIR]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--tree", type=Path, required=True)
    c.add_argument("out", type=Path)
    c.add_argument("--synth-args", default="", help="extra q38 synth flags, one string: '--seed 7 --preset full'")
    d = sub.add_parser("compare")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    d.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args(argv)
    if args.cmd == "capture":
        return capture(args.tree.resolve(), args.out.resolve(), args.synth_args.split())
    return compare(args.before.resolve(), args.after.resolve(), args.tree.resolve())


if __name__ == "__main__":
    raise SystemExit(main())
