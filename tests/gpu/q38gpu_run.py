"""Running synthetic packages on onnxruntime for the GPU suite: packages, feeds, steps, diffs.

Packages are made through the q38 command line (``q38 synth`` / ``optimize`` / ``offload``,
SPEC §3), the most stable public surface; a subcommand that is not registered yet makes the test
skip with that reason, any other failure fails the test with the command's stderr.

Feeds follow docs/synthetic-model.md: ``input_ids``/``position_ids`` [B,S], ``attention_mask``
[B,T], ``past.*``/``past_key_values.*`` fed from the previous step's ``present.*`` twins.
Symbolic dims resolve by name (B, S, T, P and their long spellings).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import q38gpu_assign as gassign
import q38gpu_env as genv

# The device's providers. Package sessions leave ORT's shape subgraphs on the CPU EP (as the CUDA EP
# intends) and record the assignment (q38gpu_assign): a compute node on the CPU fails the test, named.
# One-node probes keep session.disable_cpu_ep_fallback=1 (strict=True).
CUDA_PROVIDERS: Final[list[Any]] = [(genv.CUDA_EP, {"device_id": "0"})]
DEVICE_PROVIDERS: Final = CUDA_PROVIDERS  # the same list; --dry-run-cpu puts the CPU EP in it
CPU_PROVIDERS: Final = [genv.CPU_EP]
NO_CPU_FALLBACK: Final = {"session.disable_cpu_ep_fallback": "1"}


def use_cpu_in_place_of_cuda() -> None:
    """``--dry-run-cpu``: every device session of the suite runs on the CPU EP."""
    CUDA_PROVIDERS[:] = [genv.CPU_EP]


def device_ep() -> str:
    """The EP device sessions run on (CUDA, or the CPU EP in a dry run)."""
    first = CUDA_PROVIDERS[0]
    return first if isinstance(first, str) else str(first[0])


def target_for(ort_version: str) -> str | None:
    """The ``q38 synth --target-ort`` value for the installed onnxruntime (None: not in the table)."""
    from q38.ort_targets import ORT_TARGETS

    return ort_version if ort_version in ORT_TARGETS else None

# (rtol, atol) per comparison and output dtype; integer outputs must match exactly.
TOLERANCES: Final[Mapping[str, Mapping[str, tuple[float, float]]]] = {
    "cuda_vs_cpu": {"float16": (2e-2, 2e-2), "bfloat16": (5e-2, 5e-2), "float32": (1e-3, 1e-3)},
    "optimized_vs_unoptimized": {"float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2), "float32": (1e-4, 1e-4)},
    "offload_vs_resident": {"float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2), "float32": (1e-5, 1e-5)},
}

DIM_BATCH: Final = frozenset({"B", "batch", "batch_size"})
DIM_SEQ: Final = frozenset({"S", "seq", "sequence_length", "seq_len"})
DIM_TOTAL: Final = frozenset({"T", "total", "total_sequence_length", "total_seq_len"})
DIM_PAST: Final = frozenset({"P", "past", "past_sequence_length", "past_seq_len"})


class Unavailable(Exception):
    """A capability the test needs is missing; the message is the skip reason."""


def cuda_session_works(ort: Any) -> tuple[bool, str]:
    """Creates and runs a one-node CUDA session with CPU fallback disabled."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                              ir_version=genv.IR_VERSION).SerializeToString()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    try:
        sess = ort.InferenceSession(model, so, providers=[genv.CUDA_EP], enable_fallback=0)
        y = sess.run(None, {"x": np.ones(4, np.float32)})[0]
    except Exception as exc:
        return False, error_text(exc)
    return bool(np.all(y == 2)), "ok" if np.all(y == 2) else f"wrong result {y}"


# --------------------------------------------------------------------------- packages


def q38(*args: str | os.PathLike[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "q38", *(os.fspath(a) for a in args)], capture_output=True, text=True,
                          cwd=cwd, check=False)


class PackageFactory:
    """Synthetic, optimized and offload packages, made once per session and reused."""

    def __init__(self, root: Path, *, target_ort: str | None = None) -> None:
        self.root = root
        self.target_ort = target_ort  # q38 synth --target-ort: the installed onnxruntime's forms
        self._made: dict[tuple[str, ...], Path] = {}
        self.seconds: dict[str, float] = {}  # package directory name -> seconds its command took

    def _cmd(self, key: tuple[str, ...], out: Path, *args: str | os.PathLike[str]) -> Path:
        if key in self._made:
            return self._made[key]
        if (out / "genai_config.json").is_file():  # prepared before the run (run-offline.sh, Q38_GPU_PACKAGES)
            self._made[key] = out
            return out
        start = time.perf_counter()
        proc = q38(*args)
        self.seconds[out.name] = time.perf_counter() - start
        if proc.returncode != 0:
            err = proc.stderr.strip().splitlines()
            last = err[-1] if err else f"exit {proc.returncode}"
            if "invalid choice" in proc.stderr or "No module named" in proc.stderr:
                raise Unavailable(f"q38 {args[0]} is not available in this checkout: {last}")
            raise RuntimeError(f"q38 {' '.join(str(a) for a in args)} failed (exit {proc.returncode}): {proc.stderr}")
        self._made[key] = out
        return out

    def synth(self, *, preset: str = "tiny", variant: str = "cpu", layout: str = "flat", **extra: str) -> Path:
        if self.target_ort is not None:
            extra.setdefault("target_ort", self.target_ort)
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in sorted(extra.items())]
        key = ("synth", preset, variant, layout, *flags)
        out = self.root / "-".join(key).replace("=", "_").replace("--", "")
        return self._cmd(key, out, "synth", out, "--preset", preset, "--variant", variant, "--layout", layout, *flags)

    def optimize(self, src: Path, *, target: str = "cuda") -> Path:
        out = src.with_name(f"{src.name}-opt-{target}")
        pinned = ["--target-ort", self.target_ort] if self.target_ort else []
        return self._cmd(("optimize", str(src), target), out, "optimize", src, out, "--target", target, *pinned)

    def offload(self, src: Path, *, mode: str = "required") -> Path:
        out = src.with_name(f"{src.name}-offload-{mode}")
        return self._cmd(("offload", str(src), mode), out, "offload", out, "--from-package", src,
                         "--offload-mode", mode)


def target_graph(package: Path) -> Path:
    try:
        from q38.package import open_package

        return Path(open_package(package).graph_path("target"))
    except ImportError:
        return package / "model.onnx"


def _walk(data: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(data, Mapping):
        for k, v in data.items():
            yield str(k), v
            yield from _walk(v)
    elif isinstance(data, list):
        for v in data:
            yield from _walk(v)


def offload_entries(package: Path, *, mode: str | None = None) -> dict[str, str]:
    """The package's ``session.moe.offload.*`` config entries (``mode`` overrides the package's)."""
    config = json.loads((package / "genai_config.json").read_text(encoding="utf-8"))
    entries: dict[str, str] = {}
    for k, v in _walk(config):  # first occurrence: the decoder's own session options
        if k.startswith("session.moe.offload.") and not isinstance(v, (dict, list)):
            entries.setdefault(k, str(v))
    if mode is not None:
        entries["session.moe.offload.mode"] = mode
    return dict(sorted(entries.items()))


# --------------------------------------------------------------------------- sessions and feeds


def session(ort: Any, model: Path, *, providers: Sequence[Any], config: Mapping[str, str] | None = None,
            profile_prefix: str | None = None, cuda_graph: bool = False, strict: bool = False) -> Any:
    """A session on ``providers`` that records ORT's EP assignment (:func:`placement` reads it).

    ``enable_fallback=0``: the Python binding would otherwise retry a failed CUDA session on the CPU
    EP and report the retry's error ("Conflicting session configuration") instead of the real one
    (a missing CUDA library). ``strict``: ``session.disable_cpu_ep_fallback=1`` (one-node probes
    only; a package's shape subgraph belongs on the CPU EP)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    entries = {**gassign.record_entries(), **(config or {})}
    if strict:
        entries = {**NO_CPU_FALLBACK, **entries}
    if cuda_graph and device_ep() == genv.CUDA_EP:
        providers = [(genv.CUDA_EP, {"device_id": "0", "enable_cuda_graph": "1"})]
    for k, v in entries.items():
        so.add_session_config_entry(k, v)
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(os.fspath(model), so, providers=list(providers), enable_fallback=0)


def error_text(exc: BaseException) -> str:
    """ORT's first line of ``exc`` and of each cause under it (the real error, not a retry's)."""
    lines: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(lines) < 4:
        first = (str(seen).strip().splitlines() or [type(seen).__name__])[0][:300]
        lines.append(f"{type(seen).__name__}: {first}")
        seen = seen.__cause__ or seen.__context__
    return " <- caused by ".join(lines)


def no_kernel(exc: BaseException) -> bool:
    """Whether a session creation failed because no EP has a kernel for a node (NOT_IMPLEMENTED):
    the package cannot exist on this build, a skip the gate's manifest judges; any other error is
    a failure."""
    return "NOT_IMPLEMENTED" in str(exc) or "Failed to find kernel" in str(exc)


def placement(sess: Any, model: Path, *, ep: str | None = None) -> dict[str, Any]:
    """ORT's assignment of ``sess`` for the figures: nodes per EP, the CPU EP's nodes and those of
    them that are compute, not shape (``cpu_compute_nodes``; a device run fails on any)."""
    nodes = gassign.assignment(sess)
    doc = gassign.summary(nodes)
    doc["recorded"] = bool(nodes)
    doc["cpu_compute_nodes"] = gassign.cpu_compute_nodes(
        nodes, device_ep=ep or device_ep(), shape_nodes=gassign.shape_subgraph(model),
        model_nodes=gassign.model_node_names(model))
    return doc


def present_name(past: str) -> str:
    for prefix in ("past_key_values.", "past."):
        if past.startswith(prefix):
            return "present." + past[len(prefix):]
    raise ValueError(f"{past}: not a past-state input name")


_NP = {"tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(int64)": np.int64,
       "tensor(int32)": np.int32, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def _dim(d: Any, *, batch: int, seq: int, past: int, name: str) -> int:
    if isinstance(d, int):
        return d
    if d in DIM_BATCH:
        return batch
    if d in DIM_SEQ:
        return seq
    if d in DIM_TOTAL:
        return past + seq
    if d in DIM_PAST or name.startswith("past"):
        return past
    raise ValueError(f"input {name}: cannot resolve the symbolic dim {d!r}")


@dataclasses.dataclass
class Stepper:
    """Prefill then decode steps, each feeding the previous presents as pasts."""

    sess: Any
    vocab: int
    seed: int = 0
    batch: int = 1

    def feeds(self, *, seq: int, past: int, state: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed + past)
        out: dict[str, np.ndarray] = {}
        for meta in self.sess.get_inputs():
            shape = [_dim(d, batch=self.batch, seq=seq, past=past, name=meta.name) for d in meta.shape]
            dtype = _NP.get(meta.type, np.float32)
            if meta.name == "input_ids":
                out[meta.name] = rng.integers(0, self.vocab, size=shape, dtype=np.int64)
            elif meta.name == "position_ids":
                out[meta.name] = np.broadcast_to(np.arange(past, past + seq, dtype=dtype), shape).copy()
            elif meta.name == "attention_mask":
                out[meta.name] = np.ones(shape, dtype=dtype)
            elif state is not None and present_name(meta.name) in state:
                out[meta.name] = state[present_name(meta.name)]
            else:
                out[meta.name] = np.zeros(shape, dtype=dtype)
        return out

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.sess.get_outputs()]
        return dict(zip(names, self.sess.run(names, dict(feeds)), strict=True))

    def steps(self, *, prefill: int, decode: int) -> list[dict[str, np.ndarray]]:
        results = [self.run(self.feeds(seq=prefill, past=0))]
        for k in range(decode):
            results.append(self.run(self.feeds(seq=1, past=prefill + k, state=results[-1])))
        return results


def greedy(stepper: Stepper, *, prompt: int, tokens: int) -> list[int]:
    """Greedy token IDs: a seeded prompt of ``prompt`` tokens, then ``tokens`` argmax steps."""
    out = stepper.run(stepper.feeds(seq=prompt, past=0))
    ids: list[int] = []
    for k in range(tokens):
        ids.append(int(np.argmax(out["logits"][0, -1].astype(np.float32))))
        feeds = stepper.feeds(seq=1, past=prompt + k, state=out)
        feeds["input_ids"] = np.full_like(feeds["input_ids"], ids[-1])
        out = stepper.run(feeds)
    return ids


def device_name() -> str:
    """The OrtValue device of device sessions: ``cuda`` (or ``cpu`` in the dry run)."""
    return "cuda" if device_ep() == genv.CUDA_EP else "cpu"


def shrink_options(ort: Any) -> Any:
    """RunOptions that hand the arena's free chunks back after the run
    (``memory.enable_memory_arena_shrinkage``): a prefill's activations do not stay in the decode's
    measured peak."""
    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:0" if device_name() == "cuda" else "cpu:0")
    return ro


def prefill_bound(ort: Any, stepper: Stepper, *, length: int, run_options: Any = None) -> tuple[float, dict[str, Any]]:
    """One prefill of ``length`` seeded tokens with every output bound to the device (no host copy
    inside the timing). Returns (seconds, the outputs as device OrtValues)."""
    sess = stepper.sess
    outputs = [o.name for o in sess.get_outputs()]
    binding = sess.io_binding()
    for name, value in stepper.feeds(seq=length, past=0).items():
        binding.bind_cpu_input(name, value)
    for name in outputs:
        binding.bind_output(name, device_name())
    t0 = time.perf_counter()
    if run_options is None:
        sess.run_with_iobinding(binding)
    else:
        sess.run_with_iobinding(binding, run_options)
    binding.synchronize_outputs()
    seconds = time.perf_counter() - t0
    return seconds, dict(zip(outputs, binding.get_outputs(), strict=True))


def last_token(values: Mapping[str, Any]) -> tuple[int, bool]:
    """(greedy token of the last logits row, whether that row is finite). The row is read on the host."""
    logits = values["logits"].numpy()
    row = logits[0, -1].astype(np.float32)
    return int(np.argmax(row)), bool(np.isfinite(row).all())


def prefill_state(ort: Any, stepper: Stepper, *, start: int) -> tuple[dict[str, Any], int]:
    """A cache of ``start`` tokens made by a real prefill (not zeros): (present OrtValues renamed to
    the past inputs they feed, the first greedy token). The arena shrinks after it."""
    _seconds, values = prefill_bound(ort, stepper, length=start, run_options=shrink_options(ort))
    pasts = [i.name for i in stepper.sess.get_inputs() if i.name.startswith("past")]
    state = {p: values[present_name(p)] for p in pasts}
    token, _finite = last_token(values)
    return state, token


def decode_iobinding(ort: Any, stepper: Stepper, *, start: int, tokens: int, state: Mapping[str, Any] | None = None,
                     token: int | None = None) -> tuple[list[float], list[int]]:
    """Greedy decode of ``tokens`` steps after a cache of ``start`` tokens, with IOBinding: the
    state stays on the device (present OrtValues bound as the next step's pasts), only the token
    id goes in and the logits row comes out. ``state``/``token``: the cache of
    :func:`prefill_state` (reused by every round: a step binds new presents, the prefilled values
    stay); without them the cache is prefilled here. Returns (seconds per step, token ids).

    Not a CUDA Graph loop: the cache grows (new shapes and addresses every step); see
    q38gpu_graph for the loop a CUDA Graph may capture."""
    if state is None or token is None:
        state, token = prefill_state(ort, stepper, start=start)
    device = device_name()
    sess = stepper.sess
    outputs = [o.name for o in sess.get_outputs()]
    pairs = {present_name(p): p for p in state}
    times: list[float] = []
    ids: list[int] = []
    for k in range(tokens):
        binding = sess.io_binding()
        small = stepper.feeds(seq=1, past=start + k)
        small["input_ids"] = np.full_like(small["input_ids"], token)
        for name, value in small.items():
            if name.startswith("past"):
                binding.bind_ortvalue_input(name, state[name])
            else:
                binding.bind_cpu_input(name, value)
        for name in outputs:
            binding.bind_output(name, "cpu" if name == "logits" else device)
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)
        binding.synchronize_outputs()
        times.append(time.perf_counter() - t0)
        values = dict(zip(outputs, binding.get_outputs(), strict=True))
        token, _finite = last_token(values)
        ids.append(token)
        state = {pairs[n]: v for n, v in values.items() if n in pairs}
    return times, ids


def context_length(package: Path) -> int | None:
    """``model.context_length`` (else ``search.max_length``) of the package config."""
    config = json.loads((package / "genai_config.json").read_text(encoding="utf-8"))
    value = config.get("model", {}).get("context_length") or config.get("search", {}).get("max_length")
    return int(value) if value else None


def layer_count(package: Path) -> int:
    """``model.decoder.num_hidden_layers`` of the package config (the slice's layers, for the
    48-layer extrapolation)."""
    config = json.loads((package / "genai_config.json").read_text(encoding="utf-8"))
    return int(config["model"]["decoder"]["num_hidden_layers"])


def vocab_of(sess: Any, default: int = 512) -> int:
    for o in sess.get_outputs():
        if o.name == "logits" and o.shape and isinstance(o.shape[-1], int):
            return int(o.shape[-1])
    return default


# --------------------------------------------------------------------------- comparison


@dataclasses.dataclass(frozen=True)
class Diff:
    step: int
    name: str
    dtype: str
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""

    def line(self) -> str:
        flag = "ok " if self.ok else "BAD"
        return f"{flag} step {self.step} {self.name:<32} {self.dtype:<8} max|d|={self.max_abs:.3e} max rel={self.max_rel:.3e} {self.note}"


def compare_steps(ref: Sequence[Mapping[str, np.ndarray]], got: Sequence[Mapping[str, np.ndarray]],
                  *, comparison: str) -> list[Diff]:
    """Every output of every step, logits and each present state, with the per-dtype tolerance."""
    tol = TOLERANCES[comparison]
    diffs: list[Diff] = []
    for k, (a_step, b_step) in enumerate(zip(ref, got, strict=True)):
        for name in sorted(a_step):
            a, b = a_step[name], b_step.get(name)
            if b is None or a.shape != b.shape:
                diffs.append(Diff(k, name, str(a.dtype), np.inf, np.inf, False,
                                  f"shape {a.shape} vs {None if b is None else b.shape}"))
                continue
            dtype = str(a.dtype)
            if dtype not in tol:
                same = bool(np.array_equal(a, b))
                diffs.append(Diff(k, name, dtype, 0.0 if same else np.inf, 0.0, same, "exact"))
                continue
            rtol, atol = tol[dtype]
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            d = np.abs(a64 - b64)
            finite = bool(np.all(np.isfinite(a64)) and np.all(np.isfinite(b64)))
            rel = d / np.maximum(np.abs(a64), 1e-12)
            ok = finite and bool(np.all(d <= atol + rtol * np.abs(a64)))
            diffs.append(Diff(k, name, dtype, float(d.max(initial=0.0)), float(rel.max(initial=0.0)), ok,
                              "" if finite else "non-finite values"))
    return diffs


# --------------------------------------------------------------------------- profiling


def kernels_in_profile(path: str | os.PathLike[str], *, run_index: int = -1, ep: str = genv.CUDA_EP) -> tuple[int, str]:
    """GPU kernels launched by one run of a profiled session: (count, what was counted).

    CUPTI-enabled builds emit ``cat == "Kernel"`` events; otherwise the count is the number of
    node executions assigned to the CUDA EP (a lower bound on kernel launches).
    """
    events = json.loads(Path(path).read_text(encoding="utf-8"))
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    if runs:
        run = runs[run_index]
        lo, hi = run["ts"], run["ts"] + run["dur"]
        events = [e for e in events if lo <= e.get("ts", -1) <= hi]
    kernels = [e for e in events if e.get("cat") == "Kernel"]
    if kernels:
        return len(kernels), "CUDA kernels (CUPTI)"
    nodes = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")
             and (e.get("args") or {}).get("provider") == ep]
    if ep != genv.CUDA_EP:
        return len(nodes), f"{ep} node executions"
    return len(nodes), "CUDA EP node executions (no CUPTI events in this build)"


def prepare(argv: Sequence[str]) -> int:
    """``q38gpu_run.py prepare ROOT [--profile P] [--dry-run-cpu]``: synthesize the packages the
    throughput tests will ask for into ROOT, and optimize the two variants' packages (so the run
    itself neither synthesizes nor optimizes; run-offline.sh times it); other arguments are ignored."""
    import argparse

    import onnxruntime as ort
    import test_throughput_bench as bench

    parser = argparse.ArgumentParser(prog="q38gpu_run.py prepare")
    parser.add_argument("root", type=Path)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--dry-run-cpu", action="store_true")
    args, _rest = parser.parse_known_args(argv)
    if args.profile:
        os.environ["Q38_GPU_PROFILE"] = args.profile
    gpu = genv.dry_run_gpu() if args.dry_run_cpu else genv.detect_gpu()[0]
    try:
        profile = bench.choose_profile(gpu.memory_mib if gpu else None, dry_run=args.dry_run_cpu)
    except (ValueError, LookupError) as exc:
        print(f"prepare: nothing to prepare: {exc}")
        return 0
    factory = PackageFactory(args.root, target_ort=target_for(ort.__version__))
    wanted = [dict(variant=variant, **bench.synth_args(profile)) for variant in ("cpu", "faithful")]
    optimized = {tuple(sorted(kw.items())) for kw in wanted}  # the variants' packages, optimized here too
    if profile.slice_preset is not None:  # test_slice_decode_extrapolated[cpu]
        wanted.insert(1, dict(variant="cpu", **bench.slice_synth_args(profile)))
    wanted = list({tuple(sorted(kw.items())): kw for kw in wanted}.values())  # the dry run's slice is tiny
    target = "cpu" if args.dry_run_cpu else "cuda"

    def make(kw: dict[str, str]) -> str:
        t0 = time.perf_counter()
        pkg = factory.synth(**kw)
        size = sum(p.stat().st_size for p in pkg.rglob("*") if p.is_file())
        dt = time.perf_counter() - t0
        line = f"prepare: {pkg.name}: {size / 1e9:.2f} GB in {dt:.1f} s ({size / 1e9 / max(dt, 1e-9):.2f} GB/s)"
        if tuple(sorted(kw.items())) in optimized:
            t1 = time.perf_counter()
            opt = factory.optimize(pkg, target=target)  # test_kernels_per_verification_cycle's optimized form
            line += f"; optimized -> {opt.name} in {time.perf_counter() - t1:.1f} s"
        return line

    # One q38 synth per core at once (each is one CPU-bound process writing its own directory; the
    # bytes do not depend on the order): the H200 runner's 16 cores make all three at once.
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, min(len(wanted), cpus))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for line in pool.map(make, wanted):
            print(line)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    if sys.argv[1:2] != ["prepare"]:
        sys.exit("usage: q38gpu_run.py prepare ROOT [--profile P] [--dry-run-cpu]")
    sys.exit(prepare(sys.argv[2:]))
