"""Peak memory per tier and variant, beside ``q38 fit``'s prediction for the same package and tier.

Measured by sampling (a thread, every :data:`PERIOD_S`):

* on a GPU, NVML's ``nvmlDeviceGetMemoryInfo(...).used`` of device 0 (libnvidia-ml, the library
  nvidia-smi reads), minus the device's use when the suite started -- the whole device, so it
  includes the CUDA context, cuBLAS workspaces and the arena's slack, which is what ``q38 fit``'s
  labelled estimate covers; ``nvidia-smi --query-gpu=memory.used`` is the fallback;
* in the CPU dry run, the process's resident set (``/proc/self/statm``) minus its size at start.

``q38 fit PKG --json --context N --batch B`` gives the exact sum (weights, experts, state) and the
labelled estimate (what only the device knows). :func:`judge` sets the ratio measured / exact and
says whether fit under-predicted by more than its estimate (the gate fails the run on that).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

PERIOD_S: Final = 0.02


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def nvml_reader() -> Callable[[], int] | None:
    """A function returning device 0's used bytes through NVML, or None when NVML is not loadable."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            return None
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    info = _NvmlMemory()

    def used() -> int:
        lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(info))
        return int(info.used)

    return used


def smi_reader() -> Callable[[], int] | None:
    """Device 0's used bytes through ``nvidia-smi`` (slow: one process per sample)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None

    def used() -> int:
        out = subprocess.run([smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        return int(out.split()[0]) << 20 if out and out.split()[0].isdigit() else 0

    return used


def process_reader() -> Callable[[], int]:
    """This process's resident bytes (/proc/self/statm; the dry run's stand-in for device memory)."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def used() -> int:
        try:
            with open("/proc/self/statm", encoding="ascii") as f:
                return int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            return 0

    return used


class Meter:
    """The suite's memory source, chosen once: NVML, nvidia-smi, or the process (dry run)."""

    def __init__(self, *, device: bool) -> None:
        nvml = nvml_reader() if device else None
        smi = smi_reader() if device and nvml is None else None
        self.read: Callable[[], int]
        if nvml is not None:
            self.source, self.read = "NVML device memory used (device 0)", nvml
        elif smi is not None:
            self.source, self.read = "nvidia-smi memory.used (device 0)", smi
        else:
            self.source = ("process resident set (/proc/self/statm)" if not device
                           else "process resident set (no NVML, no nvidia-smi)")
            self.read = process_reader()
        self.baseline = self.read()

    def peak(self) -> PeakSampler:
        return PeakSampler(self)


class PeakSampler:
    """``with meter.peak() as p: ...``; then ``p.result()``: peak bytes above the suite's baseline."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.peak_used = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_used = max(self.peak_used, self.meter.read())
            self.samples += 1
            self._stop.wait(PERIOD_S)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_used = max(self.peak_used, self.meter.read())

    def result(self) -> dict[str, Any]:
        return {"source": self.meter.source, "peak_bytes": max(0, self.peak_used - self.meter.baseline),
                "peak_used_bytes": self.peak_used, "baseline_bytes": self.meter.baseline, "samples": self.samples,
                "period_s": PERIOD_S}


def fit_prediction(package: Path, *, context: int, batch: int = 1) -> dict[str, Any]:
    """``q38 fit``'s decoder row for ``package`` at ``context`` tokens and ``batch``: the exact sum and
    the labelled estimate, in bytes (``error`` when fit cannot say)."""
    proc = subprocess.run([sys.executable, "-m", "q38", "fit", os.fspath(package), "--json", "--context", str(context),
                           "--batch", str(batch)], capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"q38 fit exit {proc.returncode}"}
    rows = [r for r in json.loads(proc.stdout).get("rows", []) if r.get("context") == context]
    row = next((r for r in rows if r.get("name") == "decoder"), rows[0] if rows else None)
    if row is None:
        return {"error": f"q38 fit gave no row for context {context}"}
    return {"context": context, "batch": batch, "exact_bytes": int(row["device"]["exact_total"]),
            "estimate_bytes": int(row["estimate"]["total"]), "estimate": row["estimate"]}


def judge(measured: dict[str, Any], fit: dict[str, Any]) -> dict[str, Any]:
    """Measured peak beside fit's prediction: ratio measured / exact, and ``within_estimate``: False
    when the peak exceeds fit's exact sum by more than its labelled estimate (fit under-predicted)."""
    out: dict[str, Any] = {"measured": measured, "fit": fit}
    if "error" in fit or not fit.get("exact_bytes"):
        out.update(ratio=None, within_estimate=None)
        return out
    peak = int(measured["peak_bytes"])
    over = peak - fit["exact_bytes"]
    out.update(ratio=peak / fit["exact_bytes"], under_predicted_bytes=max(0, over),
               within_estimate=over <= fit["estimate_bytes"])
    return out


def problems(memory: dict[str, dict[str, Any]]) -> list[str]:
    """One gate line per tier where fit under-predicted by more than its estimate."""
    return [f"fit under-predicts {key}: peak {m['measured']['peak_bytes'] / 2**20:.0f} MiB, fit exact "
            f"{m['fit']['exact_bytes'] / 2**20:.0f} MiB + estimate {m['fit']['estimate_bytes'] / 2**20:.0f} MiB"
            for key, m in sorted(memory.items()) if m.get("within_estimate") is False]


_METER: dict[str, Meter] = {}


def configure(*, device: bool) -> Meter:
    """Choose the run's meter (the conftest calls this first, so the baseline is the run's start)."""
    _METER["run"] = Meter(device=device)
    return _METER["run"]


def meter() -> Meter:
    """The run's meter (:func:`configure`; a process meter when nothing configured one)."""
    return _METER.get("run") or configure(device=False)
