"""What this machine offers the GPU suite: the GPU (nvidia-smi or cudart) and onnxruntime features.

Features are probed, not guessed from versions:

* ``cuda_kernels``: the com.microsoft ops with a CUDA kernel, from onnxruntime's kernel registry;
* ``op_session``: whether a one-node session of a contrib op can be created on an EP with CPU
  fallback disabled (NOT_IMPLEMENTED / "fallback ... disabled" means no kernel; any other
  error came from the kernel's constructor, so the kernel exists);
* ``offload_config``: whether the build parses ``session.moe.offload.*`` (an unknown key
  under that prefix is rejected only by builds that implement QMoE offload; 1.31.1 accepts
  anything silently, see ort-cpu-capabilities.md §4.5).

A probe that breaks in a way it cannot read (an error that is neither "no kernel" nor a graph
check nor the kernel's constructor refusing the probe node) is a PROBE ERROR, which fails the
test that needs the op -- never "present", never a skip. Probe models are written at IR version
10 (onnx 1.23.2's default, 14, is refused by onnxruntime 1.31.1).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import json
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, Final

from q38._ops import (
    CAUSAL_CONV_WITH_STATE,
    DYNAMIC_SPARSE_ATTENTION,
    GATED_DELTA_NET,
    HC_LOW_RANK_MIX,
    MS_DOMAIN,
    QMOE,
    RMS_NORM_ROTARY,
    SPARSE_ATTENTION_INDEXER,
)

CUDA_EP: Final = "CUDAExecutionProvider"
CPU_EP: Final = "CPUExecutionProvider"
PROBE_ERROR: Final = "PROBE ERROR: "
# The IR version every model this suite writes carries (1.31.1 reads at most 13; q38._ops.IR_VERSION).
IR_VERSION: Final = 10


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    name: str
    driver: str
    compute_capability: tuple[int, int] | None
    memory_mib: int | None
    source: str

    @property
    def sm(self) -> int | None:
        cc = self.compute_capability
        return cc[0] * 10 + cc[1] if cc else None


def query_nvidia_smi() -> tuple[GpuInfo | None, str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi not found"
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        return None, f"nvidia-smi lists no GPU (exit {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()})"
    name, driver, cap, mem = (f.strip() for f in lines[0].split(",")[:4])
    try:
        major, minor = (int(x) for x in cap.split("."))
        cc: tuple[int, int] | None = (major, minor)
    except ValueError:
        cc = None
    return GpuInfo(name, driver, cc, int(mem) if mem.isdigit() else None, "nvidia-smi"), ""


def query_cudart() -> tuple[GpuInfo | None, str]:
    """Compute capability and driver version through the CUDA runtime, where it is loadable."""
    candidates = [ctypes.util.find_library("cudart"), "libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    for lib_name in [c for c in candidates if c]:
        try:
            lib = ctypes.CDLL(lib_name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if lib.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
            return None, f"{lib_name}: no CUDA device"
        major, minor, driver = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        lib.cudaDeviceGetAttribute(ctypes.byref(major), 75, 0)  # cudaDevAttrComputeCapabilityMajor
        lib.cudaDeviceGetAttribute(ctypes.byref(minor), 76, 0)  # cudaDevAttrComputeCapabilityMinor
        lib.cudaDriverGetVersion(ctypes.byref(driver))
        return GpuInfo("unknown (cudart)", f"cuda-driver-api {driver.value}", (major.value, minor.value), None,
                       lib_name), ""
    return None, "libcudart not loadable"


def dry_run_gpu() -> GpuInfo:
    """The stand-in device of ``--dry-run-cpu``: the CPU EP, this machine's memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
        memory: int | None = kib // 1024
    except (OSError, StopIteration, ValueError):
        memory = None
    return GpuInfo("CPU dry run (CPUExecutionProvider in place of CUDA)", "none", None, memory, "--dry-run-cpu")


def detect_gpu() -> tuple[GpuInfo | None, str]:
    info, why = query_nvidia_smi()
    if info is not None:
        return info, ""
    info, why2 = query_cudart()
    return (info, "") if info is not None else (None, f"{why}; {why2}")


_DEFS_SCRIPT = """
import json, sys
import onnxruntime as ort
if hasattr(ort, "preload_dlls"):
    ort.preload_dlls()
out = [[d.provider, d.domain, d.op_name, int(d.version_range[0]), int(d.version_range[1]),
        {k: sorted(v) for k, v in dict(d.type_constraints).items()}]
       for d in ort.capi._pybind_state.get_all_opkernel_def() if d.provider == sys.argv[1]]
sys.stdout.write(json.dumps(out))
"""
# A probe child never outlives this (issue 41 item 4): a hung CUDA initialisation must not eat the run.
CHILD_TIMEOUT_S: Final = 90


def child_failure(what: str, returncode: int, stderr: str) -> str:
    """One line for a probe child that failed: the signal that killed it, or its last error line."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in stderr.splitlines()]
    tail = ([line for line in lines if any(c.isalpha() for c in line)] or ["no output"])[-1][:300]
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"{PROBE_ERROR}{what}: the child was killed by {name} ({tail})"
    return f"{PROBE_ERROR}{what} failed (exit {returncode}): {tail}"


@functools.cache
def opkernel_defs(ep: str) -> tuple[tuple[str, str, int, int, dict[str, list[str]]], ...]:
    """``get_all_opkernel_def`` of ``ep``: (domain, op, since, until, type constraints) per kernel.

    Read in a child interpreter: onnxruntime-gpu 1.31.1 crashes the process (SIGSEGV) in this call
    when the CUDA libraries cannot be loaded; here that (a signal, an error exit, or no answer in
    CHILD_TIMEOUT_S) is a RuntimeError starting PROBE_ERROR, which fails only the test that needs
    the registry (the kernel dump)."""
    what = f"get_all_opkernel_def for {ep}"
    try:
        proc = subprocess.run([sys.executable, "-c", _DEFS_SCRIPT, ep], capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{PROBE_ERROR}{what}: no answer in {CHILD_TIMEOUT_S} s (child killed)") from None
    except OSError as exc:
        raise RuntimeError(f"{PROBE_ERROR}{what}: {exc}") from None
    if proc.returncode != 0:
        raise RuntimeError(child_failure(what, proc.returncode, proc.stderr))
    return tuple((d, op, lo, hi, tc) for _p, d, op, lo, hi, tc in json.loads(proc.stdout))


def registry_ops(ep: str = CUDA_EP) -> tuple[frozenset[str], str]:
    """(com.microsoft ops with a kernel of ``ep``, the probe error or ""): a broken registry child
    leaves the set empty and the other probes (one-node sessions) decide."""
    try:
        return frozenset(op for domain, op, *_ in opkernel_defs(ep) if domain == MS_DOMAIN), ""
    except RuntimeError as exc:
        return frozenset(), str(exc)


def cuda_kernel_ops(ort: Any, ep: str = CUDA_EP) -> frozenset[str]:
    """com.microsoft op names with a kernel of ``ep`` in this onnxruntime build (kernel registry);
    RuntimeError (PROBE_ERROR) when the registry child fails."""
    return frozenset(op for domain, op, *_ in opkernel_defs(ep) if domain == MS_DOMAIN)


def _schema(ort: Any, op: str, domain: str) -> Any | None:
    for s in ort.capi._pybind_state.get_all_operator_schema():
        if s.name == op and s.domain == domain:
            return s
    return None


def _probe_model(schema: Any, op: str, domain: str) -> bytes:
    from onnx import TensorProto, helper

    def first_type(type_str: str) -> int:
        allowed = next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == type_str),
                       [type_str])
        for pref in ("tensor(float16)", "tensor(float)", "tensor(int64)", "tensor(int32)", "tensor(uint8)"):
            if pref in allowed:
                return int(getattr(TensorProto, pref[7:-1].upper()))
        return TensorProto.FLOAT16

    inputs, names = [], []
    for k, formal in enumerate(schema.inputs):
        if str(formal.option).endswith("Optional"):
            names.append("")
            continue
        name = f"in{k}"
        names.append(name)
        inputs.append(helper.make_tensor_value_info(name, first_type(formal.typeStr), None))
    while names and names[-1] == "":
        names.pop()
    outputs = [helper.make_tensor_value_info(f"out{k}", first_type(f.typeStr), None)
               for k, f in enumerate(schema.outputs) if not str(f.option).endswith("Optional")]
    attrs: dict[str, Any] = {}
    for name, attr in schema.attributes.items():
        if attr.required:
            attrs[name] = 1
    node = helper.make_node(op, names, [o.name for o in outputs], domain=domain, **attrs)
    graph = helper.make_graph([node], "probe", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(domain, 1)],
                              ir_version=IR_VERSION)
    return bytes(model.SerializeToString())


NO_KERNEL_MARKERS: Final = (
    "NOT_IMPLEMENTED",
    "Could not find an implementation",
    "fallback to CPU EP has been explicitly disabled",
)
GRAPH_ERROR_MARKERS: Final = ("ShapeInferenceError", "TypeInferenceError", "INVALID_GRAPH", "Type Error")
PRESENT: Final = "present"
ABSENT: Final = "absent"
INCONCLUSIVE: Final = "inconclusive"
ERROR: Final = "error"
# Texts of a kernel constructor refusing the generic probe node: the kernel exists.
CTOR_MARKERS: Final = ("INVALID_ARGUMENT", "Attribute", "attribute", "must be", "Input ", "input ", "shape")


def op_session(ort: Any, op: str, *, ep: str, domain: str = MS_DOMAIN) -> tuple[str, str]:
    """Creates a one-node session of ``op`` on ``ep`` alone: (present|absent|inconclusive, why)."""
    schema = _schema(ort, op, domain)
    if schema is None:
        return ABSENT, f"onnxruntime {ort.__version__} has no schema for {domain}::{op}"
    model = _probe_model(schema, op, domain)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    if ep != CPU_EP:
        # Only `ep`: a node it cannot take must fail session creation instead of running on CPU.
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    try:
        ort.InferenceSession(model, so, providers=[ep], enable_fallback=0)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        if any(m in str(exc) for m in NO_KERNEL_MARKERS):
            return ABSENT, f"no {ep} kernel for {domain}::{op}: {first}"
        if any(m in str(exc) for m in GRAPH_ERROR_MARKERS):
            return INCONCLUSIVE, f"the probe node for {domain}::{op} failed graph checks: {first}"
        if any(m in str(exc) for m in CTOR_MARKERS):
            return PRESENT, f"kernel constructor ran and rejected the probe node: {first}"
        return ERROR, f"{PROBE_ERROR}{domain}::{op} on {ep}: {first}"
    return PRESENT, "session created"


def offload_config(ort: Any) -> tuple[bool, str]:
    """Whether this build implements ``session.moe.offload.*`` (rejects an unknown key)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                              ir_version=IR_VERSION).SerializeToString()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.moe.offload.q38_probe_unknown_key", "1")
    try:
        ort.InferenceSession(model, so, providers=[CPU_EP], enable_fallback=0)
    except Exception as exc:
        if "Unknown session.moe.offload.* configuration key" in str(exc):
            return True, "session.moe.offload.* is parsed"
        return False, f"{PROBE_ERROR}session.moe.offload.*: {(str(exc).strip().splitlines() or [''])[0][:300]}"
    return False, f"onnxruntime {ort.__version__} ignores session.moe.offload.* (no QMoE offload support)"


@dataclasses.dataclass(frozen=True)
class OrtFeatures:
    version: str
    providers: tuple[str, ...]
    cuda_kernels: frozenset[str]
    offload: tuple[bool, str]
    ops: Mapping[str, tuple[str, str]]
    registry_error: str = ""  # the kernel registry child's failure (fails the dump test only)

    def has_cuda_op(self, op: str) -> tuple[bool, str]:
        """(True, how) when the build has a CUDA kernel for ``op``; (False, exact reason) otherwise."""
        status, why = self.ops.get(op, (INCONCLUSIVE, "not probed"))
        if status == PRESENT:
            return True, why
        if op in self.cuda_kernels:
            return True, "in the CUDA kernel registry"
        if status == ERROR:
            return False, why
        if status == ABSENT:
            return False, why
        return False, f"onnxruntime {self.version}: {MS_DOMAIN}::{op} not in the CUDA kernel registry ({why})"


PROBED_OPS: Final = (RMS_NORM_ROTARY, HC_LOW_RANK_MIX, QMOE, DYNAMIC_SPARSE_ATTENTION,
                     SPARSE_ATTENTION_INDEXER, CAUSAL_CONV_WITH_STATE, GATED_DELTA_NET)


def kernel_registry(ort: Any, ep: str = CUDA_EP) -> dict[str, Any]:
    """The EP's registered kernels (``get_all_opkernel_def``) as a fact document, sorted.

    One entry per (domain, op) with every kernel's version range and type constraints -- the
    form of contracts/schemas' dumps -- so a committed file compares line by line.
    """
    ops: dict[tuple[str, str], list[list[Any]]] = {}
    for domain, op, lo, hi, tc in opkernel_defs(ep):
        ops.setdefault((domain, op), []).append([lo, hi, dict(sorted(tc.items()))])
    kernels = [{"domain": dom, "name": op, "kernels": sorted(ks, key=lambda k: (k[0], k[1], repr(k[2])))}
               for (dom, op), ks in sorted(ops.items())]
    return {"format": "q38.ort-ep-kernels/1", "ort_version": ort.__version__, "provider": ep,
            "regenerate": "tests/gpu: test_dump_the_ep_kernel_registry (nox -s gpu / run-offline.sh)",
            "kernels": kernels}


def probe_ort(ort: Any, *, ep: str = CUDA_EP) -> OrtFeatures:
    providers = tuple(ort.get_available_providers())
    ops = {op: op_session(ort, op, ep=ep) for op in PROBED_OPS} if ep in providers else {}
    kernels, registry_error = registry_ops(ep)
    return OrtFeatures(ort.__version__, providers, kernels, offload_config(ort), ops, registry_error)


def served_by(ort: Any) -> dict[str, Any]:
    """Which CUDA EP this onnxruntime would use, and what it offers: ``get_build_info()``, the
    available providers, the EP devices (``get_ep_devices``), and whether the build bundles the
    CUDA plugin EP (``cuda-plugin-ep=`` in the build info; onnxruntime/__init__.py registers it at
    import) or the CUDA EP is built in (libonnxruntime_providers_cuda.so beside the core)."""
    import os

    info: dict[str, Any] = {"build_info": "", "providers": [], "ep_devices": [], "cuda_ep": "none"}
    try:
        info["build_info"] = str(ort.get_build_info()) if hasattr(ort, "get_build_info") else ""
        info["providers"] = list(ort.get_available_providers())
        devices = ort.get_ep_devices() if hasattr(ort, "get_ep_devices") else []
        info["ep_devices"] = [f"{d.ep_name} ({getattr(d, 'ep_vendor', '?')}, "
                              f"{getattr(getattr(d, 'device', None), 'type', '?')})" for d in devices]
    except Exception as exc:  # a build without these bindings: record why, never crash the header
        info["error"] = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    plugin = getattr(ort, "_get_cuda_plugin_ep_library_path", lambda: None)()
    if plugin:
        info["cuda_ep"] = f"plugin ({plugin})"
    elif CUDA_EP in info["providers"]:
        capi = os.path.join(os.path.dirname(ort.__file__), "capi")
        info["cuda_ep"] = f"built-in ({os.path.join(capi, 'libonnxruntime_providers_cuda.so')})"
    return info


def ort_build_info() -> dict[str, Any]:
    """The onnxruntime build: version, package (onnxruntime / onnxruntime-gpu), CUDA / cuDNN it was
    built for (``onnxruntime.capi.build_and_package_info``, where the build has it)."""
    import importlib.metadata

    import onnxruntime as ort

    info: dict[str, Any] = {"version": ort.__version__, "device": ort.get_device()}
    for dist in ("onnxruntime-gpu", "onnxruntime"):  # the one whose version is the imported module's
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if version == ort.__version__:
            info["package"] = f"{dist}=={version}"
            break
    try:
        from onnxruntime.capi import build_and_package_info as bpi

        info.update({k: getattr(bpi, k) for k in ("cuda_version", "cudnn_version", "package_name") if hasattr(bpi, k)})
    except ImportError:
        pass
    return info
