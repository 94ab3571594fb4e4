"""Probe which operators the installed onnxruntime runs on its CPU execution provider.

For every operator schema of a probed domain (``com.microsoft`` and ORT's own contrib schemas
in the ONNX domain, e.g. ``SimplifiedLayerNormalization``) and every dtype its *compute type*
admits, the probe builds a well-typed one-node model from the schema ORT publishes
(``get_all_operator_schema()``) and asks a real ``InferenceSession`` on ``CPUExecutionProvider``
to accept it. Each attempt ends in one of four verdicts:

* ``kernel``   the session was created (directly, or through the Cast nodes ORT inserts to run
  a float16 node on a float32-only kernel: that still runs on CPU);
* ``ctor``     ORT found a kernel and its constructor rejected the probe's attribute values
  ("Exception during initialization"): the kernel exists;
* ``none``     ORT's own kernel-lookup texts ("Could not find an implementation for OP(",
  "Failed to find kernel for ..."): no CPU kernel for these types;
* ``bad``      anything else (a type/shape-inference error, an invalid model, a crash of the
  probe process): the *probe* was at fault, which says nothing about the kernel.

A ``bad`` attempt is retried with other input layouts and type bindings (all inputs present /
required inputs only; secondary type constraints bound like the primary, as the first allowed
type, or as a CPU kernel definition ORT registers binds them). A case whose every attempt is
``bad`` is recorded ``undetermined`` -- never ``none`` -- and :mod:`q38.ort_kernels` answers it
from ORT's registered CPU kernel definitions (``get_all_opkernel_def()``) instead.

Some schemas cannot be satisfied generically (a required ``STRING`` attribute whose valid values
are only in the schema's prose, a minimum the shape-inference function enforces, an attribute
that selects the output type): the few the Qwen3.8 packages use get their documented values in
:data:`HINTS`. Schemas deprecated at the probe's opset are not probed (no model at opset 21 can
use them).

Session creation can abort the process (an out-of-range input index in a kernel constructor
given a layout the kernel does not expect), so attempts run in child processes that report each
attempt before and after it; a child that dies costs one ``bad`` attempt and is restarted on the
rest. This module imports no q38 code so that it runs as the child script itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Final, TypeAlias

if TYPE_CHECKING:
    import onnx

    # onnxruntime's own schema class (what get_all_operator_schema() returns), not onnx's.
    from onnxruntime.capi.onnxruntime_pybind11_state.schemadef import OpSchema as OrtOpSchema

MS_DOMAIN: Final = "com.microsoft"
ONNX_DOMAIN: Final = ""
ONNX_OPSET: Final = 21
MS_OPSET: Final = 1
CPU_PROVIDER: Final = "CPUExecutionProvider"
PROBED_DOMAINS: Final = (MS_DOMAIN, ONNX_DOMAIN)
# Where ORT keeps its own schemas of ONNX-domain contrib ops (schema.file).
_ORT_CONTRIB_SCHEMA_DIR: Final = "graph/contrib_ops/"

VERDICT_KERNEL: Final = "kernel"
VERDICT_CTOR: Final = "ctor"
VERDICT_NONE: Final = "none"
VERDICT_UNDETERMINED: Final = "undetermined"
_BAD: Final = "bad"
# A python attribute value helper.make_node takes for the INT(S) / FLOAT(S) / STRING(S) kinds.
AttrValue: TypeAlias = int | float | str | list[int] | list[float] | list[str]



@dataclass(frozen=True)
class Hint:
    """What a schema's prose requires of a valid node, which no generic rule can read off it."""

    attributes: dict[str, AttrValue] = field(default_factory=dict)
    omit_inputs: frozenset[str] = frozenset()
    # Attributes that select the output type, per compute dtype (e.g. output_fp16).
    dtype_attributes: dict[str, dict[str, AttrValue]] = field(default_factory=dict)


# The ops of Qwen3.8 packages whose inference rejects the generic placeholders; values from
# their schema documentation. Any other such op ends ``undetermined`` (see the module doc).
HINTS: Final[dict[tuple[str, str], Hint]] = {
    (MS_DOMAIN, "NGramHashMapping"): Hint({"max_ngram_size": 2}),
    (MS_DOMAIN, "VarlenNGramHashMapping"): Hint({"max_ngram_size": 2}),
    (MS_DOMAIN, "SparseAttentionIndexer"): Hint({"policy_mode": "qsa", "compress_ratio": 4, "token_budget": 8}),
    (MS_DOMAIN, "PackedSparseAttentionIndexer"): Hint(
        {"policy_mode": "qsa", "compress_ratio": 4, "token_budget": 8, "state_capacity": 8}
    ),
    (MS_DOMAIN, "PackedSparseAttentionIndexerMerge"): Hint(
        {"policy_mode": "append_indices", "max_output_entries": 4},
        omit_inputs=frozenset({"range_starts", "range_ends"}),
    ),
    (MS_DOMAIN, "RMSNormRotary"): Hint(
        {"rotary_embedding_dim": 2}, dtype_attributes={"tensor(float16)": {"output_fp16": 1}}
    ),
}
# Per-type placeholder values for required attributes without a hint.
_GENERIC_ATTRIBUTE: Final[dict[str, AttrValue]] = {
    "INT": 1, "FLOAT": 1.0, "STRING": "none", "INTS": [1], "FLOATS": [1.0], "STRINGS": ["none"],
}
_NO_KERNEL: Final = re.compile(r"Could not find an implementation for \w+\(|Failed to find kernel for ")
_CTOR: Final = "Exception during initialization"
_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]+")
REASON_LIMIT: Final = 240
FLOAT: Final = "tensor(float)"
FLOAT16: Final = "tensor(float16)"
ATTEMPT_LIMIT: Final = 8
ATTEMPT_TIMEOUT: Final = 60.0  # seconds of silence after which a child counts as hung


@dataclass(frozen=True)
class Case:
    """One (domain, op, dtype) question; ``dtype`` is an ORT type string such as ``tensor(float)``."""

    domain: str
    op: str
    dtype: str

    @property
    def key(self) -> str:
        """``domain|op|dtype``: the case's name in the child protocol and the resume state."""
        return f"{self.domain}|{self.op}|{self.dtype}"


@dataclass(frozen=True)
class Outcome:
    """The verdict of one case, the attempt that decided it and a bounded reason."""

    case: Case
    verdict: str
    attempts: int
    reason: str


def _ort() -> ModuleType:
    import onnxruntime  # deferred: heavy; only a probe run needs it

    module: ModuleType = onnxruntime
    return module


def _state() -> ModuleType:
    # deferred: heavy; only a probe run needs it
    from onnxruntime.capi import onnxruntime_pybind11_state

    module: ModuleType = onnxruntime_pybind11_state
    return module


def latest_schemas() -> list[OrtOpSchema]:
    """The latest schema ORT registers for every (domain, op), sorted."""
    latest: dict[tuple[str, str], OrtOpSchema] = {}
    for s in _state().get_all_operator_schema():
        key = (s.domain, s.name)
        if key not in latest or s.since_version > latest[key].since_version:
            latest[key] = s
    return [latest[k] for k in sorted(latest)]


def probed_schemas() -> list[OrtOpSchema]:
    """The schemas the probe covers: com.microsoft, and ORT's own contrib ops in the ONNX domain.

    An ONNX-domain contrib op is e.g. ``SimplifiedLayerNormalization``; ONNX's own ops and schemas
    deprecated at opset 21 are not probed.
    """
    schemas = latest_schemas()
    standard = {s.name for s in schemas if s.domain == ONNX_DOMAIN and _ORT_CONTRIB_SCHEMA_DIR not in s.file}
    return [
        s for s in schemas
        if not s.deprecated
        and (s.domain == MS_DOMAIN or (s.domain == ONNX_DOMAIN and _ORT_CONTRIB_SCHEMA_DIR in s.file and s.name not in standard))
    ]


def compute_slot(schema: OrtOpSchema) -> tuple[str, int, str] | None:
    """Where an op's compute dtype lives: (``output``|``input``, index, type parameter).

    The type parameter of output 0 when it admits several types (T of QMoE, T2 of
    GatherBlockQuantized), else of the first input whose parameter does (SparseAttentionIndexer
    returns int32 indices from T inputs); ``None`` when no slot is type-polymorphic.
    """
    constraints = {t.type_param_str: list(t.allowed_type_strs) for t in schema.type_constraints}
    for kind, params in (("output", schema.outputs[:1]), ("input", schema.inputs)):
        for index, param in enumerate(params):
            if len(constraints.get(param.typeStr, ())) > 1:
                return kind, index, param.typeStr
    return None


def cases_for(schema: OrtOpSchema) -> list[Case]:
    """One case per tensor dtype of the op's compute slot (one case for a monomorphic op)."""
    slot = compute_slot(schema)
    if slot is None:
        params = [*schema.outputs[:1], *schema.inputs[:1]]
        constraints = {t.type_param_str: list(t.allowed_type_strs) for t in schema.type_constraints}
        first = params[0].typeStr if params else "tensor(float)"
        dtype = constraints.get(first, [first])[0]
        return [Case(schema.domain, schema.name, dtype)]
    constraints = {t.type_param_str: list(t.allowed_type_strs) for t in schema.type_constraints}
    return [Case(schema.domain, schema.name, t) for t in constraints[slot[2]] if t.startswith("tensor(")]


def _tensor_type(type_str: str) -> int | None:
    """The TensorProto element type of an ORT type string, ``None`` for non-tensor types."""
    from onnx import TensorProto  # deferred: heavy; only a probe run needs it

    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return None
    inner = type_str[len("tensor("):-1]
    name = {"float": "FLOAT", "double": "DOUBLE", "float16": "FLOAT16", "bfloat16": "BFLOAT16"}.get(inner, inner.upper())
    value = getattr(TensorProto, name, None)
    return int(value) if isinstance(value, int) else None


def _bindings(
    schema: OrtOpSchema, case: Case, kernel_defs: Sequence[dict[str, list[str]]]
) -> Iterator[tuple[dict[str, str], bool]]:
    """Type-parameter bindings to try, each with whether a registered CPU kernel made it.

    First the bindings of every CPU kernel ORT registers for this dtype (a float kernel also
    serves float16, through the Casts ORT inserts), then two generic ones: every other
    parameter like the compute dtype where it may be, or as its first allowed type.
    """
    constraints = {t.type_param_str: list(t.allowed_type_strs) for t in schema.type_constraints}
    slot = compute_slot(schema)
    primary = slot[2] if slot else None

    def complete(seed: dict[str, str], prefer_same: bool) -> dict[str, str]:
        out = dict(seed)
        for param, allowed in constraints.items():
            if param in out:
                continue
            tensors = [t for t in allowed if t.startswith("tensor(")] or allowed
            out[param] = case.dtype if prefer_same and case.dtype in tensors else tensors[0]
        return out

    candidates: list[tuple[dict[str, str], bool]] = []
    for kdef in kernel_defs:
        bound = {p: ts[0] for p, ts in kdef.items() if p in constraints and ts}
        if primary:
            served = kdef.get(primary, [case.dtype])
            if case.dtype not in served and not (case.dtype == FLOAT16 and FLOAT in served):
                continue
            bound[primary] = case.dtype
        candidates.append((complete(bound, True), True))
    seed = {primary: case.dtype} if primary else {}
    candidates += [(complete(seed, True), False), (complete(seed, False), False)]
    seen: list[dict[str, str]] = []
    for binding, registered in candidates:
        if binding not in seen:
            seen.append(binding)
            yield binding, registered


def attempt_models(
    schema: OrtOpSchema, case: Case, kernel_defs: Sequence[dict[str, list[str]]], limit: int = ATTEMPT_LIMIT
) -> Iterator[tuple[bytes, bool]]:
    """The serialized one-node models to try for ``case`` (lazy, at most ``limit``, no duplicates).

    Each comes with whether its type binding is one of a registered CPU kernel.
    """
    made: list[bytes] = []
    for binding, registered in _bindings(schema, case, kernel_defs):
        for with_optional in (True, False):
            model = _one_node_model(schema, case, binding, with_optional)
            if model is not None and model not in made:
                made.append(model)
                yield model, registered
            if len(made) >= limit:
                return


def _one_node_model(schema: OrtOpSchema, case: Case, binding: dict[str, str], with_optional: bool) -> bytes | None:
    """A one-node model with rank-unknown graph values (shape inference has nothing to reject).

    ``with_optional``: every optional input and output present, else only the required ones
    (an omitted optional slot in the middle is the empty name, as ONNX spells it).
    """
    from onnx import helper  # deferred: heavy; only a probe run needs it

    hint = HINTS.get((schema.domain, schema.name), Hint())

    def slots(
        params: Sequence[OrtOpSchema.FormalParameter], prefix: str, omit: frozenset[str]
    ) -> tuple[list[str], list[onnx.ValueInfoProto]] | None:
        names: list[str] = []
        infos = []
        for index, param in enumerate(params):
            if param.name in omit or (param.option.name == "Optional" and not with_optional):
                names.append("")
                continue
            elem = _tensor_type(binding.get(param.typeStr, param.typeStr))
            if elem is None:
                return None
            names.append(f"{prefix}{index}")
            infos.append(helper.make_tensor_value_info(names[-1], elem, None))
        while names and names[-1] == "":
            names.pop()
        return names, infos

    ins = slots(schema.inputs, "in", hint.omit_inputs)
    outs = slots(schema.outputs, "out", frozenset())
    if ins is None or outs is None:
        return None
    attrs = {**hint.attributes, **hint.dtype_attributes.get(case.dtype, {})}
    for name, attr in schema.attributes.items():
        if attr.required and name not in attrs:
            if attr.type.name not in _GENERIC_ATTRIBUTE:
                return None  # a GRAPH / TENSOR / SPARSE_TENSOR attribute: no generic value
            attrs[name] = _GENERIC_ATTRIBUTE[attr.type.name]
    node = helper.make_node(schema.name, ins[0], outs[0], domain=schema.domain)
    node.attribute.extend(helper.make_attribute(k, v) for k, v in sorted(attrs.items()))  # make_node's order
    graph = helper.make_graph([node], "probe", ins[1], outs[1])
    versions = {ONNX_DOMAIN: ONNX_OPSET, MS_DOMAIN: MS_OPSET}
    versions[schema.domain] = max(versions[schema.domain], schema.since_version)
    opsets = [helper.make_opsetid(d, v) for d, v in versions.items()]
    return bytes(helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString())


def classify(error: str | None) -> str:
    """The verdict of one session attempt from ORT's error text (``None``: created)."""
    if error is None:
        return VERDICT_KERNEL
    if _NO_KERNEL.search(error):
        return VERDICT_NONE
    if _CTOR in error:
        return VERDICT_CTOR
    return _BAD


def bounded_reason(text: str) -> str:
    """One line, no memory addresses, at most REASON_LIMIT characters (stable across runs)."""
    line = _ADDRESS.sub("0x?", " ".join(text.split()))
    return line if len(line) <= REASON_LIMIT else line[: REASON_LIMIT - 1] + "…"


def kernel_defs() -> dict[tuple[str, str], list[dict[str, list[str]]]]:
    """ORT's registered CPU kernel definitions: (domain, op) -> type bindings of each kernel."""
    table: dict[tuple[str, str], list[dict[str, list[str]]]] = {}
    for kdef in _state().get_all_opkernel_def():
        if kdef.provider != CPU_PROVIDER:
            continue
        domain = ONNX_DOMAIN if kdef.domain == "ai.onnx" else kdef.domain
        bindings = {p: sorted(ts) for p, ts in sorted(kdef.type_constraints.items())}
        entry = table.setdefault((domain, kdef.op_name), [])
        if bindings not in entry:
            entry.append(bindings)
    for entry in table.values():
        entry.sort(key=lambda b: json.dumps(b, sort_keys=True))
    return table


# ---------------------------------------------------------------- child process


def _child_main() -> int:
    """Read ``[[case key, first attempt], ...]`` on stdin; print one JSON line per attempt."""
    ort = _ort()
    ort.set_default_logger_severity(4)
    schemas = {(s.domain, s.name): s for s in probed_schemas()}
    defs = kernel_defs()
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    for key, first in json.loads(sys.stdin.read()):
        domain, op, dtype = key.split("|", 2)
        schema = schemas[(domain, op)]
        verdict, reason, tried = _BAD, "", 0
        attempts = attempt_models(schema, Case(domain, op, dtype), defs.get((domain, op), []))
        for index, (model, registered) in enumerate(attempts):
            if verdict == VERDICT_NONE and not registered:
                break  # every binding a registered kernel could take said "none"
            tried = index + 1
            if index < first:
                reason = reason or "an attempt crashed the probe process"
                continue
            _emit(["try", key, index])
            try:
                ort.InferenceSession(model, options, providers=[CPU_PROVIDER])
                error = None
            except Exception as exc:  # ORT raises its own pybind exception classes
                error = str(exc)
            outcome = classify(error)
            if outcome in (VERDICT_KERNEL, VERDICT_CTOR):
                verdict, reason = outcome, bounded_reason(error or "")
                break
            if outcome == VERDICT_NONE or verdict != VERDICT_NONE:
                verdict, reason = outcome, bounded_reason(error or "")
        if tried == 0:
            reason = "no attempt: the schema needs a non-tensor type or a graph attribute"
        _emit(["end", key, tried, VERDICT_UNDETERMINED if verdict == _BAD else verdict, reason])
    return 0


def _emit(record: list[object]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- parent side


def all_cases() -> list[Case]:
    """Every case the probe decides: each probed schema's compute dtypes (see :func:`cases_for`)."""
    return [c for s in probed_schemas() for c in cases_for(s)]


def run_probe(
    cases: Iterable[Case] | None = None, *, workers: int | None = None, command: Sequence[str] | None = None
) -> list[Outcome]:
    """Probe ``cases`` (default: every case of every probed op) in ``workers`` child processes.

    ``command``: the child's argv (default: this file run by this interpreter).
    """
    todo = list(all_cases() if cases is None else cases)
    if workers is None:
        workers = max(1, min(4, os.cpu_count() or 1))
    chunks = [todo[i::workers] for i in range(workers) if todo[i::workers]]
    argv = list(command or [sys.executable, os.path.abspath(__file__)])
    procs = [_Worker(argv, chunk) for chunk in chunks]
    outcomes: dict[str, Outcome] = {}
    while procs:
        worker = procs.pop(0)
        outcomes.update(worker.finish())
        if worker.remaining:
            procs.append(_Worker(argv, worker.remaining, worker.resume))
    return [outcomes[c.key] for c in todo]


class ProbeError(RuntimeError):
    """The probe itself could not run (its child failed outside any session attempt)."""


class _Worker:
    """One child process over a list of cases; after a crash, what is left and where to resume.

    The child's stderr goes to a file (a full pipe would block it); a child silent for
    :data:`ATTEMPT_TIMEOUT` seconds is killed, which counts as a crash of its current attempt.
    """

    def __init__(self, argv: list[str], cases: list[Case], resume: dict[str, int] | None = None) -> None:
        self.cases = cases
        self.resume = dict(resume or {})
        payload = json.dumps([[c.key, self.resume.get(c.key, 0)] for c in cases])
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- closed in finish()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        assert self.proc.stdin is not None
        self.proc.stdin.write(payload)
        self.proc.stdin.close()
        self.remaining: list[Case] = []

    def finish(self) -> dict[str, Outcome]:
        assert self.proc.stdout is not None
        by_key = {c.key: c for c in self.cases}
        done: dict[str, Outcome] = {}
        current: tuple[str, int] | None = None
        watchdog = _Watchdog(self.proc)
        try:
            for line in self.proc.stdout:
                watchdog.reset()
                record = json.loads(line)
                if record[0] == "try":
                    current = (record[1], record[2])
                else:
                    _, key, attempts, verdict, reason = record
                    done[key] = Outcome(by_key[key], verdict, attempts, reason)
                    current = None
        finally:
            watchdog.stop()
            self.proc.stdout.close()
            code = self.proc.wait()
            self.stderr.seek(0)
            stderr = self.stderr.read().decode("utf-8", "replace")
            self.stderr.close()
        if current is not None:  # the child died (or hung) inside a session attempt
            key, index = current
            self.resume[key] = index + 1
            self.remaining = [c for c in self.cases if c.key not in done]
        elif code != 0 or len(done) != len(self.cases):
            raise ProbeError(f"CPU kernel probe child failed (exit {code}): {bounded_reason(stderr[-400:])}")
        return done


class _Watchdog:
    """Kill ``proc`` when :meth:`reset` is not called for ATTEMPT_TIMEOUT seconds."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.timer: threading.Timer | None = None
        self.reset()

    def reset(self) -> None:
        self.stop()
        self.timer = threading.Timer(ATTEMPT_TIMEOUT, self.proc.kill)
        self.timer.daemon = True
        self.timer.start()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


if __name__ == "__main__":
    sys.exit(_child_main())
