"""Tasklet expressions as typed numba scalar code.

``NumbaExpr`` prints an ``ir.expr`` tree as Python source for an ``@njit`` kernel,
following the reference semantics (``ir.expr.evaluate`` on NumPy arrays, every value
strongly typed):

- types are inferred bottom-up (``dtype``, the shared walk's) with NumPy's promotion of the
  operand dtypes; constants print in their own dtype (``np.float32(0.5)``), so float32 code
  stays float32 — a bare ``0.5`` would promote it to float64 in numba;
- exp/tanh/erf on float32 become the vectorizable ``fastmath`` forms, and GELU's erf form
  ``(0.5·x)·(1 + erf(x·√½))`` one ``fast_gelu(x)`` (``gelu_operand``); they take the kernel's
  opaque zero as a second argument when the printer has one (``zero``, see ``fastmath``); the
  rest uses numba's typed ``math``/``np`` scalar functions (float32 in → float32 out);
- ``pow`` by the constants 2, 3, 0.5, 1, −1 becomes multiplies, ``np.sqrt`` or a
  reciprocal; integer ``div`` truncates toward zero like the reference (``_idiv``).

``helpers`` collects the helper functions a printed expression calls, so the kernel
module can define them. The walk is ``program.expr_print``'s, shared with the CUDA printer;
``NumbaExpr`` is its tables plus types and the fast forms.
"""
from __future__ import annotations

import math
from typing import Mapping

from codegen.numba_cpu import halfbits
from codegen.numba_cpu.fastmath import FAST_FUNCTIONS
from codegen.program.expr_print import (INFIX_TEMPLATES, NUMERIC, ExprPrinter, UnsupportedExpr, compute_dtype,
                                        is_float)
from ir import expr as E

_TYPE_FREE = frozenset({"add", "sub", "mul", "eq", "ne", "lt", "le", "gt", "ge"})   # print whatever the types
_LOGICAL = (("and", "&"), ("or", "|"), ("xor", "^"))
_NP_UNARY = {"floor": "np.floor", "ceil": "np.ceil", "sign": "np.sign", "round": "np.rint",
             "isnan": "np.isnan", "isinf": "np.isinf", "sqrt": "np.sqrt", "log1p": "np.log1p",
             "expm1": "np.expm1", "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan",
             "asinh": "np.arcsinh", "acosh": "np.arccosh", "atanh": "np.arctanh"}

INTEGER_SOURCES = {
    "_idiv": "def _idiv(a, b):\n    q = a // b\n    return q + 1 if q < 0 and q * b != a else q\n",
    "_ifmod": "def _ifmod(a, b):\n    r = a % b\n    return r - b if r != 0 and (a < 0) != (b < 0) else r\n",
}
"""C-style integer division (truncation toward zero) and remainder (the dividend's sign), as the reference's
``div`` and ``fmod`` (``np.fmod``) on ints: numba 0.68's ``np.fmod`` of two integers gives -6 fmod 4 = 2, not -2."""

COMBINE_SOURCES = {
    "dcs_max": "def dcs_max(a, b):\n    return b if b > a or b != b else a\n",
    "dcs_min": "def dcs_min(a, b):\n    return b if b < a or b != b else a\n",
}
"""Max and min, NaN-propagating as ``np.maximum``/``np.minimum`` (numba's ``max`` drops a NaN, as C's ``fmax``
does): the CUDA prelude's ``dcs_max``/``dcs_min``. A combine passes the accumulator as ``a``: testing the new
value for NaN, not the accumulator, keeps a row-max loop 1.15x the time of ``max`` (1.9x the other way)."""


def literal(value, dt: str) -> str:
    """A typed constant: ``np.float32(0.5)``, ``np.int32(3)``, ``True``, ``2`` (int64)."""
    if dt == "bool":
        return "True" if bool(value) else "False"
    if is_float(dt):
        f = float(value)
        text = repr(f) if math.isfinite(f) else ("np.nan" if math.isnan(f) else ("np.inf" if f > 0 else "-np.inf"))
        return text if dt == "float64" else f"np.{dt}({text})"
    if dt not in NUMERIC:
        raise UnsupportedExpr(f"constant of dtype {dt}")
    return str(int(value)) if dt == "int64" else f"np.{dt}({int(value)})"


def _const(e: E.Expr, value: float) -> bool:
    return isinstance(e, E.Const) and isinstance(e.value, (int, float)) and abs(float(e.value) - value) <= 1e-7 * value


def _ordered(e: E.Bin, op: str, test) -> tuple[E.Expr, E.Expr] | None:
    """``(a, b)`` of a commutative ``op`` node whose operand ``a`` passes ``test``, in either order."""
    if not isinstance(e, E.Bin) or e.op != op:
        return None
    return (e.a, e.b) if test(e.a) else (e.b, e.a) if test(e.b) else None


def gelu_operand(e: E.Expr) -> E.Expr | None:
    """``x`` if ``e`` is GELU's erf form ``(0.5·x)·(1 + erf(x·√½))`` (``ir.lowering.activation.gelu_erf``,
    operands of × and + in either order), else None: it prints as one ``fast_gelu(x)``."""
    for half_x, one_plus in ((e.a, e.b), (e.b, e.a)):
        hx = _ordered(half_x, "mul", lambda c: _const(c, 0.5))
        op = _ordered(one_plus, "add", lambda c: _const(c, 1.0))
        if hx is None or op is None or not isinstance(op[1], E.Un) or op[1].op != "erf":
            continue
        sx = _ordered(op[1].a, "mul", lambda c: _const(c, math.sqrt(0.5)))
        if sx is not None and sx[1] == hx[1]:
            return hx[1]
    return None


class NumbaExpr(ExprPrinter):
    """Prints expressions whose ``Var``s are typed by ``types`` and named by ``names``."""

    UNARY = {"neg": "(-{a})", "not": "(not {a})", "abs": "abs({a})",
             **{op: f"{fn}({{a}})" for op, fn in _NP_UNARY.items()}}
    UNARY_FALLBACK = "math.{op}({a})"
    BINARY = {**INFIX_TEMPLATES, "pow": "({a} ** {b})", "fmod": "np.fmod({a}, {b})",
              "max": "dcs_max({a}, {b})", "min": "dcs_min({a}, {b})"}
    HELPERS = {"max": "dcs_max", "min": "dcs_min"}     # ``COMBINE_SOURCES``
    POWERS = {"same": "{a}", "square": "({a} * {a})", "cube": "({a} * {a} * {a})", "sqrt": "np.sqrt({a})",
              "reciprocal": "({one} / {a})"}
    SELECT = "({a} if {cond} else {b})"

    def __init__(self, types: Mapping[str, str], names: Mapping[str, str], fast: bool = True,
                 zero: str | None = None) -> None:
        super().__init__(types, names)
        self.fast = fast
        self.zero = zero          # the kernel's opaque float32 zero, passed to fastmath forms

    def _fast_call(self, helper: str, arg: str) -> str:
        self.helpers.add(helper)
        return f"{helper}({arg}, {self.zero})" if self.zero else f"{helper}({arg})"

    def literal(self, value, dtype: str) -> str:
        return literal(value, compute_dtype(dtype))

    def convert(self, e: E.Cast) -> str:
        return self.cast(self.emit(e.a), self.dtype(e.a), e.dtype)

    def cast(self, text: str, have: str, want: str) -> str:
        """``text`` (of dtype ``have``) converted to ``want``; bfloat16/float16 values are
        uint16 bits here (``halfbits``), converted through float32."""
        if have == want:
            return text
        if have in halfbits.LOAD:
            self.helpers.add(halfbits.LOAD[have])
            return self.cast(f"{halfbits.LOAD[have]}({text})", "float32", want)
        if want in halfbits.STORE:
            self.helpers.add(halfbits.STORE[want])
            return f"{halfbits.STORE[want]}({self.cast(text, have, 'float32')})"
        if want == "bool":
            return f"({text} != 0)"
        if want not in NUMERIC:
            raise UnsupportedExpr(f"cast to {want}")
        return f"np.{want}({text})"

    def unary(self, e: E.Un) -> str:
        dt = self.dtype(e.a)
        if e.op in ("floor", "ceil", "round") and not is_float(dt):     # np.rint of an int64 goes through float64
            return self.emit(e.a)
        if e.op == "recip":
            return f"({literal(1.0, dt if is_float(dt) else 'float64')} / {self.emit(e.a)})"
        if self.fast and dt == "float32" and e.op in FAST_FUNCTIONS:
            return self._fast_call(FAST_FUNCTIONS[e.op], self.emit(e.a))
        return super().unary(e)

    def binary(self, e: E.Bin) -> str:
        if e.op == "mul" and self.fast and (x := gelu_operand(e)) is not None and self.dtype(x) == "float32":
            return self._fast_call("fast_gelu", self.emit(x))
        if e.op in _TYPE_FREE:
            return super().binary(e)
        self.dtype(e)             # the rest depend on their operands' types: refuse two without a common one
        if e.op in ("div", "fmod") and not (is_float(self.dtype(e.a)) or is_float(self.dtype(e.b))):
            helper = "_idiv" if e.op == "div" else "_ifmod"
            self.helpers.add(helper)
            return f"{helper}({self.emit(e.a)}, {self.emit(e.b)})"
        if e.op in ("and", "or", "xor"):
            a, b = (self.cast(self.emit(x), self.dtype(x), "bool") for x in (e.a, e.b))
            return f"({a} {dict(_LOGICAL)[e.op]} {b})"
        return super().binary(e)

    def power_applies(self, e: E.Bin) -> bool:
        return is_float(self.dtype(e))

    def power_operands(self, e: E.Bin) -> dict[str, str]:
        dt = self.dtype(e)
        return {"a": self.cast(self.emit(e.a), self.dtype(e.a), dt), "one": literal(1.0, dt)}
