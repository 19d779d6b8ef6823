"""Device versions of the ops a CUDA step used to run on the host (gathers, scatters, pooling, the loss).

Before, ``L.reference`` copied the inputs of Gather, ScatterElements, MaxPool, GlobalAveragePool,
SoftmaxCrossEntropyLoss, ConstantOfShape, Concat and Split to the host, ran the NumPy reference
kernel and copied the results back. Each such step ran kernel by kernel (a device-to-host copy
cannot be captured in a CUDA graph): a ResNet-18 step took 36 ms on an H100 and every zoo model
ran uncaptured. ``OPS`` maps ``(domain, op_type)`` to a function ``f(xp, inputs, attrs, ctx)``
written against the array namespace ``xp`` — CuPy in a package, NumPy in the tests, which
check each one against the reference kernel it replaces. A function returns None where it does
not handle the case (then the host reference runs, as before) and never reads a device value on
the host: sizes come from the shapes the exporter recorded in ``ctx.output_shapes``.

The package carries a verbatim copy beside ``_lib.py``: it imports only NumPy (and cupyx, lazily).
"""
from __future__ import annotations

import numpy as np


def _is_numpy(xp) -> bool:
    return xp is np


def _indices(xp, idx, dim):
    """Integer indices as int64 with negative ones wrapped (ONNX)."""
    idx = idx.astype(np.int64)
    return xp.where(idx < 0, idx + dim, idx)


def gather(xp, inputs, attrs, ctx):
    x, idx = inputs[0], inputs[1]
    axis = int(attrs.get("axis", 0)) % x.ndim
    return [xp.take(x, _indices(xp, idx, x.shape[axis]), axis=axis)]


def gather_elements(xp, inputs, attrs, ctx):
    x, idx = inputs[0], inputs[1]
    axis = int(attrs.get("axis", 0)) % x.ndim
    return [xp.take_along_axis(x, _indices(xp, idx, x.shape[axis]), axis=axis)]


def _scatter_targets(xp, idx, axis):
    grid = [g.reshape(-1) for g in xp.indices(idx.shape)]
    grid[axis] = idx.reshape(-1)
    return tuple(grid)


def scatter_elements(xp, inputs, attrs, ctx):
    x, idx, upd = inputs[0], inputs[1], inputs[2]
    axis = int(attrs.get("axis", 0)) % x.ndim
    red = attrs.get("reduction", "none")
    out = x.copy()
    target = _scatter_targets(xp, _indices(xp, idx, x.shape[axis]), axis)
    values = upd.reshape(-1)
    if red == "none":
        out[target] = values
    elif _is_numpy(xp):
        {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[red].at(out, target, values)
    elif red in ("add", "max", "min"):
        import cupyx
        {"add": cupyx.scatter_add, "max": cupyx.scatter_max, "min": cupyx.scatter_min}[red](out, target, values)
    else:
        return None
    return [out]


def constant_of_shape(xp, inputs, attrs, ctx):
    shape = ctx.output_shapes[0] if ctx.output_shapes else None
    if shape is None:
        return None
    value = attrs.get("value")
    if value is None:
        return [xp.zeros(shape, np.float32)]
    value = value.reshape(-1)[:1] if hasattr(value, "reshape") else np.asarray(value).reshape(-1)[:1]
    out = xp.empty(shape, value.dtype)
    out[...] = xp.asarray(value).reshape(())       # a device-side broadcast: no host read of the value
    return [out]


def concat(xp, inputs, attrs, ctx):
    return [xp.concatenate([x for x in inputs if x is not None], axis=int(attrs.get("axis", 0)))]


def split(xp, inputs, attrs, ctx):
    x = inputs[0]
    axis = int(attrs.get("axis", 0)) % x.ndim
    shapes = ctx.output_shapes
    if not shapes or any(s is None for s in shapes):
        return None
    outs, at = [], 0
    for s in shapes:
        n = int(s[axis])
        index = [slice(None)] * x.ndim
        index[axis] = slice(at, at + n)
        outs.append(xp.ascontiguousarray(x[tuple(index)]))
        at += n
    return outs if at == x.shape[axis] else None


def global_average_pool(xp, inputs, attrs, ctx):
    x = inputs[0]
    return [x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype)]


def softmax_cross_entropy_loss(xp, inputs, attrs, ctx):
    """As the reference: float64 log-softmax over axis 1, weighted NLL, mean over the kept weights."""
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    ignore = attrs.get("ignore_index")
    red = attrs.get("reduction", "mean")
    xd = x.astype(np.float64)
    s = xd - xd.max(axis=1, keepdims=True)
    logp = s - xp.log(xp.exp(s).sum(axis=1, keepdims=True))
    t = target.astype(np.int64)
    keep = xp.ones(t.shape, dtype=bool) if ignore is None else t != int(ignore)
    safe = xp.clip(xp.where(keep, t, 0), 0, x.shape[1] - 1)
    w = xp.ones(t.shape, np.float64) if weight is None else weight.astype(np.float64)[safe]
    w = xp.where(keep, w, 0.0)
    picked = xp.take_along_axis(logp, safe[:, None], axis=1)[:, 0]
    loss = -picked * w
    if red == "sum":
        loss = loss.sum()
    elif red == "mean":
        total, summed = w.sum(), loss.sum()
        loss = xp.where(total != 0, summed / xp.where(total != 0, total, 1.0), summed * np.nan)
    elif red != "none":
        return None
    return [loss.astype(x.dtype), logp.astype(x.dtype)]


def max_pool(xp, inputs, attrs, ctx):
    """2-D MaxPool and its flat argmax indices (first maximum of the window in row-major order, as
    the reference's ``argmax``); padding and windows past the edge never win."""
    x = inputs[0]
    if x.ndim != 4 or attrs.get("storage_order", 0) or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID") \
            or not ctx.output_shapes or ctx.output_shapes[0] is None:
        return None
    n, c, h, w = x.shape
    oh, ow = (int(v) for v in ctx.output_shapes[0][2:])
    kh, kw = (int(v) for v in attrs["kernel_shape"])
    sh, sw = (int(v) for v in (attrs.get("strides") or (1, 1)))
    dh, dw = (int(v) for v in (attrs.get("dilations") or (1, 1)))
    pads = attrs.get("pads") or (0, 0, 0, 0)
    ph, pw = (0, 0) if attrs.get("auto_pad", "NOTSET") == "VALID" else (int(pads[0]), int(pads[1]))
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    hi = (oh - 1) * sh + (kh - 1) * dh + 1      # the padded extent the windows reach
    wi = (ow - 1) * sw + (kw - 1) * dw + 1
    padded = xp.full((n, c, max(hi, ph + h), max(wi, pw + w)), lowest, x.dtype)
    padded[:, :, ph:ph + h, pw:pw + w] = x
    best = idx = None
    rows = xp.arange(oh, dtype=np.int64)[:, None] * sh - ph
    cols = xp.arange(ow, dtype=np.int64)[None, :] * sw - pw
    for i in range(kh):
        for j in range(kw):
            cand = padded[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            flat = (rows + i * dh) * w + (cols + j * dw)
            if best is None:
                best, idx = cand.copy(), xp.broadcast_to(flat, cand.shape).copy()
            else:
                win = cand > best
                best = xp.where(win, cand, best)
                idx = xp.where(win, flat, idx)
    base = (xp.arange(n, dtype=np.int64)[:, None] * c + xp.arange(c, dtype=np.int64)[None, :]) * (h * w)
    return [best, idx + base[:, :, None, None]]


OPS = {
    ("", "Gather"): gather,
    ("", "GatherElements"): gather_elements,
    ("", "ScatterElements"): scatter_elements,
    ("", "ConstantOfShape"): constant_of_shape,
    ("", "Concat"): concat,
    ("", "Split"): split,
    ("", "GlobalAveragePool"): global_average_pool,
    ("", "SoftmaxCrossEntropyLoss"): softmax_cross_entropy_loss,
    ("", "MaxPool"): max_pool,
}
