"""Derive the CUDA EP's com.microsoft kernel facts of one onnxruntime version from its source.

``python tools/cuda_kernel_facts.py --source FILE --version 1.32.0 --repo microsoft/onnxruntime
--ref COMMIT [--path P]`` reads the kernel class declarations of ``FILE`` (a copy of
``onnxruntime/contrib_ops/cuda/cuda_contrib_kernels.cc`` at ``COMMIT``, or its declaration
section) and writes ``contracts/schemas/cuda-kernels-VERSION.source.json``: per op its
registrations ``[since, end, {type constraint: [types]}]`` in the format of the GPU suite's dump,
labelled ``provenance`` (source-derived: repo, path, commit) and ``domains`` (the only domain the
file covers, com.microsoft; an ONNX-domain node is not judged from these facts). A registration
under a preprocessor condition (``#ifdef USE_FP8_KV_CACHE``, ``#if !defined(DISABLE_FLOAT8_TYPES)``)
is listed under ``build_dependent`` with its condition; it counts as registered.

A typed declaration (``CUDA_MS_OP_TYPED_CLASS_NAME(1, MLFloat16, QMoE)``) names the type its kernel
is built for; ORT's KernelDefBuilder binds that type to the op's first type constraint (the schema's
first input's, e.g. QMoE's ``T``), so the facts list it there; ``a_b`` names give the first type
only. An untyped declaration constrains nothing here. The GPU dump (``tests/gpu/test_cuda_kernels.py``)
replaces these facts when a GPU run writes one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.schema_registry import registry_for  # after the path above

_MACRO = re.compile(
    r"class\s+CUDA_MS_OP_(?P<kind>VERSIONED_TYPED|VERSIONED|TWO_TYPED|THREE_TYPED|TYPED|)_?CLASS_NAME\((?P<args>[^)]*)\)\s*;"
)
_CPP_TYPES = {
    "float": "float", "double": "double", "MLFloat16": "float16", "BFloat16": "bfloat16",
    "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16", "uint16_t": "uint16",
    "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64", "bool": "bool",
    "Int4x2": "int4", "UInt4x2": "uint4", "Float8E4M3FN": "float8e4m3fn", "Float8E4M3FNUZ": "float8e4m3fnuz",
    "Float8E5M2": "float8e5m2", "Float8E5M2FNUZ": "float8e5m2fnuz", "Float4E2M1x2": "float4e2m1",
}  # fmt: skip
_INT_MAX = 2147483647
OUT_DIR = Path(__file__).resolve().parents[1] / "contracts" / "schemas"


def _first_type(name: str) -> str | None:
    """``tensor(float16)`` for the first C++ type of a typed declaration's type name."""
    for cpp in sorted(_CPP_TYPES, key=len, reverse=True):
        if name == cpp or name.startswith(cpp + "_"):
            return f"tensor({_CPP_TYPES[cpp]})"
    return None


def parse(text: str) -> list[tuple[str, int, int, str | None, str]]:
    """(op, since, end, first type or None, preprocessor condition or "") per declaration."""
    found = []
    conditions: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("#if", "#ifdef", "#ifndef")):
            conditions.append(line)
        elif line.startswith("#else") and conditions:
            conditions[-1] = f"not ({conditions[-1]})"
        elif line.startswith("#endif") and conditions:
            conditions.pop()
        match = _MACRO.search(line)
        if match is None:
            continue
        args = [a.strip() for a in match.group("args").split(",")]
        kind = match.group("kind")
        if kind.startswith("VERSIONED"):
            since, end, rest = int(args[0]), int(args[1]), args[2:]
        else:
            since, end, rest = int(args[0]), _INT_MAX, args[1:]
        op, types = rest[-1], rest[:-1]
        found.append((op, since, end, _first_type(types[0]) if types else None, " && ".join(conditions)))
    return found


def facts(text: str, version: str, provenance: dict[str, object]) -> dict[str, object]:
    """The fact document of ``version`` from the declarations in ``text``."""
    registry = registry_for(version)
    ops: dict[str, dict[tuple[int, int], set[str] | None]] = {}
    dependent: dict[str, list[str]] = {}
    for op, since, end, dtype, condition in parse(text):
        schemas = registry.schemas("com.microsoft", op)
        if not schemas:
            continue  # no schema in this version: no node of it can exist
        slot = ops.setdefault(op, {})
        key = (since, end)
        if dtype is None:
            slot[key] = None  # untyped: constrains nothing
        elif key not in slot or slot[key] is not None:
            slot.setdefault(key, set()).add(dtype)  # type: ignore[union-attr]
        if condition:
            dependent.setdefault(op, []).append(f"{dtype or 'any type'}: {condition}")
    kernels = []
    for op in sorted(ops):
        param = _first_param(registry, op)
        regs = []
        for (since, end), types in sorted(ops[op].items()):
            regs.append([since, end, {} if types is None or param is None else {param: sorted(types)}])
        entry: dict[str, object] = {"domain": "com.microsoft", "name": op, "kernels": regs}
        if op in dependent:
            entry["build_dependent"] = dependent[op]
        kernels.append(entry)
    return {"ort_version": version, "provenance": provenance, "domains": ["com.microsoft"], "kernels": kernels}


def _first_param(registry: object, op: str) -> str | None:
    """The type constraint of the op's first input (what a typed kernel registration binds)."""
    schemas = registry.schemas("com.microsoft", op)  # type: ignore[attr-defined]
    schema = schemas[-1]
    if not schema.inputs:
        return None
    name = schema.inputs[0].type_str
    return name if name in schema.type_constraints else None


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the source-derived CUDA facts of one version."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("--version", required=True)
    parser.add_argument("--repo", default="microsoft/onnxruntime")
    parser.add_argument("--ref", required=True, help="the commit (or tag) the source was read at")
    parser.add_argument("--path", default="onnxruntime/contrib_ops/cuda/cuda_contrib_kernels.cc")
    parser.add_argument("--note", default="", help="what is known about how the commit relates to the release")
    args = parser.parse_args(argv)
    provenance = {"kind": "source-derived", "repo": args.repo, "ref": args.ref, "paths": [args.path],
                  "note": args.note}  # fmt: skip
    doc = facts(args.source.read_text(encoding="utf-8"), args.version, provenance)
    out = OUT_DIR / f"cuda-kernels-{args.version}.source.json"
    body = ",\n".join(json.dumps(k, separators=(",", ":")) for k in doc["kernels"])  # type: ignore[attr-defined]
    head = json.dumps({k: v for k, v in doc.items() if k != "kernels"}, indent=1)[:-2]
    out.write_text(head + ',\n "kernels": [\n' + body + "\n ]\n}\n", encoding="utf-8")
    sys.stdout.write(f"{out}: {len(doc['kernels'])} ops\n")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
