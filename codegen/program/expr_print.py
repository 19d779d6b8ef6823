"""Tasklet expressions as kernel source: one walk of an ``ir.expr`` tree for every backend.

``ExprPrinter`` recurses over the tree as ``ir.expr.to_text`` does; a backend subclass is mostly
tables of templates over the printed operands ``{a}`` and ``{b}``:

- ``UNARY`` and ``BINARY``, op → template (``INFIX_TEMPLATES`` gives the infix ones);
  ``UNARY_FALLBACK`` prints the unary ops a backend has no entry for (``{op}``: the op's name);
- ``POWERS``: the ``E.POWERS`` forms of ``pow`` by a constant (``{one}``: 1 in the result's type);
- ``SELECT`` over ``{cond}``, ``{a}``, ``{b}``; ``HELPERS``: op → the helper function its template
  calls, collected in ``helpers`` for the kernel module to define;

and hooks where the text depends on more than the op: ``literal``, ``convert`` (a ``Cast``),
``power_applies``, ``power_operands`` and ``forms`` (template fields from the operation's types).
The numba printer overrides ``unary``/``binary`` for the forms it takes first (typed fast math,
integer division, logical ops on booleans), the CUDA printer to pick its forms by type (``expf`` on
float, ``exp`` on double, integer max without a float).

Types are inferred bottom-up (``dtype``) from the ``types`` of the ``Var``s, with NumPy's promotion of
the operand dtypes; 16-bit floats compute in float32 (``compute_dtype``), as both backends load them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping

import numpy as np

from ir import dtypes
from ir import expr as E

INFIX_TEMPLATES = {op: f"({{a}} {symbol} {{b}})" for op, symbol in E.INFIX.items()}
BOOL_UNARY = frozenset({"not", "isnan", "isinf"})
SAME_UNARY = frozenset({"neg", "abs", "sign", "floor", "ceil", "round"})
BOOL_BINARY = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"})
NUMERIC = frozenset(dtypes.NUMERIC_TYPES)


class UnsupportedExpr(ValueError):
    """An expression a kernel printer cannot type or print."""


def compute_dtype(dt: str) -> str:
    """The type a kernel computes a ``dt`` value in: 16-bit floats widen to float32."""
    return "float32" if dt in dtypes.HALF_FLOATS else dt


def promote(a: str, b: str) -> str:
    """NumPy's result dtype of two strongly typed operands (none for bfloat16 with float16 or an int: ml_dtypes
    refused those before 0.7, which widens them to float64, so the rule is ours, not the installed version's)."""
    other = b if a == "bfloat16" else a if b == "bfloat16" else None
    if other not in (None, "bfloat16", "float32", "float64", "bool"):
        raise UnsupportedExpr(f"no common dtype of {a} and {b}; cast one operand first")
    try:
        return np.result_type(dtypes.to_numpy(a), dtypes.to_numpy(b)).name
    except TypeError:
        raise UnsupportedExpr(f"no common dtype of {a} and {b}; cast one operand first") from None


def is_float(dt: str) -> bool:
    return dt in dtypes.FLOAT_TYPES and dt in NUMERIC


class ExprPrinter(ABC):
    """Prints expressions whose ``Var``s are typed by ``types`` and named by ``names`` (see the module
    docstring)."""

    UNARY: Mapping[str, str] = {}
    UNARY_FALLBACK: str
    BINARY: Mapping[str, str] = {}
    POWERS: Mapping[str, str] = {}
    SELECT: str
    HELPERS: Mapping[str, str] = {}

    def __init__(self, types: Mapping[str, str], names: Mapping[str, str]) -> None:
        self.types = types
        self.names = names
        self.helpers: set[str] = set()

    def dtype(self, e: E.Expr) -> str:
        """The dtype ``e`` computes in (NumPy's rules; float functions of an int give float64)."""
        if isinstance(e, E.Const):
            return compute_dtype(e.dtype)
        if isinstance(e, E.Var):
            try:
                return self.types[e.name]
            except KeyError:
                raise UnsupportedExpr(f"unbound name {e.name!r} in a tasklet") from None
        if isinstance(e, E.Cast):
            return e.dtype
        if isinstance(e, E.Un):
            a = self.dtype(e.a)
            if e.op in BOOL_UNARY:
                return "bool"
            return a if e.op in SAME_UNARY or is_float(a) else "float64"
        if isinstance(e, E.Bin) and e.op in BOOL_BINARY:
            return "bool"
        return promote(self.dtype(e.a), self.dtype(e.b))

    def emit(self, e: E.Expr) -> str:
        if isinstance(e, E.Var):
            return self.var(e.name)
        if isinstance(e, E.Const):
            return self.literal(e.value, e.dtype)
        if isinstance(e, E.Un):
            return self.unary(e)
        if isinstance(e, E.Bin):
            return self.binary(e)
        if isinstance(e, E.Select):
            return self.SELECT.format(a=self.emit(e.a), cond=self.emit(e.cond), b=self.emit(e.b))
        return self.convert(e)

    def var(self, name: str) -> str:
        return self.names[name]

    def forms(self, e: E.Un | E.Bin) -> Mapping[str, str]:
        """Fields of ``e``'s templates beyond its operands, from its types (CUDA: ``expf`` or ``exp``)."""
        return {}

    def template(self, table: Mapping[str, str], e: E.Un | E.Bin, **operands: str) -> str:
        if e.op in self.HELPERS:
            self.helpers.add(self.HELPERS[e.op])
        return table[e.op].format(**operands, **self.forms(e))

    def unary(self, e: E.Un) -> str:
        a = self.emit(e.a)
        if e.op in self.UNARY:
            return self.template(self.UNARY, e, a=a)
        if e.op in E.UNARY_OPS:
            return self.UNARY_FALLBACK.format(op=e.op, a=a, **self.forms(e))
        raise UnsupportedExpr(f"unary op {e.op!r}")

    def binary(self, e: E.Bin) -> str:
        if e.op == "pow" and isinstance(e.b, E.Const) and float(e.b.value) in E.POWERS and self.power_applies(e):
            return self.POWERS[E.POWERS[float(e.b.value)]].format(**self.power_operands(e), **self.forms(e))
        a, b = self.emit(e.a), self.emit(e.b)
        if e.op not in self.BINARY:
            raise UnsupportedExpr(f"binary op {e.op!r}")
        return self.template(self.BINARY, e, a=a, b=b)

    @abstractmethod
    def literal(self, value, dtype: str) -> str:
        """A constant of ``dtype``."""

    @abstractmethod
    def convert(self, e: E.Cast) -> str:
        """``e.a`` converted to ``e.dtype``."""

    @abstractmethod
    def power_applies(self, e: E.Bin) -> bool:
        """Whether ``pow`` by the constant ``e.b`` (one of ``E.POWERS``) prints as its ``POWERS`` form."""

    def power_operands(self, e: E.Bin) -> dict[str, str]:
        return {"a": self.emit(e.a)}
