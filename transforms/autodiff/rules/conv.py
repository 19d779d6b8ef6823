"""Gradient rule for Conv (1-D/2-D/3-D; groups, depthwise, strides, pads, dilations, auto_pad).

For ``Y = Conv(X, W, B)`` with ``G`` groups, ``X: (N, C, *S)``, ``W: (O, C/G, *K)``:

- ``dX = ConvTranspose(dY, W)`` with the same strides, pads, dilations and groups, and
  ``output_padding`` restoring the rows the forward stride skipped;
- ``dW`` is itself a convolution: the batch becomes the channel axis.
  ``X'' = (C/G, G*N, *S)`` (channels regrouped so group ``g`` reads batch ``n`` at
  ``g*N + n``), ``dY'' = dY^T: (O, N, *OS)``, and
  ``dW = Conv(X'', dY'', strides=dilations, dilations=strides, pads, group=G)``, cut to
  ``K`` and transposed to ``(O, C/G, *K)``;
- ``dB = sum(dY)`` over every axis but 1.

ConvTranspose is Conv's adjoint in its input: for ``Y = ConvTranspose(X, W, B)`` with
``W: (C, O/G, *K)``, ``<dY, ConvTranspose(X, W)> = <Conv(dY, W), X>``, so

- ``dX = Conv(dY, W)`` with the same strides, pads, dilations and groups (``output_padding``
  only adds rows of ``Y`` that no ``X`` reached, and the conv's size arithmetic drops them);
- ``dW`` is Conv's weight gradient with ``dY`` as the input and ``X`` as the output gradient;
- ``dB = sum(dY)`` over every axis but 1.

Pads given by ``auto_pad`` or ``output_shape`` are resolved from the static shapes as ONNX
defines them (``total = s·(S−1) + output_padding + (K−1)·d + 1 − OS``).
"""
from __future__ import annotations

from math import ceil

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient


def explicit_pads(attrs: dict, in_sp: tuple[int, ...], k_eff: list[int], strides: list[int]) -> list[int]:
    """ONNX ``pads`` (begins then ends), resolving ``auto_pad`` from static sizes."""
    nd = len(in_sp)
    mode = attrs.get("auto_pad", "NOTSET")
    if mode in ("NOTSET", "") and "pads" in attrs:
        return list(attrs["pads"])
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for i in range(nd):
            total = max((ceil(in_sp[i] / strides[i]) - 1) * strides[i] + k_eff[i] - in_sp[i], 0)
            small, big = total // 2, total - total // 2
            begins.append(small if mode == "SAME_UPPER" else big)
            ends.append(big if mode == "SAME_UPPER" else small)
        return begins + ends
    return [0] * (2 * nd)


def window(attrs: dict, x_shape: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[list, list, list]:
    """Strides, dilations and explicit pads of a conv or pool window."""
    nd = len(kernel)
    strides = list(attrs.get("strides", [1] * nd))
    dil = list(attrs.get("dilations", [1] * nd))
    k_eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    return strides, dil, explicit_pads(attrs, tuple(x_shape[2:]), k_eff, strides)


@gradient("Conv")
def conv(em: Emitter, req: GradRequest) -> Grads:
    x, w = req.node.input[:2]
    sx, sw, sy = em.shape(x), em.shape(w), em.shape(req.node.output[0])
    strides, dil, pads = window(req.attrs, sx, sw[2:])
    geo = (strides, dil, pads, int(req.attrs.get("group", 1)))
    dy = req.dy()
    dx = _conv_dx(em, dy, w, sx, sw, sy, geo) if req.want(0) else None
    dw = _conv_dw(em, x, dy, sx, sw, sy, geo) if req.want(1) else None
    db = None
    if req.input(2) is not None and req.want(2):
        db = em.reduce_sum(dy, [0] + list(range(2, len(sy))), keepdims=False)
    return [dx, dw, db]


@gradient("ConvTranspose")
def conv_transpose(em: Emitter, req: GradRequest) -> Grads:
    x, w = req.node.input[:2]
    sx, sw, sy = em.shape(x), em.shape(w), em.shape(req.node.output[0])
    geo = _transpose_window(req, sx, sw, sy)
    dy = req.dy()
    dx = None
    if req.want(0):
        strides, dil, pads, group = geo
        dx = em.op("Conv", dy, w, strides=strides, dilations=dil, pads=pads, group=group if group != 1 else None)
    dw = _conv_dw(em, dy, x, sy, sw, sx, geo) if req.want(1) else None
    db = None
    if req.input(2) is not None and req.want(2):
        db = em.reduce_sum(dy, [0] + list(range(2, len(sy))), keepdims=False)
    return [dx, dw, db]


def _transpose_window(req: GradRequest, sx: tuple, sw: tuple, sy: tuple) -> tuple:
    """(strides, dilations, explicit pads, group) of a ConvTranspose (module docstring)."""
    attrs, nd = req.attrs, len(sw) - 2
    strides = list(attrs.get("strides", [1] * nd))
    dil = list(attrs.get("dilations", [1] * nd))
    mode = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if mode == "NOTSET" and "output_shape" not in attrs:
        pads = list(attrs.get("pads", [0] * (2 * nd)))
    elif mode == "VALID":
        pads = [0] * (2 * nd)
    else:
        out_pad = list(attrs.get("output_padding", [0] * nd))
        total = [strides[i] * (sx[2 + i] - 1) + out_pad[i] + (sw[2 + i] - 1) * dil[i] + 1 - sy[2 + i]
                 for i in range(nd)]
        if any(t < 0 for t in total):
            raise NoGradientError(req.node, variant=f"output_shape {list(sy[2:])} larger than the transposed "
                                  "convolution reaches (ONNX pads it with zeros)")
        upper = mode == "SAME_UPPER"
        pads = [t // 2 if upper else t - t // 2 for t in total] + [t - t // 2 if upper else t // 2 for t in total]
    return strides, dil, pads, int(attrs.get("group", 1))


def _conv_dx(em: Emitter, dy: str, w: str, sx: tuple, sw: tuple, sy: tuple, geo: tuple) -> str:
    strides, dil, pads, group = geo
    nd = len(sw) - 2
    out_pad = []
    for i in range(nd):
        covered = strides[i] * (sy[2 + i] - 1) + (sw[2 + i] - 1) * dil[i] + 1 - pads[i] - pads[nd + i]
        out_pad.append(sx[2 + i] - covered)
    return em.op("ConvTranspose", dy, w, strides=strides, dilations=dil, pads=pads,
                 group=group if group != 1 else None,
                 output_padding=out_pad if any(out_pad) else None)


def _conv_dw(em: Emitter, x: str, dy: str, sx: tuple, sw: tuple, sy: tuple, geo: tuple) -> str:
    strides, dil, pads, group = geo
    n, c = sx[:2]
    nd = len(sw) - 2
    cg = c // group
    sp = list(range(2, 2 + nd))
    if group == 1:
        xt = em.transpose(x, [1, 0] + sp)
    else:
        grouped = em.reshape(x, (n, group, cg) + tuple(sx[2:]))
        xt = em.transpose(grouped, [2, 1, 0] + [s + 1 for s in sp])
        xt = em.reshape(xt, (cg, group * n) + tuple(sx[2:]))
    dyt = em.transpose(dy, [1, 0] + sp)
    raw = em.op("Conv", xt, dyt, strides=dil, dilations=strides, pads=pads,
                group=group if group != 1 else None)
    full = [(sx[2 + i] + pads[i] + pads[nd + i] - (sy[2 + i] - 1) * strides[i] - 1) // dil[i] + 1
            for i in range(nd)]
    if full != list(sw[2:]):
        raw = em.op("Slice", raw, em.ints([0] * nd), em.ints(sw[2:]), em.ints(sp))
    return em.transpose(raw, [1, 0] + sp)
