"""Gradient rules for ops that select or assemble parts of tensors: Concat Split Slice Gather Where.

- ``Concat``: one ``Split`` of ``dy`` at the input sizes.
- ``Split``: ``Concat`` of the output gradients (zeros for outputs nobody used).
- ``Slice``: with constant starts/ends/axes/steps and unit steps, ``Pad`` ``dy`` back;
  otherwise scatter ``dy`` to the flat positions the slice read (``ScatterElements``
  on a flattened zero tensor; the positions come from slicing an ``arange``).
- ``Gather``: ``dy`` viewed as ``(outer, n_indices, inner)`` is scatter-added into
  zeros ``(outer, dim, inner)`` along axis 1, so repeated indices (a tied or shared
  embedding row) accumulate. Negative indices are valid ``ScatterElements`` indices.
- ``Where``: ``dy`` masked by the condition, summed back to each branch's shape.
"""
from __future__ import annotations

from math import prod

import numpy as np

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, gradient


@gradient("Concat")
def concat(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    axis = req.attrs["axis"] % em.rank(y)
    names = list(req.node.input)
    sizes = [em.shape(n)[axis] for n in names]
    if len(names) == 1:
        return [req.dy()]
    parts = em.op("Split", req.dy(), em.ints(sizes), axis=axis, n_out=len(names))
    return [p if req.want(i) else None for i, p in enumerate(parts)]


@gradient("Split", inputs=(0,))
def split(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    axis = req.attrs.get("axis", 0) % em.rank(x)
    pieces = []
    for k, out in enumerate(req.node.output):
        g = req.dy(k)
        pieces.append(g if g is not None else em.zeros(em.shape(out), x))
    dx = pieces[0] if len(pieces) == 1 else em.op("Concat", *pieces, axis=axis)
    return [dx, None]


@gradient("Slice", inputs=(0,))
def slice_(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    sx = em.shape(x)
    args = _constant_args(em, req)
    if args is not None:
        ranges = _static_ranges(sx, *args)
        if all(r.step == 1 for r in ranges):
            pads = [r.start for r in ranges] + [d - r.start - len(r) for r, d in zip(ranges, sx)]
            return [em.op("Pad", req.dy(), em.ints(pads))] + [None] * 4
        grid = np.arange(prod(sx), dtype=np.int64).reshape(sx)
        positions = em.const(grid[np.ix_(*[np.asarray(r, dtype=np.int64) for r in ranges])].reshape(-1),
                             "slice_positions")
    else:
        grid_name = em.const(np.arange(prod(sx), dtype=np.int64).reshape(sx), "slice_grid")
        positions = em.reshape(em.op("Slice", grid_name, *req.node.input[1:]), (-1,))
    dx = em.op("ScatterElements", em.zeros((prod(sx),), x), positions, em.reshape(req.dy(), (-1,)), axis=0)
    return [em.reshape(dx, sx)] + [None] * 4


def _constant_args(em: Emitter, req: GradRequest) -> list | None:
    """starts, ends, axes, steps as arrays (None when absent), or None if any is not constant."""
    values = []
    for i in range(1, 5):
        name = req.input(i)
        value = em.const_value(name) if name else None
        if name and value is None:
            return None
        values.append(None if value is None else value.reshape(-1))
    return values


def _static_ranges(sx: tuple, starts: np.ndarray, ends: np.ndarray, axes: np.ndarray | None,
                   steps: np.ndarray | None) -> list[range]:
    """The input positions read along each axis (clamped like ONNX Slice)."""
    rank = len(sx)
    axes_l = [int(a) % rank for a in (axes if axes is not None else range(len(starts)))]
    steps_l = [int(s) for s in (steps if steps is not None else [1] * len(starts))]
    ranges = [range(0, d, 1) for d in sx]
    big = 2 ** 62
    for a, st, en, sp in zip(axes_l, starts, ends, steps_l):
        clamp = slice(int(max(min(st, big), -big)), int(max(min(en, big), -big)), sp)
        ranges[a] = range(*clamp.indices(sx[a]))
        if sp == 1 and len(ranges[a]) == 0:
            ranges[a] = range(min(ranges[a].start, sx[a]), min(ranges[a].start, sx[a]), 1)
    return ranges


@gradient("Gather", inputs=(0,))
def gather(em: Emitter, req: GradRequest) -> Grads:
    data, idx = req.node.input[:2]
    sd = em.shape(data)
    axis = req.attrs.get("axis", 0) % len(sd)
    outer, inner, n = prod(sd[:axis]), prod(sd[axis + 1:]), prod(em.shape(idx))
    g = em.reshape(req.dy(), (outer, n, inner))
    spots = em.op("Expand", em.reshape(idx, (1, n, 1)), em.ints((outer, n, inner)))
    zeros = em.zeros((outer, sd[axis], inner), data)
    dd = em.op("ScatterElements", zeros, spots, g, axis=1, reduction="add")
    return [em.reshape(dd, sd), None]


@gradient("Where", inputs=(1, 2))
def where(em: Emitter, req: GradRequest) -> Grads:
    cond, a, b = req.node.input[:3]
    sy = em.shape(req.node.output[0])
    dy = req.dy()
    zero = em.scalar(0, req.node.output[0])
    da = em.sum_to(em.op("Where", cond, dy, zero), sy, em.shape(a)) if req.want(1) else None
    db = em.sum_to(em.op("Where", cond, zero, dy), sy, em.shape(b)) if req.want(2) else None
    return [None, da, db]

