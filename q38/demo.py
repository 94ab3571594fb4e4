"""``q38 demo``: the main job end to end, explained as it goes.

Every step calls the subcommand's own entry point (``q38.cli.main`` with ``--json``) and, as
it finishes, prints one line: what it produced, its figures and what they mean. Warnings are
spelled out (rule and message), then the output path and the commands to try next.

Runs never collide and nothing is deleted: the demo writes ``WORKDIR/run-N`` (the next free
N) below a work directory it marks as its own (``WORKDIR/.q38-demo``); a directory it did not
create is used only when empty. While a step runs, an elapsed-time line ticks on a terminal (:func:`q38.progress.elapsed`).

Variants: ``cpu`` runs everything here, real ORT CPU sessions included, and ends with
onnxruntime-genai generating tokens from the exported model. ``faithful`` builds for CUDA
(real QSA ops, which no ORT CPU build has kernels for): it stops before ORT sessions and says
where to run them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from q38.errors import FlagError
from q38.export_plan import DEFAULT_PROMPT
from q38.progress import elapsed

__all__ = ["MARKER", "Step", "prepare_workdir", "q38_command", "run_demo"]

MARKER: Final = ".q38-demo"
GENERATE_TOKENS: Final = 8


@dataclass
class Step:
    """One subcommand run of the demo, and what it reported."""

    name: str
    argv: list[str]
    output: Path | None
    explain: Callable[[Step], str]
    seconds: float = 0.0
    exit_code: int = 0
    stderr: str = ""
    report: Any = None
    facts: dict[str, Any] = field(default_factory=dict)


def prepare_workdir(workdir: Path) -> Path:
    """A fresh ``run-N`` directory below ``workdir`` (created and marked as the demo's)."""
    if workdir.is_symlink() or (workdir.exists() and not workdir.is_dir()):
        raise FlagError(f"--workdir {workdir}: exists and is not a directory")
    if workdir.is_dir() and not (workdir / MARKER).is_file() and any(workdir.iterdir()):
        raise FlagError(
            f"--workdir {workdir}: exists and was not made by q38 demo (no {MARKER}); "
            "the demo only writes into its own or an empty directory: pass another --workdir"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).touch()
    taken = {p.name for p in workdir.iterdir()}
    n = 1
    while f"run-{n}" in taken:
        n += 1
    run = workdir / f"run-{n}"
    run.mkdir()
    return run


def _invoke(step: Step, label: str, progress: TextIO) -> None:
    # deferred: the sanctioned upward import (pyproject.toml); only demo steps run it
    from q38.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with elapsed(label, stream=progress), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        step.exit_code = main(step.argv)
    step.seconds = time.perf_counter() - start
    step.stderr = err.getvalue().strip()
    with contextlib.suppress(json.JSONDecodeError):
        step.report = json.loads(out.getvalue())


# --------------------------------------------------------------------------- explanations


def _explain_synth(step: Step) -> str:
    r = step.report or {}
    return (
        f"source bundles of the {r.get('preset')} synthetic Qwen3.8-Flash ({r.get('variant')} variant): "
        "target, head and prefill graphs with their weights, as an exporter leaves them"
    )


def _explain_build(step: Step) -> str:
    r = step.report or {}
    pooled = sum((r.get("pool_entries") or {}).values())
    modes = ", ".join(f"{n} {m}" for m, n in sorted((r.get("link_modes") or {}).items()))
    step.facts.update(pool_entries=pooled)
    return (
        f"one folded package; {pooled} weights are pooled (weights_pool.txt): tensors the three graphs "
        f"share are stored once; files placed: {modes or 'none'}"
    )


def _explain_optimize(step: Step) -> str:
    r = step.report or {}
    rewrites = {k: v for k, v in (r.get("rewrites") or {}).items() if v}
    total = sum(rewrites.values())
    nodes = (r.get("nodes") or {}).get("target") or [0, 0]
    step.facts.update(rewrites=total, target_nodes=nodes)
    done = ", ".join(f"{k} {v}" for k, v in rewrites.items()) or "none applied"
    return (
        f"{total} exporter patterns fused into com.microsoft contrib ops ({done}); the target graph went "
        f"from {nodes[0]} to {nodes[1]} nodes; target {r.get('target')}: {r.get('target_reason')}"
    )


def _explain_offload(step: Step) -> str:
    r = step.report or {}
    offloaded, kept = len(r.get("offloaded") or []), len(r.get("kept_resident") or [])
    step.facts.update(offloaded=offloaded, kept_resident=kept, router_weights_cleared=r.get("router_weights_cleared"))
    graphs = ", ".join(sorted((r.get("graphs") or {}).values()))
    return (
        f"{offloaded} QMoE expert nodes left for ORT to offload to host memory ({kept} kept on the GPU); "
        f"router_weights cleared on {r.get('router_weights_cleared')} QMoE nodes across the graphs (ORT routes "
        "from the router logits instead); "
        f"multi-draft verify graphs {graphs}"
    )


def _explain_check(step: Step) -> str:
    r = step.report or {}
    violations = r.get("violations") or []
    errors = sum(v.get("severity") == "error" for v in violations)
    warnings = len(violations) - errors
    sessions = r.get("sessions") or []
    ok = sum(s.get("status") == "ok" for s in sessions)
    skipped = sum(s.get("status") == "skipped" for s in sessions)
    step.facts.update(rules=len(r.get("rules_checked") or []), errors=errors, warnings=warnings,
                      sessions_ok=ok, sessions_skipped=skipped)
    text = (f"{len(r.get('rules_checked') or [])} ORT contract rules on {len(r.get('graphs') or [])} graphs: "
            f"{errors} error(s), {warnings} warning(s)")
    if sessions:
        text += f"; real onnxruntime CPU sessions: {ok} created" + (f", {skipped} skipped" if skipped else "")
    else:
        text += "; no ORT session (not run on this build)"
    return text


def _explain_export(step: Step) -> str:
    r = step.report or {}
    tokens = r.get("tokens") or []
    step.facts.update(tokens=tokens)
    return (
        f"a model directory onnxruntime-genai 0.18.0 loads; it generated {len(tokens)} tokens greedily "
        f"from prompt ids {DEFAULT_PROMPT}: {' '.join(str(t) for t in tokens)}"
    )


# --------------------------------------------------------------------------- the run


def _steps(run: Path, preset: str, variant: str, use_ort: bool) -> list[Step]:
    bundles, built, optimized, offloaded, exported = (
        run / n for n in ("bundles", "built", "optimized", "offloaded", "exported")
    )
    cpu = variant == "cpu"
    target = "cpu" if cpu else "cuda"
    ort = ["--ort"] if use_ort and cpu else []
    steps = [
        Step("synth", ["synth", str(bundles), "--bundles", "--preset", preset, "--variant", variant, "--json"],
             bundles, _explain_synth),
        Step("build", ["build", str(built), "--target", str(bundles / "target"), "--head", str(bundles / "head"),
                       "--prefill", str(bundles / "prefill"), "--provider", target, "--json"], built, _explain_build),
        # No --target: optimize picks what the package can run (cpu for the cpu variant, else cuda).
        Step("optimize", ["optimize", str(built), str(optimized), "--json"], optimized,
             _explain_optimize),
        Step("offload", ["offload", str(offloaded), "--from-package", str(optimized), "--offload-mode", "auto",
                         "--json"], offloaded, _explain_offload),
    ]
    steps += [Step(f"check {s.name}", ["check", str(s.output), "--json", *ort], None, _explain_check)
              for s in steps[1:]]
    if cpu:
        steps.append(Step("export-genai", ["export-genai", str(optimized), str(exported), "--generate",
                                           str(GENERATE_TOKENS), "--json"], exported, _explain_export))
    return steps


def _warnings(steps: list[Step]) -> list[str]:
    seen: dict[str, str] = {}
    for step in steps:
        for v in (step.report or {}).get("violations") or [] if step.name.startswith("check") else []:
            if v.get("severity") != "error":
                where = "/".join(x for x in (v.get("graph"), v.get("node")) if x)
                seen.setdefault(f"{v.get('rule_id')}: {v.get('message')}", f"{step.name}{' ' + where if where else ''}")
    return [f"  {text} (in {where})" for text, where in seen.items()]


def run_demo(*, workdir: str, preset: str, variant: str, use_ort: bool, as_json: bool) -> int:
    """Run the demo (see the module docstring); returns the exit code of the first failed step, or 0."""
    run = prepare_workdir(Path(workdir))
    steps = _steps(run, preset, variant, use_ort)
    say: Callable[[str], None] = (lambda _text: None) if as_json else print
    say(f"q38 demo: the main job on the {preset} synthetic package ({variant} variant), in {run}")
    failed = None
    width = max(len(s.name) for s in steps)
    for i, step in enumerate(steps, 1):
        label = f"[{i}/{len(steps)}] {step.name:<{width}}"
        _invoke(step, label, sys.stderr)
        if step.exit_code != 0:
            failed = step
            say(f"{label} FAILED after {step.seconds:.1f} s (exit {step.exit_code}): {step.stderr}")
            break
        text = step.explain(step)
        say(f"{label} {step.seconds:5.1f} s  {text}")
    if as_json:
        _report_json(steps, failed, run)
        return 0 if failed is None else (failed.exit_code or 1)
    if failed is None:
        _report_text(steps, run, variant, use_ort)
    return 0 if failed is None else (failed.exit_code or 1)


def q38_command() -> str:
    """The ``q38`` command as the user can type it now: the demo prints its next steps with it.

    ``q38`` when that name on the user's PATH is this installation's script; else the full path of
    the script beside this interpreter (``nox -s demo`` runs in ``.nox/demo``, whose ``bin`` is not
    on the user's PATH); else ``python -m q38`` with this interpreter's full path. Each works as
    printed. The user's PATH is ``Q38_USER_PATH`` where set: nox puts the session's ``bin`` first on
    the PATH of every command it runs, so ``nox -s demo`` passes the PATH of the shell that called it.
    """
    bindir = Path(sys.executable).parent
    script = bindir / ("q38.exe" if os.name == "nt" else "q38")
    on_path = shutil.which("q38", path=os.environ.get("Q38_USER_PATH"))
    if script.is_file():
        if on_path is not None and Path(on_path).resolve() == script.resolve():
            return "q38"
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m q38"


def _report_text(steps: list[Step], run: Path, variant: str, use_ort: bool) -> None:
    warnings = _warnings(steps)
    if warnings:
        print(f"warnings ({len(warnings)}; they do not fail a check):")
        print("\n".join(warnings))
    offloaded = run / "offloaded"
    q38 = q38_command()
    print(f"output: {offloaded} (the QMoE-offload package; every step's output is in {run})")
    if variant != "cpu":
        print("note: the faithful variant uses QSA ops that no ORT CPU build has kernels for; its ORT sessions "
              f"need a Qwen3.8-capable CUDA build: there, run {q38} check {shlex.quote(str(offloaded))} --ort")
    elif not use_ort:
        print("note: --no-ort: the checks created no ORT session")
    built, optimized = (shlex.quote(str(run / name)) for name in ("built", "optimized"))
    print(f"next: {q38} diff {built} {optimized}   # what optimize changed, node by node")
    print(f"      {q38} check {shlex.quote(str(offloaded))} --ort -v        # the contracts and real sessions, "
          "step by step")


def _report_json(steps: list[Step], failed: Step | None, run: Path) -> None:
    doc = [
        {"step": s.name, "exit_code": s.exit_code, "seconds": round(s.seconds, 3),
         "output": str(s.output) if s.output else None, "facts": s.facts}
        for s in steps if s.seconds or s is failed
    ]
    print(json.dumps({"run": str(run), "steps": doc, "ok": failed is None}, indent=2, sort_keys=True))
