"""Element types: names, ONNX codes, NumPy dtypes and sizes in bytes.

The IR names dtypes by NumPy-style strings (``"float32"``, ``"int64"``, ``"bool"``,
``"bfloat16"``). bfloat16 has no NumPy dtype here; it is stored as ``uint16`` bits.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

ONNX_TO_NAME: dict[int, str] = {
    TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.FLOAT16: "float16",
    TensorProto.BFLOAT16: "bfloat16", TensorProto.INT8: "int8", TensorProto.INT16: "int16",
    TensorProto.INT32: "int32", TensorProto.INT64: "int64", TensorProto.UINT8: "uint8",
    TensorProto.UINT16: "uint16", TensorProto.UINT32: "uint32", TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool", TensorProto.STRING: "string",
}
NAME_TO_ONNX: dict[str, int] = {v: k for k, v in ONNX_TO_NAME.items()}

ITEMSIZE: dict[str, int] = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "int16": 2, "int32": 4,
    "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1, "string": 8,
}

FLOAT_TYPES = frozenset({"float32", "float64", "float16", "bfloat16"})


def from_onnx(code: int) -> str:
    """ONNX TensorProto element type -> dtype name; unknown codes raise ValueError."""
    try:
        return ONNX_TO_NAME[code]
    except KeyError:
        raise ValueError(f"unsupported ONNX element type {TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code}") from None


def to_numpy(name: str) -> np.dtype:
    """dtype name -> NumPy dtype (bfloat16 is carried as uint16 bits)."""
    if name == "bfloat16":
        return np.dtype(np.uint16)
    if name == "string":
        return np.dtype(object)
    return np.dtype(name)


def from_numpy(dtype: np.dtype) -> str:
    """NumPy dtype -> dtype name."""
    dtype = np.dtype(dtype)
    if dtype == np.dtype(object):
        return "string"
    return dtype.name


def itemsize(name: str) -> int:
    """Bytes per element of ``name``."""
    return ITEMSIZE[name]
