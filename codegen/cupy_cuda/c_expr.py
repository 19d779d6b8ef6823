"""``ir.expr`` trees as CUDA C expressions (float32 math: ``expf``, ``tanhf``, ``erff``, …).

``to_cuda(e, names)`` prints a tasklet expression; ``names`` maps variables (connectors,
map parameters) to the C text that loads them. ``C_TYPES`` is the one table of C element
types of the CUDA backend.
"""
from __future__ import annotations

import math
from typing import Mapping

from ir import dtypes
from ir import expr as E

C_TYPES = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
           "int64": "long long", "int32": "int", "int16": "short", "int8": "signed char", "uint8": "unsigned char",
           "bool": "bool"}
_FN = {"abs": "fabsf", "isnan": "isnan", "isinf": "isinf", "round": "rintf"}
_BINARY = {"pow": "powf({a}, {b})", "max": "dcs_max<float>({a}, {b})", "min": "dcs_min<float>({a}, {b})", "and": "({a} && {b})",
           "or": "({a} || {b})", "xor": "({a} != {b})", "mod": "({a} % {b})", "fmod": "fmodf({a}, {b})",
           "floordiv": "({a} / {b})"}

# ``E.POWERS``, pow by a constant float: powf is about 170 instructions inlined, and x·x is correctly
# rounded where powf is within an ulp (as the numba printer does)
_POWERS = {"same": "({a})", "square": "dcs_sq({a})", "cube": "dcs_cube({a})", "sqrt": "sqrtf({a})",
           "reciprocal": "(1.0f / {a})"}


def to_cuda(e: E.Expr, names: Mapping[str, str] | None = None) -> str:
    """CUDA C source for ``e`` (see the module docstring)."""
    names = names or {}
    if isinstance(e, E.Var):
        return names.get(e.name, e.name)
    if isinstance(e, E.Const):
        return _literal(e.value, e.dtype)
    if isinstance(e, E.Un):
        return _unary(e.op, to_cuda(e.a, names))
    if isinstance(e, E.Bin):
        a, b = to_cuda(e.a, names), to_cuda(e.b, names)
        if e.op == "pow" and isinstance(e.b, E.Const) and e.b.dtype in dtypes.FLOAT_TYPES \
                and float(e.b.value) in E.POWERS:
            return _POWERS[E.POWERS[float(e.b.value)]].format(a=a)
        if e.op in E.INFIX and e.op not in ("mod", "floordiv"):
            return f"({a} {E.INFIX[e.op]} {b})"
        return _BINARY[e.op].format(a=a, b=b)
    if isinstance(e, E.Select):
        return f"({to_cuda(e.cond, names)} ? {to_cuda(e.a, names)} : {to_cuda(e.b, names)})"
    return f"(({C_TYPES.get(e.dtype, 'float')})({to_cuda(e.a, names)}))"


def _literal(value, dtype: str) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in dtypes.FLOAT_TYPES:
        f = float(value)
        if math.isinf(f):
            return "INFINITY" if f > 0 else "-INFINITY"
        if math.isnan(f):
            return "NAN"
        return repr(f) + ("f" if dtype == "float32" else "")
    return str(int(value))


def _unary(op: str, a: str) -> str:
    if op == "neg":
        return f"(-{a})"
    if op == "not":
        return f"(!{a})"
    if op == "recip":
        return f"(1.0f / {a})"
    if op == "sign":
        return f"(copysignf(1.0f, {a}) * ({a} != 0.0f))"
    return f"{_FN.get(op, op + 'f')}({a})"
