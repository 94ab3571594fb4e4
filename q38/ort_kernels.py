"""Which operators (and dtypes) the installed onnxruntime runs on CPU: probed once, then cached.

``cpu_kernels()`` answers from ``$Q38_CACHE_DIR`` (else ``$XDG_CACHE_HOME/q38``, else
``~/.cache/q38``)/``ort-cpu-kernels-<version>-<identity>.json``; on a miss it runs
:mod:`q38.ort_kernel_probe` (one-node sessions of the installed ORT, about 1 s of CPU) and writes
the table atomically (temporary file in the same directory, fsync, rename). The identity is the
wheel's own RECORD digest of its native libraries (or their size and mtime when there is no
RECORD), so a rebuilt wheel of the same version is probed again. A cache file that is not what
this module writes -- unreadable, not a regular file, oversized, malformed JSON, another format
or probe revision, another version or identity, an unknown verdict -- is re-probed and replaced,
never trusted. A cache that cannot be written is logged and the probed table still returned.

The table covers every operator ORT knows (a schema or a CPU kernel definition). For the probed
domains (``com.microsoft`` and ORT's contrib schemas in the ONNX domain) :meth:`CpuKernels.has`
answers from the sessions; a case the probe could not decide (``undetermined``: the schema's
one-node graph could not be made valid generically) and every standard ONNX / ai.onnx.ml op are
answered from ORT's registered CPU kernel definitions instead (``get_all_opkernel_def``), which
do not list the Casts ORT inserts to run a float16 node on a float32 kernel (added as a rule).

A *dtype* is the element type of the op's compute slot (see
:func:`q38.ort_kernel_probe.compute_slot`): ``"float16"``, ``"tensor(float16)"``, an ONNX
``TensorProto`` enum value or an ``onnx_ir.DataType`` are all accepted.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from q38 import ort_kernel_probe as probe
from q38._ops import MS_DOMAIN
from q38.errors import PackageError, Q38Error
from q38.package.io.files import read_bounded
from q38.package.io.jsonio import dumps_json, loads_strict
from q38.package.io.staging import write_file_atomic

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = [
    "CACHE_ENV",
    "CpuKernels",
    "KernelKnowledgeError",
    "MissingKernel",
    "OpKernels",
    "cache_dir",
    "cpu_kernels",
]

log = logging.getLogger(__name__)

CACHE_ENV: Final = "Q38_CACHE_DIR"
FORMAT: Final = "q38.ort-cpu-kernels/1"
# Bump when the probe's logic changes: tables of an older revision are re-probed.
PROBE_REVISION: Final = 1
CACHE_LIMIT: Final = 4 * 1024 * 1024
_VERDICTS: Final = frozenset(
    {probe.VERDICT_KERNEL, probe.VERDICT_CTOR, probe.VERDICT_NONE, probe.VERDICT_UNDETERMINED}
)
_HAS: Final = frozenset({probe.VERDICT_KERNEL, probe.VERDICT_CTOR})
_LIB_SUFFIXES: Final = (".so", ".dylib", ".dll", ".pyd")


class KernelKnowledgeError(Q38Error):
    """No CPU-kernel table can be had (no onnxruntime, or another version that was never probed)."""


@dataclass(frozen=True)
class OpKernels:
    """What is known of one operator: its compute slot, the probe's verdicts, ORT's registry."""

    slot: str | None  # "output:0" / "input:2"; None: no type-polymorphic slot
    probed: Mapping[str, str]  # dtype ("float16") -> verdict; empty for an op the probe skips
    registered: tuple[str, ...]  # dtypes a registered CPU kernel takes at the slot ("*": any)
    reasons: Mapping[str, str]  # dtype -> ORT's text for every verdict but "kernel"

    def has(self, dtype: str | None) -> bool:
        """Whether a CPU session runs the op at ``dtype`` (None: at some dtype, any will do).

        A probe verdict decides; an op or dtype the probe did not decide falls back to the
        registry, where float16 also runs on a float kernel (ORT inserts Casts).
        """
        if dtype is None:
            return any(self._has(d) for d in {*self.probed, *self.registered}) or "*" in self.registered
        return self._has(dtype)

    def _has(self, dtype: str) -> bool:
        verdict = self.probed.get(dtype)
        if verdict in _HAS:
            return True
        if verdict == probe.VERDICT_NONE:
            return False
        if dtype in self.registered or "*" in self.registered:
            return True
        # ORT's InsertCastTransformer runs a float16 node on a float kernel (every float16
        # probe of a float-only contrib kernel confirms it); the registry does not list that.
        return dtype == "float16" and "float" in self.registered


@dataclass(frozen=True)
class MissingKernel:
    """A node whose op has no CPU kernel (for its dtype, when the op has one for others)."""

    node: str
    domain: str
    op: str
    dtype: str | None
    op_has_other_dtypes: bool

    def describe(self) -> str:
        """``"Op"``, or ``"Op for dtype"`` when only that dtype lacks a kernel (message wording)."""
        if self.dtype is not None and self.op_has_other_dtypes:
            return f"{self.op} for {self.dtype}"
        return self.op


@dataclass(frozen=True)
class CpuKernels:
    """The CPU-kernel table of one onnxruntime build."""

    ort_version: str
    identity: str
    ops: Mapping[tuple[str, str], OpKernels]

    def has(self, op: str, domain: str = MS_DOMAIN, dtype: str | int | None = None) -> bool:
        """Whether a CPU session accepts a ``domain::op`` node of compute dtype ``dtype``.

        ``dtype=None``: for some dtype. An op ORT has neither a schema nor a CPU kernel for
        (a custom domain, a misspelling) has none.
        """
        entry = self.ops.get((_domain(domain), op))
        return entry is not None and entry.has(dtype_name(dtype))

    def slot(self, op: str, domain: str = MS_DOMAIN) -> tuple[str, int] | None:
        """Where ``op``'s compute dtype is read: (``"input"``|``"output"``, index)."""
        entry = self.ops.get((_domain(domain), op))
        if entry is None or entry.slot is None:
            return None
        kind, index = entry.slot.split(":")
        return kind, int(index)

    def node_dtype(self, node: ir.Node) -> str | None:
        """The compute dtype of an ``onnx_ir`` node (``None`` when its value has no type)."""
        where = self.slot(node.op_type, node.domain)
        if where is None:
            return None
        values = node.outputs if where[0] == "output" else node.inputs
        value = values[where[1]] if where[1] < len(values) else None
        dtype = getattr(value, "dtype", None)
        return None if dtype is None else dtype_name(int(dtype))

    def has_node(self, node: ir.Node) -> bool:
        """Whether a CPU session runs this ``onnx_ir`` node (its op at its compute dtype)."""
        return self.has(node.op_type, node.domain, self.node_dtype(node))

    def probed(self, op: str, domain: str = MS_DOMAIN) -> bool:
        """Whether one-node sessions decided ``op`` (else answers come from ORT's registry)."""
        entry = self.ops.get((_domain(domain), op))
        return entry is not None and bool(entry.probed)

    def missing(self, nodes: Iterable[ir.Node]) -> list[MissingKernel]:
        """The nodes of ``nodes`` (in order) of a probed op that has no CPU kernel for them.

        Standard ONNX ops and ops ORT has no schema for are left to the session itself (an
        unregistered op is a broken graph, not a missing kernel).
        """
        out = []
        for node in nodes:
            if not self.probed(node.op_type, node.domain) or self.has_node(node):
                continue
            dtype = self.node_dtype(node)
            out.append(
                MissingKernel(
                    node.name or "", _domain(node.domain), node.op_type, dtype,
                    dtype is not None and self.has(node.op_type, node.domain),
                )
            )
        return out

    # ---------------------------------------------------------------- JSON form

    def to_json(self) -> str:
        """The deterministic cache document (sorted keys, indent 2, trailing newline)."""
        ops: dict[str, dict[str, Any]] = {}
        for (domain, op), entry in sorted(self.ops.items()):
            ops.setdefault(domain, {})[op] = {
                "slot": entry.slot,
                "probed": dict(sorted(entry.probed.items())),
                "registered": list(entry.registered),
                "reasons": dict(sorted(entry.reasons.items())),
            }
        document = {
            "format": FORMAT,
            "probe_revision": PROBE_REVISION,
            "onnxruntime": {"version": self.ort_version, "identity": self.identity},
            "ops": ops,
        }
        return dumps_json(document, what="CPU-kernel table")

    @classmethod
    def from_json(cls, data: bytes | str, *, version: str | None, identity: str | None) -> CpuKernels:
        """Parse a cache document (strict JSON) written by :meth:`to_json`.

        Raises ``ValueError`` / ``PackageError`` on anything this module would not write, or on a
        table of another ``version`` / ``identity`` than the one asked for.
        """
        doc = loads_strict(data, what="CPU-kernel cache", limit=CACHE_LIMIT)
        _expect(isinstance(doc, dict) and set(doc) == {"format", "probe_revision", "onnxruntime", "ops"}, "keys")
        _expect(doc["format"] == FORMAT and doc["probe_revision"] == PROBE_REVISION, "format")
        ort = doc["onnxruntime"]
        _expect(isinstance(ort, dict) and set(ort) == {"version", "identity"}, "onnxruntime")
        _expect(all(isinstance(ort[k], str) for k in ort), "onnxruntime")
        _expect(version is None or ort["version"] == version, "version")
        _expect(identity is None or ort["identity"] == identity, "identity")
        _expect(isinstance(doc["ops"], dict) and bool(doc["ops"]), "ops")
        table: dict[tuple[str, str], OpKernels] = {}
        for domain, ops in doc["ops"].items():
            _expect(isinstance(ops, dict), "domain")
            for op, e in ops.items():
                _expect(isinstance(e, dict) and set(e) == {"slot", "probed", "registered", "reasons"}, op)
                _expect(e["slot"] is None or (isinstance(e["slot"], str) and _valid_slot(e["slot"])), op)
                _expect(isinstance(e["probed"], dict) and all(v in _VERDICTS for v in e["probed"].values()), op)
                _expect(isinstance(e["registered"], list) and all(isinstance(t, str) for t in e["registered"]), op)
                _expect(isinstance(e["reasons"], dict) and all(isinstance(v, str) for v in e["reasons"].values()), op)
                table[(domain, op)] = OpKernels(e["slot"], dict(e["probed"]), tuple(e["registered"]), dict(e["reasons"]))
        return cls(ort["version"], ort["identity"], table)


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"cache document: bad {what}")


def _valid_slot(slot: str) -> bool:
    kind, _, index = slot.partition(":")
    return kind in ("input", "output") and index.isdigit()


def _domain(domain: str | None) -> str:
    return "" if domain in (None, "", "ai.onnx") else str(domain)


def dtype_name(dtype: str | int | None) -> str | None:
    """ORT's lower-case name of an element type given in any of the spellings q38 meets.

    ``"float16"`` for ``"tensor(float16)"``, ``"float16"``, ``TensorProto.FLOAT16`` or
    ``ir.DataType.FLOAT16`` (an int enum); ``"float"`` for float32 (ORT's own spelling).
    """
    if dtype is None:
        return None
    if isinstance(dtype, str):
        name = dtype[len("tensor("):-1] if dtype.startswith("tensor(") and dtype.endswith(")") else dtype
        return {"float32": "float", "float64": "double"}.get(name.lower(), name.lower())
    from onnx import TensorProto  # deferred: heavy; only an int dtype needs it

    return str(TensorProto.DataType.Name(int(dtype)).lower())


# ---------------------------------------------------------------- building and caching


def cache_dir() -> Path:
    """``$Q38_CACHE_DIR``, else ``$XDG_CACHE_HOME/q38``, else ``~/.cache/q38``."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "q38" if xdg else Path.home() / ".cache" / "q38"


def installed_identity() -> tuple[str, str]:
    """(version, identity) of the installed onnxruntime, found without importing it.

    An import costs about as much as reading the cache. Raises ``KernelKnowledgeError`` when
    onnxruntime is not installed.
    """
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        raise KernelKnowledgeError("onnxruntime is not installed: no CPU-kernel knowledge (pip install onnxruntime)")
    package = Path(spec.origin).resolve().parent
    dist = _distribution(package)
    if dist is not None:
        version, record = dist
    else:  # no wheel metadata (a source build): ask the module itself
        import onnxruntime  # deferred: heavy; only without wheel metadata

        version, record = str(onnxruntime.__version__), []
    digest = hashlib.sha256(f"{version}\n".encode())
    if record:
        digest.update(b"record\n" + "\n".join(record).encode())
    else:
        for lib in sorted(p for p in package.rglob("*") if p.name.endswith(_LIB_SUFFIXES) or ".so." in p.name):
            st = lib.stat()
            digest.update(f"{lib.relative_to(package).as_posix()} {st.st_size} {st.st_mtime_ns}\n".encode())
    return version, digest.hexdigest()[:16]


def _distribution(package: Path) -> tuple[str, list[str]] | None:
    """(version, RECORD lines of the native libraries) of the wheel that installed ``package``.

    The library lines are empty when a library's size no longer matches its RECORD entry (a
    file replaced in place): the identity then falls back to the files' size and mtime.
    """
    for dist in sorted(package.parent.glob("onnxruntime*.dist-info")):
        try:
            lines = (dist / "RECORD").read_text(encoding="utf-8").splitlines()
            metadata = (dist / "METADATA").read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        if not any(line.startswith("onnxruntime/__init__.py,") for line in lines):
            continue  # onnxruntime_genai and friends
        version = next((m.split(":", 1)[1].strip() for m in metadata if m.startswith("Version:")), "")
        if not version:
            continue
        libs = []
        for line in lines:
            path, _, rest = line.partition(",")
            if path.startswith("onnxruntime/") and (path.endswith(_LIB_SUFFIXES) or ".so." in path):
                try:
                    if int(rest.rpartition(",")[2]) != (package.parent / path).stat().st_size:
                        return version, []
                except (OSError, ValueError):
                    return version, []
                libs.append(line)
        return version, sorted(libs)
    return None


def _cache_path(version: str, identity: str) -> Path:
    return cache_dir() / f"ort-cpu-kernels-{version}-{identity}.json"


_MEMO: dict[tuple[str, str, str], CpuKernels] = {}


def cpu_kernels(ort_version: str | None = None) -> CpuKernels:
    """The CPU-kernel table of the installed onnxruntime (cached; probed on the first call).

    ``ort_version``: the table of that version; when it is not the installed one, the table a
    previous run with that version installed left in the cache (``KernelKnowledgeError`` if none).
    """
    version, identity = installed_identity()
    if ort_version is not None and ort_version != version:
        return _cached_other(ort_version, version)
    path = _cache_path(version, identity)
    memo_key = (version, identity, str(path))
    if memo_key in _MEMO:
        return _MEMO[memo_key]
    kernels = _read_cache(path, version, identity)
    if kernels is None:
        kernels = build_table(version, identity)
        _write_cache(path, kernels.to_json())
    _MEMO[memo_key] = kernels
    return kernels


def _cached_other(wanted: str, installed: str) -> CpuKernels:
    directory = cache_dir()
    candidates = sorted(directory.glob(f"ort-cpu-kernels-{wanted}-*.json")) if directory.is_dir() else []
    for path in candidates:
        found = _read_cache(path, wanted, None)
        if found is not None:
            return found
    raise KernelKnowledgeError(
        f"no CPU-kernel table for onnxruntime {wanted} in {directory} (installed: {installed}); "
        f"run q38 once with onnxruntime {wanted} installed"
    )


def clear_memo() -> None:
    """Forget the in-process tables (tests; a process that swaps its cache directory)."""
    _MEMO.clear()


def _read_cache(path: Path, version: str, identity: str | None) -> CpuKernels | None:
    """The cached table, or ``None`` (logged) when the file is absent or anything but ours.

    Read like every package file (``read_bounded``: a regular file, no symlink, no FIFO wait,
    at most CACHE_LIMIT bytes) and parsed as strict JSON.
    """
    if not os.path.lexists(path):
        return None
    try:
        data = read_bounded(path, what="CPU-kernel cache", limit=CACHE_LIMIT, nofollow=True)
        return CpuKernels.from_json(data, version=version, identity=identity)
    except (PackageError, ValueError) as exc:
        log.warning("CPU-kernel cache rejected, probing again: %s", exc)
        return None


def _write_cache(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically; a failure is logged, never raised."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, text.encode("utf-8"), replace=True)
    except OSError as exc:
        log.warning("CPU-kernel cache %s not written (%s)", path, exc.strerror or exc)


def build_table(version: str, identity: str) -> CpuKernels:
    """Probe the installed onnxruntime and merge in its registered CPU kernel definitions."""
    schemas = {(_domain(s.domain), s.name): s for s in probe.latest_schemas()}
    defs = probe.kernel_defs()
    try:
        outcomes = probe.run_probe()
    except (probe.ProbeError, OSError) as exc:
        raise KernelKnowledgeError(f"onnxruntime {version}: the CPU-kernel probe failed: {exc}") from None
    probed: dict[tuple[str, str], dict[str, str]] = {}
    reasons: dict[tuple[str, str], dict[str, str]] = {}
    for o in outcomes:
        key = (o.case.domain, o.case.op)
        dtype = dtype_name(o.case.dtype) or o.case.dtype
        probed.setdefault(key, {})[dtype] = o.verdict
        if o.verdict != probe.VERDICT_KERNEL:
            reasons.setdefault(key, {})[dtype] = o.reason
    table: dict[tuple[str, str], OpKernels] = {}
    for key in sorted({*schemas, *defs}):
        schema = schemas.get(key)
        slot = probe.compute_slot(schema) if schema is not None else None
        registered: set[str] = set()
        for binding in defs.get(key, []):
            if slot is None or slot[2] not in binding:
                registered.add("*")
            else:
                registered.update(dtype_name(t) or t for t in binding[slot[2]])
        table[key] = OpKernels(
            f"{slot[0]}:{slot[1]}" if slot else None,
            probed.get(key, {}),
            tuple(sorted(registered)),
            reasons.get(key, {}),
        )
    return CpuKernels(version, identity, table)
