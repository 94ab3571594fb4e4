"""The device EP's kernel registry as a fact file, and generation end to end with onnxruntime-genai.

* ``test_dump_the_ep_kernel_registry``: the EP's ``get_all_opkernel_def`` (op, domain, version
  range, type constraints) is written to ``$Q38_GPU_OUT`` (default .benchmarks/gpu) as
  ``<ep>-kernels-<version>.json``; on CUDA it must equal the committed
  ``contracts/schemas/cuda-kernels-<version>.json`` where one exists (absent until a GPU run produced
  it: docs/gpu.md), and under ``--dry-run-cpu`` the CPU registry must equal the committed CPU
  kernels of contracts/schemas/ort-<version>.json (the dump's code checked on every commit).
  The registry is read in a child (a SIGSEGV there is reported, never a crash of the run); a child
  that failed fails this test only.
* ``test_genai_cuda_generation``: a builder-form package (``q38 synth --exporter builder``, for the
  installed release) generates greedy tokens with onnxruntime-genai on the device's provider, in a
  child process (onnxruntime-genai-cuda carries its own ORT core beside onnxruntime-gpu's) and
  after every measurement (the conftest's order); on CUDA a second child decodes through genai's
  own loop with a buffer-shared cache and ``enable_cuda_graph=1`` (recorded, tokens compared).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import q38gpu_env as genv
import q38gpu_figures as gfig
import q38gpu_run as grun

SCHEMAS = Path(__file__).resolve().parents[2] / "contracts" / "schemas"


def _out_dir() -> Path:
    out = Path(os.environ.get("Q38_GPU_OUT") or Path(".benchmarks") / "gpu")
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_dump_the_ep_kernel_registry(ort_module: Any, ort_features: genv.OrtFeatures) -> None:
    ep = grun.device_ep()
    if ort_features.registry_error:
        pytest.fail(ort_features.registry_error)
    doc = genv.kernel_registry(ort_module, ep)
    served = genv.served_by(ort_module)
    doc["served_by"] = served["cuda_ep"] if ep == genv.CUDA_EP else ep
    if ep == genv.CUDA_EP and served["cuda_ep"].startswith("plugin") and not doc["kernels"]:
        pytest.fail(f"the CUDA EP is the bundled plugin ({served['cuda_ep']}) and get_all_opkernel_def lists none "
                    "of its kernels: the plugin's registry is not in the static kernel registry")
    assert doc["kernels"], f"{ep}: the kernel registry is empty"
    short = "cuda" if ep == genv.CUDA_EP else "cpu"
    path = _out_dir() / f"{short}-kernels-{ort_module.__version__}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    gfig.RECORDER.notes.append(f"{ep} kernel registry: {len(doc['kernels'])} ops -> {path}")
    if ep == genv.CUDA_EP:
        committed = SCHEMAS / f"cuda-kernels-{ort_module.__version__}.json"
        if committed.exists():
            assert json.loads(committed.read_text(encoding="utf-8"))["kernels"] == doc["kernels"], (
                f"the CUDA kernel registry differs from {committed}; copy {path} there if the build is right")
        else:
            gfig.RECORDER.notes.append(f"{committed.name} is not committed yet: copy {path} there")
        return
    dump = SCHEMAS / f"ort-{ort_module.__version__}.json"
    if not dump.exists():
        pytest.fail(f"no committed schema dump {dump.name} to compare the CPU registry with")
    committed_cpu = json.loads(dump.read_text(encoding="utf-8"))["cpu_kernels"]
    assert json.loads(json.dumps(doc["kernels"])) == committed_cpu


_GENAI_CHILD = """
import json, sys, time
import numpy as np
import onnxruntime_genai as og
pkg, provider, count, graph = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "graph"
config = og.Config(pkg)
config.clear_providers()
if provider == "cuda":
    config.append_provider("cuda")
prompt = [1, 5, 9, 13, 17, 21, 25, 29]
if graph:  # onnxruntime-genai's own decode loop: a buffer-shared KV cache of max_length, captured once
    config.overlay(json.dumps({"search": {"past_present_share_buffer": True, "max_length": len(prompt) + count}}))
    config.set_provider_option("cuda", "enable_cuda_graph", "1")
model = og.Model(config)
params = og.GeneratorParams(model)
params.set_search_options(max_length=len(prompt) + count, do_sample=False)
generator = og.Generator(model, params)
generator.append_tokens(np.asarray([prompt], dtype=np.int32))
tokens, times = [], []
while not generator.is_done() and len(tokens) < count:
    t0 = time.perf_counter()
    generator.generate_next_token()
    tokens.append(int(generator.get_next_tokens()[0]))
    times.append(time.perf_counter() - t0)
sys.stdout.write(json.dumps({"tokens": tokens, "step_s": times}))
"""
GENAI_TOKENS = 16


def test_genai_cuda_generation(ort_module: Any, packages: grun.PackageFactory, gpu: genv.GpuInfo) -> None:
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai(-cuda) is not installed")
    try:
        pkg = packages.synth(exporter="builder")
    except grun.Unavailable as exc:
        pytest.skip(str(exc))
    gfig.RECORDER.package(pkg.name, pkg)
    provider = "cuda" if grun.device_ep() == genv.CUDA_EP else "cpu"
    ok, plain = _genai_child(pkg, provider, graph=False)
    if not ok:
        pytest.fail(plain["error"])
    tokens = plain["tokens"]
    assert len(tokens) == GENAI_TOKENS
    gfig.RECORDER.parity.setdefault("genai_generation", {}).update(tokens=tokens, verdict="pass",
                                                                   provider=grun.device_ep(), process="child")
    gfig.RECORDER.parity["genai_generation"]["cuda_graph"] = _genai_cuda_graph(pkg, provider, tokens)


def _genai_child(pkg: Path, provider: str, *, graph: bool) -> tuple[bool, dict[str, Any]]:
    """Generation in a child process: (ok, {"tokens", "step_s"} or {"error"})."""
    argv = [sys.executable, "-c", _GENAI_CHILD, str(pkg), provider, str(GENAI_TOKENS), "graph" if graph else "plain"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=genv.CHILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False, {"error": f"onnxruntime-genai generation: no answer in {genv.CHILD_TIMEOUT_S} s"}
    if proc.returncode != 0:
        return False, {"error": genv.child_failure("onnxruntime-genai generation", proc.returncode, proc.stderr)}
    return True, json.loads(proc.stdout)


def _genai_cuda_graph(pkg: Path, provider: str, plain_tokens: list[int]) -> dict[str, Any]:
    """A CUDA Graph decode where ORT allows it: onnxruntime-genai's own loop on the builder-form
    package with a buffer-shared cache (its own child: a sticky CUDA error dies with it). Recorded,
    never a failure of the generation test; tokens compared with the plain run."""
    if provider != "cuda":
        return {"status": "not attempted", "reason": "CUDA only (dry run on the CPU EP)"}
    ok, doc = _genai_child(pkg, provider, graph=True)
    if not ok:
        return {"status": "failed", "reason": doc["error"]}
    steps = doc["step_s"][1:] or doc["step_s"]  # the first step captures the graph
    return {"status": "ok", "tokens_per_s": len(steps) / sum(steps), "tokens_equal": doc["tokens"] == plain_tokens,
            "how": "onnxruntime-genai decode loop, past_present_share_buffer, enable_cuda_graph=1"}
