"""Benchmarks of the gated writing commands against their floor, with the gate's share (issue 38).

``optimize``, ``offload`` (hard-linked: ``--link hardlink``) and ``export-genai`` each run as a
whole process next to the floor -- ``onnx_ir.load`` + ``onnx_ir.save`` of the same graphs, the
other files hard-linked, in a fresh process started like q38's (``gc`` thresholds of
``q38.__main__``) -- interleaved ``ROUNDS`` times. Recorded in ``extra_info`` when enabled:
median CPU seconds (user + system of the child) and wall seconds of each, ``cpu_ratio`` and
``ratio`` = command / floor (issue 38: optimize and offload <= 1.2), and from one instrumented
run of the command (``_SHARE``, the same entry point with the two checks timed) ``gate_share``
and ``output_check_share``: the CPU time of the source gate and of the commit-time output check
over the command's whole CPU time.

Invariants guarded (every run, the CPU suite's smoke included): each command succeeds and writes
its package; the floor's tree holds every file of the source; the gate ran exactly once before
the command and the output check once at commit; each source graph was parsed once by the
gated optimize (the gate's models are the command's, the output judged in memory).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.bench_floor import floor_script

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 3

_START = "import gc; gc.set_threshold(50_000, 20, 20)\n"  # q38.__main__.GC_THRESHOLDS: the same start-up

# The floor: what any tool that rewrites these graphs must do at least (load, save, hard-link the rest).
_FLOOR = floor_script("link", start=_START)

# The command through q38's own entry point, the gate and the output check timed (CPU seconds).
_SHARE = _START + textwrap.dedent("""
    import json, sys, time
    import onnx_ir as ir
    import contracts.runner as runner
    import q38.commands._source_gate as gate
    spent = {"gate": [], "output_check": []}
    parsed = []
    real_check, real_refuse, real_parse = runner.check_package, gate.refuse_invalid_source, ir.serde.deserialize_model
    phase = ["output_check"]
    def refuse(*a, **k):
        phase[0] = "gate"
        try:
            return real_refuse(*a, **k)
        finally:
            phase[0] = "output_check"
    def check(*a, **k):
        t = time.process_time()
        try:
            return real_check(*a, **k)
        finally:
            spent[phase[0]].append(time.process_time() - t)
    def parse(proto):
        parsed.append(proto.graph.name)
        return real_parse(proto)
    runner.check_package, gate.refuse_invalid_source, ir.serde.deserialize_model = check, refuse, parse
    from q38.cli import main
    import gc; gc.freeze()  # as q38.__main__.entry: the start-up's objects out of every collection
    code = main(sys.argv[1:], last_run=True)
    total = time.process_time()
    print(json.dumps({"code": code, "cpu_s": total, "gate_s": spent["gate"], "output_check_s": spent["output_check"],
                      "parsed": parsed}))
""")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _timed(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds: user + system, stdout) of one child process."""
    start, before = time.perf_counter(), os.times()
    proc = subprocess.run(args, capture_output=True, text=True, env=_env(), check=False)
    elapsed, after = time.perf_counter() - start, os.times()
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return elapsed, cpu, proc.stdout


def _argv(command: str, src: Path, out: Path) -> list[str]:
    if command == "optimize":
        return ["optimize", "-q", str(src), str(out), "--target", "cpu", "--link", "hardlink"]
    if command == "offload":
        return ["offload", "-q", str(out), "--from-package", str(src), "--offload-mode", "auto", "--link", "hardlink"]
    return ["export-genai", "-q", str(src), str(out), "--link", "hardlink"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["optimize", "offload", "export-genai"])
def test_bench_gated_command_vs_floor(benchmark, command: str, bench_package: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = bench_package  # the full preset under nox -s bench, tiny in the CPU suite's smoke
    graphs = sorted(p.relative_to(src) for p in src.rglob("*.onnx"))
    share = json.loads(_timed([sys.executable, "-c", _SHARE, *_argv(command, src, tmp_path / "share")])[2].splitlines()[-1])
    assert share["code"] == 0
    assert len(share["gate_s"]) == 1 and len(share["output_check_s"]) == 1, share  # once before, once at commit
    if command == "optimize":  # the gate's models are rewritten, the output is judged in memory
        assert len(share["parsed"]) == len(graphs), share["parsed"]
    rounds = 1 if benchmark.disabled else ROUNDS
    walls: dict[str, list[float]] = {command: [], "floor": []}
    cpus: dict[str, list[float]] = {command: [], "floor": []}
    for i in range(rounds):  # interleaved, so load on the machine hits both alike
        for key, args in (
            (command, [sys.executable, "-m", "q38", *_argv(command, src, tmp_path / f"cmd{i}")]),
            ("floor", [sys.executable, "-c", _FLOOR, str(src), str(tmp_path / f"floor{i}")]),
        ):
            wall, cpu, _ = _timed(args)
            walls[key].append(wall)
            cpus[key].append(cpu)
    assert (tmp_path / "cmd0" / "genai_config.json").is_file()
    assert sorted(p.relative_to(tmp_path / "floor0") for p in (tmp_path / "floor0").rglob("*")) == sorted(
        p.relative_to(src) for p in src.rglob("*")
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    if benchmark.disabled:
        return
    wall_med = {k: statistics.median(v) for k, v in walls.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpus.items()}
    benchmark.extra_info.update({
        "command": command, "graphs": len(graphs), "rounds": rounds,
        "cpu_s": cpus[command], "floor_cpu_s": cpus["floor"], "wall_s": walls[command], "floor_wall_s": walls["floor"],
        "cpu_ratio": cpu_med[command] / cpu_med["floor"], "ratio": wall_med[command] / wall_med["floor"],
        "gate_share": share["gate_s"][0] / share["cpu_s"],
        "output_check_share": share["output_check_s"][0] / share["cpu_s"],
        "graphs_parsed": len(share["parsed"]),
    })
    print(f"\n{command}: {cpu_med[command]:.2f} s CPU vs floor {cpu_med['floor']:.2f} s "
          f"({benchmark.extra_info['cpu_ratio']:.2f}x; wall {benchmark.extra_info['ratio']:.2f}x); "
          f"gate {benchmark.extra_info['gate_share']:.0%}, output check {benchmark.extra_info['output_check_share']:.0%} "
          f"of {share['cpu_s']:.2f} s; {len(share['parsed'])} graph parses for {len(graphs)} graphs")  # fmt: skip
