"""Gradient rules for BatchNormalization and LayerNormalization.

Both normalise ``x_hat = (x - mean) * inv`` with ``inv = 1/sqrt(var + eps)`` and then
apply ``scale`` and ``bias``. Over the ``M`` elements of one statistic:

    dx = scale * inv * (dy - mean(dy) - x_hat * mean(dy * x_hat))
    dscale = sum(dy * x_hat),  dbias = sum(dy)

BatchNormalization in training mode (batch statistics, per channel over axes
``0, 2, …``) recomputes mean and variance in the backward pass; in inference mode the
running statistics are constants and ``dx = dy * scale * inv``. Running statistics get
no gradient. LayerNormalization reuses the forward ``Mean``/``InvStdDev`` outputs when
their element type matches ``x`` (the generator adds them), else recomputes them.
"""
from __future__ import annotations

from math import prod

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient


def _stats(em: Emitter, x: str, axes: list[int], eps: float) -> tuple[str, str]:
    m = 1.0 / prod(em.shape(x)[a] for a in axes)
    mean = em.mul(em.reduce_sum(x, axes), em.scalar(m, x))
    xc = em.sub(x, mean)
    var = em.mul(em.reduce_sum(em.mul(xc, xc), axes), em.scalar(m, x))
    inv = em.op("Reciprocal", em.op("Sqrt", em.add(var, em.scalar(eps, x))))
    return mean, inv


def _normalized_dx(em: Emitter, x: str, g: str, x_hat: str, inv: str, axes: list[int]) -> str:
    """inv * (g - mean(g) - x_hat mean(g x_hat)), means over ``axes`` (g = dy * scale)."""
    m = em.scalar(1.0 / prod(em.shape(x)[a] for a in axes), x)
    mean_g = em.mul(em.reduce_sum(g, axes), m)
    mean_gx = em.mul(em.reduce_sum(em.mul(g, x_hat), axes), m)
    return em.mul(inv, em.sub(em.sub(g, mean_g), em.mul(x_hat, mean_gx)))


@gradient("BatchNormalization", inputs=(0, 1, 2))
def batch_norm(em: Emitter, req: GradRequest) -> Grads:
    x, scale = req.node.input[:2]
    if req.dy(1) is not None or req.dy(2) is not None:
        raise NoGradientError(req.node, variant="through its running-statistics outputs",
                              hint="Only the normalized output Y may lead to the loss")
    rank = em.rank(x)
    axes = [0] + list(range(2, rank))
    cs = (1, em.shape(x)[1]) + (1,) * (rank - 2)
    eps = req.attrs.get("epsilon", 1e-5)
    dy = req.dy()
    if req.attrs.get("training_mode", 0):
        mean, inv = _stats(em, x, axes, eps)
    else:
        mean = em.reshape(req.node.input[3], cs)
        inv = em.op("Reciprocal", em.op("Sqrt", em.add(em.reshape(req.node.input[4], cs), em.scalar(eps, x))))
    x_hat = em.mul(em.sub(x, mean), inv)
    scale_c = em.reshape(scale, cs)
    dx = None
    if req.want(0):
        if req.attrs.get("training_mode", 0):
            dx = em.mul(scale_c, _normalized_dx(em, x, dy, x_hat, inv, axes))
        else:
            dx = em.mul(dy, em.mul(scale_c, inv))
    dscale = em.reduce_sum(em.mul(dy, x_hat), axes, keepdims=False) if req.want(1) else None
    dbias = em.reduce_sum(dy, axes, keepdims=False) if req.want(2) else None
    return [dx, dscale, dbias, None, None]


@gradient("LayerNormalization")
def layer_norm(em: Emitter, req: GradRequest) -> Grads:
    x, scale = req.node.input[:2]
    if req.dy(1) is not None or req.dy(2) is not None:
        raise NoGradientError(req.node, variant="through its Mean/InvStdDev outputs",
                              hint="Only the normalized output Y may lead to the loss")
    sx = em.shape(x)
    axis = req.attrs.get("axis", -1) % len(sx)
    axes = list(range(axis, len(sx)))
    outs = list(req.node.output) + ["", ""]
    if outs[1] and outs[2] and em.elem(outs[1]) == em.elem(x) and em.elem(outs[2]) == em.elem(x):
        mean, inv = outs[1], outs[2]
    else:
        mean, inv = _stats(em, x, axes, req.attrs.get("epsilon", 1e-5))
    x_hat = em.mul(em.sub(x, mean), inv)
    dy = req.dy()
    dx = None
    if req.want(0):
        dx = _normalized_dx(em, x, em.mul(dy, scale), x_hat, inv, axes)
    dscale = em.sum_to(em.mul(dy, x_hat), sx, em.shape(scale)) if req.want(1) else None
    bias = req.input(2)
    dbias = em.sum_to(dy, sx, em.shape(bias)) if bias is not None and req.want(2) else None
    return [dx, dscale, dbias]
