"""``ir.expr`` trees as CUDA C expressions, each operation in the type it computes in.

``to_cuda(e, names, helpers, types)`` prints a tasklet expression; ``names`` maps variables (connectors,
map parameters) to the C text that loads them (a name it lacks prints as itself), ``types`` to the dtype
they compute in (float32 where not given). The walk and its typing are ``program.expr_print``'s;
``CudaExpr`` is its tables. ``C_TYPES`` is the one table of C element types of the CUDA backend.

- Float math prints in the operation's own type (``FLOAT_FORMS``): ``expf``, ``1.0f`` and ``dcs_max<float>``
  on float32 (and 16-bit floats), ``exp``, ``1.0`` and ``dcs_max<double>`` on float64; a float function of
  an int computes in double, as NumPy's.
- Integer max, min, abs and sign keep every bit (``dcs_max<long long>``, ``dcs_iabs``); the rounding ops
  are the value itself, ``fmod`` is C's ``%`` and ``pow`` goes through double.

``mod`` and ``floordiv`` follow NumPy (the divisor's sign, the floor) through helpers a kernel defines
when it calls them (``device_lib.HELPER_SOURCES``; C's ``%`` takes the dividend's sign and is no float operator).
An index expression (``CudaIndex``: params and positive constants, never negative) keeps C's ``%`` and ``/``.
"""
from __future__ import annotations

import math
from typing import Mapping

from codegen.program.expr_print import INFIX_TEMPLATES, ExprPrinter, UnsupportedExpr, compute_dtype, is_float
from ir import dtypes
from ir import expr as E

C_TYPES = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
           "int64": "long long", "int32": "int", "int16": "short", "int8": "signed char", "uint8": "unsigned char",
           "bool": "bool"}


FLOAT_FORMS = {"float32": {"f": "f", "one": "1.0f", "zero": "0.0f", "T": "float"},
               "float64": {"f": "", "one": "1.0", "zero": "0.0", "T": "double"}}
"""A float function's suffix, 1, 0 and the C type, in the type an operation computes in."""


class CudaExpr(ExprPrinter):
    UNARY = {"neg": "(-{a})", "not": "(!{a})", "recip": "({one} / {a})", "abs": "fabs{f}({a})", "isnan": "isnan({a})",
             "isinf": "isinf({a})", "round": "rint{f}({a})", "sign": "(copysign{f}({one}, {a}) * ({a} != {zero}))"}
    UNARY_FALLBACK = "{op}{f}({a})"
    INTEGER_UNARY = {"abs": "dcs_iabs({a})", "sign": "dcs_isign({a})", "floor": "({a})", "ceil": "({a})",
                     "round": "({a})", "isnan": "false", "isinf": "false"}
    BINARY = {**INFIX_TEMPLATES, "floordiv": "dcs_floordiv({a}, {b})", "mod": "dcs_mod({a}, {b})",
              "pow": "pow{f}({a}, {b})", "max": "dcs_max<{T}>({a}, {b})", "min": "dcs_min<{T}>({a}, {b})",
              "and": "({a} && {b})", "or": "({a} || {b})", "xor": "({a} != {b})", "fmod": "fmod{f}({a}, {b})"}
    INTEGER_BINARY = {"pow": "(({T})pow((double)({a}), (double)({b})))", "fmod": "({a} % {b})"}
    HELPERS = {"floordiv": "dcs_floordiv", "mod": "dcs_mod"}
    INTEGER_HELPERS = {"abs": "dcs_iabs", "sign": "dcs_isign"}
    # powf is about 170 instructions inlined, and x·x is correctly rounded where powf is within an ulp
    POWERS = {"same": "({a})", "square": "dcs_sq({a})", "cube": "dcs_cube({a})", "sqrt": "sqrt{f}({a})",
              "reciprocal": "({one} / {a})"}
    SELECT = "({cond} ? {a} : {b})"

    def forms(self, e: E.Un | E.Bin) -> dict[str, str]:
        """``FLOAT_FORMS`` of double where ``e`` or an operand is float64, else of float; ``T``: ``e``'s C type."""
        types = {self.dtype(e), *(self.dtype(x) for x in E.children(e))}
        return {**FLOAT_FORMS["float64" if "float64" in types else "float32"], "T": C_TYPES[self.dtype(e)]}

    def unary(self, e: E.Un) -> str:
        have = self.dtype(e.a)
        if not is_float(have) and e.op in self.INTEGER_UNARY:        # ints keep their bits
            if e.op in self.INTEGER_HELPERS:
                self.helpers.add(self.INTEGER_HELPERS[e.op])
            return self.INTEGER_UNARY[e.op].format(a=self.emit(e.a))
        if is_float(self.dtype(e)) and not is_float(have):           # a float function of an int: in double
            return super().unary(E.Un(e.op, E.Cast(e.a, "float64")))
        return super().unary(e)

    def binary(self, e: E.Bin) -> str:
        if e.op in self.INTEGER_BINARY and not is_float(want := self.dtype(e)):
            return self.INTEGER_BINARY[e.op].format(a=self.emit(e.a), b=self.emit(e.b), T=C_TYPES[want])
        return super().binary(e)

    def var(self, name: str) -> str:
        return self.names.get(name, name)

    def literal(self, value, dtype: str) -> str:
        dtype = compute_dtype(dtype)
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
        if e.dtype not in C_TYPES:              # never another type's cast: it would keep a fraction or a sign
            raise UnsupportedExpr(f"a cast to {e.dtype}, which CUDA kernels do not handle")
        return f"(({C_TYPES[e.dtype]})({self.emit(e.a)}))"

    def power_applies(self, e: E.Bin) -> bool:
        return is_float(self.dtype(e))

    def power_operands(self, e: E.Bin) -> dict[str, str]:
        want, a = self.dtype(e), self.emit(e.a)
        return {"a": a if self.dtype(e.a) == want else f"(({C_TYPES[want]})({a}))"}


class CudaIndex(CudaExpr):
    """An index expression: its operands are never negative, so C's ``%`` and ``/`` are NumPy's."""

    BINARY = {**CudaExpr.BINARY, "floordiv": "({a} / {b})", "mod": "({a} % {b})"}
    HELPERS = {}

    def dtype(self, e: E.Expr) -> str:
        return "int64"


def to_cuda(e: E.Expr, names: Mapping[str, str] | None = None, helpers: set[str] | None = None,
            types: Mapping[str, str] | None = None) -> str:
    """CUDA C source for ``e`` (see the module docstring); the helpers it calls are added to ``helpers``."""
    printer = CudaExpr({**{v: "float32" for v in E.free_vars(e)}, **(types or {})}, names or {})
    text = printer.emit(e)
    if helpers is not None:
        helpers |= printer.helpers
    return text


def index_to_cuda(e: E.Expr, names: Mapping[str, str]) -> str:
    """CUDA C source for index expression ``e``."""
    return CudaIndex({}, names).emit(e)
