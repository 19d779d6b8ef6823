"""Gradient rules for ops that only move or relabel data: Reshape Flatten Squeeze Unsqueeze
Transpose Expand Tile Identity Cast.

Shape-changing ops reshape ``dy`` back to the input's static shape; ``Transpose``
applies the inverse permutation; ``Expand`` and ``Tile`` sum the copies back;
``Cast`` casts ``dy`` back to the input's float type (an integer input gets nothing).
Shape, axes and repeats inputs are never differentiable.
"""
from __future__ import annotations

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient


@gradient("Reshape", "Flatten", "Squeeze", "Unsqueeze", inputs=(0,))
def reshape_like(em: Emitter, req: GradRequest) -> Grads:
    return [em.reshape(req.dy(), em.shape(req.node.input[0])), None]


@gradient("Transpose")
def transpose(em: Emitter, req: GradRequest) -> Grads:
    rank = em.rank(req.node.input[0])
    perm = req.attrs.get("perm", list(range(rank))[::-1])
    inverse = [0] * rank
    for i, p in enumerate(perm):
        inverse[p] = i
    return [em.transpose(req.dy(), inverse)]


@gradient("Expand", inputs=(0,))
def expand(em: Emitter, req: GradRequest) -> Grads:
    src = em.shape(req.node.output[0])
    return [em.sum_to(req.dy(), src, em.shape(req.node.input[0])), None]


@gradient("Tile", inputs=(0,))
def tile(em: Emitter, req: GradRequest) -> Grads:
    sx = em.shape(req.node.input[0])
    reps = em.const_value(req.input(1))
    if reps is None:
        raise NoGradientError(req.node, variant="with repeats that are not constant",
                              hint="Compute the repeats from constants or static shapes")
    split = []
    for r, d in zip(reps.reshape(-1), sx):
        split.extend([int(r), d])
    g = em.reshape(req.dy(), split)
    return [em.reshape(em.reduce_sum(g, list(range(0, 2 * len(sx), 2))), sx), None]


@gradient("Identity")
def identity(em: Emitter, req: GradRequest) -> Grads:
    return [req.dy()]


@gradient("Cast", "CastLike", inputs=(0,))
def cast(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    if not em.is_float(x):
        return [None, None]
    return [em.cast(req.dy(), em.elem(x), em.elem(req.node.output[0])), None]
