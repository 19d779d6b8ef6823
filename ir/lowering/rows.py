"""Rows: the map shape of every reduction-based expansion (Reduce*, softmax, normalizations).

A tensor of ``shape`` is split into *kept* axes and *reduced* axes. ``Rows``
is the top-level map over the kept axes (``i0, i1, …``: one point per row);
each ``Sweep`` is a nested map over the reduced axes of one row (fresh
``r<n>`` params), appended to the row's body in order. Row statistics are
row-level locals written from a sweep with a ``wcr`` (``Sweep.reduce``) and
read by later sweeps or row-level tasklets (``Rows.let``). By the reference
semantics every statement completes over its whole iteration space before the
next one starts, so a sweep may read a statistic reduced by an earlier one.

    Rows(x, axes=[2])  →  map[i0, i1] { local mx; map[r0] { mx (wcr=max) = x[i0, i1, r0] } … }
"""
from __future__ import annotations

import math
from typing import Sequence

from ir import expr as E
from ir.containers import Container
from ir.lowering.builder import KernelBuilder, Reads, interleave, names_of
from ir.memlet import Memlet
from ir.nodes import MapNode


class Rows:
    """The top-level map over the kept axes of ``shape`` (see module docstring)."""

    def __init__(self, k: KernelBuilder, shape: Sequence[int], axes: Sequence[int]) -> None:
        self.k = k
        self.shape = tuple(shape)
        self.axes = sorted({a % max(len(shape), 1) for a in axes})
        self.kept = [a for a in range(len(shape)) if a not in self.axes]
        self.params = k.params("i", [shape[a] for a in self.kept])
        self.names = names_of(self.params)
        self.count = math.prod(shape[a] for a in self.axes)
        self.body: list = []
        self.locals: list[Container] = []

    def row_index(self, keepdims: bool) -> list[str | int]:
        """Index of this row in a statistics tensor (reduced axes 0, or dropped)."""
        out: list[str | int] = []
        for a in range(len(self.shape)):
            if a in self.axes:
                if keepdims:
                    out.append(0)
            else:
                out.append(self.names[self.kept.index(a)])
        return out

    def stat(self, name: str) -> Memlet:
        """A memlet of ``name`` at this row: keepdims form if its rank is the tensor's."""
        keep = len(self.k.shape(name)) == len(self.shape)
        return self.k.at(name, self.row_index(keep))

    def local(self, label: str, dtype: str) -> str:
        name, cont = self.k.local(label, dtype)
        self.locals.append(cont)
        return name

    def reads(self) -> Reads:
        """Reads at row level (only explicit ``read``/``local`` memlets make sense here)."""
        return Reads(self.k, (), ())

    def let(self, label: str, expr: E.Expr, reads: Reads, dtype: str) -> str:
        """A row-level local computed once per row."""
        name = self.local(label, dtype)
        self.body.append(self.k.tasklet(label, expr, reads.memlets, Memlet(name)))
        return name

    def store(self, name: str | None, expr: E.Expr, reads: Reads, label: str) -> None:
        """Write a global statistics tensor (keepdims form or not) at this row."""
        if name is not None:
            self.body.append(self.k.tasklet(label, expr, reads.memlets, self.stat(name)))

    def sweep(self, label: str) -> "Sweep":
        return Sweep(self, label)

    def kernel(self) -> MapNode:
        return self.k.kernel(self.params, self.body, self.locals)


class Sweep:
    """A nested map over the reduced axes of one row; ``close`` appends it to the row."""

    def __init__(self, rows: Rows, label: str) -> None:
        self.rows = rows
        self.k = rows.k
        self.label = label
        self.params = self.k.params("r", [rows.shape[a] for a in rows.axes])
        self.names = names_of(self.params)
        self.index = interleave(len(rows.shape), rows.kept, rows.names, rows.axes, self.names)
        self.body: list = []
        self.locals: list[Container] = []

    def reads(self) -> Reads:
        """Reads broadcast onto the current element of the full tensor."""
        return Reads(self.k, self.rows.shape, self.index)

    def reduce(self, label: str, expr: E.Expr, reads: Reads, target: str, wcr: str) -> None:
        """Accumulate ``expr`` into ``target`` (a row local or a global memlet) with ``wcr``."""
        self.body.append(self.k.tasklet(label, expr, reads.memlets, Memlet(target, None, None, wcr)))

    def reduce_into(self, label: str, expr: E.Expr, reads: Reads, memlet: Memlet) -> None:
        self.body.append(self.k.tasklet(label, expr, reads.memlets, memlet))

    def let(self, label: str, expr: E.Expr, reads: Reads, dtype: str) -> str:
        """A per-element local of this sweep."""
        name, cont = self.k.local(label, dtype)
        self.locals.append(cont)
        self.body.append(self.k.tasklet(label, expr, reads.memlets, Memlet(name)))
        return name

    def store(self, name: str | None, expr: E.Expr, reads: Reads, label: str = "out") -> None:
        """Write a global of the full tensor's shape at the current element."""
        if name is not None:
            self.body.append(self.k.tasklet(label, expr, reads.memlets, self.k.at(name, self.index)))

    def close(self) -> MapNode:
        m = self.k.nested(self.label, self.params, self.body, self.locals)
        self.rows.body.append(m)
        return m


def stat_dtype(dtype: str) -> str:
    """Accumulator dtype: float32 for half types, else the tensor's own."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


__all__ = ["Rows", "Sweep", "stat_dtype"]


def max_and_exp_sum(rows: Rows, dt: str) -> tuple[str, str]:
    """Two sweeps over each row of input ``x``: its max, then Σ exp(x − max) (softmax, logsumexp).
    Returns the two locals' names."""
    mx, s = rows.local("max", dt), rows.local("sum", dt)
    sw = rows.sweep("max")
    r = sw.reads()
    sw.reduce("max", r.load("x", 0), r, mx, "max")
    sw.close()
    sw = rows.sweep("sum")
    r = sw.reads()
    sw.reduce("sum", E.Un("exp", E.Bin("sub", r.load("x", 0), r.local("max", mx))), r, s, "sum")
    sw.close()
    return mx, s

