"""Training reference kernels: onnxruntime-training's com.microsoft gradient ops and fusions.

Semantics follow onnxruntime-training's CPU kernels (orttraining/training_ops/cpu):
the ``…Grad`` ops, ``InPlaceAccumulatorV2``, ``BatchNormInternal``, ``FusedMatMul``,
``Scale``, the GELU family, plus ``MaxPoolGrad``, which ORT puts in the default
domain. The per-tensor optimizer ops (ai.dcstudio) live in ``optimizer.py``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .contraction import contract
from .elementwise import erf, gelu, sigmoid
from .linalg import gather_windows, product_dtype, window_geometry
from .nn import batch_norm_train, layer_norm
from .loss import target_weights
from .registry import MS_DOMAIN, STUDIO_DOMAIN, Inputs, OpContext, kernel

MS = MS_DOMAIN


def _opt(inputs: Inputs, i: int) -> np.ndarray | None:
    return np.asarray(inputs[i]) if len(inputs) > i and inputs[i] is not None else None


def _like(x: Any, ref: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(ref.dtype, copy=False)


# ---------------------------------------------------------------- accumulation, scale

@kernel("InPlaceAccumulatorV2", domain=MS)
def in_place_accumulator_v2(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                            ) -> list[np.ndarray]:
    """(buffer, value, [overwrite]) -> (updated_flag bool[1], buffer + value | value)."""
    buf, value = np.asarray(inputs[0]), np.asarray(inputs[1])
    overwrite = _opt(inputs, 2)
    if overwrite is not None and bool(overwrite.reshape(-1)[0]):
        out = np.broadcast_to(value, buf.shape).astype(buf.dtype)
    else:
        out = (buf + value.astype(buf.dtype)).astype(buf.dtype)
    return [np.ones(1, dtype=bool), out]


@kernel("Scale", domain=MS)
def scale(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """input * scale, or input / scale when scale_down=1 (scale is a 1-element tensor)."""
    x = np.asarray(inputs[0])
    s = np.asarray(inputs[1]).astype(x.dtype).reshape(())
    return [_like(x / s if attrs.get("scale_down", 0) else x * s, x)]


# ---------------------------------------------------------------- activations and grads

@kernel("Gelu", domain=MS)
def ms_gelu(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [gelu(np.asarray(inputs[0]))]


@kernel("BiasGelu", domain=MS)
def bias_gelu(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    return [gelu(_like(x + np.asarray(inputs[1]), x))]


@kernel("FastGelu", domain=MS)
def fast_gelu(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    b = _opt(inputs, 1)
    return [gelu(x if b is None else _like(x + b, x), "tanh")]


@kernel("QuickGelu", domain=MS)
def quick_gelu(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    xd = x.astype(np.float64)
    return [_like(xd * sigmoid(attrs.get("alpha", 1.702) * xd), x)]


def gelu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d/dx of exact GELU times dy (float64)."""
    xd = x.astype(np.float64)
    pdf = np.exp(-0.5 * xd * xd) / math.sqrt(2 * math.pi)
    return dy * (0.5 * (1 + erf(xd / math.sqrt(2))) + xd * pdf)


def fast_gelu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d/dx of tanh-approximated GELU times dy (float64)."""
    xd = x.astype(np.float64)
    k, c = math.sqrt(2 / math.pi), 0.044715
    t = np.tanh(k * (xd + c * xd ** 3))
    return dy * 0.5 * (1 + t + xd * (1 - t * t) * k * (1 + 3 * c * xd * xd))


@kernel("GeluGrad", domain=MS)
def gelu_grad_kernel(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    dy, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    return [_like(gelu_grad(dy.astype(np.float64), x), dy)]


@kernel("FastGeluGrad", domain=MS)
def fast_gelu_grad_kernel(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                          ) -> list[np.ndarray]:
    dy, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    return [_like(fast_gelu_grad(dy.astype(np.float64), x), dy)]


@kernel("BiasGeluGrad_dX", domain=MS)
def bias_gelu_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    dy, x, b = (np.asarray(v) for v in inputs[:3])
    return [_like(gelu_grad(dy.astype(np.float64), x.astype(np.float64) + b), dy)]


@kernel("QuickGeluGrad", domain=MS)
def quick_gelu_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    dy, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    v = attrs.get("alpha", 1.702) * x.astype(np.float64)
    s = sigmoid(v)
    return [_like(dy * s * (1 + v * (1 - s)), dy)]


@kernel("ReluGrad", domain=MS)
def relu_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(dY, X or Y) -> dY where the forward input/output is > 0, else 0."""
    dy, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    return [_like(np.where(x > 0, dy, 0), dy)]


@kernel("SigmoidGrad", domain=MS)
def sigmoid_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(dY, Y) -> dY * Y * (1 - Y)."""
    dy, y = np.asarray(inputs[0]), np.asarray(inputs[1])
    return [_like(dy * y * (1 - y), dy)]


@kernel("TanhGrad", domain=MS)
def tanh_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(dY, Y) -> dY * (1 - Y^2)."""
    dy, y = np.asarray(inputs[0]), np.asarray(inputs[1])
    return [_like(dy * (1 - y * y), dy)]


# ---------------------------------------------------------------- softmax grads

def _softmax_axis(x: np.ndarray, attrs: dict[str, Any], legacy: bool) -> tuple[np.ndarray, int]:
    """The view and axis the softmax grads reduce over (2-D coercion when legacy)."""
    if legacy:
        axis = attrs.get("axis", 1) % x.ndim
        return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1), 1
    return x, attrs.get("axis", -1)


def _softmax_grad(inputs: Inputs, attrs: dict[str, Any], legacy: bool, log: bool) -> np.ndarray:
    dy, y = np.asarray(inputs[0]), np.asarray(inputs[1])
    d2, axis = _softmax_axis(dy.astype(np.float64), attrs, legacy)
    y2, _ = _softmax_axis(y.astype(np.float64), attrs, legacy)
    if log:
        dx = d2 - np.exp(y2) * np.sum(d2, axis=axis, keepdims=True)
    else:
        dx = y2 * (d2 - np.sum(d2 * y2, axis=axis, keepdims=True))
    return _like(dx.reshape(dy.shape), dy)


@kernel("SoftmaxGrad_13", domain=MS)
def softmax_grad_13(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(dY, Y) -> Y * (dY - sum(dY * Y, axis)), single axis (default -1)."""
    return [_softmax_grad(inputs, attrs, legacy=False, log=False)]


@kernel("SoftmaxGrad", domain=MS)
def softmax_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """Pre-opset-13 semantics: the input is coerced to 2-D at ``axis`` (default 1)."""
    return [_softmax_grad(inputs, attrs, legacy=True, log=False)]


@kernel("LogSoftmaxGrad_13", domain=MS)
def log_softmax_grad_13(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                        ) -> list[np.ndarray]:
    """(dY, Y=log_softmax) -> dY - exp(Y) * sum(dY, axis)."""
    return [_softmax_grad(inputs, attrs, legacy=False, log=True)]


@kernel("LogSoftmaxGrad", domain=MS)
def log_softmax_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    return [_softmax_grad(inputs, attrs, legacy=True, log=True)]


@kernel("SoftmaxCrossEntropyLossGrad", domain=MS)
def softmax_cross_entropy_loss_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                                    ) -> list[np.ndarray]:
    """(dY, log_prob, label, [weight], [ignore_index]) -> d_logits (N, C, d1, …)."""
    dy, logp, label = np.asarray(inputs[0]), np.asarray(inputs[1]), np.asarray(inputs[2])
    ignore = _opt(inputs, 4)
    ignore_index = int(ignore.reshape(-1)[0]) if ignore is not None else attrs.get("ignore_index")
    w, safe = target_weights(label, _opt(inputs, 3), logp.shape[1], ignore_index)
    reduction = attrs.get("reduction", "mean")
    if reduction == "none":
        scale_ = w * dy.astype(np.float64)
    else:
        total = w.sum() if reduction == "mean" else 0.0
        scale_ = w * float(dy.reshape(-1)[0]) / (total if total != 0 else 1.0)
    onehot = np.zeros(logp.shape, dtype=np.float64)
    np.put_along_axis(onehot, safe[:, None], 1.0, axis=1)
    dx = (np.exp(logp.astype(np.float64)) - onehot) * scale_[:, None]
    return [_like(dx, logp)]


# ---------------------------------------------------------------- normalization

def _contrib_layer_norm(inputs: Inputs, attrs: dict[str, Any], simplified: bool
                        ) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    y, mean, inv = layer_norm(x, inputs[1], _opt(inputs, 2), attrs.get("axis", -1),
                              attrs.get("epsilon", 1e-5), simplified=simplified)
    stash = np.float64 if x.dtype == np.float64 else np.float32
    if simplified:
        return [y, inv.astype(stash)]
    return [y, mean.astype(stash), inv.astype(stash)]


@kernel("LayerNormalization", domain=MS)
def ms_layer_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                           ) -> list[np.ndarray]:
    """Contrib LayerNorm: (Y, mean, inv_std_dev), stats shaped X.shape[:axis] + 1s."""
    return _contrib_layer_norm(inputs, attrs, simplified=False)


@kernel("SimplifiedLayerNormalization", domain=MS)
@kernel("SimplifiedLayerNormalization")
def simplified_layer_normalization(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                                   ) -> list[np.ndarray]:
    """RMSNorm without bias: (Y, inv_std_dev) with inv = 1/sqrt(mean(x^2) + eps)."""
    return _contrib_layer_norm(inputs, attrs, simplified=True)


def _layer_norm_grad(inputs: Inputs, attrs: dict[str, Any], simplified: bool
                     ) -> list[np.ndarray]:
    dy, x, scale_ = (np.asarray(v, dtype=np.float64) for v in inputs[:3])
    axis = attrs.get("axis", -1) % x.ndim
    red = tuple(range(axis, x.ndim))
    outer = tuple(range(axis))
    inv = np.asarray(inputs[3 if simplified else 4], dtype=np.float64)
    mean = 0.0 if simplified else np.asarray(inputs[3], dtype=np.float64)
    inv = inv.reshape(x.shape[:axis] + (1,) * len(red))
    xhat = (x - (mean if simplified else mean.reshape(inv.shape))) * inv
    b = dy * scale_ * inv
    mean_c = np.mean(b * xhat, axis=red, keepdims=True)
    dx = b - xhat * mean_c if simplified else \
        b - np.mean(b, axis=red, keepdims=True) - xhat * mean_c
    ref = np.asarray(inputs[0])
    dscale = np.sum(dy * xhat, axis=outer).reshape(np.shape(inputs[2]))
    out = [_like(dx, ref), _like(dscale, ref)]
    if not simplified:
        out.append(_like(np.sum(dy, axis=outer).reshape(np.shape(inputs[2])), ref))
    return out


@kernel("LayerNormalizationGrad", domain=MS)
def layer_normalization_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                             ) -> list[np.ndarray]:
    """(dY, X, scale, mean, inv_std_dev; axis) -> (dX, dscale, dbias)."""
    return _layer_norm_grad(inputs, attrs, simplified=False)


@kernel("SimplifiedLayerNormalizationGrad", domain=MS)
def simplified_layer_normalization_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                                        ) -> list[np.ndarray]:
    """(dY, X, scale, inv_std_dev; axis) -> (dX, dscale)."""
    return _layer_norm_grad(inputs, attrs, simplified=True)


@kernel("BatchNormInternal", domain=MS)
def batch_norm_internal(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                        ) -> list[np.ndarray]:
    """(X, scale, B, mean, var) -> (Y, running_mean, running_var, saved_mean, saved_inv_std).

    Training mode uses the biased batch variance for both normalisation and the
    running update, like ORT's CPU BatchNorm; inference mode just normalises."""
    x, scale_, bias, mean, var = (np.asarray(v) for v in inputs[:5])
    eps, mom = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
    if not attrs.get("training_mode", 1):
        cs = [1, -1] + [1] * (x.ndim - 2)
        y = (x - mean.reshape(cs)) / np.sqrt(var.reshape(cs).astype(np.float64) + eps)
        return [_like(y * scale_.reshape(cs) + bias.reshape(cs), x), mean.copy(), var.copy()]
    y, bmean, bvar = batch_norm_train(x, scale_, bias, eps)
    run_mean = _like(mean * mom + bmean * (1 - mom), mean)
    run_var = _like(var * mom + bvar * (1 - mom), var)
    inv_std = 1.0 / np.sqrt(bvar + eps)
    return [y, run_mean, run_var, _like(bmean, mean), _like(inv_std, var)]


@kernel("BatchNormalizationGrad", domain=MS)
def batch_normalization_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext
                             ) -> list[np.ndarray]:
    """(dY, X, scale, saved_mean, saved_inv_std) -> (dX, dscale, dbias)."""
    dy, x, scale_, mean, inv = (np.asarray(v, dtype=np.float64) for v in inputs[:5])
    red = tuple(i for i in range(x.ndim) if i != 1)
    cs = [1, -1] + [1] * (x.ndim - 2)
    count = x.size // x.shape[1]
    xhat = (x - mean.reshape(cs)) * inv.reshape(cs)
    dbias = dy.sum(axis=red)
    dscale = (dy * xhat).sum(axis=red)
    dx = (scale_ * inv).reshape(cs) / count * (
        dy * count - dbias.reshape(cs) - xhat * dscale.reshape(cs))
    ref = np.asarray(inputs[0])
    return [_like(dx, ref), _like(dscale, ref), _like(dbias, ref)]


# ---------------------------------------------------------------- conv, pool, dropout

def _conv_grad_x(dy: np.ndarray, w: np.ndarray, x_shape: tuple[int, ...],
                 attrs: dict[str, Any]) -> np.ndarray:
    """Input gradient of Conv: col2im of W^T @ dY."""
    kshape = tuple(attrs.get("kernel_shape") or w.shape[2:])
    out, pb, _ = window_geometry(x_shape[2:], kshape, attrs)
    n, c = x_shape[:2]
    g, m = attrs.get("group", 1), w.shape[0]
    k = int(np.prod(kshape))
    dyg = dy.reshape(n, g, m // g, -1)
    wg = w.reshape(g, m // g, (c // g) * k)
    dcols = np.einsum("gmk,ngmp->ngkp", wg, dyg).reshape((n, c, k, -1))
    probe = np.zeros((1, 1) + tuple(x_shape[2:]))
    _, valid, flat = gather_windows(probe, kshape, out, pb, attrs)
    dx = np.zeros((n * c, int(np.prod(x_shape[2:]))), dtype=np.float64)
    cols = dcols.reshape(n * c, k, -1)
    for j in range(k):
        ok = valid[j].reshape(-1)
        idx = np.asarray(flat[j]).reshape(-1)[ok]
        np.add.at(dx, (slice(None), idx), cols[:, j, ok])
    return dx.reshape(x_shape)


def _conv_grad_w(dy: np.ndarray, x: np.ndarray, w_shape: tuple[int, ...],
                 attrs: dict[str, Any]) -> np.ndarray:
    kshape = tuple(attrs.get("kernel_shape") or w_shape[2:])
    out, pb, _ = window_geometry(x.shape[2:], kshape, attrs)
    cols, _, _ = gather_windows(x, kshape, out, pb, attrs)
    n, c = x.shape[:2]
    g, m = attrs.get("group", 1), w_shape[0]
    colsg = cols.reshape(n, g, (c // g) * int(np.prod(kshape)), -1)
    dyg = dy.reshape(n, g, m // g, -1)
    return np.einsum("ngmp,ngkp->gmk", dyg, colsg).reshape(w_shape)


@kernel("ConvGrad", domain=MS)
def conv_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(dY, X, W; Conv attrs) -> (dX, dW, dB)."""
    dy, x, w = (np.asarray(v) for v in inputs[:3])
    dyd = dy.astype(np.float64)
    dx = _conv_grad_x(dyd, w.astype(np.float64), x.shape, attrs)
    dw = _conv_grad_w(dyd, x.astype(np.float64), w.shape, attrs)
    db = dyd.sum(axis=tuple(i for i in range(dy.ndim) if i != 1))
    return [_like(dx, x), _like(dw, w), _like(db, dy)]


@kernel("ConvWeightGrad", domain=STUDIO_DOMAIN)
def conv_weight_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(X, dY; the forward Conv's kernel_shape, strides, pads, dilations, group) -> dW, in W's layout
    (made by the ``conv_weight_grad`` transformation from autodiff's transposed-batch Conv)."""
    x, dy = np.asarray(inputs[0]), np.asarray(inputs[1])
    g = int(attrs.get("group", 1))
    w_shape = (dy.shape[1], x.shape[1] // g) + tuple(attrs["kernel_shape"])
    return [_like(_conv_grad_w(dy.astype(np.float64), x.astype(np.float64), w_shape, attrs), x)]


@kernel("MaxPoolGrad")
def max_pool_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(dY, Indices) -> dX, scattering dY to the flat argmax indices; dX's shape is static."""
    dy, idx = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(np.int64)
    shape = ctx.output_shapes[0] if ctx.output_shapes else None
    if shape is None:
        raise ValueError(f"{ctx.label}: MaxPoolGrad needs the static shape of dX "
                         "(ctx.output_shapes[0])")
    dx = np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=np.float64)
    np.add.at(dx, idx.reshape(-1), dy.astype(np.float64).reshape(-1))
    return [_like(dx.reshape(shape), dy)]


@kernel("DropoutGrad", domain=MS)
def dropout_grad(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """(dY, mask, [ratio=0.5], [training_mode]) -> dY * mask / (1 - ratio).

    An explicit training_mode=false gives dY unchanged (inference mimicry)."""
    dy, mask = np.asarray(inputs[0]), np.asarray(inputs[1])
    ratio = _opt(inputs, 2)
    ratio = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
    training = _opt(inputs, 3)
    if ratio == 0.0 or (training is not None and not bool(training.reshape(-1)[0])):
        return [dy.copy()]
    return [_like(dy * mask.astype(dy.dtype) / np.asarray(1.0 - ratio, dy.dtype), dy)]


# ---------------------------------------------------------------- FusedMatMul

def _fused_operand(a: np.ndarray, trans: bool, trans_batch: bool) -> np.ndarray:
    if trans_batch:
        r = a.ndim
        a = np.transpose(a, list(range(1, r - 1)) + [0, r - 1])
    if trans:
        a = np.swapaxes(a, -1, -2)
    return a


@kernel("FusedMatMul", domain=MS)
def fused_matmul(inputs: Inputs, attrs: dict[str, Any], ctx: OpContext) -> list[np.ndarray]:
    """alpha * op(A) @ op(B); transBatch moves dim 0 to rank-2, then trans swaps the last two."""
    a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
    ea = _fused_operand(a, bool(attrs.get("transA", 0)) and a.ndim > 1,
                        bool(attrs.get("transBatchA", 0)))
    eb = _fused_operand(b, bool(attrs.get("transB", 0)) and b.ndim > 1,
                        bool(attrs.get("transBatchB", 0)))
    y = attrs.get("alpha", 1.0) * contract(ea.astype(np.float64), eb.astype(np.float64),
                                           ctx.extra.get("impl", "blas"))
    return [np.asarray(y).astype(product_dtype(ctx, a), copy=False)]
