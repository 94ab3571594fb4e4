"""Goldens: a syrupy extension that stores canonical, reviewable JSON of graphs and packages.

A golden is one JSON file per snapshot under ``goldens/<test_module>/<test_name>.json``
(``goldens/`` at the pytest root directory). Structure is indented by 2 spaces; the records a
reviewer compares one by one (graph inputs/outputs, nodes, initializers, value infos, files)
are written one record per line, so a changed node is a one-line diff.

Canonical graph form (``canonical_graph``):

* ``format`` and ``version`` (:data:`VERSION`; bump it whenever the serializer output changes);
* ``opset_imports`` (domain -> version, sorted), ``ir_version``;
* ``inputs`` / ``outputs`` / ``value_info``: name, dtype, shape (ints, dim_param strings, null);
* ``nodes`` in graph order: domain, op, name, attributes (sorted; tensors as dtype/shape/sha256
  plus the values of tiny tensors, subgraphs recursively), inputs, outputs;
* ``initializers`` in graph order: name, dtype, shape, sha256 of the tensor bytes. External
  data is hashed from the referenced bytes read with a plain ``open()`` (never through onnx's
  external-data loader, which refuses hard links); when unreadable, the record carries
  ``location``/``offset``/``length`` and the reason instead of a hash;
* volatile fields (producer version, q38 version, absolute paths, temp dirs, library hashes;
  in package forms also the hashes and sizes of ``.onnx`` files, whose bytes depend on the
  protobuf serializer while their content has its own graph golden) replaced by ``<...>``.

Unused goldens fail the run (syrupy's default), also under pytest-xdist: syrupy 7 merges the
workers' reports on the controller (tests/unit/goldens/test_golden_extension.py proves it with
``-n 2``). Running a subset (a path, ``-k``) does not flag the goldens of deselected tests.

Canonical package form (``canonical_package``): ``genai_config.json``, ``weights_pool.txt`` and
``package_manifest.json`` with paths and volatile fields normalized, plus the file inventory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import onnx
from onnx import numpy_helper
from syrupy.extensions.json import JSONSnapshotExtension
from syrupy.location import PyTestLocation

VERSION: Final = 2
"""Format version of the canonical JSON. Bump it when the serializer output changes."""

GOLDENS_DIRNAME: Final = "goldens"
MASK: Final = "<masked>"
TINY_TENSOR_VALUES: Final = 16
"""Tensors (attributes) with at most this many numeric elements also record their values."""

CONFIG_FILE: Final = "genai_config.json"
POOL_FILE: Final = "weights_pool.txt"
MANIFEST_FILE: Final = "package_manifest.json"

VOLATILE_KEYS: Final = frozenset(
    {
        "q38_version",
        "producer_version",
        "created",
        "created_at",
        "timestamp",
        "time",
        "date",
        "hostname",
        "host",
        "user",
        "mtime",
        "ctime",
        "atime",
        "inode",
        "pid",
    }
)
"""Keys whose values are masked wherever they appear in a config, manifest or metadata."""

HASH_KEYS: Final = frozenset({"sha256", "hash", "digest", "checksum"})
LIB_SUFFIX_RE: Final = re.compile(r"(\.so(\.\d+)*|\.dll|\.dylib)$")
_TMP_RE: Final = re.compile(r"/(?:tmp|var/tmp|private/var/folders/[^/]+/[^/]+/T)/[^\s\"',;]*")


# --------------------------------------------------------------------------- path normalizer


class Normalizer:
    """Replaces machine-specific substrings of strings by stable markers.

    ``roots`` maps absolute directories to markers, longest first; any other absolute
    temporary path becomes ``<tmp>/<basename>``.
    """

    def __init__(self, roots: Mapping[str | os.PathLike[str], str] | None = None) -> None:
        pairs: list[tuple[str, str]] = []
        for root, marker in (roots or {}).items():
            for form in {os.fspath(root), os.path.realpath(root)}:
                pairs.append((form.rstrip("/"), marker))
        pairs.append((tempfile.gettempdir().rstrip("/"), "<tmp>"))
        pairs.append((os.path.expanduser("~").rstrip("/"), "<home>"))
        self._pairs = sorted({p for p in pairs if len(p[0]) > 1}, key=lambda p: -len(p[0]))

    def text(self, value: str) -> str:
        for prefix, marker in self._pairs:
            if marker in ("<tmp>", "<home>"):
                continue
            value = value.replace(prefix, marker)
        value = _TMP_RE.sub(lambda m: "<tmp>/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], value)
        for prefix, marker in self._pairs:
            if marker in ("<tmp>", "<home>"):
                value = value.replace(prefix, marker)
        return value

    def data(self, value: Any, *, key: str | None = None, library: bool = False, graph: bool = False) -> Any:
        """Normalizes a JSON-like value; masks volatile keys and the hashes of libraries and graphs.

        A hash is a library's when a sibling value or the enclosing key names a library file
        (``libs/...``, ``*.so*``, ``*.dll``, ``*.dylib``); a graph's when it names a ``*.onnx``
        file: its bytes depend on the protobuf serializer, and its content has its own golden.
        """
        if key is not None and key.lower() in VOLATILE_KEYS:
            return MASK if value not in (None, "") else value
        if key is not None and key.lower() in HASH_KEYS and library:
            return "<sha256:lib>"
        if key is not None and key.lower() in HASH_KEYS and graph:
            return "<sha256:graph>"
        if isinstance(value, Mapping):
            lib_here = library or _names_library(value)
            graph_here = graph or _names_graph(value)
            return {
                str(k): self.data(
                    v,
                    key=str(k),
                    library=lib_here or _is_library_path(str(k)),
                    graph=graph_here or str(k).endswith(".onnx"),
                )
                for k, v in sorted(value.items())
            }
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value


def _names_graph(record: Mapping[str, Any]) -> bool:
    return any(isinstance(v, str) and v.endswith(".onnx") for v in record.values())


def _is_library_path(text: str) -> bool:
    return bool(LIB_SUFFIX_RE.search(text)) or text.startswith("libs/")


def _names_library(record: Mapping[str, Any]) -> bool:
    for k, v in record.items():
        if isinstance(v, str) and _is_library_path(v):
            return True
        if k in ("kind", "type") and v in ("lib", "library", "custom_op_library"):
            return True
    return False


# --------------------------------------------------------------------------- graph canonicalizer


def _dtype(elem_type: int) -> str:
    return str(onnx.helper.tensor_dtype_to_string(elem_type)).removeprefix("TensorProto.")


def _shape_of(dims: Iterable[onnx.TensorShapeProto.Dimension]) -> list[int | str | None]:
    out: list[int | str | None] = []
    for d in dims:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def _type(tp: onnx.TypeProto) -> dict[str, Any]:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type" or kind == "sparse_tensor_type":
        tt = tp.tensor_type if kind == "tensor_type" else tp.sparse_tensor_type
        rec: dict[str, Any] = {"dtype": _dtype(tt.elem_type)}
        rec["shape"] = _shape_of(tt.shape.dim) if tt.HasField("shape") else None
        if kind == "sparse_tensor_type":
            rec["sparse"] = True
        return rec
    if kind == "sequence_type":
        return {"sequence": _type(tp.sequence_type.elem_type)}
    if kind == "optional_type":
        return {"optional": _type(tp.optional_type.elem_type)}
    if kind == "map_type":
        return {"map": [_dtype(tp.map_type.key_type), _type(tp.map_type.value_type)]}
    return {"dtype": None}


def _value_info(vi: onnx.ValueInfoProto) -> dict[str, Any]:
    return {"name": vi.name, **_type(vi.type)}


class _GraphCanon:
    def __init__(self, base_dir: Path | None, norm: Normalizer) -> None:
        self.base_dir = base_dir
        self.norm = norm

    # Tensors --------------------------------------------------------------------------------
    def tensor(self, t: onnx.TensorProto, *, values: bool) -> dict[str, Any]:
        rec: dict[str, Any] = {"dtype": _dtype(t.data_type), "shape": [int(d) for d in t.dims]}
        if t.data_location == onnx.TensorProto.EXTERNAL:
            rec.update(self._external(t))
            return rec
        if t.HasField("raw_data"):
            payload = t.raw_data
        elif t.data_type == onnx.TensorProto.STRING:
            payload = b"\0".join(bytes(s) for s in t.string_data)
        else:
            payload = numpy_helper.to_array(t).tobytes()
        rec["sha256"] = hashlib.sha256(payload).hexdigest()
        if values:
            count = 1
            for d in t.dims:
                count *= int(d)
            if count <= TINY_TENSOR_VALUES and t.data_type != onnx.TensorProto.STRING:
                try:
                    rec["values"] = numpy_helper.to_array(t).reshape(-1).tolist()
                except (ValueError, TypeError):
                    pass
        return rec

    def _external(self, t: onnx.TensorProto) -> dict[str, Any]:
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else None
        rec: dict[str, Any] = {"location": self.norm.text(location)}
        if self.base_dir is None:
            reason = "no base directory"
        else:
            path = self.base_dir / location
            try:
                # A plain open(): hard-linked data files must hash like any other file.
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read() if length is None else f.read(length)
                if length is not None and len(data) != length:
                    reason = f"short read: {len(data)} of {length} bytes"
                else:
                    rec["sha256"] = hashlib.sha256(data).hexdigest()
                    return rec
            except OSError as exc:
                reason = f"{type(exc).__name__}: {exc.strerror or exc}"
        rec.update({"offset": offset, "length": length, "unreadable": reason})
        return rec

    # Attributes and graphs --------------------------------------------------------------------
    def attribute(self, a: onnx.AttributeProto) -> Any:
        if a.ref_attr_name:
            return {"ref": a.ref_attr_name}
        A = onnx.AttributeProto
        kind = a.type
        if kind == A.INT:
            return int(a.i)
        if kind == A.FLOAT:
            return float(a.f)
        if kind == A.STRING:
            return self.norm.text(a.s.decode("utf-8", errors="backslashreplace"))
        if kind == A.INTS:
            return [int(v) for v in a.ints]
        if kind == A.FLOATS:
            return [float(v) for v in a.floats]
        if kind == A.STRINGS:
            return [self.norm.text(s.decode("utf-8", errors="backslashreplace")) for s in a.strings]
        if kind == A.TENSOR:
            return {"tensor": self.tensor(a.t, values=True)}
        if kind == A.TENSORS:
            return {"tensors": [self.tensor(t, values=True) for t in a.tensors]}
        if kind == A.GRAPH:
            return {"graph": self.graph(a.g)}
        if kind == A.GRAPHS:
            return {"graphs": [self.graph(g) for g in a.graphs]}
        if kind == A.SPARSE_TENSOR:
            return {"sparse_tensor": {"dims": [int(d) for d in a.sparse_tensor.dims],
                                      "values": self.tensor(a.sparse_tensor.values, values=False),
                                      "indices": self.tensor(a.sparse_tensor.indices, values=False)}}
        if kind == A.TYPE_PROTO:
            return {"type": _type(a.tp)}
        return {"unsupported_attribute_type": int(kind)}

    def node(self, n: onnx.NodeProto) -> dict[str, Any]:
        return {
            "domain": n.domain,
            "op": n.op_type,
            "name": n.name,
            "attributes": {a.name: self.attribute(a) for a in sorted(n.attribute, key=lambda a: a.name)},
            "inputs": list(n.input),
            "outputs": list(n.output),
        }

    def graph(self, g: onnx.GraphProto) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "name": g.name,
            "inputs": [_value_info(v) for v in g.input],
            "outputs": [_value_info(v) for v in g.output],
            "nodes": [self.node(n) for n in g.node],
            "initializers": [{"name": t.name, **self.tensor(t, values=False)} for t in g.initializer],
        }
        if g.sparse_initializer:
            rec["sparse_initializers"] = [
                {"name": s.values.name, "dims": [int(d) for d in s.dims]} for s in g.sparse_initializer
            ]
        if g.value_info:
            rec["value_info"] = [_value_info(v) for v in g.value_info]
        return rec


def _as_proto(model: Any) -> tuple[onnx.ModelProto, Path | None]:
    """Returns a ModelProto and the directory its external data is relative to."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        # load_external_data=False: the data files are hashed by _GraphCanon, read directly.
        return onnx.load(os.fspath(path), load_external_data=False), path.parent
    if isinstance(model, onnx.ModelProto):
        return model, None
    try:
        import onnx_ir as ir
    except ImportError as exc:  # pragma: no cover - onnx-ir is a core dependency
        raise TypeError(f"cannot canonicalize {type(model).__name__}") from exc
    if isinstance(model, ir.Model):
        base_dir: Path | None = None
        for value in model.graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                base_dir = Path(tensor.base_dir)
                break
        return ir.to_proto(model), base_dir
    raise TypeError(f"graph_snapshot takes a .onnx path, onnx.ModelProto or onnx_ir.Model, not {type(model).__name__}")


def canonical_graph(
    model: Any, *, base_dir: str | os.PathLike[str] | None = None, normalizer: Normalizer | None = None
) -> dict[str, Any]:
    """Canonical, JSON-ready form of a model (a path, ``onnx.ModelProto`` or ``onnx_ir.Model``).

    Args:
        model: the graph to describe; a path is loaded without external data.
        base_dir: where relative external-data locations resolve (defaults to the model's
            directory for a path, the tensors' base_dir for an onnx_ir model).
        normalizer: path normalizer (defaults to one rooted at ``base_dir``).
    """
    proto, found_dir = _as_proto(model)
    root = Path(base_dir) if base_dir is not None else found_dir
    norm = normalizer or Normalizer({root: "<package>"} if root is not None else None)
    canon = _GraphCanon(root, norm)
    out: dict[str, Any] = {
        "format": "q38-graph",
        "version": VERSION,
        "ir_version": int(proto.ir_version),
        "producer_name": proto.producer_name,
        "producer_version": MASK if proto.producer_version else "",
        "opset_imports": {o.domain: int(o.version) for o in sorted(proto.opset_import, key=lambda o: o.domain)},
        "metadata": norm.data({p.key: p.value for p in proto.metadata_props}),
    }
    out.update(canon.graph(proto.graph))
    if proto.functions:
        out["functions"] = [
            {
                "domain": f.domain,
                "name": f.name,
                "inputs": list(f.input),
                "outputs": list(f.output),
                "attributes": list(f.attribute),
                "opset_imports": {o.domain: int(o.version) for o in sorted(f.opset_import, key=lambda o: o.domain)},
                "nodes": [canon.node(n) for n in f.node],
            }
            for f in proto.functions
        ]
    return out


# --------------------------------------------------------------------------- package canonicalizer


def _pool_lines(path: Path, norm: Normalizer) -> list[str]:
    return [norm.text(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _inventory(root: Path, norm: Normalizer) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            full = Path(dirpath, name)
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                records.append({"path": rel, "kind": "symlink", "target": norm.text(os.readlink(full))})
            elif full.is_dir():
                records.append({"path": rel, "kind": "dir"})
            elif rel.endswith(".onnx"):  # serializer-dependent size; the graph has its own golden
                records.append({"path": rel, "kind": "file"})
            else:
                records.append({"path": rel, "kind": "file", "size": full.stat().st_size})
    return sorted(records, key=lambda r: str(r["path"]))


def canonical_package(package_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Canonical form of a package directory: config, pool, manifest and the file inventory."""
    root = Path(package_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a package directory")
    norm = Normalizer({root: "<package>"})
    out: dict[str, Any] = {"format": "q38-package", "version": VERSION}
    for key, name in (("config", CONFIG_FILE), ("manifest", MANIFEST_FILE)):
        path = root / name
        out[key] = norm.data(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None
    pool = root / POOL_FILE
    out["pool"] = _pool_lines(pool, norm) if pool.is_file() else None
    out["files"] = _inventory(root, norm)
    return out


# --------------------------------------------------------------------------- JSON writer

_INLINE_LISTS: Final = frozenset(
    {"inputs", "outputs", "nodes", "initializers", "value_info", "sparse_initializers", "files"}
)


def _has_subgraph(value: Any) -> bool:
    if isinstance(value, dict):
        return "graph" in value or "graphs" in value or any(_has_subgraph(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_subgraph(v) for v in value)
    return False


def dumps(data: Any) -> str:
    """Writes JSON indented by 2, records of the known record lists one per line, plus ``\\n``."""

    def inline(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))

    def emit(value: Any, level: int, key: str | None) -> str:
        pad, inner = "  " * level, "  " * (level + 1)
        if isinstance(value, dict) and value:
            items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {emit(v, level + 1, k)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + f"\n{pad}}}"
        if isinstance(value, list) and value:
            if key in _INLINE_LISTS:
                parts = [
                    f"{inner}{emit(v, level + 1, None) if _has_subgraph(v) else inline(v)}" for v in value
                ]
            else:
                parts = [f"{inner}{emit(v, level + 1, None)}" for v in value]
            return "[\n" + ",\n".join(parts) + f"\n{pad}]"
        return inline(value)

    return emit(data, 0, None) + "\n"


# --------------------------------------------------------------------------- syrupy extensions


class GoldenExtension(JSONSnapshotExtension):
    """Base: one JSON file per snapshot under ``<rootdir>/goldens/<test_module>/``."""

    canonicalize: Callable[[Any], Any] = staticmethod(lambda data: data)

    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        root = Path(test_location.item.config.rootpath)
        return str(root / GOLDENS_DIRNAME / test_location.basename)

    def serialize(self, data: Any, *, exclude: Any = None, include: Any = None, matcher: Any = None) -> str:
        return dumps(type(self).canonicalize(data))


class GraphGoldenExtension(GoldenExtension):
    """Graphs: a ``.onnx`` path, ``onnx.ModelProto`` or ``onnx_ir.Model`` -> canonical JSON."""

    canonicalize = staticmethod(canonical_graph)


class PackageGoldenExtension(GoldenExtension):
    """Packages: a package directory -> canonical config + pool + manifest + inventory JSON."""

    canonicalize = staticmethod(canonical_package)
