"""Element types: names, ONNX codes, NumPy dtypes and sizes in bytes.

The IR names dtypes by their NumPy names (``"float32"``, ``"int64"``, ``"bool"``,
``"bfloat16"``, ``"float8_e4m3fn"``, …), taken from onnx's own type table, so
bfloat16 and the float8/int4 families map to their ``ml_dtypes`` NumPy types.
Strings are ``"string"`` (NumPy object arrays).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper


def _table() -> dict[int, np.dtype]:
    out = {}
    for code in TensorProto.DataType.values():
        try:
            out[code] = np.dtype(helper.tensor_dtype_to_np_dtype(code))
        except (KeyError, TypeError, ValueError):
            continue
    return out


_NP_OF_CODE = _table()
ONNX_TO_NAME: dict[int, str] = {
    code: ("string" if dt == np.dtype(object) else dt.name) for code, dt in _NP_OF_CODE.items()}
NAME_TO_ONNX: dict[str, int] = {v: k for k, v in ONNX_TO_NAME.items()}
_NP_OF_NAME: dict[str, np.dtype] = {ONNX_TO_NAME[c]: dt for c, dt in _NP_OF_CODE.items()}

FLOAT_TYPES = frozenset({"float32", "float64", "float16", "bfloat16"})
NUMERIC_TYPES = ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "bool")
"""The dtypes a tasklet computes in (lowering, the kernel printers): the floats but bfloat16 (a storage type,
widened to float32 to compute), the integers and bool."""
HALF_FLOATS = frozenset({"float16", "bfloat16"})
"""The 16-bit floats: computed in float32, stored as uint16 bits by every backend's program."""
WIDE_TYPES = ("float32", "float64", "int32", "int64")
"""The 32- and 64-bit floats and integers: what a kernel's row caches, column accumulators and warp shuffles hold."""
NUMPY_NAMES = {dt: "np.bool_" if dt == "bool" else f"np.{dt}" for dt in NUMERIC_TYPES}
"""How generated code names a dtype's NumPy type."""


def from_onnx(code: int) -> str:
    """ONNX TensorProto element type -> dtype name; unknown codes raise ValueError."""
    try:
        return ONNX_TO_NAME[code]
    except KeyError:
        raise ValueError(f"unsupported ONNX element type {code}") from None


def to_numpy(name: str) -> np.dtype:
    """dtype name -> NumPy dtype (ml_dtypes types for bfloat16, float8, int4, …)."""
    try:
        return _NP_OF_NAME[name]
    except KeyError:
        return np.dtype(name)


def from_numpy(dtype: np.dtype) -> str:
    """NumPy dtype -> dtype name."""
    dtype = np.dtype(dtype)
    return "string" if dtype == np.dtype(object) else dtype.name


def itemsize(name: str) -> int:
    """Bytes per element of ``name`` (sub-byte types count one byte, as stored here)."""
    return to_numpy(name).itemsize
