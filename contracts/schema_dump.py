"""Write the canonical operator-schema dump of the installed onnxruntime wheel.

``python -m contracts.schema_dump [--out DIR] [--check]`` reads every schema of the installed
wheel (``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``: name, domain,
since_version, inputs/outputs with their option, attributes with type, required flag and default,
type constraints), the highest opset each domain accepts (probed with one-node sessions:
``ValidateOpsetForDomain``) and the CPU EP's kernel registrations (``get_all_opkernel_def()``),
and writes ``contracts/schemas/ort-<version>.json``. The committed
dumps are what the generic schema rules (``contracts.schema_rules``) read, so ``q38 check`` mirrors
ORT's schema layer without importing onnxruntime. ``--check`` compares instead of writing (exit 1
on a difference); ``tests/unit/contracts/test_schema_dump.py`` does the same for the installed wheel.

Documentation strings are left out (they change wording between builds without changing what a
session accepts). The file is canonical: schemas sorted by (domain, name, since_version), one JSON
object per line led by domain, name and since; then one line of CPU kernels per op.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import onnx
from onnx import helper

if TYPE_CHECKING:
    # onnxruntime's own schema class (what get_all_operator_schema() returns), not onnx's.
    from onnxruntime.capi.onnxruntime_pybind11_state.schemadef import OpSchema as OrtOpSchema

__all__ = ["SCHEMA_DIR", "dump_installed", "dump_path", "main", "render"]

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
FORMAT = 1
_OPTION = {"Single": "single", "Optional": "optional", "Variadic": "variadic"}
# Domains whose highest accepted opset is probed: every schema domain, plus the domains ORT's
# registry knows without schemas in the Python list (a domain that accepts any version, like an
# unknown custom domain, is not recorded).
_EXTRA_DOMAINS = ("ai.onnx.training", "ai.onnx.preview.training", "ai.onnx.preview",
                  "com.microsoft.experimental", "org.pytorch.aten", "com.microsoft.dml",
                  "com.microsoft.extensions", "com.microsoft.mlfeaturizers")  # fmt: skip
_PROBE_LIMIT = 1024


def dump_path(version: str, directory: Path = SCHEMA_DIR) -> Path:
    """Where the dump of onnxruntime ``version`` lives."""
    return directory / f"ort-{version}.json"


def _attr_type_name(code: int) -> str:
    return str(onnx.AttributeProto.AttributeType.Name(code))


def _default(raw: bytes) -> object:
    """The JSON value of a schema attribute's default (None when it has none)."""
    if not raw:
        return None
    proto = onnx.AttributeProto.FromString(raw)
    if proto.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
                      onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRINGS):  # fmt: skip
        value = helper.get_attribute_value(proto)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, list):
            return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        return value
    return {"type": _attr_type_name(proto.type)}  # a tensor/graph default: its kind only


def _formal(param: OrtOpSchema.FormalParameter) -> dict[str, Any]:
    """One input / output of a schema as its dump record."""
    option = str(param.option).rsplit(".", 1)[-1]
    return {
        "name": param.name,
        "type": param.typeStr,
        "option": _OPTION[option],
        "homogeneous": bool(param.isHomogeneous),
    }


def _schema(schema: OrtOpSchema) -> dict[str, Any]:
    """One onnxruntime schema as its dump record (attribute defaults as JSON values)."""
    attributes = {}
    for name, attribute in sorted(schema.attributes.items()):
        attributes[name] = {
            "type": _attr_type_name(int(attribute.type.value)),
            "required": bool(attribute.required),
            "default": _default(attribute._default_value),
        }
    return {
        "domain": schema.domain,
        "name": schema.name,
        "since": int(schema.since_version),
        "deprecated": bool(schema.deprecated),
        "min_input": int(schema.min_input),
        "max_input": int(schema.max_input),
        "min_output": int(schema.min_output),
        "max_output": int(schema.max_output),
        "inputs": [_formal(p) for p in schema.inputs],
        "outputs": [_formal(p) for p in schema.outputs],
        "attributes": attributes,
        "type_constraints": {
            tc.type_param_str: sorted(tc.allowed_type_strs) for tc in schema.type_constraints
        },
        "inference": bool(schema.has_type_and_shape_inference_function),
    }


def _opset_accepted(domain: str, version: int) -> bool:
    """Whether a session accepts an opset import of ``domain`` at ``version`` (Identity model)."""
    import onnxruntime as ort  # deferred: heavy; only the opset probe needs it

    opsets = [helper.make_opsetid(domain, version)]
    if domain not in ("", "ai.onnx"):
        opsets.insert(0, helper.make_opsetid("", 13))
    node = helper.make_node("Identity", ["x"], ["y"])
    value = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [value("x", onnx.TensorProto.FLOAT, [1])],
                              [value("y", onnx.TensorProto.FLOAT, [1])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several pybind exception types
        text = str(exc)
        if "official support" in text or "No Op registered for Identity" in text:
            return False
        raise
    return True


def _opset_max(domain: str) -> int | None:
    """The highest opset version of ``domain`` a session accepts, found by bisection.

    Acceptance is monotone in the version. None when every version is accepted (a domain ORT
    does not validate).
    """
    lo, hi = 1 if domain in ("", "ai.onnx") else 0, _PROBE_LIMIT
    if _opset_accepted(domain, hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _opset_accepted(domain, mid):
            lo = mid
        else:
            hi = mid
    return lo


def _cpu_kernels(state: ModuleType) -> list[dict[str, Any]]:
    """The CPU EP's kernel registrations: per (domain, op), each version range and type set.

    ``state`` is onnxruntime's ``onnxruntime_pybind11_state`` module.
    """
    by_op: dict[tuple[str, str], list[Any]] = {}
    for kernel in state.get_all_opkernel_def():
        if kernel.provider != "CPUExecutionProvider":
            continue
        since, end = kernel.version_range
        types = {k: sorted(v) for k, v in sorted(kernel.type_constraints.items())}
        by_op.setdefault((kernel.domain, kernel.op_name), []).append([int(since), int(end), types])
    return [
        {"domain": d, "name": n, "kernels": sorted(v, key=lambda r: (r[0], r[1], json.dumps(r[2], sort_keys=True)))}
        for (d, n), v in sorted(by_op.items())
    ]


def dump_installed() -> dict[str, Any]:
    """The canonical dump of the installed onnxruntime (version, opset limits, schemas, CPU kernels)."""
    import onnxruntime as ort  # deferred: heavy; only a dump needs it

    # deferred: heavy; only a dump needs it
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    schemas = sorted((_schema(s) for s in state.get_all_operator_schema()),
                     key=lambda s: (s["domain"], s["name"], s["since"]))  # fmt: skip
    domains = sorted({s["domain"] for s in schemas} | set(_EXTRA_DOMAINS))
    limits = {domain: _opset_max(domain) for domain in domains}
    return {
        "format": FORMAT,
        "ort_version": str(ort.__version__).split("+")[0],
        "regenerate": "python -m contracts.schema_dump",
        # ValidateOpsetForDomain: an import above this fails the session ("official support").
        "opset_max": {domain: top for domain, top in limits.items() if top is not None},
        # The highest ai.onnx version a node resolves at ("ai.onnx" imports are not validated).
        "onnx_registry_max": _opset_max("ai.onnx"),
        "schemas": schemas,
        "cpu_kernels": _cpu_kernels(state),
    }


def _line(schema: dict[str, Any]) -> str:
    """One schema as one JSON line: domain, name and since first, then the other keys sorted.

    The reader indexes lines by the first three without parsing the rest.
    """
    ident = {"domain": schema["domain"], "name": schema["name"], "since": schema["since"]}
    rest = {k: v for k, v in schema.items() if k not in ident}
    return json.dumps({**ident, **dict(sorted(rest.items()))}, sort_keys=False, separators=(",", ":"))


def render(dump: dict[str, Any]) -> str:
    """The canonical text of ``dump``, the committed ``contracts/schemas`` file format.

    Header keys first, then one schema per line, then one CPU kernel list per line
    (``"cpu_kernels"``).
    """
    head = {k: v for k, v in dump.items() if k not in ("schemas", "cpu_kernels")}
    schemas = [_line(s) for s in dump["schemas"]]
    kernels = [json.dumps(k, separators=(",", ":")) for k in dump["cpu_kernels"]]
    body = json.dumps(head, sort_keys=True, indent=1)[:-2]  # drop the closing "\n}"
    return (body + ',\n "schemas": [\n' + ",\n".join(schemas) + '\n ],\n "cpu_kernels": [\n'
            + ",\n".join(kernels) + "\n ]\n}\n")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``python -m contracts.schema_dump``: write (or with ``--check`` compare) the installed dump.

    Returns 0, or 1 when ``--check`` finds the committed dump differs from the installed wheel.
    """
    parser = argparse.ArgumentParser(prog="python -m contracts.schema_dump", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR, help="directory of the dumps (default: contracts/schemas)")
    parser.add_argument("--check", action="store_true", help="compare with the committed dump instead of writing")
    args = parser.parse_args(argv)
    dump = dump_installed()
    text = render(dump)
    path = dump_path(dump["ort_version"], args.out)
    if args.check:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        sys.stdout.write(f"{path}: {'up to date' if same else 'DIFFERS from the installed onnxruntime'}\n")
        return 0 if same else 1
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {path} ({len(dump['schemas'])} schemas)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
