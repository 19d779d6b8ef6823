"""Gradient rules for ReduceSum, ReduceMean and ReduceSumSquare.

``dy`` is reshaped to the ``keepdims=1`` shape and expanded back to ``x``'s shape
(``ReduceMean`` divides by the reduced count, ``ReduceSumSquare`` multiplies by
``2x``). Axes come from the attribute (older opsets) or the constant ``axes`` input;
negative axes count from the end; no axes reduce everything unless
``noop_with_empty_axes`` is set, in which case the op is the identity.
"""
from __future__ import annotations

from math import prod

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient


def reduced_axes(em: Emitter, req: GradRequest) -> list[int] | None:
    """The normalized reduced axes, or None when the op is an identity."""
    rank = em.rank(req.node.input[0])
    axes = req.attrs.get("axes")
    if axes is None and req.input(1) is not None:
        value = em.const_value(req.input(1))
        if value is None:
            raise NoGradientError(req.node, variant="with axes that are not constant",
                                  hint="Compute the axes from constants or static shapes")
        axes = [int(a) for a in value.reshape(-1)]
    if not axes:
        return None if req.attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(a % rank for a in axes)


def _spread(em: Emitter, req: GradRequest, axes: list[int]) -> str:
    sx = em.shape(req.node.input[0])
    dy = req.dy()
    if not req.attrs.get("keepdims", 1):
        dy = em.reshape(dy, tuple(1 if i in axes else d for i, d in enumerate(sx)))
    return em.op("Expand", dy, em.ints(sx))


@gradient("ReduceSum", inputs=(0,))
def reduce_sum(em: Emitter, req: GradRequest) -> Grads:
    axes = reduced_axes(em, req)
    return [req.dy() if axes is None else _spread(em, req, axes), None]


@gradient("ReduceMean", inputs=(0,))
def reduce_mean(em: Emitter, req: GradRequest) -> Grads:
    axes = reduced_axes(em, req)
    if axes is None:
        return [req.dy(), None]
    x = req.node.input[0]
    count = prod(em.shape(x)[a] for a in axes)
    return [em.mul(_spread(em, req, axes), em.scalar(1.0 / count, x)), None]


@gradient("ReduceSumSquare", inputs=(0,))
def reduce_sum_square(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    axes = reduced_axes(em, req)
    g = req.dy() if axes is None else _spread(em, req, axes)
    return [em.mul(g, em.mul(x, em.scalar(2.0, x))), None]
