"""Neural-network reference kernels: softmax family, normalizations, pooling, dropout, RNG.

Normalizations compute their statistics in float64 and cast back, so they are a
slightly more accurate reference than a float32 runtime.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .elementwise import onnx_dtype
from .linalg import gather_windows, window_geometry
from .registry import Inputs, OpContext, kernel


def _legacy_2d(x: np.ndarray, axis: int) -> np.ndarray:
    """Softmax before opset 13: coerce to 2-D at ``axis``."""
    axis = axis % max(x.ndim, 1)
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (float64 internally)."""
    xd = x.astype(np.float64)
    e = np.exp(xd - np.max(xd, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable log-softmax along ``axis`` (float64 internally)."""
    xd = x.astype(np.float64)
    s = xd - np.max(xd, axis=axis, keepdims=True)
    return (s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))).astype(x.dtype)


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, idx, 1, axis=axis)
    return out


def _softmax_like(fn: Any) -> Any:
    def run(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
        x = np.asarray(inputs[0])
        if ctx.opset < 13:
            return [fn(_legacy_2d(x, attrs.get("axis", 1)), 1).reshape(x.shape)]
        return [fn(x, attrs.get("axis", -1))]
    return run


kernel("Softmax")(_softmax_like(softmax))
kernel("LogSoftmax")(_softmax_like(log_softmax))
kernel("Hardmax")(_softmax_like(_hardmax))


def layer_norm(x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, axis: int,
               eps: float, simplified: bool = False
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LayerNorm over dims ``axis..``: (Y, mean, inv_std_dev), stats keep rank."""
    axis = axis % x.ndim
    red = tuple(range(axis, x.ndim))
    xd = x.astype(np.float64)
    mean = np.zeros_like(xd[(...,) + (slice(0, 1),) * len(red)]) if simplified else \
        np.mean(xd, axis=red, keepdims=True)
    var = np.mean(np.square(xd - mean), axis=red, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = (xd - mean) * inv
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype), mean, inv


@kernel("LayerNormalization")
def layer_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    bias = inputs[2] if len(inputs) > 2 else None
    y, mean, inv = layer_norm(x, inputs[1], bias, attrs.get("axis", -1), attrs.get("epsilon", 1e-5))
    stash = onnx_dtype(attrs.get("stash_type", 1))
    return [y, mean.astype(stash), inv.astype(stash)]


@kernel("RMSNormalization")
def rms_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = attrs.get("axis", -1) % x.ndim
    xd = x.astype(np.float64)
    ms = np.mean(np.square(xd), axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = xd / np.sqrt(ms + attrs.get("epsilon", 1e-5)) * np.asarray(inputs[1])
    return [y.astype(x.dtype)]


def _channel_shape(x: np.ndarray) -> list[int]:
    return [1, -1] + [1] * (x.ndim - 2)


def batch_norm_train(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training-mode BN: (Y, batch mean, biased batch var) with per-channel stats."""
    red = tuple(i for i in range(x.ndim) if i != 1)
    xd = x.astype(np.float64)
    mean = np.mean(xd, axis=red)
    var = np.var(xd, axis=red)
    cs = _channel_shape(x)
    y = (xd - mean.reshape(cs)) / np.sqrt(var.reshape(cs) + eps)
    y = y * np.asarray(scale).reshape(cs) + np.asarray(bias).reshape(cs)
    return y.astype(x.dtype), mean, var


@kernel("BatchNormalization")
def batch_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, scale, bias, mean, var = (np.asarray(v) for v in inputs[:5])
    eps, mom = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
    training = attrs.get("training_mode", 0) if ctx.opset >= 14 else ctx.n_outputs > 1
    if not training:
        cs = _channel_shape(x)
        y = (x.astype(np.float64) - mean.reshape(cs)) / np.sqrt(var.reshape(cs) + eps)
        return [(y * scale.reshape(cs) + bias.reshape(cs)).astype(x.dtype)]
    y, bmean, bvar = batch_norm_train(x, scale, bias, eps)
    run_mean = (mean * mom + bmean * (1 - mom)).astype(mean.dtype)
    run_var = (var * mom + bvar * (1 - mom)).astype(var.dtype)
    if ctx.opset >= 14:
        return [y, run_mean, run_var]
    return [y, run_mean, run_var, bmean.astype(mean.dtype), bvar.astype(var.dtype)]


@kernel("InstanceNormalization")
def instance_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                           ) -> list[np.ndarray]:
    x, scale, bias = (np.asarray(v) for v in inputs[:3])
    red = tuple(range(2, x.ndim))
    xd = x.astype(np.float64)
    mean = np.mean(xd, axis=red, keepdims=True)
    var = np.var(xd, axis=red, keepdims=True)
    cs = _channel_shape(x)
    y = (xd - mean) / np.sqrt(var + attrs.get("epsilon", 1e-5))
    return [(y * scale.reshape(cs) + bias.reshape(cs)).astype(x.dtype)]


@kernel("GroupNormalization")
def group_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x, scale, bias = (np.asarray(v) for v in inputs[:3])
    g = attrs["num_groups"]
    n, c = x.shape[:2]
    xg = x.astype(np.float64).reshape(n, g, -1)
    mean = xg.mean(axis=2, keepdims=True)
    var = xg.var(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + attrs.get("epsilon", 1e-5))).reshape(x.shape)
    if scale.size != c:
        scale, bias = np.repeat(scale, c // g), np.repeat(bias, c // g)
    cs = _channel_shape(x)
    return [(y * scale.reshape(cs) + bias.reshape(cs)).astype(x.dtype)]


@kernel("LpNormalization")
def lp_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    p, axis = attrs.get("p", 2), attrs.get("axis", -1)
    norm = np.sum(np.abs(x.astype(np.float64)) ** p, axis=axis, keepdims=True) ** (1.0 / p)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(norm == 0, 0, x / norm)
    return [y.astype(x.dtype)]


@kernel("MeanVarianceNormalization")
def mean_variance_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                                ) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axes = tuple(attrs.get("axes", [0, 2, 3]))
    xd = x.astype(np.float64)
    mean = np.mean(xd, axis=axes, keepdims=True)
    var = np.mean(np.square(xd), axis=axes, keepdims=True) - np.square(mean)
    return [((xd - mean) / (np.sqrt(var) + 1e-9)).astype(x.dtype)]


@kernel("LRN")
def lrn(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    size = attrs["size"]
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    sq = np.square(x.astype(np.float64))
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    total = sum(padded[:, i:i + x.shape[1]] for i in range(size))
    return [(x / (bias + alpha / size * total) ** beta).astype(x.dtype)]


def _pool_setup(x: np.ndarray, attrs: dict[str, Any]) -> tuple[tuple[int, ...], list[int],
                                                                list[int], list[int]]:
    kshape = tuple(attrs["kernel_shape"])
    out, pb, pe = window_geometry(x.shape[2:], kshape, attrs, bool(attrs.get("ceil_mode", 0)))
    return kshape, out, pb, pe


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def max_pool(x: np.ndarray, attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """MaxPool values and flat (N*C*spatial) argmax indices, ONNX/ORT style."""
    kshape, out, pb, _ = _pool_setup(x, attrs)
    order = "F" if attrs.get("storage_order", 0) else "C"
    cols, valid, flat = gather_windows(x, kshape, out, pb, attrs, _lowest(x.dtype), order)
    cols = np.where(valid[None, None], cols, _lowest(x.dtype))
    arg = np.argmax(cols, axis=2)
    y = np.take_along_axis(cols, arg[:, :, None], axis=2)[:, :, 0]
    spatial = np.stack(flat)
    idx = np.take_along_axis(np.broadcast_to(spatial, arg.shape[:2] + spatial.shape),
                             arg[:, :, None], axis=2)[:, :, 0]
    n, c = x.shape[:2]
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * plane
    idx = idx + base.reshape((n, c) + (1,) * len(out))
    return y.astype(x.dtype), idx.astype(np.int64)


@kernel("MaxPool")
def maxpool(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    y, idx = max_pool(np.asarray(inputs[0]), attrs)
    return [y, idx]


@kernel("AveragePool")
def average_pool(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    kshape, out, pb, pe = _pool_setup(x, attrs)
    xd = x.astype(np.float64)
    if attrs.get("count_include_pad", 0):
        nd = len(out)
        xd = np.pad(xd, [(0, 0), (0, 0)] + [(pb[i], pe[i]) for i in range(nd)])
        pb = [0] * nd
    cols, valid, _ = gather_windows(xd, kshape, out, pb, attrs)
    count = valid.sum(axis=0)
    return [(cols.sum(axis=2) / np.maximum(count, 1)).astype(x.dtype)]


@kernel("LpPool")
def lp_pool(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    kshape, out, pb, _ = _pool_setup(x, attrs)
    p = attrs.get("p", 2)
    cols, _, _ = gather_windows(np.abs(x.astype(np.float64)) ** p, kshape, out, pb, attrs)
    return [(cols.sum(axis=2) ** (1.0 / p)).astype(x.dtype)]


def _global(inputs: Inputs, fn: Any) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    return [fn(x.astype(np.float64), tuple(range(2, x.ndim))).astype(x.dtype)]


@kernel("GlobalAveragePool")
def global_average_pool(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return _global(inputs, lambda x, a: np.mean(x, axis=a, keepdims=True))


global_average_pool.native = "global_average_pool"   # the CPU library runs float32 ones as a loop nest (pooling.py)


@kernel("GlobalMaxPool")
def global_max_pool(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return _global(inputs, lambda x, a: np.max(x, axis=a, keepdims=True))


@kernel("GlobalLpPool")
def global_lp_pool(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    p = attrs.get("p", 2)
    return _global(inputs, lambda x, a: np.sum(np.abs(x) ** p, axis=a, keepdims=True) ** (1 / p))


def _rng(attrs: dict[str, Any], ctx: OpContext) -> np.random.Generator:
    seed = attrs.get("seed")
    return np.random.default_rng(int(seed) if seed is not None else ctx.seed)


@kernel("Dropout")
def dropout(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    if ctx.opset >= 12:
        ratio = float(np.asarray(inputs[1])) if len(inputs) > 1 and inputs[1] is not None else 0.5
        training = bool(np.asarray(inputs[2])) if len(inputs) > 2 and inputs[2] is not None \
            else False
    else:
        ratio, training = attrs.get("ratio", 0.5), ctx.opset < 7 and not attrs.get("is_test", 0)
    if not training or ratio == 0:
        return [x.copy(), np.ones(x.shape, dtype=bool)]
    mask = _rng(attrs, ctx).uniform(size=x.shape) >= ratio
    return [(x * mask / (1 - ratio)).astype(x.dtype), mask]


def _random_dtype(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> np.dtype:
    if "dtype" in attrs:
        return onnx_dtype(attrs["dtype"])
    if inputs and inputs[0] is not None:
        return np.asarray(inputs[0]).dtype
    return np.dtype(np.float32)


def _random_shape(inputs: Inputs, attrs: dict[str, Any]) -> tuple[int, ...]:
    return tuple(attrs["shape"]) if "shape" in attrs else np.asarray(inputs[0]).shape


@kernel("RandomUniformLike", "RandomUniform")
def random_uniform(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    vals = _rng(attrs, ctx).uniform(attrs.get("low", 0.0), attrs.get("high", 1.0),
                                    size=_random_shape(inputs, attrs))
    return [vals.astype(_random_dtype(inputs, attrs, ctx))]


@kernel("RandomNormalLike", "RandomNormal")
def random_normal(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    vals = _rng(attrs, ctx).normal(attrs.get("mean", 0.0), attrs.get("scale", 1.0),
                                   size=_random_shape(inputs, attrs))
    return [vals.astype(_random_dtype(inputs, attrs, ctx))]


@kernel("Bernoulli")
def bernoulli(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    p = np.asarray(inputs[0])
    draws = _rng(attrs, ctx).uniform(size=p.shape) < p
    return [draws.astype(_random_dtype(inputs, attrs, ctx))]
