r"""A whole-process benchmark against its floor: ``COMMAND`` within ``RATIO`` x of ``FLOOR``.

The base/head gate (:mod:`q38.benchgate.runner`) catches a command getting slower than it was;
it cannot say the command was already too slow. Some costs have a floor outside q38: ``q38
check`` reads graphs through onnx-ir, which imports onnx, so ``python -c "import onnx"`` is the
least a check can cost. ``python -m q38.benchgate.floor`` times both, interleaved, and fails when
the command costs more than ``--max-ratio`` times the floor::

    python -m q38.benchgate.floor --name check-tiny --command "{python} -m q38 check PKG" \\
        --floor-name import-onnx --floor "{python} -c 'import onnx'" --max-ratio 1.5

Each side's figure is its fastest of ``--rounds`` runs (CPU time of the process, the gate's
default clock): the machine's noise only ever adds time, so the minimum is the stable figure.
Prints one line per side and the ratio; exit 0 within the ratio, 1 above it, 2 on a usage error
or a command that fails.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from q38.benchgate.runner import time_process
from q38.benchgate.samples import Clock, GateError

__all__ = ["FloorResult", "main", "measure_floor"]


@dataclass(frozen=True)
class FloorResult:
    """The fastest run of the command and of its floor, in seconds of ``clock``."""

    name: str
    seconds: float
    floor_name: str
    floor_seconds: float
    max_ratio: float
    clock: Clock

    @property
    def ratio(self) -> float:
        """Command over floor."""
        return self.seconds / self.floor_seconds if self.floor_seconds > 0 else float("inf")

    @property
    def ok(self) -> bool:
        """Within ``max_ratio`` of the floor."""
        return self.ratio <= self.max_ratio

    def lines(self) -> list[str]:
        """The report: both figures side by side, the ratio and the verdict."""
        verdict = "ok" if self.ok else "ABOVE"
        return [
            f"floor {self.name}: {self.seconds:.3f} s {self.clock} (fastest run)",
            f"floor {self.floor_name}: {self.floor_seconds:.3f} s {self.clock} (fastest run)",
            f"floor {self.name} / {self.floor_name}: {self.ratio:.2f}x (target <= {self.max_ratio:.2f}x): {verdict}",
        ]


def measure_floor(
    *, name: str, command: str, floor_name: str, floor: str, rounds: int, max_ratio: float,
    python: str, tree: Path, clock: Clock = "cpu",
) -> FloorResult:  # fmt: skip
    """Run ``command`` and ``floor`` alternately ``rounds`` times each; keep each one's fastest run."""
    if rounds < 1:
        raise GateError(f"--rounds {rounds}: at least 1")
    runs: dict[str, list[float]] = {command: [], floor: []}
    for r in range(rounds):
        for cmd in (command, floor) if r % 2 == 0 else (floor, command):
            runs[cmd].append(time_process(cmd, tree=tree, python=python, clock=clock))
    return FloorResult(name, min(runs[command]), floor_name, min(runs[floor]), max_ratio, clock)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m q38.benchgate.floor`` (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m q38.benchgate.floor", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--name", required=True, help="the command's benchmark name")
    p.add_argument("--command", required=True, help="the command ({python}: the interpreter, {tmp}: a scratch dir)")
    p.add_argument("--floor-name", required=True, help="the floor's benchmark name")
    p.add_argument("--floor", required=True, help="the floor command")
    p.add_argument("--max-ratio", type=float, required=True, help="fail above this command / floor ratio")
    p.add_argument("--rounds", type=int, default=7, help="runs of each (the fastest counts)")
    p.add_argument("--python", default=sys.executable, help="the interpreter for {python}")
    p.add_argument("--repo", default=".", help="where the commands run")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="CPU time of the process, or elapsed time")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the figures, return 0 (within the ratio), 1 (above) or 2 (error)."""
    args = build_parser().parse_args(argv)
    try:
        result = measure_floor(
            name=args.name, command=args.command, floor_name=args.floor_name, floor=args.floor,
            rounds=args.rounds, max_ratio=args.max_ratio, python=args.python, tree=Path(args.repo),
            clock=args.clock,
        )  # fmt: skip
    except GateError as exc:
        sys.stderr.write(f"q38 benchgate floor: error: {exc}\n")
        return 2
    sys.stdout.write("".join(line + "\n" for line in result.lines()))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
