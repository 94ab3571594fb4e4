"""The demo pipeline: every step calls the subcommand's own entry point (``q38.cli.main``)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from q38.errors import FlagError

__all__ = ["Step", "run_demo"]


@dataclass
class Step:
    name: str
    argv: list[str]
    output: Path | None
    seconds: float = 0.0
    exit_code: int = 0
    stderr: str = ""
    facts: dict[str, object] = field(default_factory=dict)


def _invoke(step: Step) -> None:
    from q38.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        step.exit_code = main(step.argv)
    step.seconds = time.perf_counter() - start
    step.stderr = err.getvalue().strip()
    if step.argv[0] == "check" and "--json" in step.argv:
        step.facts = _check_facts(out.getvalue())


def _check_facts(text: str) -> dict[str, object]:
    try:
        report = json.loads(text)
    except json.JSONDecodeError:
        return {}
    violations = report.get("violations", [])
    sessions = report.get("sessions", [])
    facts: dict[str, object] = {
        "rules": len(report.get("rules_checked", [])),
        "errors": sum(1 for v in violations if v.get("severity") == "error"),
        "warnings": sum(1 for v in violations if v.get("severity") == "warning"),
    }
    if sessions:
        facts["ort sessions"] = len(sessions)
    return facts


def _package_facts(path: Path) -> dict[str, object]:
    from q38.package import open_package

    package = open_package(path)
    facts: dict[str, object] = {"graphs": len(package.roles()), "pool entries": len(package.pool.entries)}
    target = package.load("target")
    ops = Counter((n.domain or "ai.onnx", n.op_type) for n in target.graph)
    facts["target nodes"] = sum(ops.values())
    facts["QMoE"] = ops.get(("com.microsoft", "QMoE"), 0)
    fused = sum(ops.get(("com.microsoft", op), 0) for op in ("RMSNormRotary", "HyperConnectionLowRankMix", "MatMulBlockQuantizedFp8Weight"))
    if fused:
        facts["fused contrib nodes"] = fused
    if package.manifest is not None:
        rewrites = sum(v for k, v in package.manifest.rewrites.items() if k != "router_weights_cleared")
        if rewrites:
            facts["rewrites"] = rewrites
        if package.manifest.router_weights_cleared:
            facts["router_weights cleared"] = package.manifest.router_weights_cleared
    if package.config.runtime_profiles:
        facts["runtime profiles"] = len(package.config.runtime_profiles)
    return facts


def run_demo(*, workdir: str, preset: str, variant: str, use_ort: bool, as_json: bool) -> int:
    root = Path(workdir)
    if root.exists() or root.is_symlink():
        raise FlagError(f"--workdir {root} exists; the demo writes a fresh directory")
    root.mkdir(parents=True)
    bundles, built, optimized, offloaded = (root / n for n in ("bundles", "built", "optimized", "offloaded"))
    target = "cpu" if variant == "cpu" else "cuda"
    ort = ["--ort"] if use_ort else []
    steps = [
        Step("synth", ["synth", str(bundles), "--bundles", "--preset", preset, "--variant", variant], None),
        Step(
            "build",
            [
                "build", str(built), "--target", str(bundles / "target"), "--head", str(bundles / "head"),
                "--prefill", str(bundles / "prefill"), "--layout", "folded",
            ],
            built,
        ),
        Step("optimize", ["optimize", str(built), str(optimized), "--target", target], optimized),
        Step("offload", ["offload", str(offloaded), "--from-package", str(optimized), "--offload-mode", "auto"], offloaded),
    ]
    steps += [Step(f"check {s.name}", ["check", str(s.output), "--json", *ort], None) for s in steps if s.output is not None]
    failed = None
    for step in steps:
        _invoke(step)
        if step.exit_code != 0:
            failed = step
            break
        if step.output is not None:
            step.facts = _package_facts(step.output)
    _report(steps, failed, as_json)
    return 0 if failed is None else (failed.exit_code or 1)


def _report(steps: list[Step], failed: Step | None, as_json: bool) -> None:
    if as_json:
        doc = [
            {"step": s.name, "exit_code": s.exit_code, "seconds": round(s.seconds, 3), "output": str(s.output) if s.output else None, "facts": s.facts}
            for s in steps
        ]
        print(json.dumps({"steps": doc, "ok": failed is None}, indent=2, sort_keys=True))
        return
    print(f"{'step':<16} {'exit':>4} {'seconds':>8}  facts")
    for step in steps:
        facts = ", ".join(f"{k}={v}" for k, v in step.facts.items())
        print(f"{step.name:<16} {step.exit_code:>4} {step.seconds:>8.2f}  {facts}")
        if step is failed:
            break
    if failed is not None:
        print(f"demo stopped at {failed.name!r}: {failed.stderr}", file=sys.stderr)
    else:
        print("demo: every step succeeded and every package passed q38 check")
