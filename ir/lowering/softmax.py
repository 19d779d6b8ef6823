"""Softmax-family expansions: one row per softmax, sweeps over the softmax axes.

Axes: opset >= 13 (and the ``…Grad_13`` ops) use the single ``axis`` (default -1);
older Softmax/LogSoftmax and the legacy ``SoftmaxGrad``/``LogSoftmaxGrad`` coerce
the input to 2-D at ``axis`` (default 1), i.e. reduce over all axes from ``axis``
on — expressed exactly as a multi-axis row.

Implementations of Softmax and LogSoftmax (``impls``):

- ``two_pass`` (default): a max sweep, a Σexp(x − max) sweep, then the output sweep.
- ``online``: one statistics sweep that keeps a running max ``m`` and a running sum
  ``s``, rescaled whenever the max grows (Milakov & Gimelshein 2018)::

      mp = m;  m (wcr=max) = x;  s (wcr=sum) = s·(exp(mp − m) − 1) + exp(x − m)

  Executed sequentially this is the online recurrence s ← s·exp(mp − m) + exp(x − m).
  Under the reference semantics (each statement completes over the sweep before the
  next) ``mp`` is −∞, ``s`` reads 0 and ``m`` is already the row max, so the
  contribution is exactly exp(x − max): both readings give the two-pass result.
  A parallel backend must run this sweep sequentially (or tree-combine (m, s) pairs).

FLOPs per row of N elements:

- Softmax two_pass: max N + Σexp 3N + exp(x − max)/s 3N ⇒ **7N**; online: 9N + 3N ⇒ 12N
- LogSoftmax two_pass: N + 3N + (max + log s) 2 + (x − ls) N ⇒ 5N + 2; online 10N + 2
- SoftmaxGrad(_13) dX = Y·(dY − Σ dY·Y): 2N + 2N ⇒ 4N
- LogSoftmaxGrad(_13) dX = dY − exp(Y)·Σ dY: N + 3N ⇒ 4N
"""
from __future__ import annotations

from ir.lowering.builder import KernelBuilder, NotExpandable, add, div, mul, sub, un
from ir.lowering.registry import expansion
from ir.lowering.rows import Rows, max_and_exp_sum, stat_dtype
from ir.nodes import MapNode

MS = "com.microsoft"
LEGACY_GRADS = ("SoftmaxGrad", "LogSoftmaxGrad")


def softmax_axes(k: KernelBuilder, rank: int) -> list[int]:
    """The reduced axes: the single axis, or every axis from it (pre-13 coercion)."""
    legacy = k.node.op_type in LEGACY_GRADS or (k.node.domain == "" and k.node.opset < 13)
    axis = int(k.attr("axis", 1 if legacy else -1))
    if not -rank <= axis < max(rank, 1):
        raise NotExpandable(f"unsupported attribute value axis={axis} for rank {rank}")
    axis %= max(rank, 1)
    return list(range(axis, rank)) if legacy else [axis]


def _stats_two_pass(k: KernelBuilder, rows: Rows, dt: str) -> tuple[str, str]:
    return max_and_exp_sum(rows, dt)


def _stats_online(k: KernelBuilder, rows: Rows, dt: str) -> tuple[str, str]:
    mx, s = rows.local("max", dt), rows.local("sum", dt)
    sw = rows.sweep("stats")
    r = sw.reads()
    prev = sw.let("prev_max", r.local("max", mx), r, dt)
    r = sw.reads()
    sw.reduce("max", r.load("x", 0), r, mx, "max")
    r = sw.reads()
    m, sv = r.local("max", mx), r.local("sum", s)
    rescale = mul(sv, sub(un("exp", sub(r.local("prev_max", prev), m)), k.c(1, dt)))
    sw.reduce("sum", add(rescale, un("exp", sub(r.load("x", 0), m))), r, s, "sum")
    sw.close()
    return mx, s


@expansion("Softmax", "LogSoftmax", impls=("two_pass", "online"))
def softmax(k: KernelBuilder, impl: str) -> MapNode:
    x, y = k.in_name(0), k.out_name(0)
    shape, dt = k.shape(x), stat_dtype(k.dtype(x))
    rows = Rows(k, shape, softmax_axes(k, len(shape)))
    stats = _stats_online if impl == "online" else _stats_two_pass
    mx, s = stats(k, rows, dt)
    if k.node.op_type == "Softmax":
        sw = rows.sweep("out")
        r = sw.reads()
        sw.store(y, div(un("exp", sub(r.load("x", 0), r.local("max", mx))), r.local("sum", s)), r)
        sw.close()
        return rows.kernel()
    rr = rows.reads()
    ls = rows.let("log_sum", add(rr.local("max", mx), un("log", rr.local("sum", s))), rr, dt)
    sw = rows.sweep("out")
    r = sw.reads()
    sw.store(y, sub(r.load("x", 0), r.local("log_sum", ls)), r)
    sw.close()
    return rows.kernel()


@expansion("SoftmaxGrad_13", "SoftmaxGrad", "LogSoftmaxGrad_13", "LogSoftmaxGrad", domain=MS)
def softmax_grad(k: KernelBuilder, impl: str) -> MapNode:
    """(dY, Y) → dX; Y is the softmax (or log-softmax) output."""
    dx = k.out_name(0)
    shape, dt = k.shape(k.in_name(0)), stat_dtype(k.dtype(k.in_name(0)))
    rows = Rows(k, shape, softmax_axes(k, len(shape)))
    is_log = k.node.op_type.startswith("Log")
    s = rows.local("sum", dt)
    sw = rows.sweep("sum")
    r = sw.reads()
    term = r.load("dy", 0) if is_log else mul(r.load("dy", 0), r.load("y", 1))
    sw.reduce("sum", term, r, s, "sum")
    sw.close()
    sw = rows.sweep("out")
    r = sw.reads()
    dy, yv, sv = r.load("dy", 0), r.load("y", 1), r.local("sum", s)
    sw.store(dx, sub(dy, mul(un("exp", yv), sv)) if is_log else mul(yv, sub(dy, sv)), r)
    sw.close()
    return rows.kernel()


__all__ = ["softmax", "softmax_axes", "softmax_grad"]
