"""Gradient rules for MaxPool, AveragePool and GlobalAveragePool.

- ``MaxPool``: the forward node's ``Indices`` output (flat over the whole input; the
  generator adds it) routes ``dy`` back: ``ScatterElements(zeros, indices, dy,
  reduction="add")`` on the flattened input, so overlapping windows add up.
- ``AveragePool``: ``dy`` divided by each window's element count (static, honouring
  ``count_include_pad`` and ``ceil_mode``) is spread over its window by a
  ``ConvTranspose`` with a ones kernel on the padded grid, then the padding is cut.
- ``GlobalAveragePool``: ``dx = expand(dy) / (H*W…)``.
"""
from __future__ import annotations

from math import prod

import numpy as np

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient
from transforms.autodiff.rules.conv import window


@gradient("MaxPool")
def max_pool(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    if len(req.node.output) < 2 or not req.node.output[1] or req.attrs.get("storage_order", 0):
        raise NoGradientError(req.node, variant="with column-major Indices (storage_order=1)",
                              hint="Export MaxPool with storage_order=0")
    sx = em.shape(x)
    n = prod(sx)
    flat_idx = em.reshape(req.node.output[1], (-1,))
    flat_dy = em.reshape(req.dy(), (-1,))
    dx = em.op("ScatterElements", em.zeros((n,), x), flat_idx, flat_dy, axis=0, reduction="add")
    return [em.reshape(dx, sx)]


def window_counts(out_sp: tuple, in_sp: tuple, kernel: tuple, strides: list, dil: list, pads: list,
                  include_pad: bool) -> np.ndarray:
    """Elements counted by each AveragePool window (product of the per-axis counts)."""
    nd = len(kernel)
    counts = np.ones((), dtype=np.float64)
    for i in range(nd):
        lo, hi = (-pads[i], in_sp[i] + pads[nd + i]) if include_pad else (0, in_sp[i])
        starts = np.arange(out_sp[i]) * strides[i] - pads[i]
        taps = starts[:, None] + np.arange(kernel[i])[None, :] * dil[i]
        per_axis = ((taps >= lo) & (taps < hi)).sum(axis=1).astype(np.float64)
        counts = np.multiply.outer(counts, per_axis)
    return counts


@gradient("AveragePool")
def average_pool(em: Emitter, req: GradRequest) -> Grads:
    x, y = req.node.input[0], req.node.output[0]
    sx, sy = em.shape(x), em.shape(y)
    kernel = tuple(req.attrs["kernel_shape"])
    strides, dil, pads = window(req.attrs, sx, kernel)
    nd = len(kernel)
    counts = window_counts(sy[2:], sx[2:], kernel, strides, dil, pads,
                           bool(req.attrs.get("count_include_pad", 0)))
    inv = 1.0 / np.maximum(counts, 1.0)
    if np.all(inv == inv.flat[0]):
        g = em.mul(req.dy(), em.scalar(float(inv.flat[0]), x))
    else:
        g = em.mul(req.dy(), em.const(inv.astype(em.np_dtype(x)), "inv_count"))
    planes = sx[0] * sx[1]
    g = em.reshape(g, (planes, 1) + tuple(sy[2:]))
    ones = em.const(np.ones((1, 1) + kernel, dtype=em.np_dtype(x)), "ones_kernel")
    spread = em.op("ConvTranspose", g, ones, strides=strides, dilations=dil)
    full = [(sy[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(nd)]
    short = [max(pads[i] + sx[2 + i] - full[i], 0) for i in range(nd)]
    if any(short):
        spread = em.op("Pad", spread, em.ints([0] * (nd + 2) + [0, 0] + short))
    sp = list(range(2, 2 + nd))
    cut = em.op("Slice", spread, em.ints(pads[:nd]), em.ints([pads[i] + sx[2 + i] for i in range(nd)]),
                em.ints(sp))
    return [em.reshape(cut, sx)]


@gradient("GlobalAveragePool")
def global_average_pool(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    sx = em.shape(x)
    g = em.mul(req.dy(), em.scalar(1.0 / prod(sx[2:]), x))
    return [em.op("Expand", g, em.ints(sx))]
