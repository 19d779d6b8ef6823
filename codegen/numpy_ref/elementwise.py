"""Elementwise reference kernels: unary/binary math, comparisons, logic, casts, activations.

Results keep the input dtype (float16 inputs give float16 outputs), the way the
ONNX ops are typed. Transcendentals are evaluated by NumPy in that dtype.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .registry import Inputs, OpContext, kernel
from ir.special import erf64

UnaryFn = Callable[[np.ndarray, dict[str, Any]], np.ndarray]
BinaryFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _same_dtype(out: Any, like: np.ndarray) -> np.ndarray:
    """``out`` as an array of ``like``'s dtype (0-d results stay 0-d)."""
    return np.asarray(out).astype(like.dtype, copy=False)


def _register_unary(op: str, fn: UnaryFn) -> None:
    def run(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
        x = np.asarray(inputs[0])
        return [_same_dtype(fn(x, attrs), x)]
    run.__name__ = f"unary_{op}"
    kernel(op)(run)


def _register_binary(op: str, fn: BinaryFn, keep_dtype: bool = True) -> None:
    def run(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        out = np.asarray(fn(a, b))
        return [_same_dtype(out, a) if keep_dtype else out]
    run.__name__ = f"binary_{op}"
    kernel(op)(run)


erf = erf64                         # the elementwise error function, in float64


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, stable for large |x|."""
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU, exact (erf) or the tanh approximation."""
    xd = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
    else:
        y = 0.5 * xd * (1 + erf(xd / math.sqrt(2)))
    return y.astype(x.dtype)


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)), stable."""
    return np.logaddexp(np.zeros((), x.dtype), x)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C-style integer division (truncate towards zero)."""
    if not np.issubdtype(a.dtype, np.integer):
        return np.divide(a, b)
    q = np.floor_divide(a, b)
    r = np.remainder(a, b)
    return q + ((r != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype)


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.round(x)


_UNARY: dict[str, UnaryFn] = {
    "Abs": lambda x, a: np.abs(x),
    "Neg": lambda x, a: np.negative(x),
    "Exp": lambda x, a: np.exp(x),
    "Log": lambda x, a: np.log(x),
    "Sqrt": lambda x, a: np.sqrt(x),
    "Reciprocal": lambda x, a: np.reciprocal(x),
    "Sin": lambda x, a: np.sin(x), "Cos": lambda x, a: np.cos(x), "Tan": lambda x, a: np.tan(x),
    "Asin": lambda x, a: np.arcsin(x), "Acos": lambda x, a: np.arccos(x),
    "Atan": lambda x, a: np.arctan(x), "Sinh": lambda x, a: np.sinh(x),
    "Cosh": lambda x, a: np.cosh(x), "Tanh": lambda x, a: np.tanh(x),
    "Asinh": lambda x, a: np.arcsinh(x), "Acosh": lambda x, a: np.arccosh(x),
    "Atanh": lambda x, a: np.arctanh(x),
    "Ceil": lambda x, a: np.ceil(x), "Floor": lambda x, a: np.floor(x),
    "Round": lambda x, a: _round_half_even(x),
    "Sign": lambda x, a: np.sign(x),
    "Erf": lambda x, a: erf(x),
    "BitwiseNot": lambda x, a: np.invert(x),
    "Sigmoid": lambda x, a: sigmoid(x),
    "Relu": lambda x, a: np.maximum(x, 0),
    "Softplus": lambda x, a: softplus(x),
    "Softsign": lambda x, a: x / (1 + np.abs(x)),
    "HardSigmoid": lambda x, a: np.clip(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0, 1),
    "HardSwish": lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1),
    "LeakyRelu": lambda x, a: np.where(x >= 0, x, a.get("alpha", 0.01) * x),
    "Elu": lambda x, a: np.where(x > 0, x, a.get("alpha", 1.0) * np.expm1(np.minimum(x, 0))),
    "Selu": lambda x, a: a.get("gamma", 1.05070102214813232421875) * np.where(
        x > 0, x, a.get("alpha", 1.67326319217681884765625) * np.expm1(np.minimum(x, 0))),
    "Celu": lambda x, a: np.maximum(x, 0) + np.minimum(
        0, a.get("alpha", 1.0) * np.expm1(x / a.get("alpha", 1.0))),
    "ThresholdedRelu": lambda x, a: np.where(x > a.get("alpha", 1.0), x, 0),
    "Shrink": lambda x, a: np.where(
        x < -a.get("lambd", 0.5), x + a.get("bias", 0.0),
        np.where(x > a.get("lambd", 0.5), x - a.get("bias", 0.0), 0)),
    "Mish": lambda x, a: x * np.tanh(softplus(x)),
    "Gelu": lambda x, a: gelu(x, a.get("approximate", "none")),
    "Swish": lambda x, a: x * sigmoid(a.get("alpha", 1.0) * x),
}

_BINARY: dict[str, BinaryFn] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _int_div,
    "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor,
    "PRelu": lambda x, s: np.where(x < 0, s * x, x),
}

_COMPARE: dict[str, BinaryFn] = {
    "Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
    "Greater": np.greater, "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}

for _op, _fn in _UNARY.items():
    _register_unary(_op, _fn)
for _op, _fn in _BINARY.items():
    _register_binary(_op, _fn)
for _op, _fn in _COMPARE.items():
    _register_binary(_op, _fn, keep_dtype=False)


@kernel("Not")
def not_(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [np.logical_not(inputs[0])]


@kernel("IsNaN")
def isnan(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [np.isnan(inputs[0])]


@kernel("IsInf")
def isinf(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = inputs[0]
    pos = np.isposinf(x) if attrs.get("detect_positive", 1) else np.zeros(x.shape, bool)
    neg = np.isneginf(x) if attrs.get("detect_negative", 1) else np.zeros(x.shape, bool)
    return [pos | neg]


@kernel("Pow")
def pow_(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, y = np.asarray(inputs[0]), np.asarray(inputs[1])
    if np.issubdtype(x.dtype, np.integer) and np.issubdtype(y.dtype, np.integer):
        return [np.power(x, y.astype(x.dtype))]
    if np.issubdtype(x.dtype, np.integer):
        return [np.power(x.astype(np.float64), y).astype(x.dtype)]
    return [np.power(x, y.astype(x.dtype)).astype(x.dtype)]


@kernel("Mod")
def mod(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    a, b = inputs[0], inputs[1]
    out = np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)
    return [_same_dtype(out, a)]


@kernel("BitShift")
def bitshift(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, s = inputs[0], inputs[1].astype(inputs[0].dtype)
    out = np.left_shift(x, s) if attrs["direction"] == "LEFT" else np.right_shift(x, s)
    return [out.astype(x.dtype)]


def _variadic(inputs: Inputs, fn: BinaryFn) -> np.ndarray:
    arrays = [np.asarray(x) for x in inputs if x is not None]
    out = arrays[0]
    for x in arrays[1:]:
        out = fn(out, x)
    return _same_dtype(out, arrays[0])


@kernel("Max")
def max_(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [_variadic(inputs, np.maximum)]


@kernel("Min")
def min_(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [_variadic(inputs, np.minimum)]


@kernel("Sum")
def sum_(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [_variadic(inputs, np.add)]


@kernel("Mean")
def mean(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    total = _variadic(inputs, np.add)
    n = sum(1 for x in inputs if x is not None)
    return [_same_dtype(total / n, total)]


@kernel("Where")
def where(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    c, x, y = inputs
    return [np.where(c, x, y).astype(np.result_type(x, y), copy=False)]


@kernel("Clip")
def clip(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo = inputs[1] if len(inputs) > 1 else None
        hi = inputs[2] if len(inputs) > 2 else None
    out = x
    if lo is not None:
        out = np.maximum(out, np.asarray(lo).astype(x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi).astype(x.dtype))
    return [_same_dtype(out, x)]


def _onnx_dtypes() -> dict[int, np.dtype]:
    table = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
             7: np.int64, 8: np.str_, 9: np.bool_, 10: np.float16, 11: np.float64,
             12: np.uint32, 13: np.uint64, 14: np.complex64, 15: np.complex128}
    out = {k: np.dtype(v) for k, v in table.items()}
    try:
        import ml_dtypes as mld
    except ImportError:  # pragma: no cover - ml_dtypes ships with onnx
        return out
    extra = {16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
             20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn",
             24: "float8_e8m0fnu", 25: "uint2", 26: "int2"}
    for k, name in extra.items():
        if hasattr(mld, name):
            out[k] = np.dtype(getattr(mld, name))
    return out


ONNX_DTYPES: dict[int, np.dtype] = _onnx_dtypes()
_SATURATING = {17, 18, 19, 20}


def onnx_dtype(to: int) -> np.dtype:
    """The NumPy dtype of an ONNX TensorProto elem_type."""
    if to not in ONNX_DTYPES:
        raise NotImplementedError(f"ONNX elem_type {to} has no NumPy dtype here")
    return ONNX_DTYPES[to]


def cast_to(x: np.ndarray, to: int, saturate: int = 1) -> np.ndarray:
    """ONNX Cast: plain astype, clipping to the finite range for saturating float8."""
    dtype = onnx_dtype(to)
    if to == 24:
        raise NotImplementedError("Cast to float8e8m0 (round_mode) is not implemented")
    if to == 8:
        return x.astype(np.str_).astype(object)
    if x.dtype.kind in "OUS":
        x = x.astype(np.float64) if dtype.kind != "b" else x.astype(np.float64)
    if to in _SATURATING and saturate and x.dtype.kind == "f" or (
            to in _SATURATING and saturate and x.dtype.kind == "V"):
        import ml_dtypes as mld
        fmax = float(mld.finfo(dtype).max)
        xf = x.astype(np.float32)
        x = np.where(np.isnan(xf), xf, np.clip(xf, -fmax, fmax))
    return np.asarray(x).astype(dtype)


@kernel("Cast")
def cast(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [cast_to(np.asarray(inputs[0]), attrs["to"], attrs.get("saturate", 1))]


@kernel("CastLike")
def castlike(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    target = np.asarray(inputs[1]).dtype
    to = next((k for k, v in ONNX_DTYPES.items() if v == target), None)
    if to is None or target.kind in "OU":
        to = 8 if target.kind in "OU" else None
    if to is None:
        raise NotImplementedError(f"CastLike to {target}")
    return [cast_to(np.asarray(inputs[0]), to, attrs.get("saturate", 1))]
