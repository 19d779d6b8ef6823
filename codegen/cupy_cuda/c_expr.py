"""``ir.expr`` trees as CUDA C expressions (float32 math: ``expf``, ``tanhf``, ``erff``, …).

``to_cuda(e, names)`` prints a tasklet expression; ``names`` maps variables (connectors,
map parameters) to the C text that loads them (a name it lacks prints as itself). The walk is
``program.expr_print``'s; ``CudaExpr`` is its tables. ``C_TYPES`` is the one table of C element
types of the CUDA backend.

``mod`` and ``floordiv`` follow NumPy (the divisor's sign, the floor) through helpers a kernel defines
when it calls them (``HELPER_SOURCES``; C's ``%`` takes the dividend's sign and is no float operator).
An index expression (``CudaIndex``: params and positive constants, never negative) keeps C's ``%`` and ``/``.
"""
from __future__ import annotations

import math
from typing import Mapping

from codegen.program.expr_print import INFIX_TEMPLATES, ExprPrinter
from ir import dtypes
from ir import expr as E

C_TYPES = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
           "int64": "long long", "int32": "int", "int16": "short", "int8": "signed char", "uint8": "unsigned char",
           "bool": "bool"}


def _helper(name: str, integer: str, real: str) -> str:
    """``name`` for every integer type (``integer``) and for float and double (``real``, over ``F`` = fmodf/fmod, …),
    guarded so that kernels compiled as one unit define it once."""
    guard = name.upper()
    reals = "".join(f"__device__ inline {t} {name}({t} a, {t} b) {{ {real.format(T=t, F=f)} }}\n"
                    for t, f in (("float", "f"), ("double", "")))
    return (f"#ifndef {guard}\n#define {guard}\ntemplate <typename T> __device__ T {name}(T a, T b) {{ {integer} }}\n"
            f"{reals}#endif\n")


HELPER_SOURCES = {
    "dcs_mod": _helper("dcs_mod", "T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;",
                       "{T} r = fmod{F}(a, b); return r != 0 ? (((r < 0) != (b < 0)) ? r + b : r) : copysign{F}(({T})0, b);"),
    "dcs_floordiv": _helper("dcs_floordiv", "T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;",
                            "return floor{F}(a / b);"),
}


class CudaExpr(ExprPrinter):
    UNARY = {"neg": "(-{a})", "not": "(!{a})", "recip": "(1.0f / {a})", "abs": "fabsf({a})", "isnan": "isnan({a})",
             "isinf": "isinf({a})", "round": "rintf({a})", "sign": "(copysignf(1.0f, {a}) * ({a} != 0.0f))"}
    UNARY_FALLBACK = "{op}f({a})"
    BINARY = {**INFIX_TEMPLATES, "floordiv": "dcs_floordiv({a}, {b})", "mod": "dcs_mod({a}, {b})",
              "pow": "powf({a}, {b})", "max": "dcs_max<float>({a}, {b})", "min": "dcs_min<float>({a}, {b})",
              "and": "({a} && {b})", "or": "({a} || {b})", "xor": "({a} != {b})", "fmod": "fmodf({a}, {b})"}
    HELPERS = {"floordiv": "dcs_floordiv", "mod": "dcs_mod"}
    # powf is about 170 instructions inlined, and x·x is correctly rounded where powf is within an ulp
    POWERS = {"same": "({a})", "square": "dcs_sq({a})", "cube": "dcs_cube({a})", "sqrt": "sqrtf({a})",
              "reciprocal": "(1.0f / {a})"}
    SELECT = "({cond} ? {a} : {b})"

    def var(self, name: str) -> str:
        return self.names.get(name, name)

    def literal(self, value, dtype: str) -> str:
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

    def convert(self, e: E.Cast) -> str:
        return f"(({C_TYPES.get(e.dtype, 'float')})({self.emit(e.a)}))"

    def power_applies(self, e: E.Bin) -> bool:
        return e.b.dtype in dtypes.FLOAT_TYPES


class CudaIndex(CudaExpr):
    """An index expression: its operands are never negative, so C's ``%`` and ``/`` are NumPy's."""

    BINARY = {**CudaExpr.BINARY, "floordiv": "({a} / {b})", "mod": "({a} % {b})"}
    HELPERS = {}


def to_cuda(e: E.Expr, names: Mapping[str, str] | None = None, helpers: set[str] | None = None) -> str:
    """CUDA C source for ``e`` (see the module docstring); the helpers it calls are added to ``helpers``."""
    printer = CudaExpr(names or {})
    text = printer.emit(e)
    if helpers is not None:
        helpers |= printer.helpers
    return text


def index_to_cuda(e: E.Expr, names: Mapping[str, str]) -> str:
    """CUDA C source for index expression ``e``."""
    return CudaIndex(names).emit(e)
