"""Device versions of the ops a CUDA step used to run on the host (gathers, scatters, pooling, the loss).

Before, ``L.reference`` copied the inputs of Gather, ScatterElements, MaxPool, GlobalAveragePool,
SoftmaxCrossEntropyLoss, ConstantOfShape, Concat and Split (and onnxruntime's BatchNormInternal,
BatchNormalizationGrad and MaxPoolGrad) to the host, ran the NumPy reference
kernel and copied the results back. Each such step ran kernel by kernel (a device-to-host copy
cannot be captured in a CUDA graph): a ResNet-18 step took 36 ms on an H100 and every zoo model
ran uncaptured. ``OPS`` maps ``(domain, op_type)`` to a function ``f(xp, inputs, attrs, ctx)``
written against the array namespace ``xp`` — CuPy in a package, NumPy in the tests, which
check each one against the reference kernel it replaces. A function returns None where it does
not handle the case (then the host reference runs, as before) and never reads a device value on
the host: sizes come from the shapes the exporter recorded in ``ctx.output_shapes``, and the
index inputs of Slice and Pad (starts, ends, pads — graph constants) from ``host(x)``, the
library's host copy of a small constant weight (None for anything else: the op then declines).

The package carries a verbatim copy beside ``_lib.py``: it imports NumPy, cupyx (lazily) and two helpers of
the package's own reference kernels (``_ref/shape.py``: Slice bounds, Pad arguments).
"""
from __future__ import annotations

import numpy as np

try:                                      # in an exported package: its own copy of the reference kernels
    from ._ref.shape import _pad_args, _slice_bounds
except ImportError:                       # in the repository
    from codegen.numpy_ref.shape import _pad_args, _slice_bounds


def _numpy_host(x):
    """The host value of ``x`` when it is on the host already, else None (then the op declines)."""
    return x if x is None or isinstance(x, np.ndarray) else None


def _is_numpy(xp) -> bool:
    return xp is np


def _indices(xp, idx, dim):
    """Integer indices as int64 with negative ones wrapped (ONNX)."""
    idx = idx.astype(np.int64)
    return xp.where(idx < 0, idx + dim, idx)


def gather(xp, inputs, attrs, ctx, host=_numpy_host):
    x, idx = inputs[0], inputs[1]
    axis = int(attrs.get("axis", 0)) % x.ndim
    return [xp.take(x, _indices(xp, idx, x.shape[axis]), axis=axis)]


def gather_elements(xp, inputs, attrs, ctx, host=_numpy_host):
    x, idx = inputs[0], inputs[1]
    axis = int(attrs.get("axis", 0)) % x.ndim
    return [xp.take_along_axis(x, _indices(xp, idx, x.shape[axis]), axis=axis)]


def _scatter_targets(xp, idx, axis):
    grid = [g.reshape(-1) for g in xp.indices(idx.shape)]
    grid[axis] = idx.reshape(-1)
    return tuple(grid)


def scatter_elements(xp, inputs, attrs, ctx, host=_numpy_host):
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


def constant_of_shape(xp, inputs, attrs, ctx, host=_numpy_host):
    shape = ctx.output_shapes[0] if ctx.output_shapes else None
    if shape is None:
        return None
    value = attrs.get("value")
    if value is None:
        return [xp.zeros(shape, np.float32)]
    if isinstance(value, np.ndarray) or not hasattr(value, "reshape"):   # on the host: fill with the scalar
        value = np.asarray(value).reshape(-1)
        out = xp.empty(shape, value.dtype)
        out.fill(value[0].item())
        return [out]
    out = xp.empty(shape, value.dtype)
    out[...] = value.reshape(-1)[0]               # a device-side broadcast: no host read of the value
    return [out]


def concat(xp, inputs, attrs, ctx, host=_numpy_host):
    """Slice assignments into one output (``cupy.concatenate`` of several arrays uploads a table of
    their addresses from the host, which a captured CUDA graph refuses)."""
    arrays = [x for x in inputs if x is not None]
    axis = int(attrs.get("axis", 0)) % arrays[0].ndim
    shape = list(arrays[0].shape)
    shape[axis] = sum(int(x.shape[axis]) for x in arrays)
    out = xp.empty(tuple(shape), xp.result_type(*arrays))
    at = 0
    for x in arrays:
        index = [slice(None)] * out.ndim
        index[axis] = slice(at, at + x.shape[axis])
        out[tuple(index)] = x
        at += x.shape[axis]
    return [out]


def split(xp, inputs, attrs, ctx, host=_numpy_host):
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


def global_average_pool(xp, inputs, attrs, ctx, host=_numpy_host):
    x = inputs[0]
    return [x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype)]


def softmax_cross_entropy_loss(xp, inputs, attrs, ctx, host=_numpy_host):
    """As the reference: float64 log-softmax over axis 1, weighted NLL, mean over the kept weights."""
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    red = attrs.get("reduction", "mean")
    xd = x.astype(np.float64)
    s = xd - xd.max(axis=1, keepdims=True)
    logp = s - xp.log(xp.exp(s).sum(axis=1, keepdims=True))
    w, safe = _target_weights(xp, target, weight, x.shape[1], attrs.get("ignore_index"))
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


def _target_weights(xp, target, weight, classes, ignore):
    """(per-element float64 weight, 0 where ignored; targets clipped into [0, classes)), as the reference."""
    t = target.astype(np.int64)
    keep = xp.ones(t.shape, dtype=bool) if ignore is None else t != int(ignore)
    safe = xp.clip(xp.where(keep, t, 0), 0, classes - 1)
    w = xp.ones(t.shape, np.float64) if weight is None else weight.astype(np.float64)[safe]
    return xp.where(keep, w, 0.0), safe


def softmax_cross_entropy_loss_grad(xp, inputs, attrs, ctx, host=_numpy_host):
    """com.microsoft SoftmaxCrossEntropyLossGrad (dY, log_prob, label, [weight], [ignore_index])."""
    dy, logp, label = inputs[0], inputs[1], inputs[2]
    weight = inputs[3] if len(inputs) > 3 else None
    ignore = attrs.get("ignore_index")
    if len(inputs) > 4 and inputs[4] is not None:
        value = host(inputs[4])
        if value is None:
            return None
        ignore = int(np.asarray(value).reshape(-1)[0])
    w, safe = _target_weights(xp, label, weight, logp.shape[1], ignore)
    red = attrs.get("reduction", "mean")
    if red == "none":
        scale = w * dy.astype(np.float64)
    else:
        total = w.sum() if red == "mean" else xp.zeros((), np.float64)
        scale = w * dy.reshape(-1)[0].astype(np.float64) / xp.where(total != 0, total, 1.0)
    classes = xp.arange(logp.shape[1]).reshape((1, -1) + (1,) * (logp.ndim - 2))
    onehot = (classes == safe[:, None]).astype(np.float64)
    return [((xp.exp(logp.astype(np.float64)) - onehot) * scale[:, None]).astype(logp.dtype)]


def max_pool(xp, inputs, attrs, ctx, host=_numpy_host):
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


def slice_(xp, inputs, attrs, ctx, host=_numpy_host):
    """ONNX Slice (opset ≥ 10) with constant starts, ends, axes and steps."""
    x = inputs[0]
    if ctx.opset < 10:
        return None
    args = [host(inputs[i]) if len(inputs) > i else None for i in range(1, 5)]
    if any(a is None and len(inputs) > i + 1 and inputs[i + 1] is not None for i, a in enumerate(args)):
        return None
    starts, ends = [int(v) for v in args[0].reshape(-1)], [int(v) for v in args[1].reshape(-1)]
    axes = [int(v) for v in args[2].reshape(-1)] if args[2] is not None else list(range(len(starts)))
    steps = [int(v) for v in args[3].reshape(-1)] if args[3] is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s_, e, a, st in zip(starts, ends, axes, steps):
        a = a % x.ndim
        index[a] = _slice_bounds(s_, e, st, x.shape[a])
    return [x[tuple(index)].copy()]


def pad(xp, inputs, attrs, ctx, host=_numpy_host):
    """ONNX Pad with constant pads (and value, axes): crop the negative pads, pad the rest."""
    x = inputs[0]
    hosted = [None] + [host(v) for v in inputs[1:]]
    if any(h is None and v is not None for h, v in zip(hosted[1:], inputs[1:])):
        return None
    pads, value, axes = _pad_args(hosted, attrs, ctx)
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in axes]
    k = len(axes)
    width = [[0, 0] for _ in range(x.ndim)]
    for i, a in enumerate(axes):
        width[a] = [int(pads[i]), int(pads[i + k])]
    x = x[tuple(slice(max(-lo, 0), x.shape[d] - max(-hi, 0)) for d, (lo, hi) in enumerate(width))]
    width = [(max(lo, 0), max(hi, 0)) for lo, hi in width]
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        return [xp.pad(x, width, mode="constant", constant_values=np.asarray(value).astype(x.dtype).item())]
    if mode not in ("reflect", "edge", "wrap"):
        return None
    return [xp.pad(x, width, mode=mode)]


def max_pool_grad(xp, inputs, attrs, ctx, host=_numpy_host):
    """MaxPoolGrad (dY, flat argmax indices) -> dX: dY added at the indices in float64 (as the reference;
    windows that overlap send several terms to one element), dX's shape from the exporter."""
    dy, idx = inputs[0], inputs[1]
    if not ctx.output_shapes or ctx.output_shapes[0] is None:
        return None
    shape = tuple(int(v) for v in ctx.output_shapes[0])
    dx = xp.zeros(int(np.prod(shape, dtype=np.int64)), np.float64)
    flat, values = idx.astype(np.int64).reshape(-1), dy.astype(np.float64).reshape(-1)
    if _is_numpy(xp):
        np.add.at(dx, flat, values)
    else:
        import cupyx
        cupyx.scatter_add(dx, flat, values)
    return [dx.reshape(shape).astype(dy.dtype)]


def _channels(x):
    """(the axes a BatchNorm reduces: all but channels, the shape that broadcasts a per-channel vector)."""
    return tuple(i for i in range(x.ndim) if i != 1), (1, -1) + (1,) * (x.ndim - 2)


def batch_norm_internal(xp, inputs, attrs, ctx, host=_numpy_host):
    """com.microsoft BatchNormInternal (X, scale, B, mean, var) -> (Y, running mean, running var, saved
    mean, saved inverse std), in float64 with the biased batch variance, as the reference."""
    x, scale, bias, mean, var = inputs[:5]
    eps, mom = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
    red, cs = _channels(x)
    xd = x.astype(np.float64)
    if not attrs.get("training_mode", 1):
        y = (x - mean.reshape(cs)) / xp.sqrt(var.reshape(cs).astype(np.float64) + eps)
        return [(y * scale.reshape(cs) + bias.reshape(cs)).astype(x.dtype), mean.copy(), var.copy()]
    bmean = xd.mean(axis=red)
    bvar = xd.var(axis=red)
    y = (xd - bmean.reshape(cs)) / xp.sqrt(bvar.reshape(cs) + eps) * scale.reshape(cs) + bias.reshape(cs)
    return [y.astype(x.dtype), (mean * mom + bmean * (1 - mom)).astype(mean.dtype),
            (var * mom + bvar * (1 - mom)).astype(var.dtype), bmean.astype(mean.dtype),
            (1.0 / xp.sqrt(bvar + eps)).astype(var.dtype)]


def batch_normalization_grad(xp, inputs, attrs, ctx, host=_numpy_host):
    """com.microsoft BatchNormalizationGrad (dY, X, scale, saved mean, saved inverse std) -> (dX, dscale,
    dbias), in float64 as the reference."""
    dy, x, scale, mean, inv = (v.astype(np.float64) for v in inputs[:5])
    red, cs = _channels(x)
    count = x.size // x.shape[1]
    xhat = (x - mean.reshape(cs)) * inv.reshape(cs)
    dbias = dy.sum(axis=red)
    dscale = (dy * xhat).sum(axis=red)
    dx = (scale * inv).reshape(cs) / count * (dy * count - dbias.reshape(cs) - xhat * dscale.reshape(cs))
    dt = inputs[0].dtype
    return [dx.astype(dt), dscale.astype(dt), dbias.astype(dt)]


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
    ("", "Slice"): slice_,
    ("", "Pad"): pad,
    ("com.microsoft", "SoftmaxCrossEntropyLossGrad"): softmax_cross_entropy_loss_grad,
    ("", "MaxPoolGrad"): max_pool_grad,
    ("com.microsoft", "BatchNormInternal"): batch_norm_internal,
    ("com.microsoft", "BatchNormalizationGrad"): batch_normalization_grad,
}
