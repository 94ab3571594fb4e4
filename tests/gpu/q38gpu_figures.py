"""The GPU run's figures: one JSON a gate can compare (``python -m q38.benchgate``-style statistics
in ``compare``) and a PNG of decode tokens/s per context tier.

Tests record into :data:`RECORDER` (device, driver, ORT build, package digests, per-tier TPS / TTFT
samples, kernels per verification cycle, parity verdicts, CPU fallbacks); the conftest writes it
with ``--figures PATH`` at the end of the session. ``compare(a, b)`` puts two such files side by
side per figure with the median change and a bootstrap 95 % interval (``nox -s bench`` runs it
when Q38_GPU_FIGURES names two files).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

FORMAT: Final = "q38.gpu-figures/1"


@dataclasses.dataclass
class Recorder:
    """Everything a run measured, keyed for the JSON; tests append, the conftest writes."""

    env: dict[str, Any] = dataclasses.field(default_factory=dict)
    packages: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    tiers: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    kernels: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    parity: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    extrapolations: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    # ORT's EP assignment per device session (q38gpu_run.placement): nodes per EP, the CPU nodes.
    placements: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # Peak memory per tier and variant beside q38 fit's prediction (q38gpu_memory.judge).
    memory: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # Test id -> outcome as each test finishes; the ids collected; why the run stopped early.
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    collected: list[str] = dataclasses.field(default_factory=list)
    stopped: str = ""

    def package(self, label: str, path: Path) -> None:
        """Record a package's digest and size: sha256 over its sorted file names and the per-file
        sha256 of its package_manifest.json (written at synthesis; no byte re-read), else over the
        files' bytes."""
        if label in self.packages:
            return
        manifest = path / "package_manifest.json"
        if manifest.is_file():
            files = json.loads(manifest.read_text(encoding="utf-8")).get("files", {})
            if files and all(isinstance(v, dict) and v.get("sha256") for v in files.values()):
                h = hashlib.sha256()
                for name in sorted(files):
                    h.update(f"{name}\0{files[name]['sha256']}\n".encode())
                size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
                self.packages[label] = {"path": str(path), "sha256": h.hexdigest(), "bytes": size,
                                        "digest": "sha256 of package_manifest.json's file digests"}
                return
        h, size = hashlib.sha256(), 0
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(path)).encode())
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 24), b""):
                    h.update(block)
                    size += len(block)
        self.packages[label] = {"path": str(path), "sha256": h.hexdigest(), "bytes": size}

    def tier(self, key: str, **values: Any) -> None:
        self.tiers.setdefault(key, {}).update(values)


RECORDER: Final = Recorder()


def spread(samples: Sequence[float]) -> dict[str, float]:
    """median, min, max, stdev and the 95 % bootstrap interval of the median (seeded)."""
    a = np.asarray(samples, dtype=np.float64)
    if a.size == 0:
        return {}
    rng = np.random.default_rng(0)
    with np.errstate(all="ignore"):  # a NaN sample is reported (as "nan" in the JSON), not raised
        boots = np.median(rng.choice(a, size=(1000, a.size), replace=True), axis=1)
        return {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()),
                "stdev": float(a.std(ddof=1)) if a.size > 1 else 0.0, "n": int(a.size),
                "ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]}


def extrapolate_layers(step_s: Mapping[int, float], full_layers: int) -> dict[str, Any]:
    """A decode step of ``full_layers`` layers extrapolated from measured steps of fewer layers.

    ``step_s`` maps a layer count to the measured seconds per decode step of a slice with that many
    layers (the slice preset: real dimensions, 1 x (3 GDN + 1 QSA)). Two or more counts fit
    ``step = fixed + per_layer * layers`` (least squares): ``fixed`` is the embedding, final mixer
    and lm_head. One count gives ``per_layer = step / layers`` with ``fixed = 0``: the non-layer
    work is then counted once per layer, so the step is an upper bound and tokens/s a lower bound.
    The result is labelled ``kind: extrapolation`` so it is never read as a measured figure."""
    if not step_s or full_layers <= 0:
        raise ValueError("extrapolate_layers: no measured steps or no target layer count")
    pts = sorted(step_s.items())
    if any(n <= 0 or not t > 0 for n, t in pts):
        raise ValueError(f"extrapolate_layers: layer counts and step times must be positive: {pts}")
    if max(n for n, _ in pts) > full_layers:
        raise ValueError(f"extrapolate_layers: a slice of {max(n for n, _ in pts)} layers exceeds {full_layers}")
    if len(pts) == 1:
        (n, t), = pts
        fixed, per = 0.0, t / n
        method = "proportional: non-layer work counted per layer (step an upper bound, tokens/s a lower bound)"
    else:
        x = np.array([n for n, _ in pts], np.float64)
        y = np.array([t for _, t in pts], np.float64)
        per, fixed = (float(v) for v in np.polyfit(x, y, 1))
        if per <= 0:
            raise ValueError(f"extrapolate_layers: step time does not grow with layers: {pts}")
        fixed = max(fixed, 0.0)
        method = "linear fit over layer counts: step = fixed + per_layer * layers"
    step = fixed + per * full_layers
    return {"kind": "extrapolation", "method": method, "measured_layers": [n for n, _ in pts],
            "measured_step_s": [t for _, t in pts], "full_layers": full_layers, "per_layer_s": per,
            "fixed_s": fixed, "step_s": step, "tokens_per_s": 1.0 / step}


def document(rec: Recorder, *, verdict: Any = None, dry_run: bool = False) -> dict[str, Any]:
    """The figures JSON document."""
    gate = None if verdict is None else {"ok": verdict.ok, "passed": verdict.passed, "skipped": verdict.skipped,
                                          "problems": list(verdict.problems), "allowed": list(verdict.allowed)}
    not_run = [t for t in rec.collected if t not in rec.outcomes]
    doc = {"format": FORMAT, "dry_run_cpu": dry_run, "host": platform.node(), "env": rec.env,
           "packages": rec.packages, "tiers": rec.tiers, "kernels_per_verification_cycle": rec.kernels,
           "parity": rec.parity, "cpu_fallbacks": rec.fallbacks, "placements": rec.placements,
           "memory": rec.memory, "extrapolated": rec.extrapolations, "timings_s": rec.timings, "notes": rec.notes,
           "tests": {"finished": dict(rec.outcomes), "not_run": not_run, "stopped": rec.stopped,
                     "order": list(rec.collected)},
           "gate": gate}
    return finite(doc)


def finite(value: Any) -> Any:
    """``value`` with every NaN / infinity replaced by the string "nan" / "inf" / "-inf" (strict
    JSON; a non-finite figure is reported, never raised)."""
    if isinstance(value, float) and not np.isfinite(value):
        return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def write(path: Path, rec: Recorder, *, verdict: Any = None, dry_run: bool = False, png: bool = True) -> Path:
    """Write ``path`` (JSON, atomically: a run killed mid-write keeps the previous file) and, with
    ``png``, ``path`` with .png (decode TPS per tier; skipped without matplotlib)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = document(rec, verdict=verdict, dry_run=dry_run)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    if png:
        plot(doc, path.with_suffix(".png"))
    return path


def plot(doc: Mapping[str, Any], png: Path) -> Path | None:
    """Bar chart of decode tokens/s (median, min-max whiskers) per tier and package."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ordered = sorted(doc["tiers"].items(), key=lambda kv: (kv[0].split("/")[0], kv[1].get("tokens", 0)))
    rows = [(k, v["decode_tps"]) for k, v in ordered
            if v.get("decode_tps") and all(isinstance(v["decode_tps"].get(f), float) for f in ("median", "min", "max"))]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(rows) + 2), 3.5))
    if rows:
        med = [r[1]["median"] for r in rows]
        err = [[m - r[1]["min"] for m, r in zip(med, rows, strict=True)],
               [r[1]["max"] - m for m, r in zip(med, rows, strict=True)]]
        ax.bar(range(len(rows)), med, yerr=err, capsize=3)
        ax.set_xticks(range(len(rows)), [r[0] for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("decode tokens/s")
    env = doc.get("env", {})
    device = "DRY RUN on the CPU EP" if doc.get("dry_run_cpu") else env.get("gpu_model", "?")
    ax.set_title(f"{device} | onnxruntime {env.get('ort_version', '?')}", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def compare(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """Per tier and figure (decode_tps, ttft_ms): base and head medians, % change and a bootstrap
    95 % interval of the change of medians from the recorded samples; kernel counts and parity side by side."""
    lines = [f"{'figure':<44} {'base':>10} {'head':>10} {'change':>8}  95% interval"]
    rng = np.random.default_rng(0)
    for key in sorted(set(base["tiers"]) | set(head["tiers"])):
        for fig_name in ("decode_tps", "ttft_ms"):
            a = base["tiers"].get(key, {}).get(f"{fig_name}_samples")
            b = head["tiers"].get(key, {}).get(f"{fig_name}_samples")
            if not a or not b:
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            boots = [np.median(rng.choice(b, len(b))) / np.median(rng.choice(a, len(a))) - 1 for _ in range(1000)]
            lo, hi = np.percentile(boots, [2.5, 97.5])
            lines.append(f"{key + ' ' + fig_name:<44} {ma:>10.2f} {mb:>10.2f} {100 * (mb / ma - 1):>+7.1f}%  "
                         f"[{100 * lo:+.1f}%, {100 * hi:+.1f}%]")
    for key in sorted(set(base["kernels_per_verification_cycle"]) | set(head["kernels_per_verification_cycle"])):
        a = base["kernels_per_verification_cycle"].get(key, {}).get("kernels")
        b = head["kernels_per_verification_cycle"].get(key, {}).get("kernels")
        lines.append(f"{'kernels ' + key:<44} {a!s:>10} {b!s:>10}")
    for key in sorted(set(base["parity"]) | set(head["parity"])):
        a = base["parity"].get(key, {}).get("verdict")
        b = head["parity"].get(key, {}).get("verdict")
        lines.append(f"{'parity ' + key:<44} {a!s:>10} {b!s:>10}")
    return lines


if __name__ == "__main__":  # python tests/gpu/q38gpu_figures.py BASE.json HEAD.json
    import sys

    docs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in sys.argv[1:3]]
    print("\n".join(compare(docs[0], docs[1])))
