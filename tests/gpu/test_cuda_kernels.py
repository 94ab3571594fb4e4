"""The device EP's kernel registry as a fact file, and generation end to end with onnxruntime-genai.

* ``test_dump_the_ep_kernel_registry``: the EP's ``get_all_opkernel_def`` (op, domain, version
  range, type constraints) is written to ``$Q38_GPU_OUT`` (default .benchmarks/gpu) as
  ``<ep>-kernels-<version>.json``; on CUDA it must equal the committed
  ``contracts/schemas/cuda-kernels-<version>.json`` where one exists (absent until a GPU run produced
  it: docs/gpu.md), and under ``--dry-run-cpu`` the CPU registry must equal the committed CPU
  kernels of contracts/schemas/ort-<version>.json (the dump's code checked on every commit).
* ``test_genai_cuda_generation``: a builder-form package (``q38 synth --exporter builder``, for the
  installed release) generates greedy tokens with onnxruntime-genai on the device's provider.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
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
    doc = genv.kernel_registry(ort_module, ep)
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


def test_genai_cuda_generation(ort_module: Any, packages: grun.PackageFactory, gpu: genv.GpuInfo) -> None:
    og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai(-cuda) is not installed")
    try:
        pkg = packages.synth(exporter="builder")
    except grun.Unavailable as exc:
        pytest.skip(str(exc))
    gfig.RECORDER.package(pkg.name, pkg)
    config = og.Config(str(pkg))
    config.clear_providers()
    if grun.device_ep() == genv.CUDA_EP:
        config.append_provider("cuda")
    model = og.Model(config)
    params = og.GeneratorParams(model)
    prompt = [1, 5, 9, 13, 17, 21, 25, 29]
    params.set_search_options(max_length=len(prompt) + 16, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(np.asarray([prompt], dtype=np.int32))
    tokens: list[int] = []
    while not generator.is_done() and len(tokens) < 16:
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    assert len(tokens) == 16
    gfig.RECORDER.parity.setdefault("genai_generation", {}).update(tokens=tokens, verdict="pass",
                                                                   provider=grun.device_ep())
