"""Tasklet expressions as typed numba scalar code.

``ExprPrinter`` prints an ``ir.expr`` tree as Python source for an ``@njit`` kernel,
following the reference semantics (``ir.expr.evaluate`` on NumPy arrays, every value
strongly typed):

- types are inferred bottom-up (``dtype``) with NumPy's promotion of the operand
  dtypes; constants print in their own dtype (``np.float32(0.5)``), so float32 code
  stays float32 — a bare ``0.5`` would promote it to float64 in numba;
- exp/tanh/erf on float32 become the vectorizable ``fastmath`` forms, and GELU's erf form
  ``(0.5·x)·(1 + erf(x·√½))`` one ``fast_gelu(x)`` (``gelu_operand``); they take the kernel's
  opaque zero as a second argument when the printer has one (``zero``, see ``fastmath``); the
  rest uses numba's typed ``math``/``np`` scalar functions (float32 in → float32 out);
- ``pow`` by the constants 2, 3, 0.5, 1, −1 becomes multiplies, ``np.sqrt`` or a
  reciprocal; integer ``div`` truncates toward zero like the reference (``_idiv``).

``helpers`` collects the helper functions a printed expression calls, so the kernel
module can define them. The printer follows ``ir.expr.to_text``'s recursion with types and
fast forms added.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from codegen.numba_cpu import halfbits
from codegen.numba_cpu.fastmath import FAST_FUNCTIONS
from ir import dtypes
from ir import expr as E

_BOOL_UNARY = frozenset({"not", "isnan", "isinf"})
_SAME_UNARY = frozenset({"neg", "abs", "sign", "floor", "ceil", "round"})
_BOOL_BINARY = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"})
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*"}
_NP_UNARY = {"floor": "np.floor", "ceil": "np.ceil", "sign": "np.sign", "round": "np.rint",
             "isnan": "np.isnan", "isinf": "np.isinf", "sqrt": "np.sqrt", "log1p": "np.log1p",
             "expm1": "np.expm1", "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan",
             "asinh": "np.arcsinh", "acosh": "np.arccosh", "atanh": "np.arctanh"}
NUMERIC = frozenset(dtypes.NUMERIC_TYPES)

IDIV_SOURCE = '''def _idiv(a, b):
    q = a // b
    return q + 1 if q < 0 and q * b != a else q
'''
"""C-style integer division (truncation toward zero), as the reference's ``div`` on ints."""

COMBINE_SOURCES = {
    "dcs_max": "def dcs_max(a, b):\n    return b if b > a or b != b else a\n",
    "dcs_min": "def dcs_min(a, b):\n    return b if b < a or b != b else a\n",
}
"""Max and min, NaN-propagating as ``np.maximum``/``np.minimum`` (numba's ``max`` drops a NaN, as C's ``fmax``
does): the CUDA prelude's ``dcs_max``/``dcs_min``. A combine passes the accumulator as ``a``: testing the new
value for NaN, not the accumulator, keeps a row-max loop 1.15x the time of ``max`` (1.9x the other way)."""


def max_min(helpers: set, op: str, a: str, b: str) -> str:
    """``op`` ("max" or "min") of ``a`` and ``b`` through its ``COMBINE_SOURCES`` helper, added to ``helpers``."""
    helpers.add(f"dcs_{op}")
    return f"dcs_{op}({a}, {b})"


class UnsupportedExpr(ValueError):
    """An expression the CPU kernel printer cannot type or print."""


def promote(a: str, b: str) -> str:
    """NumPy's result dtype of two strongly typed operands."""
    return np.result_type(dtypes.to_numpy(a), dtypes.to_numpy(b)).name


def is_float(dt: str) -> bool:
    return dt in dtypes.FLOAT_TYPES and dt in NUMERIC


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


_POWERS = {"same": "{a}", "square": "({a} * {a})", "cube": "({a} * {a} * {a})", "sqrt": "np.sqrt({a})",
           "reciprocal": "({one} / {a})"}     # ``E.POWERS``: pow by a constant float


class ExprPrinter:
    """Prints expressions whose ``Var``s are typed by ``types`` and named by ``names``."""

    def __init__(self, types: Mapping[str, str], names: Mapping[str, str], fast: bool = True,
                 zero: str | None = None) -> None:
        self.types = types
        self.names = names
        self.fast = fast
        self.zero = zero          # the kernel's opaque float32 zero, passed to fastmath forms
        self.helpers: set[str] = set()

    def _fast_call(self, helper: str, arg: str) -> str:
        self.helpers.add(helper)
        return f"{helper}({arg}, {self.zero})" if self.zero else f"{helper}({arg})"

    # --- types ------------------------------------------------------------------------
    def dtype(self, e: E.Expr) -> str:
        if isinstance(e, E.Const):
            return e.dtype
        if isinstance(e, E.Var):
            try:
                return self.types[e.name]
            except KeyError:
                raise UnsupportedExpr(f"unbound name {e.name!r} in a tasklet") from None
        if isinstance(e, E.Cast):
            return e.dtype
        if isinstance(e, E.Un):
            a = self.dtype(e.a)
            if e.op in _BOOL_UNARY:
                return "bool"
            if e.op in _SAME_UNARY or is_float(a):
                return a
            return "float64"
        if isinstance(e, E.Bin):
            if e.op in _BOOL_BINARY:
                return "bool"
            return promote(self.dtype(e.a), self.dtype(e.b))
        return promote(self.dtype(e.a), self.dtype(e.b))

    # --- source -----------------------------------------------------------------------
    def emit(self, e: E.Expr) -> str:
        if isinstance(e, E.Var):
            return self.names[e.name]
        if isinstance(e, E.Const):
            return literal(e.value, e.dtype)
        if isinstance(e, E.Un):
            return self._unary(e)
        if isinstance(e, E.Bin):
            return self._binary(e)
        if isinstance(e, E.Select):
            return f"({self.emit(e.a)} if {self.emit(e.cond)} else {self.emit(e.b)})"
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

    def _unary(self, e: E.Un) -> str:
        a, dt = self.emit(e.a), self.dtype(e.a)
        op = e.op
        if op == "neg":
            return f"(-{a})"
        if op == "not":
            return f"(not {a})"
        if op == "abs":
            return f"abs({a})"
        if op == "recip":
            one = literal(1.0, dt if is_float(dt) else "float64")
            return f"({one} / {a})"
        if self.fast and dt == "float32" and op in FAST_FUNCTIONS:
            return self._fast_call(FAST_FUNCTIONS[op], a)
        if op in _NP_UNARY:
            return f"{_NP_UNARY[op]}({a})"
        if op in E.UNARY_OPS:
            return f"math.{op}({a})"
        raise UnsupportedExpr(f"unary op {op!r}")

    def _binary(self, e: E.Bin) -> str:
        op = e.op
        if op == "pow":
            return self._pow(e)
        if op == "mul" and self.fast and (x := gelu_operand(e)) is not None and self.dtype(x) == "float32":
            return self._fast_call("fast_gelu", self.emit(x))
        a, b = self.emit(e.a), self.emit(e.b)
        if op in _ARITH:
            return f"({a} {_ARITH[op]} {b})"
        if op in _CMP:
            return f"({a} {_CMP[op]} {b})"
        da, db = self.dtype(e.a), self.dtype(e.b)
        if op == "div":
            if is_float(da) or is_float(db):
                return f"({a} / {b})"
            self.helpers.add("_idiv")
            return f"_idiv({a}, {b})"
        if op in ("max", "min"):
            return max_min(self.helpers, op, a, b)
        if op in ("and", "or", "xor"):
            sym = {"and": "&", "or": "|", "xor": "^"}[op]
            return f"({self.cast(a, da, 'bool')} {sym} {self.cast(b, db, 'bool')})"
        if op == "mod":
            return f"({a} % {b})"
        if op == "floordiv":
            return f"({a} // {b})"
        if op == "fmod":
            return f"np.fmod({a}, {b})"
        raise UnsupportedExpr(f"binary op {op!r}")

    def _pow(self, e: E.Bin) -> str:
        a, dt = self.emit(e.a), self.dtype(e)
        if isinstance(e.b, E.Const) and is_float(dt) and float(e.b.value) in E.POWERS:
            base = self.cast(a, self.dtype(e.a), dt)
            return _POWERS[E.POWERS[float(e.b.value)]].format(a=base, one=literal(1.0, dt))
        return f"({a} ** {self.emit(e.b)})"
