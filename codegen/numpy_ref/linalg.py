"""Linear-algebra reference kernels: MatMul, Gemm, Conv, ConvTranspose, Einsum, Det.

Also holds the sliding-window geometry (``window_geometry``/``gather_windows``)
that Conv and the pooling kernels in ``nn.py`` share.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .contraction import contract
from .registry import Inputs, OpContext, kernel


def _spatial_attrs(attrs: dict[str, Any], nd: int, kshape: tuple[int, ...]
                   ) -> tuple[list[int], list[int], list[int]]:
    strides = list(attrs.get("strides") or [1] * nd)
    dil = list(attrs.get("dilations") or [1] * nd)
    pads = list(attrs.get("pads") or [0] * (2 * nd))
    return strides, dil, pads


def window_geometry(in_shape: tuple[int, ...], kshape: tuple[int, ...], attrs: dict[str, Any],
                    ceil_mode: bool = False) -> tuple[list[int], list[int], list[int]]:
    """Output spatial shape and begin/end pads of a sliding window (Conv/Pool rules)."""
    nd = len(in_shape)
    strides, dil, pads = _spatial_attrs(attrs, nd, kshape)
    auto = attrs.get("auto_pad", "NOTSET")
    out, pb, pe = [], list(pads[:nd]), list(pads[nd:])
    for i in range(nd):
        ext = (kshape[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-in_shape[i] // strides[i])
            total = max((o - 1) * strides[i] + ext - in_shape[i], 0)
            small = total // 2
            pb[i], pe[i] = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
        elif auto == "VALID":
            o = -(-(in_shape[i] - ext + 1) // strides[i])
            pb[i] = pe[i] = 0
        else:
            span = in_shape[i] + pb[i] + pe[i] - ext
            o = (-(-span // strides[i]) if ceil_mode else span // strides[i]) + 1
            if ceil_mode and (o - 1) * strides[i] >= in_shape[i] + pb[i]:
                o -= 1
        out.append(int(o))
    return out, pb, pe


def gather_windows(x: np.ndarray, kshape: tuple[int, ...], out: list[int], pb: list[int],
                   attrs: dict[str, Any], fill: Any = 0.0, order: str = "C"
                   ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Windows of ``x`` (N, C, *S) as (N, C, K, *out), a (K, *out) validity mask and,
    per kernel offset, the flat spatial index (into *S) of each window element."""
    nd = len(out)
    strides, dil, _ = _spatial_attrs(attrs, nd, kshape)
    cols, valid, flat = [], [], []
    for offs in itertools.product(*(range(k) for k in kshape)):
        coords = [np.arange(out[i]) * strides[i] - pb[i] + offs[i] * dil[i] for i in range(nd)]
        ok = [(c >= 0) & (c < x.shape[2 + i]) for i, c in enumerate(coords)]
        clipped = [np.clip(c, 0, max(x.shape[2 + i] - 1, 0)) for i, c in enumerate(coords)]
        grid = np.ix_(*clipped)
        m = np.ones(tuple(out), dtype=bool)
        for i, o in enumerate(ok):
            m = m & o.reshape([-1 if j == i else 1 for j in range(nd)])
        vals = x[(slice(None), slice(None)) + tuple(grid)]
        cols.append(np.where(m, vals, fill))
        valid.append(np.broadcast_to(m, tuple(out)))
        flat.append(np.ravel_multi_index(tuple(np.broadcast_arrays(*grid)), x.shape[2:],
                                         order=order))
    return np.stack(cols, axis=2), np.stack(valid), flat


def _wide(x: np.ndarray) -> np.ndarray:
    """Low-precision floats (fp16, bf16, fp8) accumulate in float32, like runtimes do."""
    x = np.asarray(x)
    if x.dtype.kind in "fV" and x.dtype.itemsize < 4:
        return x.astype(np.float32)
    return x


def _acc(x: np.ndarray) -> np.ndarray:
    """Floats accumulate in float64 in the convolutions: their sums run over C·k·k (thousands)."""
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind in "fV" else x


def product_dtype(ctx: OpContext, first: np.ndarray) -> np.dtype:
    """A contraction's result is rounded once, to its output container's dtype (a bfloat16
    operand of a mixed-precision graph must not round a float32 product); without an IR
    container (a bare call), to the first operand's."""
    dt = ctx.output_dtypes[0] if ctx.output_dtypes else None
    return dt if dt is not None else np.asarray(first).dtype


@kernel("MatMul")
def matmul(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
    return [contract(_wide(a), _wide(b), ctx.extra.get("impl", "blas")).astype(product_dtype(ctx, a), copy=False)]


@kernel("MatMulInteger")
def matmul_integer(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    a, b = np.asarray(inputs[0]).astype(np.int32), np.asarray(inputs[1]).astype(np.int32)
    za = np.asarray(inputs[2]).astype(np.int32) if len(inputs) > 2 and inputs[2] is not None else 0
    zb = np.asarray(inputs[3]).astype(np.int32) if len(inputs) > 3 and inputs[3] is not None else 0
    if np.ndim(za) == 1:
        za = za.reshape(-1, 1)
    return [np.matmul(a - za, b - zb).astype(np.int32)]


@kernel("Gemm")
def gemm(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
    a = a.T if attrs.get("transA", 0) else a
    b = b.T if attrs.get("transB", 0) else b
    y = attrs.get("alpha", 1.0) * contract(a, b, ctx.extra.get("impl", "blas"))
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + attrs.get("beta", 1.0) * np.asarray(inputs[2])
    return [y.astype(product_dtype(ctx, inputs[0]))]


@kernel("Einsum")
def einsum(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    eq = attrs["equation"].replace(" ", "")
    out = np.einsum(eq, *[_wide(x) for x in inputs], optimize=len(inputs) > 1)   # pairwise via BLAS
    return [np.asarray(out).astype(product_dtype(ctx, inputs[0]))]


@kernel("Det")
def det(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    return [np.linalg.det(x).astype(x.dtype)]


def conv_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any]
            ) -> np.ndarray:
    """N-d grouped convolution (ONNX Conv semantics) via im2col."""
    kshape = tuple(attrs.get("kernel_shape") or w.shape[2:])
    out, pb, _ = window_geometry(x.shape[2:], kshape, attrs)
    cols, _, _ = gather_windows(x, kshape, out, pb, attrs)
    n, c = x.shape[:2]
    g = attrs.get("group", 1)
    m = w.shape[0]
    cols = cols.reshape(n, g, (c // g) * int(np.prod(kshape)), -1)
    wg = w.reshape(g, m // g, -1)
    y = np.einsum("gmk,ngkp->ngmp", _acc(wg), _acc(cols), optimize=True).reshape([n, m] + out)
    if b is not None:
        y = y + b.reshape([1, m] + [1] * len(out))
    return y.astype(x.dtype)


def conv_direct(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any]
                ) -> np.ndarray:
    """N-d grouped convolution without a window buffer: one contraction per kernel offset."""
    kshape = tuple(attrs.get("kernel_shape") or w.shape[2:])
    out, pb, pe = window_geometry(x.shape[2:], kshape, attrs)
    strides, dil, _ = _spatial_attrs(attrs, len(out), kshape)
    n, c = x.shape[:2]
    g, m = attrs.get("group", 1), w.shape[0]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(max(a, 0), max(e, 0) + s) for a, e, s in zip(pb, pe, strides)])
    wg = w.reshape((g, m // g, c // g) + kshape)
    y = np.zeros((n, g, m // g) + tuple(out), dtype=np.result_type(_acc(x[:0]), _acc(w[:0])))
    for offs in itertools.product(*(range(k) for k in kshape)):
        window = tuple(slice(o * d, o * d + (size - 1) * st + 1, st)
                       for o, d, size, st in zip(offs, dil, out, strides))
        xs = xp[(slice(None), slice(None)) + window].reshape((n, g, c // g) + tuple(out))
        y += np.einsum("gmc,ngc...->ngm...", _acc(wg[(Ellipsis,) + offs]), _acc(xs))
    y = y.reshape((n, m) + tuple(out))
    if b is not None:
        y = y + b.reshape([1, m] + [1] * len(out))
    return y.astype(x.dtype)


@kernel("Conv")
def conv(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    b = inputs[2] if len(inputs) > 2 else None
    impl = ctx.extra.get("impl", "im2col")
    fn = conv_direct if impl == "direct" else conv_nd
    return [fn(np.asarray(inputs[0]), np.asarray(inputs[1]), b, attrs)]


def _convt_pads(x_sp: tuple[int, ...], kshape: tuple[int, ...], attrs: dict[str, Any]
                ) -> tuple[list[int], list[int]]:
    """Begin pads and output spatial shape of ConvTranspose."""
    nd = len(x_sp)
    strides, dil, pads = _spatial_attrs(attrs, nd, kshape)
    opad = list(attrs.get("output_padding") or [0] * nd)
    full = [strides[i] * (x_sp[i] - 1) + opad[i] + (kshape[i] - 1) * dil[i] + 1 for i in range(nd)]
    auto = attrs.get("auto_pad", "NOTSET")
    oshape = attrs.get("output_shape")
    if oshape is None and auto in ("SAME_UPPER", "SAME_LOWER") and not attrs.get("pads"):
        oshape = [x_sp[i] * strides[i] for i in range(nd)]
    if oshape is not None:
        oshape = list(oshape)[-nd:]
        total = [full[i] - oshape[i] for i in range(nd)]
        if auto == "SAME_UPPER":
            return [t // 2 for t in total], oshape
        return [t - t // 2 for t in total], oshape
    return pads[:nd], [full[i] - pads[i] - pads[i + nd] for i in range(nd)]


@kernel("ConvTranspose")
def conv_transpose(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, w = np.asarray(inputs[0]), np.asarray(inputs[1])
    kshape = tuple(attrs.get("kernel_shape") or w.shape[2:])
    nd = len(kshape)
    strides, dil, _ = _spatial_attrs(attrs, nd, kshape)
    pb, oshape = _convt_pads(x.shape[2:], kshape, attrs)
    g = attrs.get("group", 1)
    n, c = x.shape[:2]
    mg = w.shape[1]
    full = [strides[i] * (x.shape[2 + i] - 1) + (kshape[i] - 1) * dil[i] + 1 for i in range(nd)]
    size = [max(full[i], pb[i] + oshape[i]) for i in range(nd)]
    acc = np.zeros([n, g * mg] + size, dtype=np.float64)
    xg = _acc(x).reshape((n, g, c // g) + x.shape[2:])
    wg = _acc(w).reshape((g, c // g, mg) + kshape)
    for offs in itertools.product(*(range(k) for k in kshape)):
        contrib = np.einsum("ngc...,gcm->ngm...", xg, wg[(slice(None),) * 3 + offs])
        idx = tuple(slice(offs[i] * dil[i], offs[i] * dil[i] + strides[i] * (x.shape[2 + i] - 1) + 1,
                          strides[i]) for i in range(nd))
        acc[(slice(None), slice(None)) + idx] += contrib.reshape((n, g * mg) + x.shape[2:])
    crop = tuple(slice(pb[i], pb[i] + oshape[i]) for i in range(nd))
    y = acc[(slice(None), slice(None)) + crop]
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + np.asarray(inputs[2]).reshape([1, -1] + [1] * nd)
    return [y.astype(x.dtype)]
