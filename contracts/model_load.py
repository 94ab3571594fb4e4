"""Model-level load rules: what onnxruntime checks when it reads a model, before any node.

``onnxruntime::Model::Model`` and ``Graph``'s constructor refuse a model for reasons that have
nothing to do with its operators; each rule carries ORT's own text (probed on 1.31.1 and 1.32.0 CPU
with real sessions, ``tests/unit/contracts/test_contracts_model_load_differential.py``):

* ``ORT-MODEL-001`` (model.cc): the IR version is at most what the build supports (1.31.1: 13,
  1.32.0: 14). Below that anything goes: ORT accepts 0 and negative IR versions.
* ``ORT-MODEL-002`` (model.cc): the model states an IR version at all (``has_ir_version``: a
  field onnx-ir reads as 0, so this rule reads the file's own fields, see :func:`read_header`).
* ``ORT-MODEL-003`` (graph.cc): graph input names are unique ("Duplicate definition-site"). ORT
  accepts duplicate graph outputs and duplicate initializers (q38's reader refuses the latter:
  ``PKG-GRAPH-001``, q38 being stricter on purpose: it could not say which one a session uses).
* ``ORT-MODEL-004`` (tensor_external_data_info.cc, tensorprotoutils.cc): an external initializer's
  fields: only the keys ``location`` / ``offset`` / ``length`` / ``checksum``, one non-empty
  ``location``, ``offset`` / ``length`` decimal int64 (``std::from_chars``: no sign ``+``, no space),
  a relative location that stays in the model's directory and exists, ``length`` equal to the
  tensor's size, ``[offset, offset + size)`` within the file. Read from the file's own fields
  (onnx-ir drops unknown keys and keeps one of two locations).

Opset imports (also read here, before any node) are ``ORT-OPSET-001`` / ``-002`` in
``schema_rules``: a domain imported twice takes its last version, ``ai.onnx`` being ``""``
(``_facts.Typing.opset_version``), and a domain not imported takes the newest ORT knows.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from contracts._graph import ModelLike, as_ir_model
from contracts._rule import GraphExamples, Rule, RuleDoc, Violation
from contracts._versions import per_version
from contracts.package_layout import PackageView

__all__ = [
    "EXTERNAL_DATA_KEYS",
    "RULES",
    "ExternalTensor",
    "ModelHeader",
    "check_model_headers",
    "max_ir_version",
    "read_header",
]

_SRC = "probed onnxruntime 1.31.1 / 1.32.0 CPU (core/graph/model.cc, graph.cc, tensor_external_data_info.cc, tensorprotoutils.cc)"
# The newest IR version each mirrored onnxruntime build reads (ONNX_NAMESPACE::Version::IR_VERSION).
_MAX_IR_VERSION = {"1.31.1": 13, "1.32.0": 14}
EXTERNAL_DATA_KEYS = frozenset({"location", "offset", "length", "checksum"})
# Bytes per element by TensorProto.DataType (0: sub-byte, counted by _size; absent: no fixed size).
_ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2,
                  17: 1, 18: 1, 19: 1, 20: 1, 21: 0, 22: 0, 23: 0, 24: 1, 25: 0, 26: 0}  # fmt: skip
_SUB_BYTE_BITS = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}
_INT64_MAX = 2**63 - 1


def max_ir_version(version: str) -> int:
    """The newest model IR version onnxruntime ``version`` (a mirrored dump's) loads."""
    return _MAX_IR_VERSION[version]


@dataclass(frozen=True)
class ExternalTensor:
    """One main-graph initializer stored externally, with its fields as the file spells them."""

    name: str
    data_type: int
    dims: tuple[int, ...]
    entries: tuple[tuple[str, str], ...]  # external_data key/value pairs, in file order


@dataclass(frozen=True)
class ModelHeader:
    """The model-level fields ORT reads before any node, straight from the protobuf's wire form."""

    has_ir_version: bool
    ir_version: int
    external: tuple[ExternalTensor, ...] = ()


# What the header reader decodes: the graph file mapped read-only (bytes in the same shape).
_Buffer: TypeAlias = mmap.mmap | bytes


def _varint(buf: _Buffer, pos: int) -> tuple[int, int]:
    """(protobuf varint at ``pos``, the position after it); ValueError past 64 bits."""
    shift = value = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: _Buffer, start: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value: an int, or a (start, end) span for length-delimited)."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise ValueError("truncated field")
            yield number, wire, (pos, pos + size)
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(buf: _Buffer, span: tuple[int, int]) -> str:
    return bytes(buf[span[0]:span[1]]).decode("utf-8", "replace")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _tensor(buf: _Buffer, span: tuple[int, int]) -> ExternalTensor | None:
    """An initializer (TensorProto) if it is stored externally (data_location EXTERNAL)."""
    name, dtype, external = "", 0, False
    dims: list[int] = []
    entries: list[tuple[str, str]] = []
    for number, wire, value in _fields(buf, *span):
        if number == 1 and wire == 0:
            dims.append(_signed(value))
        elif number == 1 and wire == 2:  # packed dims
            pos, end = value
            while pos < end:
                dim, pos = _varint(buf, pos)
                dims.append(_signed(dim))
        elif number == 2 and wire == 0:
            dtype = value
        elif number == 8 and wire == 2:
            name = _text(buf, value)
        elif number == 13 and wire == 2:
            key = val = ""
            for n, w, v in _fields(buf, *value):
                if w == 2 and n in (1, 2):
                    key, val = (_text(buf, v), val) if n == 1 else (key, _text(buf, v))
            entries.append((key, val))
        elif number == 14 and wire == 0:
            external = value == 1
    return ExternalTensor(name, dtype, tuple(dims), tuple(entries)) if external else None


def read_header(path: Path) -> ModelHeader | None:
    """The model-level fields of the graph file ``path`` (None: not a readable protobuf).

    An unreadable file is the graph reader's refusal, ``PKG-GRAPH-001``, to name. Only the model's
    and the main graph's own fields are decoded; nodes and tensor bytes are skipped by length,
    nothing is copied.
    """
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return None
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                has_ir, ir_version = False, 0
                external: list[ExternalTensor] = []
                for number, wire, value in _fields(buf, 0, size):
                    if number == 1 and wire == 0:
                        has_ir, ir_version = True, _signed(value)
                    elif number == 7 and wire == 2:
                        for gnum, gwire, gvalue in _fields(buf, *value):
                            if gnum == 5 and gwire == 2:
                                found = _tensor(buf, gvalue)
                                if found is not None:
                                    external.append(found)
                return ModelHeader(has_ir, ir_version, tuple(external))
    except (OSError, ValueError, IndexError):
        return None


def _int64(text: str) -> int | None:
    """``std::from_chars`` of an int64: an optional ``-`` and decimal digits, nothing else."""
    digits = text[1:] if text.startswith("-") else text
    if not digits or not all("0" <= ch <= "9" for ch in digits):
        return None
    value = int(text)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def _size(tensor: ExternalTensor) -> int | None:
    """The tensor's byte size as ORT computes it (None: a type without a fixed size)."""
    per = _ELEMENT_BYTES.get(tensor.data_type)
    if per is None or any(d < 0 for d in tensor.dims):
        return None
    count = 1
    for dim in tensor.dims:
        count *= dim
    if per:
        return count * per
    bits = _SUB_BYTE_BITS[tensor.data_type]
    return (count * bits + 7) // 8


def external_problem(tensor: ExternalTensor, model_dir: Path) -> str | None:
    """ORT's text for the first thing it refuses in ``tensor``'s external-data fields, or None."""
    name = tensor.name
    locations = [v for k, v in tensor.entries if k == "location"]
    for key, _value in tensor.entries:
        if key not in EXTERNAL_DATA_KEYS:
            return f"model format error! (initializer '{name}': unknown external-data key {key!r})"
    if len(locations) > 1:
        return "model format error! TensorProto external data has duplicate 'location' entries"
    if not locations:
        return "model format error! Missing 'location'"
    location = locations[0]
    if not location.split("\0", 1)[0]:
        return "model format error! External data location cannot be empty"
    fields: dict[str, int] = {}
    for key in ("offset", "length"):
        raw = dict(tensor.entries).get(key)
        if raw is None:
            continue
        parsed = _int64(raw)
        if parsed is None:
            return f'Failed to parse value: "0" (initializer \'{name}\': external-data {key} {raw!r})'
        fields[key] = parsed
    location = location.split("\0", 1)[0]  # a C string: ORT reads the path up to its first NUL
    if os.path.isabs(location):
        return (f"External data path validation failed for initializer: {name}. "
                "Error: Absolute path not allowed for external data location")  # fmt: skip
    target = model_dir / location
    if not os.path.realpath(target).startswith(os.path.realpath(model_dir) + os.sep):
        return (f"External data path validation failed for initializer: {name}. Error: External data path escapes "
                f'model directory. External data path: "{location}"')  # fmt: skip
    if not os.path.lexists(target):
        return (f"External data path validation failed for initializer: {name}. "
                f'Error: External data path does not exist: "{target}"')  # fmt: skip
    size = _size(tensor)
    if size is None:
        return None
    if "length" in fields and fields["length"] != size:
        return f"TensorProto: {name} external data size mismatch. Computed size: {size}, external_data.length: {fields['length']}"
    offset = fields.get("offset", 0)
    try:
        file_length = os.stat(target).st_size
    except OSError:
        return None  # unreadable: the layout rules name it
    if offset < 0 or offset + size > file_length:
        return (f"External initializer: {name} offset: {offset} size to read: {size} given file_length: "
                f"{file_length} are out of bounds or can not be read in full.")  # fmt: skip
    return None


def check_model_headers(view: PackageView) -> list[Violation]:
    """ORT-MODEL-002 / -004 on every graph file of a package view.

    The headers come from ``view.extra['model_headers']`` (label -> :class:`ModelHeader`, read by
    the runner with :func:`read_header`); a graph without a header is skipped.
    """
    headers: Mapping[str, ModelHeader | None] = view.extra.get("model_headers", {})
    found: list[Violation] = []
    for graph in view.graphs:
        header = headers.get(graph.label)
        if header is None:
            continue
        if not header.has_ir_version:
            found.append(Violation("ORT-MODEL-002", "Missing model IR version.", graph=graph.label))
        for tensor in header.external:
            problem = external_problem(tensor, graph.path.parent)
            if problem is not None:
                found.append(Violation("ORT-MODEL-004", problem, graph=graph.label))
    return found


def _check_ir_version(model: ModelLike, _entries: Mapping[str, str], version: str) -> list[Violation]:
    ir_version = as_ir_model(model).ir_version
    top = max_ir_version(version)
    if ir_version is not None and ir_version > top:
        return [Violation("ORT-MODEL-001", f"Unsupported model IR version: {ir_version}, max supported IR version: {top}")]
    return []


def _check_input_names(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
    seen: set[str] = set()
    for value in as_ir_model(model).graph.inputs:
        name = value.name or ""
        if name in seen:
            return [Violation("ORT-MODEL-003", f"Duplicate definition-site for ({name}).")]
        seen.add(name)
    return []


def _package_rule(rule_id: str) -> Callable[[PackageView], list[Violation]]:
    def check(view: PackageView) -> list[Violation]:
        return [v for v in check_model_headers(view) if v.rule_id == rule_id]

    return check


FAMILY = "model-load"
"""The rule family of this module's rules (``q38 rules --family``)."""

# The graph rules' examples (ONNX text, onnx.parser): one Relu.
_EX_RELU = """<ir_version: 14, opset_import: ["" : 21]>
g (float[2,8] x) => (float[] y) {
  [n0] y = Relu (x)
}"""

RULES: tuple[Rule, ...] = (
    *per_version("ORT-MODEL-001", "the model's IR version is at most what onnxruntime supports (1.31.1: 13, "
                 "1.32.0: 14)", _SRC, "cpu-session", "graph", _check_ir_version, family=FAMILY, doc=RuleDoc(
        "When onnxruntime reads a model (Model::Load, core/graph/model.cc) it compares the model's "
        "ir_version with the newest IR version its onnx build knows and refuses a newer one before "
        "any node is looked at: 'Unsupported model IR version: N, max supported IR version: M' "
        "(onnxruntime 1.31.1 reads up to 13, 1.32.0 up to 14).",
        "model.onnx with ir_version: 99",
        "Save the graph with an IR version the target onnxruntime reads (q38 synth --target-ort; "
        "onnx.helper.make_model(..., ir_version=13) for 1.31.1).",
    ), examples=GraphExamples.edited(_EX_RELU, ("ir_version: 14", "ir_version: 15"))),
    Rule("ORT-MODEL-002", "the model states an IR version", _SRC, "cpu-session", "package",
         _package_rule("ORT-MODEL-002"), family=FAMILY, doc=RuleDoc(
        "A ModelProto without an ir_version field is refused by onnxruntime's loader with "
        "'Missing model IR version.' before the graph is resolved.",
        "model.onnx whose ModelProto has no ir_version (field 1 absent)",
        "Write the model with onnx.save / onnx_ir.save, which always set ir_version.",
    )),
    Rule("ORT-MODEL-003", "graph input names are unique", _SRC, "cpu-session", "graph", _check_input_names, family=FAMILY, doc=RuleDoc(
        "Graph resolution defines each graph input once; a second input of the same name fails "
        "with 'Duplicate definition-site for (NAME).' when the session is created.",
        "graph inputs: input_ids, attention_mask, input_ids",
        "Rename or remove the duplicate graph input.",
    ), examples=GraphExamples.edited(_EX_RELU, ("(float[2,8] x)", "(float[2,8] x, float[2,8] x)"))),
    Rule("ORT-MODEL-004", "external-data fields: known keys, one non-empty location, int64 offset / length, a "
         "relative location inside the model's directory that exists, length = the tensor's size, the range "
         "within the file", _SRC, "cpu-session", "package", _package_rule("ORT-MODEL-004"), family=FAMILY, doc=RuleDoc(
        "An initializer stored as external data carries location / offset / length fields; "
        "onnxruntime refuses unknown keys, an empty or absolute location, one that leaves the "
        "model's directory ('..'), a missing file, offsets and lengths that are not int64, a length "
        "other than the tensor's byte size, and a range past the end of the file.",
        'external_data { key: "location" value: "../weights.bin" }',
        "Keep data files next to the graph with relative locations; re-save with "
        "onnx.save(..., save_as_external_data=True) so offsets and lengths match the file.",
    )),
)  # fmt: skip
