"""The gradient rule of ``Resize`` (modes nearest, linear and cubic; every coordinate transformation
but ``tf_crop_and_resize``; no antialias), as torch exporters write ``nn.Upsample`` and
``F.interpolate``.

Resize is linear in ``X`` and separable (``ir.interpolation``): along each resized axis
``Y = M·X`` with a constant ``O×I`` matrix ``M`` of the static sizes, so ``dX = Mᵀ·dY`` along each
resized axis in turn: one MatMul with a constant per axis (the last axis on the right, the one
before it on the left, any other between transposes). The scales or sizes must be constant.
"""
from __future__ import annotations

import numpy as np

from ir.interpolation import matrix, plan, unsupported
from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient


@gradient("Resize")
def resize(em: Emitter, req: GradRequest) -> Grads:
    none = [None] * (len(req.node.input) - 1)
    if not req.want(0):
        return [None] + none
    x = req.node.input[0]
    variant = unsupported(req.attrs)
    if variant:
        raise NoGradientError(req.node, variant=variant,
                              hint="Use nearest, linear or cubic resizing without antialiasing or a region of "
                                   "interest, as nn.Upsample and F.interpolate export them")
    values = [em.const_value(req.input(k)) if req.input(k) else None for k in (2, 3)]
    if any(req.input(k) and v is None for k, v in zip((2, 3), values)):
        raise NoGradientError(req.node, variant="with scales or sizes that are not constant",
                              hint="Compute them from constants or static shapes")
    g, rank = req.dy(), len(em.shape(x))
    for axis, n_in, n_out, scale in plan(em.shape(x), req.attrs, *values):
        g = _contract(em, g, axis, rank, matrix(n_in, n_out, scale, req.attrs).astype(em.np_dtype(x)))
    return [g] + none


def _contract(em: Emitter, g: str, axis: int, rank: int, m: np.ndarray) -> str:
    """``g`` (output length along ``axis``) times ``M`` there: the input length (``Mᵀ·g`` along the axis)."""
    if axis == rank - 1:
        return em.op("MatMul", g, em.const(m, "resize_taps"))
    if axis == rank - 2:
        return em.op("MatMul", em.const(np.ascontiguousarray(m.T), "resize_taps"), g)
    perm = [a for a in range(rank) if a != axis] + [axis]
    moved = em.op("MatMul", em.transpose(g, perm), em.const(m, "resize_taps"))
    return em.transpose(moved, list(np.argsort(perm)))
