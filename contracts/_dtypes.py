"""Tensor element types as ORT spells them in its schemas (``tensor(float16)``): a leaf module."""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["dtype_of", "type_str"]

_TYPE_NAMES = {
    ir.DataType.FLOAT: "float", ir.DataType.UINT8: "uint8", ir.DataType.INT8: "int8",
    ir.DataType.UINT16: "uint16", ir.DataType.INT16: "int16", ir.DataType.INT32: "int32",
    ir.DataType.INT64: "int64", ir.DataType.STRING: "string", ir.DataType.BOOL: "bool",
    ir.DataType.FLOAT16: "float16", ir.DataType.DOUBLE: "double", ir.DataType.UINT32: "uint32",
    ir.DataType.UINT64: "uint64", ir.DataType.COMPLEX64: "complex64",
    ir.DataType.COMPLEX128: "complex128", ir.DataType.BFLOAT16: "bfloat16",
    ir.DataType.FLOAT8E4M3FN: "float8e4m3fn", ir.DataType.FLOAT8E4M3FNUZ: "float8e4m3fnuz",
    ir.DataType.FLOAT8E5M2: "float8e5m2", ir.DataType.FLOAT8E5M2FNUZ: "float8e5m2fnuz",
    ir.DataType.UINT4: "uint4", ir.DataType.INT4: "int4", ir.DataType.FLOAT4E2M1: "float4e2m1",
}  # fmt: skip
_BY_NAME = {f"tensor({name})": dtype for dtype, name in _TYPE_NAMES.items()}
if hasattr(ir.DataType, "FLOAT8E8M0"):
    _TYPE_NAMES[ir.DataType.FLOAT8E8M0] = "float8e8m0"
    _BY_NAME["tensor(float8e8m0)"] = ir.DataType.FLOAT8E8M0


def type_str(dtype: ir.DataType) -> str:
    """ORT's spelling of a tensor type: ``tensor(float16)``."""
    return f"tensor({_TYPE_NAMES.get(dtype, dtype.name.lower())})"


def dtype_of(type_string: str) -> ir.DataType | None:
    """The element type ORT's spelling ``tensor(float16)`` names (None: not a tensor type it knows)."""
    return _BY_NAME.get(type_string)
