"""Tasklet expressions: a tiny typed scalar language, and its printers.

An ``Expr`` is a frozen tree of ``Const``, ``Var``, ``Un`` (unary op),
``Bin`` (binary op), ``Select`` (c ? a : b) and ``Cast``. The same tree

- evaluates vectorized over NumPy arrays (``evaluate``: the reference semantics),
- prints to NumPy source (``to_numpy``), to Python/Numba scalar code
  (``to_python``) and to CUDA C (``to_cuda``),
- counts its arithmetic (``count_flops``: every Un/Bin/Select is one FLOP),
- bounds integer index expressions over parameter ranges (``bounds``).

Memlet subsets use the same trees for index expressions (``Var`` = map param).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Union

import numpy as np

from ir import dtypes
from ir.special import erf64

Scalar = Union[int, float, bool]


@dataclass(frozen=True, slots=True)
class Const:
    value: Scalar
    dtype: str = "float32"


@dataclass(frozen=True, slots=True)
class Var:
    name: str


@dataclass(frozen=True, slots=True)
class Un:
    op: str
    a: "Expr"


@dataclass(frozen=True, slots=True)
class Bin:
    op: str
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True, slots=True)
class Select:
    cond: "Expr"
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True, slots=True)
class Cast:
    a: "Expr"
    dtype: str


Expr = Union[Const, Var, Un, Bin, Select, Cast]

UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "tanh", "erf", "sin", "cos", "tan", "floor",
             "ceil", "sign", "not", "recip", "isnan", "isinf", "round", "asin", "acos", "atan",
             "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1")
BINARY_OPS = ("add", "sub", "mul", "div", "pow", "max", "min", "and", "or", "xor", "eq", "ne",
              "lt", "le", "gt", "ge", "mod", "fmod", "floordiv")
POWERS = {1.0: "same", 2.0: "square", 3.0: "cube", 0.5: "sqrt", -1.0: "reciprocal"}
"""Constant float exponents every backend's printer writes without a power function (each maps the
form to its own text: multiplies, a square root, a reciprocal)."""
INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<",
         "le": "<=", "gt": ">", "ge": ">=", "mod": "%", "floordiv": "//"}


# --- construction helpers (terse builders used by lowering rules) ---------------------------

def c(value: Scalar, dtype: str = "float32") -> Const:
    return Const(value, dtype)


def v(name: str) -> Var:
    return Var(name)


def free_vars(e: Expr) -> frozenset[str]:
    """Names of all ``Var`` leaves."""
    if isinstance(e, Var):
        return frozenset((e.name,))
    if isinstance(e, Const):
        return frozenset()
    return frozenset().union(*(free_vars(ch) for ch in children(e)))


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Un):
        return (e.a,)
    if isinstance(e, Bin):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Cast):
        return (e.a,)
    return ()


def substitute(e: Expr, mapping: Mapping[str, Expr]) -> Expr:
    """Replace ``Var``s by expressions (used when fusing tasklets)."""
    if isinstance(e, Var):
        return mapping.get(e.name, e)
    if isinstance(e, Const):
        return e
    if isinstance(e, Un):
        return Un(e.op, substitute(e.a, mapping))
    if isinstance(e, Bin):
        return Bin(e.op, substitute(e.a, mapping), substitute(e.b, mapping))
    if isinstance(e, Select):
        return Select(substitute(e.cond, mapping), substitute(e.a, mapping), substitute(e.b, mapping))
    return Cast(substitute(e.a, mapping), e.dtype)


def count_flops(e: Expr) -> int:
    """Arithmetic operations in one evaluation: each Un, Bin and Select counts 1; Cast 0."""
    own = 1 if isinstance(e, (Un, Bin, Select)) else 0
    return own + sum(count_flops(ch) for ch in children(e))


# --- NumPy evaluation (the reference semantics) ----------------------------------------------

def erf(x: np.ndarray) -> np.ndarray:
    """erf keeping the input's float dtype (ints give float64), rounded once from Cody's float64 erf
    (``ir.special.erf64``, as exact as ``math.erf``). It was a Chebyshev form with 1.2e-7 absolute error:
    10⁸ ulp in float64, and near 0, where erf is small, 900 ulp in float32."""
    arr = np.asarray(x)
    out = erf64(arr)
    return out.astype(arr.dtype) if arr.dtype.kind == "f" else out


def _np_sign(x):
    return np.sign(x)


_NP_UNARY: dict[str, Callable] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "tanh": np.tanh, "erf": erf, "sin": np.sin, "cos": np.cos, "tan": np.tan, "floor": np.floor,
    "ceil": np.ceil, "sign": _np_sign, "not": np.logical_not, "isnan": np.isnan, "isinf": np.isinf,
    "round": np.round, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "log1p": np.log1p, "expm1": np.expm1,
}
_NP_BINARY: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "pow": np.power, "max": np.maximum,
    "min": np.minimum, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "mod": np.mod, "fmod": np.fmod, "floordiv": np.floor_divide,
}


def _div(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(np.true_divide(a, b)).astype(np.result_type(a, b))  # C-style int division
    return np.true_divide(a, b)


def _recip(a):
    a = np.asarray(a)
    return np.reciprocal(a) if a.dtype.kind == "f" else np.true_divide(1.0, a)


def evaluate(e: Expr, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """Evaluate ``e`` with NumPy broadcasting; ``env`` maps Var names to arrays or scalars."""
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Const):
        return np.asarray(e.value, dtype=dtypes.to_numpy(e.dtype))
    if isinstance(e, Un):
        a = evaluate(e.a, env)
        if e.op == "recip":
            return _recip(a)
        return _NP_UNARY[e.op](a)
    if isinstance(e, Bin):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        if e.op == "div":
            return _div(a, b)
        return _NP_BINARY[e.op](a, b)
    if isinstance(e, Select):
        return np.where(evaluate(e.cond, env), evaluate(e.a, env), evaluate(e.b, env))
    return np.asarray(evaluate(e.a, env)).astype(dtypes.to_numpy(e.dtype))


def bounds(e: Expr, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    """Inclusive integer bounds of an index expression, given inclusive bounds per Var."""
    if isinstance(e, Const):
        return int(e.value), int(e.value)
    if isinstance(e, Var):
        return ranges[e.name]
    if isinstance(e, Bin) and e.op in ("add", "sub", "mul", "floordiv", "mod", "max", "min"):
        (alo, ahi), (blo, bhi) = bounds(e.a, ranges), bounds(e.b, ranges)
        if e.op == "add":
            return alo + blo, ahi + bhi
        if e.op == "sub":
            return alo - bhi, ahi - blo
        if e.op == "max":
            return max(alo, blo), max(ahi, bhi)
        if e.op == "min":
            return min(alo, blo), min(ahi, bhi)
        if e.op == "mod" and blo == bhi and blo > 0:
            return (alo % blo, ahi % blo) if ahi // blo == alo // blo else (0, blo - 1)
        if e.op in ("mul", "floordiv") and blo == bhi:
            lo, hi = (alo * blo, ahi * blo) if e.op == "mul" else (alo // blo, ahi // blo)
            return min(lo, hi), max(lo, hi)
    raise ValueError(f"cannot bound index expression {to_text(e)}")


# --- printers -------------------------------------------------------------------------------

def _literal(value: Scalar, dtype: str) -> str:
    if dtype == "bool":
        return str(bool(value))
    if dtype in dtypes.FLOAT_TYPES:
        f = float(value)
        if math.isinf(f):
            return "np.inf" if f > 0 else "-np.inf"
        return "np.nan" if math.isnan(f) else repr(f)
    return str(int(value))


def to_text(e: Expr) -> str:
    """The IR's own readable form, e.g. ``((in0 + in1) * 0.5)``. Backends print code with their
    own printers (``codegen.numba_cpu.exprs``, ``codegen.cupy_cuda.c_expr``)."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return _literal(e.value, e.dtype)
    if isinstance(e, Un):
        return f"(-{to_text(e.a)})" if e.op == "neg" else f"{e.op}({to_text(e.a)})"
    if isinstance(e, Bin):
        a, b = to_text(e.a), to_text(e.b)
        return f"({a} {INFIX[e.op]} {b})" if e.op in INFIX else f"{e.op}({a}, {b})"
    if isinstance(e, Select):
        return f"select({to_text(e.cond)}, {to_text(e.a)}, {to_text(e.b)})"
    return f"{e.dtype}({to_text(e.a)})"


# --- JSON -----------------------------------------------------------------------------------

def to_json(e: Expr) -> list:
    if isinstance(e, Const):
        val = e.value
        if isinstance(val, float) and not math.isfinite(val):
            val = repr(val)  # 'inf', '-inf', 'nan' as strings: JSON has no literal for them
        return ["c", val, e.dtype]
    if isinstance(e, Var):
        return ["v", e.name]
    if isinstance(e, Un):
        return ["u", e.op, to_json(e.a)]
    if isinstance(e, Bin):
        return ["b", e.op, to_json(e.a), to_json(e.b)]
    if isinstance(e, Select):
        return ["s", to_json(e.cond), to_json(e.a), to_json(e.b)]
    return ["cast", e.dtype, to_json(e.a)]


def from_json(d: list) -> Expr:
    tag = d[0]
    if tag == "c":
        val = d[1]
        if isinstance(val, str):
            if val not in ("inf", "-inf", "nan"):
                raise ValueError(f"bad constant {val!r} in expression")
            val = float(val)
        return Const(val, d[2])
    if tag == "v":
        return Var(str(d[1]))
    if tag == "u":
        if d[1] not in UNARY_OPS:
            raise ValueError(f"unknown unary op {d[1]!r}")
        return Un(d[1], from_json(d[2]))
    if tag == "b":
        if d[1] not in BINARY_OPS:
            raise ValueError(f"unknown binary op {d[1]!r}")
        return Bin(d[1], from_json(d[2]), from_json(d[3]))
    if tag == "s":
        return Select(from_json(d[1]), from_json(d[2]), from_json(d[3]))
    if tag == "cast":
        return Cast(from_json(d[2]), d[1])
    raise ValueError(f"unknown expression tag {tag!r}")
