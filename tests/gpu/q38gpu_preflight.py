#!/usr/bin/env python3
"""The GPU run's preflight, before any synthesis: fail in seconds, naming the missing library.

``python tests/gpu/q38gpu_preflight.py [--dry-run-cpu]`` (run-offline.sh runs it after preloading
the CUDA libraries):

1. ``ldd`` of onnxruntime's CUDA provider (``onnxruntime/capi/libonnxruntime_providers_cuda.so``)
   and of onnxruntime-genai's native libraries: every "not found" line is a missing library
   (onnxruntime-gpu 1.31.1 needs CUDA 13's libcublasLt.so.13, cuDNN 9 ...);
2. a one-node CUDA session (``session.disable_cpu_ep_fallback=1``, ``enable_fallback=0``) created
   and run; its error is ORT's own, not a CPU retry's.

Exit 0 with one line per check; exit 2 with ``preflight: error: ...`` lines naming each missing
library and the session's error. ``--dry-run-cpu`` skips the CUDA session (the CPU EP stands in)
but still reads ``ldd`` of what is installed.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent


def missing_libraries(ldd_output: str) -> list[str]:
    """The sonames ``ldd`` could not resolve ("libcublasLt.so.13 => not found")."""
    return [line.split("=>")[0].strip() for line in ldd_output.splitlines() if "not found" in line]


def native_libraries() -> list[Path]:
    """onnxruntime's CUDA provider and onnxruntime-genai's shared objects, where installed."""
    found: list[Path] = []
    for module in ("onnxruntime", "onnxruntime_genai"):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin).parent
        pattern = "capi/libonnxruntime_providers_cuda.so" if module == "onnxruntime" else "**/*.so*"
        found += sorted(Path(p) for p in glob.glob(str(root / pattern), recursive=True))
    return found


def ldd_check(libs: Sequence[Path]) -> tuple[list[str], list[str]]:
    """(ok lines, error lines): each library's unresolved dependencies by ``ldd``."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return ["ldd: not available, library check skipped"], []
    ok, errors = [], []
    for lib in libs:
        proc = subprocess.run([ldd, os.fspath(lib)], capture_output=True, text=True, timeout=30, check=False)
        missing = missing_libraries(proc.stdout + proc.stderr)
        if missing:
            errors.append(f"{lib.name} needs {', '.join(missing)}: not found (LD_LIBRARY_PATH, the nvidia-* wheels)")
        else:
            ok.append(f"ldd {lib.name}: every library found")
    return ok, errors


def cuda_session() -> tuple[bool, str]:
    """A one-node CUDA session created and run (q38gpu_run.cuda_session_works)."""
    sys.path.insert(0, str(HERE))
    import onnxruntime as ort
    import q38gpu_run as grun

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    providers = ort.get_available_providers()
    if "CUDAExecutionProvider" not in providers:
        return False, f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (providers: {', '.join(providers)})"
    return grun.cuda_session_works(ort)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="q38gpu_preflight.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run-cpu", action="store_true", help="skip the CUDA session (CPU dry run)")
    args, _rest = parser.parse_known_args(argv)
    ok, errors = ldd_check(native_libraries())
    if args.dry_run_cpu:
        ok.append("CUDA session: skipped (--dry-run-cpu)")
    else:
        works, why = cuda_session()
        (ok if works else errors).append(f"one-node CUDA session: {why}")
    for line in ok:
        print(f"preflight: {line}")
    for line in errors:
        print(f"preflight: error: {line}", file=sys.stderr)
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
