"""Reduce* expansions: a map over the kept axes with a nested map over the reduced axes.

Axes come from the ``axes`` attribute (before opset 18; ReduceSum before 13) or
from a constant ``axes`` input (a runtime axes tensor is not expandable); empty
axes reduce everything unless ``noop_with_empty_axes`` (then a copy). Pure
reductions accumulate straight into the output with a wcr; the others
accumulate into a row local and finish with one row-level tasklet (so do pure
reductions over every axis: the reference executor cannot yet store a wcr
reduction into a point whose indices are all constants — see maps._store).

FLOPs per output element, N = reduced elements per output:

- ReduceSum, ReduceMax, ReduceMin, ReduceProd: N (the wcr)
- ReduceSumSquare, ReduceL1: 2N; ReduceMean: N + 1; ReduceLogSum: N + 1; ReduceL2: 2N + 1
- ReduceLogSumExp: max N, Σexp(x − max) 3N, log(s) + max 2 ⇒ 4N + 2
"""
from __future__ import annotations

import numpy as np

from ir import expr as E
from ir.lowering.builder import KernelBuilder, NotExpandable, Pointwise, add, mul, un
from ir.lowering.registry import expansion
from ir.lowering.rows import Rows, max_and_exp_sum, stat_dtype
from ir.nodes import MapNode

AXES_INPUT_SINCE = {"ReduceSum": 13}
DIRECT = {"ReduceSum": ("sum", None), "ReduceMax": ("max", None), "ReduceMin": ("min", None),
          "ReduceProd": ("prod", None), "ReduceSumSquare": ("sum", "square"),
          "ReduceL1": ("sum", "abs")}
FINISHED = {"ReduceMean": (None, "mean"), "ReduceLogSum": (None, "log"),
            "ReduceL2": ("square", "sqrt")}


def reduce_axes(k: KernelBuilder, rank: int) -> list[int] | None:
    """The axes to reduce (normalized), or None for 'no axes given'."""
    if k.node.opset < AXES_INPUT_SINCE.get(k.node.op_type, 18):
        axes = k.attr("axes")
    else:
        value = k.require_constant(1, "axes")
        axes = None if value is None else [int(a) for a in np.asarray(value).reshape(-1)]
    if not axes:
        return None
    for a in axes:
        if not -rank <= a < rank:
            raise NotExpandable(f"unsupported attribute value axes={axes} for rank {rank}")
    return sorted({a % rank for a in axes})


def _element(k: KernelBuilder, x: E.Expr, pre: str | None) -> E.Expr:
    if pre == "square":
        return mul(x, x)
    return un(pre, x) if pre else x


def _finish(k: KernelBuilder, acc: E.Expr, post: str | None, count: int) -> E.Expr:
    if post is None:
        return acc
    if post == "mean":
        return E.Bin("div", acc, k.c(count))
    return un(post, acc)


def _copy(k: KernelBuilder) -> MapNode:
    pw = Pointwise(k)
    r = pw.reads()
    pw.store(0, r.load("x", 0), r)
    return pw.kernel()


@expansion("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
           "ReduceMean", "ReduceLogSum", "ReduceL2", "ReduceLogSumExp")
def reduce(k: KernelBuilder, impl: str) -> MapNode:
    x, out = k.in_name(0), k.out_name(0)
    shape, dt = k.shape(x), k.dtype(x)
    if dt == "bool":
        raise NotExpandable("boolean reductions have no wcr identity here")
    axes = reduce_axes(k, len(shape))
    if axes is None:
        if k.attr("noop_with_empty_axes", 0):
            return _copy(k)
        axes = list(range(len(shape)))
    rows = Rows(k, shape, axes)
    keep = bool(k.attr("keepdims", 1))
    op = k.node.op_type
    if op in DIRECT and rows.kept:
        wcr, pre = DIRECT[op]
        sw = rows.sweep("reduce")
        r = sw.reads()
        sw.reduce_into("acc", _element(k, r.load("x", 0), pre), r, k.at(out, rows.row_index(keep), wcr))
        sw.close()
    elif op in DIRECT or op in FINISHED:
        wcr, pre = DIRECT.get(op, ("sum", FINISHED.get(op, (None,))[0]))
        acc = rows.local("acc", stat_dtype(dt))
        sw = rows.sweep("reduce")
        r = sw.reads()
        sw.reduce("acc", _element(k, r.load("x", 0), pre), r, acc, wcr)
        sw.close()
        rr = rows.reads()
        post = FINISHED[op][1] if op in FINISHED else None
        rows.store(out, _finish(k, rr.local("acc", acc), post, rows.count), rr, "out")
    else:
        _log_sum_exp(k, rows, out, stat_dtype(dt))
    return rows.kernel()


def _log_sum_exp(k: KernelBuilder, rows: Rows, out: str, dt: str) -> None:
    mx, s = max_and_exp_sum(rows, dt)
    rr = rows.reads()
    rows.store(out, add(un("log", rr.local("sum", s)), rr.local("max", mx)), rr, "out")


__all__ = ["reduce", "reduce_axes"]
