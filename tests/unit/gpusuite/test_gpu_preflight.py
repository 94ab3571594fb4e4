"""The GPU run's preflight (tests/gpu/q38gpu_preflight.py): it fails in seconds, naming what is missing.

Invariants guarded (issue 41 item 6):
* ``ldd``'s "not found" lines become the missing sonames, each named in one ``preflight: error:``
  line with the library that needs it, and the preflight exits 2;
* without a CUDA EP (this machine's CPU onnxruntime) the one-node CUDA session fails the preflight
  with ORT's providers named; ``--dry-run-cpu`` skips that session and passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parents[2] / "gpu"
ROOT = GPU_DIR.parents[1]
sys.path.insert(0, str(GPU_DIR))
import q38gpu_preflight as pre  # noqa: E402

LDD = """\tlinux-vdso.so.1 (0x00007ffd)
\tlibcublasLt.so.13 => not found
\tlibcudnn.so.9 => not found
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f)
"""


def test_ldd_not_found_lines_name_the_missing_libraries() -> None:
    assert pre.missing_libraries(LDD) == ["libcublasLt.so.13", "libcudnn.so.9"]
    assert pre.missing_libraries("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n") == []


def test_a_missing_library_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ldd").write_text("#!/bin/sh\nprintf '" + LDD.replace("\t", "\\t").replace("\n", "\\n") + "'\n")
    (fake / "ldd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    ok, errors = pre.ldd_check([Path("/x/libonnxruntime_providers_cuda.so")])
    assert ok == []
    assert errors == [("libonnxruntime_providers_cuda.so needs libcublasLt.so.13, libcudnn.so.9: not found "
                       "(LD_LIBRARY_PATH, the nvidia-* wheels)")]


def _preflight(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GPU_DIR / "q38gpu_preflight.py"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False)


def test_no_cuda_ep_fails_the_preflight_and_the_dry_run_passes() -> None:
    proc = _preflight()
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.strip().splitlines() == [
        line for line in proc.stderr.strip().splitlines() if line.startswith("preflight: error: ")]
    assert "one-node CUDA session: onnxruntime" in proc.stderr and "has no CUDAExecutionProvider" in proc.stderr
    dry = _preflight("--dry-run-cpu", "--budget-s", "60")  # pytest arguments pass through
    assert dry.returncode == 0, dry.stderr
    assert "preflight: CUDA session: skipped (--dry-run-cpu)" in dry.stdout
