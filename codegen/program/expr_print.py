"""Tasklet expressions as kernel source: one walk of an ``ir.expr`` tree for every backend.

``ExprPrinter`` recurses over the tree as ``ir.expr.to_text`` does; a backend subclass is mostly
tables of templates over the printed operands ``{a}`` and ``{b}``:

- ``UNARY`` and ``BINARY``, op → template (``INFIX_TEMPLATES`` gives the infix ones);
  ``UNARY_FALLBACK`` prints the unary ops a backend has no entry for (``{op}``: the op's name);
- ``POWERS``: the ``E.POWERS`` forms of ``pow`` by a constant (``{one}``: 1 in the result's type);
- ``SELECT`` over ``{cond}``, ``{a}``, ``{b}``; ``HELPERS``: op → the helper function its template
  calls, collected in ``helpers`` for the kernel module to define;

and hooks where the text depends on more than the op: ``literal``, ``convert`` (a ``Cast``),
``power_applies`` and ``power_operands``. The numba printer overrides ``unary``/``binary`` for the
forms it takes first (typed fast math, integer division, logical ops on booleans).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping

from ir import expr as E

INFIX_TEMPLATES = {op: f"({{a}} {symbol} {{b}})" for op, symbol in E.INFIX.items()}


class UnsupportedExpr(ValueError):
    """An expression a kernel printer cannot type or print."""


class ExprPrinter(ABC):
    """Prints expressions whose ``Var``s are named by ``names`` (see the module docstring)."""

    UNARY: Mapping[str, str] = {}
    UNARY_FALLBACK: str
    BINARY: Mapping[str, str] = {}
    POWERS: Mapping[str, str] = {}
    SELECT: str
    HELPERS: Mapping[str, str] = {}

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = names
        self.helpers: set[str] = set()

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

    def template(self, table: Mapping[str, str], op: str, **operands: str) -> str:
        if op in self.HELPERS:
            self.helpers.add(self.HELPERS[op])
        return table[op].format(**operands)

    def unary(self, e: E.Un) -> str:
        a = self.emit(e.a)
        if e.op in self.UNARY:
            return self.template(self.UNARY, e.op, a=a)
        if e.op in E.UNARY_OPS:
            return self.UNARY_FALLBACK.format(op=e.op, a=a)
        raise UnsupportedExpr(f"unary op {e.op!r}")

    def binary(self, e: E.Bin) -> str:
        if e.op == "pow" and isinstance(e.b, E.Const) and float(e.b.value) in E.POWERS and self.power_applies(e):
            return self.POWERS[E.POWERS[float(e.b.value)]].format(**self.power_operands(e))
        a, b = self.emit(e.a), self.emit(e.b)
        if e.op not in self.BINARY:
            raise UnsupportedExpr(f"binary op {e.op!r}")
        return self.template(self.BINARY, e.op, a=a, b=b)

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
