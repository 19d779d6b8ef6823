"""Gradient rules for ops that pick elements by value or position: Max Min ReduceMax ReduceMin
GatherElements ScatterND CumSum.

- ``Max``/``Min`` (variadic, broadcasting) and ``ReduceMax``/``ReduceMin``: ``dy`` goes to the
  elements equal to the result, split evenly between ties (as ``torch.maximum``/``amax``).
- ``GatherElements``: ``dy`` is scatter-added into zeros at the gathered positions.
- ``ScatterND``: the data keeps ``dy`` except where it was overwritten (``reduction='none'``)
  or all of it (``'add'``); the updates get ``GatherND(dy, indices)``.
- ``CumSum``: the cumulative sum of ``dy`` in the other direction (same ``exclusive``).
"""
from __future__ import annotations

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient
from transforms.autodiff.rules.reduction import reduced_axes


@gradient("Max", "Min")
def max_min(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    sy = em.shape(y)
    masks = [em.cast(em.op("Equal", x, y), em.elem(y)) for x in req.node.input]
    count = masks[0] if len(masks) == 1 else em.op("Sum", *masks)
    share = em.div(req.dy(), count)
    return [em.sum_to(em.mul(share, m), sy, em.shape(x)) if req.want(i) else None
            for i, (x, m) in enumerate(zip(req.node.input, masks))]


@gradient("ReduceMax", "ReduceMin", inputs=(0,))
def reduce_max_min(em: Emitter, req: GradRequest) -> Grads:
    x, y = req.node.input[0], req.node.output[0]
    sx = em.shape(x)
    axes = reduced_axes(em, req)
    if axes is None:
        return [req.dy(), None]
    kept = tuple(1 if i in axes else d for i, d in enumerate(sx))
    dy, y = req.dy(), y
    if not req.attrs.get("keepdims", 1):
        dy, y = em.reshape(dy, kept), em.reshape(y, kept)
    mask = em.cast(em.op("Equal", x, y), em.elem(x))
    count = em.reduce_sum(mask, axes, keepdims=True)
    return [em.mul(mask, em.div(dy, count)), None]


@gradient("GatherElements", inputs=(0,))
def gather_elements(em: Emitter, req: GradRequest) -> Grads:
    data, idx = req.node.input[:2]
    axis = req.attrs.get("axis", 0) % em.rank(data)
    zeros = em.zeros(em.shape(data), data)
    return [em.op("ScatterElements", zeros, idx, req.dy(), axis=axis, reduction="add"), None]


@gradient("ScatterND", inputs=(0, 2))
def scatter_nd(em: Emitter, req: GradRequest) -> Grads:
    data, idx, updates = req.node.input[:3]
    reduction = req.attrs.get("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("none", "add"):
        raise NoGradientError(req.node, variant=f"with reduction '{reduction}'")
    dy = req.dy()
    dd = None
    if req.want(0):
        dd = dy if reduction == "add" else em.op("ScatterND", dy, idx, em.zeros(em.shape(updates), updates))
    du = em.op("GatherND", dy, idx) if req.want(2) else None
    return [dd, None, du]


@gradient("CumSum", inputs=(0,))
def cumsum(em: Emitter, req: GradRequest) -> Grads:
    reverse = 1 - int(req.attrs.get("reverse", 0))
    return [em.op("CumSum", req.dy(), req.node.input[1], exclusive=int(req.attrs.get("exclusive", 0)),
                  reverse=reverse), None]
