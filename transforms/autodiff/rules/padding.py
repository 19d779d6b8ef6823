"""The gradient rule of ``Pad`` (modes constant, reflect, edge and wrap; negative pads crop).

``dy`` is unpadded one padded axis at a time. The interior ``Slice`` goes straight back to
the input; the padded border goes back where it was read from:

- ``constant``: nowhere (a cropped border, a negative pad, gets zeros);
- ``edge``: summed into the first / last element of the axis;
- ``reflect``: the border reversed (``Slice`` with step -1) onto elements ``1..pb`` and
  ``d-1-pe..d-2``;
- ``wrap``: onto the last ``pb`` / first ``pe`` elements.

A border is ``Pad``-ded with zeros to the axis length and added. The ``constant_value``
input gets ``sum(dy) - sum(dx)`` (the total gradient of the padded cells). Pads and axes
must be constant.
"""
from __future__ import annotations

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient

BEFORE_FIRST = -(2 ** 62)   # a Slice end that reaches index 0 with step -1


@gradient("Pad", inputs=(0, 2))
def pad(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    sx = em.shape(x)
    rank = len(sx)
    pads = em.const_value(req.input(1))
    axes = em.const_value(req.input(3)) if req.input(3) else None
    if pads is None or (req.input(3) and axes is None):
        raise NoGradientError(req.node, variant="with pads or axes that are not constant",
                              hint="Compute the pads from constants or static shapes")
    axes_l = [int(a) % rank for a in (axes.reshape(-1) if axes is not None else range(rank))]
    flat = [int(p) for p in pads.reshape(-1)]
    mode = req.attrs.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    g = req.dy()
    for k, a in enumerate(axes_l):
        pb, pe = flat[k], flat[k + len(axes_l)]
        if pb or pe:
            g = _unpad_axis(em, req, g, a, sx[a], pb, pe, mode)
    dx = g if req.want(0) else None
    dvalue = None
    if req.want(2) and req.input(2):
        total = em.op("ReduceSum", req.dy(), keepdims=0)
        inside = em.op("ReduceSum", g, keepdims=0)
        dvalue = em.reshape(em.sub(total, inside), em.shape(req.node.input[2]))
    return [dx, None, dvalue, None]


def _unpad_axis(em: Emitter, req: GradRequest, g: str, axis: int, d: int, pb: int, pe: int, mode: str) -> str:
    """The gradient along one axis of length ``d`` padded by ``pb`` before and ``pe`` after."""
    rank = em.rank(req.node.input[0])
    if mode == "constant":
        lo, hi = max(pb, 0), max(pb, 0) + d - max(-pb, 0) - max(-pe, 0)
        core = _slice(em, g, axis, lo, hi)
        return _zero_pad(em, core, axis, rank, max(-pb, 0), max(-pe, 0))
    if pb < 0 or pe < 0 or (mode == "reflect" and max(pb, pe) > d - 1) or (mode == "wrap" and max(pb, pe) > d):
        raise NoGradientError(req.node, variant=f"in mode '{mode}' with pads ({pb}, {pe}) on an axis of {d}",
                              hint="Pad by at most the axis length minus one")
    if mode not in ("edge", "reflect", "wrap"):
        raise NoGradientError(req.node, variant=f"in mode '{mode}'")
    out = _slice(em, g, axis, pb, pb + d)
    if pb:
        lead = _slice(em, g, axis, 0, pb)
        if mode == "edge":
            out = em.add(out, _zero_pad(em, em.reduce_sum(lead, [axis]), axis, rank, 0, d - 1))
        elif mode == "reflect":
            out = em.add(out, _zero_pad(em, _reversed(em, lead, axis, pb), axis, rank, 1, d - 1 - pb))
        else:
            out = em.add(out, _zero_pad(em, lead, axis, rank, d - pb, 0))
    if pe:
        trail = _slice(em, g, axis, pb + d, pb + d + pe)
        if mode == "edge":
            out = em.add(out, _zero_pad(em, em.reduce_sum(trail, [axis]), axis, rank, d - 1, 0))
        elif mode == "reflect":
            out = em.add(out, _zero_pad(em, _reversed(em, trail, axis, pe), axis, rank, d - 1 - pe, 1))
        else:
            out = em.add(out, _zero_pad(em, trail, axis, rank, 0, d - pe))
    return out


def _slice(em: Emitter, g: str, axis: int, start: int, end: int, step: int = 1) -> str:
    return em.op("Slice", g, em.ints([start]), em.ints([end]), em.ints([axis]), em.ints([step]))


def _reversed(em: Emitter, g: str, axis: int, n: int) -> str:
    return g if n == 1 else _slice(em, g, axis, n - 1, BEFORE_FIRST, -1)


def _zero_pad(em: Emitter, g: str, axis: int, rank: int, before: int, after: int) -> str:
    if not before and not after:
        return g
    pads = [0] * (2 * rank)
    pads[axis], pads[rank + axis] = before, after
    return em.op("Pad", g, em.ints(pads))
