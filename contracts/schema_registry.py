"""onnxruntime's operator-schema registry, read from the committed dumps (``contracts/schemas``).

The dumps are written by ``python -m contracts.schema_dump`` from the installed wheel; this module
only reads them (no onnxruntime import), once per version, and answers the questions ORT's schema
layer asks when it creates a session: which schema a node resolves to at the model's opset import,
which opset imports ORT accepts at all.

Which dump a version uses: the exact version when a dump exists, else the newest dump that is not
newer, else the oldest. Every generic rule follows the CPU wheel's registry (the one probed and
dumped). The CUDA build's published 1.32.0 schema text (``docs/reference/ort-1.32.0-contrib-schemas.txt``,
19 contrib ops) agrees with it in every input, output, attribute, required flag and type
constraint, and in the documentation text itself: ``CUDA_SCHEMA_DIFFERENCES`` is empty, and
``tests/unit/contracts/test_schema_dump.py`` re-derives it from that file. What is CUDA-only is
the kernels' behaviour (the ``cuda-only`` rules), not the schemas.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts._dtypes import dtype_of
from contracts._rule import parse_version

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = [
    "CUDA_SCHEMA_DIFFERENCES",
    "ONNX_DOMAINS",
    "FormalParam",
    "OpSchema",
    "Registry",
    "available_versions",
    "registry_for",
]

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
# Domains whose missing schemas ORT reports as "No Op registered for ..." at graph resolve; any
# other domain fails later with "Fatal error: <domain>:<op>(-1) is not a registered function/op".
ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})
# (op, what differs) between the CUDA build's schema text and the CPU wheel's registry: none (the
# rules follow the CPU wheel's registry; tests/unit/contracts/test_schema_dump.py re-derives this).
CUDA_SCHEMA_DIFFERENCES: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FormalParam:
    """One formal input or output: its name, type string (a parameter or a fixed type), option."""

    name: str
    type_str: str
    option: str  # "single" | "optional" | "variadic"
    homogeneous: bool


@dataclass(frozen=True)
class OpSchema:
    """One registered schema (a (domain, name, since_version) of ORT's registry)."""

    domain: str
    name: str
    since: int
    deprecated: bool
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    inputs: tuple[FormalParam, ...]
    outputs: tuple[FormalParam, ...]
    attributes: Mapping[str, tuple[str, bool, Any]]  # name -> (type name, required, default)
    type_constraints: Mapping[str, frozenset[str]]
    inference: bool

    @functools.cached_property
    def input_type_strs(self) -> tuple[str, ...]:
        """The formal type string of each input, in order (a type parameter or one fixed type)."""
        return tuple(p.type_str for p in self.inputs)

    @functools.cached_property
    def output_type_strs(self) -> tuple[str, ...]:
        """The formal type string of each output, in order (a type parameter or one fixed type)."""
        return tuple(p.type_str for p in self.outputs)

    @functools.cached_property
    def variadic_input(self) -> bool:
        """Whether the last input is variadic (it then stands for every input beyond it)."""
        return bool(self.inputs) and self.inputs[-1].option == "variadic"

    @functools.cached_property
    def variadic_output(self) -> bool:
        """Whether the last output is variadic (it then stands for every output beyond it)."""
        return bool(self.outputs) and self.outputs[-1].option == "variadic"

    @functools.cached_property
    def output_fixed(self) -> tuple[ir.DataType | None, ...]:
        """Per output: its element type when the formal type allows exactly one, else None."""
        fixed = []
        for param in self.outputs:
            allowed = self.allowed(param.type_str) or frozenset()
            fixed.append(dtype_of(next(iter(allowed))) if len(allowed) == 1 else None)
        return tuple(fixed)

    def allowed(self, type_str: str) -> frozenset[str] | None:
        """The allowed types of a formal type string (a parameter, or one fixed type)."""
        if type_str in self.type_constraints:
            return self.type_constraints[type_str]
        if type_str.startswith(("tensor(", "seq(", "optional(", "map(", "sparse_tensor(")):
            return frozenset({type_str})
        return None

    def input_param(self, index: int) -> FormalParam | None:
        """The formal parameter of input ``index`` (the last one when it is variadic)."""
        return _param_at(self.inputs, index)

    def output_param(self, index: int) -> FormalParam | None:
        """The formal parameter of output ``index`` (the last one when it is variadic)."""
        return _param_at(self.outputs, index)


def _param_at(params: tuple[FormalParam, ...], index: int) -> FormalParam | None:
    if index < len(params):
        return params[index]
    if params and params[-1].option == "variadic":
        return params[-1]
    return None


def _formal(raw: Mapping[str, Any]) -> FormalParam:
    return FormalParam(raw["name"], raw["type"], raw["option"], bool(raw["homogeneous"]))


def _schema(raw: Mapping[str, Any]) -> OpSchema:
    return OpSchema(
        domain=raw["domain"],
        name=raw["name"],
        since=int(raw["since"]),
        deprecated=bool(raw["deprecated"]),
        min_input=int(raw["min_input"]),
        max_input=int(raw["max_input"]),
        min_output=int(raw["min_output"]),
        max_output=int(raw["max_output"]),
        inputs=tuple(_formal(p) for p in raw["inputs"]),
        outputs=tuple(_formal(p) for p in raw["outputs"]),
        attributes={k: (v["type"], bool(v["required"]), v["default"]) for k, v in raw["attributes"].items()},
        type_constraints={k: frozenset(v) for k, v in raw["type_constraints"].items()},
        inference=bool(raw["inference"]),
    )


def _canonical_domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


class Registry:
    """The schemas and opset limits of one onnxruntime version.

    Schemas are parsed on first use: the dump holds one schema per line, led by its domain, name
    and since_version, so loading indexes lines and parses only the ops a graph uses.
    """

    def __init__(self, ort_version: str, opset_max: Mapping[str, int], onnx_registry_max: int,
                 lines: Mapping[tuple[str, str], list[str]],
                 kernel_lines: Mapping[tuple[str, str], str] | None = None) -> None:  # fmt: skip
        self.ort_version = ort_version
        self.opset_max = dict(opset_max)  # ValidateOpsetForDomain limits of the domains ORT validates
        self.onnx_registry_max = onnx_registry_max
        self._lines = lines
        self._parsed: dict[tuple[str, str], tuple[OpSchema, ...]] = {}
        self.domains = frozenset({d for d, _ in lines} | set(self.opset_max))
        self._kernel_lines = kernel_lines or {}
        self._kernels: dict[tuple[str, str], tuple[tuple[int, int, Mapping[str, frozenset[str]]], ...]] = {}

    def cpu_kernels(self, domain: str, name: str) -> tuple[tuple[int, int, Mapping[str, frozenset[str]]], ...]:
        """The CPU EP's registrations of (domain, name): (since, end, allowed types per parameter)."""
        key = (_canonical_domain(domain), name)
        found = self._kernels.get(key)
        if found is None:
            line = self._kernel_lines.get(key)
            raw = json.loads(line)["kernels"] if line else []
            found = self._kernels[key] = tuple(
                (int(a), int(b), {k: frozenset(v) for k, v in types.items()}) for a, b, types in raw
            )
        return found

    def schemas(self, domain: str, name: str) -> tuple[OpSchema, ...]:
        """Every registered version of (domain, name), ascending since_version."""
        key = (_canonical_domain(domain), name)
        found = self._parsed.get(key)
        if found is None:
            raw = [_schema(json.loads(line)) for line in self._lines.get(key, ())]
            found = self._parsed[key] = tuple(sorted(raw, key=lambda s: s.since))
        return found

    def lookup_max(self, domain: str) -> int | None:
        """The highest version a node of ``domain`` resolves at (None: no limit known)."""
        domain = _canonical_domain(domain)
        return self.onnx_registry_max if domain == "" else self.opset_max.get(domain)

    def default_version(self, domain: str) -> int | None:
        """The version ORT gives a known domain the model does not import (its latest)."""
        return self.lookup_max(domain)

    def has_op(self, domain: str, name: str) -> bool:
        """Whether the registry has any schema of ``domain::name``, at whatever version."""
        return (_canonical_domain(domain), name) in self._lines

    def resolve(self, domain: str, name: str, version: int) -> OpSchema | None:
        """The schema a node resolves to at opset ``version`` of its domain (ORT's lookup)."""
        top = self.lookup_max(domain)
        if top is not None and version > top:
            return None
        found = None
        for schema in self.schemas(domain, name):
            if schema.since <= version:
                found = schema
        return found


def available_versions(directory: Path = SCHEMA_DIR) -> tuple[str, ...]:
    """The onnxruntime versions with a committed dump, oldest first."""
    found = [p.name[len("ort-") : -len(".json")] for p in directory.glob("ort-*.json")]
    return tuple(sorted(found, key=parse_version))


def _pick(version: str, versions: tuple[str, ...]) -> str:
    if version in versions:
        return version
    older = [v for v in versions if parse_version(v) <= parse_version(version)]
    return older[-1] if older else versions[0]


_IDENT = re.compile(r'\{"domain":"([^"]*)","name":"([^"]*)",')


@functools.cache
def _load(version: str) -> Registry:
    text = (SCHEMA_DIR / f"ort-{version}.json").read_text(encoding="utf-8")
    head, _, body = text.partition('\n "schemas": [\n')
    schema_part, _, kernel_part = body.partition('\n "cpu_kernels": [\n')
    meta = json.loads(head.rstrip(",") + "\n}")
    lines: dict[tuple[str, str], list[str]] = {}
    for line in schema_part.splitlines():
        found = _IDENT.match(line)
        if found is not None:
            lines.setdefault((found.group(1), found.group(2)), []).append(line.rstrip(","))
    kernels: dict[tuple[str, str], str] = {}
    for line in kernel_part.splitlines():
        found = _IDENT.match(line)
        if found is not None:
            kernels[(found.group(1), found.group(2))] = line.rstrip(",")
    return Registry(meta["ort_version"], meta["opset_max"], int(meta["onnx_registry_max"]), lines, kernels)


def registry_for(version: str) -> Registry:
    """The registry mirroring onnxruntime ``version`` (see the module docstring for the choice)."""
    return _load(_pick(version, available_versions()))
