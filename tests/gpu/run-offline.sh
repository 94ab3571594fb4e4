#!/usr/bin/env bash
# The GPU suite on an offline runner, without nox: tests/gpu/run-offline.sh DIR [pytest args...]
#
# DIR holds parts/ and manifest.json from `nox -s gpu-wheelhouse` (tests/gpu/wheelhouse.py download).
# Steps, each timed into $WORK/out/prep-times.json:
#   1. reassemble and verify the wheels (sha256 of every part and every wheel);
#   2. install them, with no index, into a private target ($WORK/site; nothing else is touched):
#      extracted in parallel (Q38_GPU_PIP=1: pip install --no-index --target);
#   3. preload the CUDA libraries: onnxruntime.preload_dlls() and the nvidia-* wheels' lib/ folders
#      (those of the target and of the interpreter's own site-packages, where the image has them);
#      then the preflight (tests/gpu/q38gpu_preflight.py): ldd's "not found" lines for the CUDA
#      provider and onnxruntime-genai, and a one-node CUDA session -- exit 2 in seconds, naming
#      the missing library, before any synthesis;
#   4. synthesize the run's packages (q38 synth --target-ort <installed onnxruntime>) and optimize
#      them (q38 optimize --target-ort) into $WORK/packages, reused by the suite (Q38_GPU_PACKAGES);
#   5. run tests/gpu with the gate (a skip is not a pass), writing $WORK/out/figures.json + .png,
#      the benchmark JSON and the CUDA kernel dump.
# The interpreter: the Python the wheelhouse was downloaded for (manifest "python", default 3.12):
# $Q38_PYTHON if it is that version, else pythonX.Y, python3 or python of that version. WORK defaults to DIR/run. Exit: the suite's (0 only when the gate passes); 2 on a setup error.
# DIR "--installed": the image already has onnxruntime-gpu (and the test dependencies); steps 1-2
# are skipped, $Q38_PYTHON or python3 runs the rest, WORK defaults to .benchmarks/gpu-run.
# Q38_GPU_BUDGET_S=N: the whole command's wall budget; the suite gets what preparation left of it
# (pytest --budget-s, minus 10 s for the interpreter to exit) and stops cleanly, in order of value.
set -euo pipefail
if [ $# -lt 1 ]; then echo "usage: $0 DIR|--installed [pytest args...]" >&2; exit 2; fi
REPO=$(cd "$(dirname "$0")/../.." && pwd)
INSTALLED=0
if [ "$1" = --installed ]; then
  INSTALLED=1; shift
  WORK=${Q38_GPU_WORK:-$REPO/.benchmarks/gpu-run}
  PY=${Q38_PYTHON:-$(command -v python3 || true)}
  if [ -z "$PY" ]; then echo "run-offline: error: no python3 (set Q38_PYTHON)" >&2; exit 2; fi
else
  DIR=$(cd "$1" && pwd); shift
  WORK=${Q38_GPU_WORK:-$DIR/run}
fi
mkdir -p "$WORK/out"
START=$(date +%s)

if [ "$INSTALLED" = 0 ]; then
# The wheels are built for one Python (the manifest's "python", e.g. 3.12): the interpreter must be it.
WANT=$(sed -n 's/.*"python": *"\([0-9.]*\)".*/\1/p' "$DIR/manifest.json" | head -n 1)
if [ -z "$WANT" ]; then echo "run-offline: error: $DIR/manifest.json names no python version" >&2; exit 2; fi
is_want() { "$1" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$WANT')" >/dev/null 2>&1; }
PY=${Q38_PYTHON:-}
if [ -n "$PY" ] && ! is_want "$PY"; then
  echo "run-offline: error: Q38_PYTHON=$PY is not Python $WANT, which the wheelhouse was downloaded for" >&2; exit 2
fi
if [ -z "$PY" ]; then
  for cand in "python$WANT" python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && is_want "$cand"; then PY=$(command -v "$cand"); break; fi
  done
fi
if [ -z "$PY" ]; then
  echo "run-offline: error: no Python $WANT found, which the wheelhouse was downloaded for (set Q38_PYTHON)" >&2; exit 2
fi
fi
echo "run-offline: $("$PY" -V 2>&1) at $PY; work $WORK"

now() { "$PY" -c 'import time; print(f"{time.time():.3f}")'; }
T0=$(now)
if [ "$INSTALLED" = 0 ]; then
"$PY" "$REPO/tests/gpu/wheelhouse.py" assemble "$DIR" "$WORK/wheels" || exit 2
T1=$(now)
rm -rf "$WORK/site"
# The wheels are pinned and resolved already: installing is extracting them (in parallel, no
# index, no pip needed). Q38_GPU_PIP=1 installs with pip --no-index --target instead.
if [ "${Q38_GPU_PIP:-0}" = 1 ]; then
  PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null "$PY" -m pip install --quiet --no-index --no-deps --no-compile \
    --disable-pip-version-check --target "$WORK/site" "$WORK"/wheels/*.whl || exit 2
else
  "$PY" "$REPO/tests/gpu/wheelhouse.py" unpack "$WORK/wheels" "$WORK/site" || exit 2
fi
T2=$(now)
else
  T1=$T0; T2=$T0; mkdir -p "$WORK/site"
fi

export PYTHONPATH="$WORK/site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
# nvidia-* wheels (cuBLAS, cuDNN, cuRAND, cuFFT, ...): their lib/ folders, target first, then the image's.
LIBS=$("$PY" - "$WORK/site" <<'PYEOF'
import glob, os, site, sys
roots = [sys.argv[1], *site.getsitepackages(), site.getusersitepackages()]
dirs = [d for r in roots for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib")))]
print(":".join(dict.fromkeys(dirs)))
PYEOF
)
export LD_LIBRARY_PATH="${LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export Q38_GPU_OUT="$WORK/out" Q38_GPU_PACKAGES="$WORK/packages"
mkdir -p "$Q38_GPU_PACKAGES"
cd "$REPO"
"$PY" - <<'PYEOF'
import onnxruntime as ort
if hasattr(ort, "preload_dlls"):
    ort.preload_dlls()  # CUDA / cuDNN / MSVC runtime from nvidia-* wheels or the system
print("run-offline: onnxruntime", ort.__version__, ort.get_available_providers())
PYEOF
"$PY" "$REPO/tests/gpu/q38gpu_preflight.py" "$@" || exit 2
T3=$(now)
PROFILE_ARGS=()
if [ -n "${Q38_GPU_PROFILE:-}" ]; then PROFILE_ARGS=(--profile "$Q38_GPU_PROFILE"); fi
"$PY" "$REPO/tests/gpu/q38gpu_run.py" prepare "$Q38_GPU_PACKAGES" "${PROFILE_ARGS[@]}" "$@" || exit 2
T4=$(now)
"$PY" - "$WORK/out/prep-times.json" "$T0" "$T1" "$T2" "$T3" "$T4" <<'PYEOF'
import json, sys
t = [float(x) for x in sys.argv[2:]]
doc = {"reassemble_s": t[1] - t[0], "install_s": t[2] - t[1], "preload_and_preflight_s": t[3] - t[2],
       "synthesize_and_optimize_s": t[4] - t[3],
       "preparation_s": t[4] - t[0]}
open(sys.argv[1], "w").write(json.dumps(doc, indent=1) + "\n")
print("run-offline: preparation", ", ".join(f"{k} {v:.1f}" for k, v in doc.items()))
PYEOF
BUDGET_ARGS=()
if [ -n "${Q38_GPU_BUDGET_S:-}" ]; then
  LEFT=$(( Q38_GPU_BUDGET_S - ($(date +%s) - START) - 10 ))
  if [ "$LEFT" -lt 30 ]; then echo "run-offline: error: preparation left ${LEFT} s of Q38_GPU_BUDGET_S=$Q38_GPU_BUDGET_S" >&2; exit 2; fi
  BUDGET_ARGS=(--budget-s "$LEFT")
  echo "run-offline: the suite's budget: $LEFT s of $Q38_GPU_BUDGET_S"
fi
set +e
"$PY" - "$WORK" "${BUDGET_ARGS[@]}" "$@" <<'PYEOF'
import os, sys
import onnxruntime as ort
if hasattr(ort, "preload_dlls"):
    ort.preload_dlls()
import pytest
work, extra = sys.argv[1], sys.argv[2:]
sys.exit(pytest.main(["tests/gpu", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs", "-o", "addopts=",
                      "--benchmark-enable", f"--benchmark-json={work}/out/gpu-bench.json",
                      f"--figures={work}/out/figures.json", *extra]))
PYEOF
rc=$?
echo "run-offline: suite exit $rc; figures in $WORK/out"
exit $rc
