"""Tests of the NumPy reference kernels for training: com.microsoft grads, ORT fusions,
MaxPoolGrad and the ai.dcstudio optimizers.

Gradient ops are checked as vector-Jacobian products against central finite
differences of the forward kernels in float64, and against torch autograd when
torch is installed. Forward fusions are checked against onnxruntime's contrib ops.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

import codegen.numpy_ref.kernels  # noqa: F401  (fills NUMPY_KERNELS)
from codegen.numpy_ref.registry import MS_DOMAIN, STUDIO_DOMAIN, OpContext, lookup

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional oracle
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (optional oracle)")
RNG = np.random.default_rng(1234)


def call(op: str, inputs: list[Any], attrs: dict[str, Any] | None = None, domain: str = MS_DOMAIN,
         n_outputs: int = 1, shapes: tuple = (), opset: int = 17) -> list[np.ndarray]:
    fn = lookup(domain, op)
    assert fn is not None, f"no kernel for {domain}:{op}"
    ctx = OpContext(opset=opset, n_outputs=n_outputs, output_shapes=shapes, label=op)
    return list(fn(inputs, attrs or {}, ctx))


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def fd_vjp(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, dy: np.ndarray,
           h: float = 1e-6) -> float:
    """<dy, J v> for a random direction v, by central differences; returns (value, v)."""
    v = RNG.standard_normal(x.shape)
    jv = (f(x + h * v) - f(x - h * v)) / (2 * h)
    return float(np.sum(dy * jv)), v


def assert_vjp(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, dy: np.ndarray,
               grad: np.ndarray, rtol: float = 1e-5) -> None:
    for _ in range(3):
        expected, v = fd_vjp(f, x, dy)
        got = float(np.sum(grad * v))
        assert got == pytest.approx(expected, rel=rtol, abs=1e-8)


# ------------------------------------------------------------------ accumulate, scale

def test_in_place_accumulator_v2_accumulates_and_overwrites() -> None:
    buf, val = np.ones((2, 3), np.float32), np.full((2, 3), 2.5, np.float32)
    flag, out = call("InPlaceAccumulatorV2", [buf, val], n_outputs=2)
    assert flag.dtype == np.bool_ and flag.shape == (1,) and flag[0]
    np.testing.assert_array_equal(out, np.full((2, 3), 3.5, np.float32))
    np.testing.assert_array_equal(buf, np.ones((2, 3), np.float32))  # input untouched
    _, out = call("InPlaceAccumulatorV2", [buf, val, np.array([True])], n_outputs=2)
    np.testing.assert_array_equal(out, val)
    _, out = call("InPlaceAccumulatorV2", [buf, val, np.array([False])], n_outputs=2)
    np.testing.assert_array_equal(out, buf + val)


def test_scale_multiplies_or_divides() -> None:
    x = randn(3, 4).astype(np.float32)
    s = np.array([4.0], np.float32)
    np.testing.assert_allclose(call("Scale", [x, s])[0], x * 4, rtol=1e-6)
    np.testing.assert_allclose(call("Scale", [x, s], {"scale_down": 1})[0], x / 4, rtol=1e-6)


# ------------------------------------------------------------------ activations

@pytest.mark.parametrize("fwd_op,grad_op,attrs,uses_output", [
    ("Relu", "ReluGrad", {}, False),
    ("Sigmoid", "SigmoidGrad", {}, True),
    ("Tanh", "TanhGrad", {}, True),
    ("Gelu", "GeluGrad", {}, False),
    ("FastGelu", "FastGeluGrad", {}, False),
    ("QuickGelu", "QuickGeluGrad", {}, False),
    ("QuickGelu", "QuickGeluGrad", {"alpha": 1.3}, False),
])
def test_activation_grads_match_finite_differences(fwd_op: str, grad_op: str, attrs: dict,
                                                   uses_output: bool) -> None:
    x = randn(4, 7)
    x[np.abs(x) < 1e-3] = 0.5  # keep ReLU away from its kink
    dom = "" if fwd_op in ("Relu", "Sigmoid", "Tanh") else MS_DOMAIN

    def f(z: np.ndarray) -> np.ndarray:
        return call(fwd_op, [z], attrs, domain=dom)[0]

    dy = randn(4, 7)
    second = f(x) if uses_output else x
    dx = call(grad_op, [dy, second], attrs)[0]
    assert dx.shape == x.shape
    assert_vjp(f, x, dy, dx)


def test_bias_gelu_grad_matches_gelu_grad_of_sum() -> None:
    x, b, dy = randn(3, 5), randn(5), randn(3, 5)
    got = call("BiasGeluGrad_dX", [dy, x, b])[0]
    np.testing.assert_allclose(got, call("GeluGrad", [dy, x + b])[0], rtol=1e-12)


def _ort_one_node(op: str, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], domain=MS_DOMAIN, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, x.shape) for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = 9
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))[0]


@pytest.mark.parametrize("op,n_in,attrs", [
    ("Gelu", 1, {}), ("FastGelu", 1, {}), ("FastGelu", 2, {}), ("BiasGelu", 2, {}),
    ("QuickGelu", 1, {}), ("QuickGelu", 1, {"alpha": 1.5}),
])
def test_gelu_family_matches_onnxruntime(op: str, n_in: int, attrs: dict) -> None:
    inputs = [randn(3, 8).astype(np.float32), randn(8).astype(np.float32)][:n_in]
    np.testing.assert_allclose(call(op, inputs, attrs)[0], _ort_one_node(op, inputs, attrs),
                               rtol=1e-5, atol=1e-6)


def _fused_physical(eff: tuple[int, ...], trans: int, trans_batch: int) -> list[int]:
    s = list(eff)
    if trans:
        s[-1], s[-2] = s[-2], s[-1]
    return [s[-2]] + s[:-2] + [s[-1]] if trans_batch else s


@pytest.mark.parametrize("ta,tb,tba,tbb", [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (1, 1, 1, 0),
                                           (0, 1, 0, 1), (1, 1, 1, 1)])
def test_fused_matmul_matches_onnxruntime(ta: int, tb: int, tba: int, tbb: int) -> None:
    a = randn(*_fused_physical((2, 3, 4, 5), ta, tba)).astype(np.float32)
    b = randn(*_fused_physical((2, 3, 5, 6), tb, tbb)).astype(np.float32)
    attrs = {"alpha": 0.5, "transA": ta, "transB": tb, "transBatchA": tba, "transBatchB": tbb}
    got = call("FusedMatMul", [a, b], attrs)[0]
    assert got.shape == (2, 3, 4, 6)
    np.testing.assert_allclose(got, _ort_one_node("FusedMatMul", [a, b], attrs), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ softmax and loss

@pytest.mark.parametrize("op,fwd,axis", [
    ("SoftmaxGrad_13", "Softmax", -1), ("SoftmaxGrad_13", "Softmax", 1),
    ("LogSoftmaxGrad_13", "LogSoftmax", -1), ("LogSoftmaxGrad_13", "LogSoftmax", 0),
])
def test_softmax_grads_match_finite_differences(op: str, fwd: str, axis: int) -> None:
    x, dy = randn(3, 4, 5), randn(3, 4, 5)

    def f(z: np.ndarray) -> np.ndarray:
        return call(fwd, [z], {"axis": axis}, domain="", opset=13)[0]

    dx = call(op, [dy, f(x)], {"axis": axis})[0]
    assert_vjp(f, x, dy, dx)


def test_legacy_softmax_grad_coerces_to_2d() -> None:
    x, dy = randn(2, 3, 4), randn(2, 3, 4)

    def f(z: np.ndarray) -> np.ndarray:
        return call("Softmax", [z], {"axis": 1}, domain="", opset=11)[0]

    dx = call("SoftmaxGrad", [dy, f(x)], {"axis": 1})[0]
    assert_vjp(f, x, dy, dx)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_softmax_cross_entropy_loss_grad(reduction: str, weighted: bool) -> None:
    logits = randn(4, 5, 3)
    labels = RNG.integers(0, 5, size=(4, 3))
    labels[0, 0] = -100
    weight = RNG.uniform(0.5, 2.0, 5) if weighted else None
    attrs = {"reduction": reduction, "ignore_index": -100}
    extra = [weight] if weighted else []

    def f(z: np.ndarray) -> np.ndarray:
        return call("SoftmaxCrossEntropyLoss", [z, labels] + extra, attrs, domain="", n_outputs=2)[0]

    loss, logp = call("SoftmaxCrossEntropyLoss", [logits, labels] + extra, attrs, domain="",
                      n_outputs=2)
    dy = randn(*loss.shape) if reduction == "none" else np.array(1.7)
    dx = call("SoftmaxCrossEntropyLossGrad", [dy, logp, labels] + extra, attrs)[0]
    assert dx.shape == logits.shape
    assert np.all(dx[0, :, 0] == 0)  # ignored target
    assert_vjp(f, logits, dy, dx)


@needs_torch
def test_softmax_cross_entropy_loss_grad_matches_torch() -> None:
    logits = randn(6, 4)
    labels = RNG.integers(0, 4, size=6)
    labels[2] = 1
    weight = RNG.uniform(0.5, 2.0, 4)
    t = torch.tensor(logits, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(t, torch.tensor(labels), weight=torch.tensor(weight),
                                             ignore_index=1)
    loss.backward()
    attrs = {"reduction": "mean", "ignore_index": 1}
    out, logp = call("SoftmaxCrossEntropyLoss", [logits, labels, weight], attrs, domain="",
                     n_outputs=2)
    np.testing.assert_allclose(out, loss.item(), rtol=1e-10)
    dx = call("SoftmaxCrossEntropyLossGrad", [np.array(1.0), logp, labels, weight], attrs)[0]
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ normalization

@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization_grad(axis: int) -> None:
    x = randn(2, 3, 4)
    norm_shape = x.shape[axis % 3:]
    scale, bias = randn(*norm_shape), randn(*norm_shape)
    attrs = {"axis": axis, "epsilon": 1e-5}
    y, mean, inv = call("LayerNormalization", [x, scale, bias], attrs, n_outputs=3)
    assert mean.shape == inv.shape == x.shape[:axis % 3] + (1,) * (3 - axis % 3)
    dy = randn(*x.shape)
    dx, dscale, dbias = call("LayerNormalizationGrad", [dy, x, scale, mean, inv], attrs, n_outputs=3)
    assert_vjp(lambda z: call("LayerNormalization", [z, scale, bias], attrs, n_outputs=3)[0], x, dy, dx)
    assert_vjp(lambda s: call("LayerNormalization", [x, s, bias], attrs, n_outputs=3)[0], scale, dy, dscale)
    assert_vjp(lambda b: call("LayerNormalization", [x, scale, b], attrs, n_outputs=3)[0], bias, dy, dbias)


def test_layer_normalization_default_domain_matches_contrib() -> None:
    x, s, b = randn(3, 6), randn(6), randn(6)
    ours = call("LayerNormalization", [x, s, b], {"epsilon": 1e-5}, domain="", n_outputs=3)
    ms = call("LayerNormalization", [x, s, b], {"epsilon": 1e-5}, n_outputs=3)
    for a, c in zip(ours, ms):
        np.testing.assert_allclose(a, c, rtol=1e-6)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * s + b
    np.testing.assert_allclose(ours[0], ref, rtol=1e-10)


def test_simplified_layer_normalization_grad() -> None:
    x, scale, dy = randn(3, 8), randn(8), randn(3, 8)
    attrs = {"axis": -1, "epsilon": 1e-6}
    y, inv = call("SimplifiedLayerNormalization", [x, scale], attrs, n_outputs=2)
    np.testing.assert_allclose(y, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * scale)
    dx, dscale = call("SimplifiedLayerNormalizationGrad", [dy, x, scale, inv], attrs, n_outputs=2)

    def f(z: np.ndarray) -> np.ndarray:
        return call("SimplifiedLayerNormalization", [z, scale], attrs, n_outputs=2)[0]

    assert_vjp(f, x, dy, dx)
    assert_vjp(lambda s: call("SimplifiedLayerNormalization", [x, s], attrs, n_outputs=2)[0],
               scale, dy, dscale)


def test_batch_norm_internal_training_outputs() -> None:
    x = randn(4, 3, 5, 2).astype(np.float32)
    scale, bias = randn(3).astype(np.float32), randn(3).astype(np.float32)
    rmean, rvar = randn(3).astype(np.float32), RNG.uniform(0.5, 2, 3).astype(np.float32)
    attrs = {"epsilon": 1e-5, "momentum": 0.9}
    y, run_mean, run_var, smean, sinv = call("BatchNormInternal", [x, scale, bias, rmean, rvar],
                                             attrs, n_outputs=5)
    bm = x.astype(np.float64).mean(axis=(0, 2, 3))
    bv = x.astype(np.float64).var(axis=(0, 2, 3))  # biased, as ORT uses for both updates
    np.testing.assert_allclose(smean, bm, rtol=1e-5)
    np.testing.assert_allclose(sinv, 1 / np.sqrt(bv + 1e-5), rtol=1e-5)
    np.testing.assert_allclose(run_mean, 0.9 * rmean + 0.1 * bm, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(run_var, 0.9 * rvar + 0.1 * bv, rtol=1e-5)
    cs = (1, 3, 1, 1)
    ref = (x - bm.reshape(cs)) / np.sqrt(bv.reshape(cs) + 1e-5) * scale.reshape(cs) + bias.reshape(cs)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    assert y.dtype == np.float32


def test_batch_normalization_grad() -> None:
    x, scale, bias, dy = randn(3, 2, 4), randn(2), randn(2), randn(3, 2, 4)
    mean0, var0 = np.zeros(2), np.ones(2)

    def f(z: np.ndarray, s: np.ndarray = scale, b: np.ndarray = bias) -> np.ndarray:
        return call("BatchNormInternal", [z, s, b, mean0, var0], {"epsilon": 1e-5}, n_outputs=5)[0]

    _, _, _, smean, sinv = call("BatchNormInternal", [x, scale, bias, mean0, var0], {"epsilon": 1e-5},
                                n_outputs=5)
    dx, dscale, dbias = call("BatchNormalizationGrad", [dy, x, scale, smean, sinv],
                             {"epsilon": 1e-5}, n_outputs=3)
    assert_vjp(f, x, dy, dx)
    assert_vjp(lambda s: f(x, s=s), scale, dy, dscale)
    assert_vjp(lambda b: f(x, b=b), bias, dy, dbias)


# ------------------------------------------------------------------ conv, pool, dropout

@pytest.mark.parametrize("attrs", [
    {},
    {"pads": [1, 1, 1, 1], "strides": [2, 2]},
    {"pads": [0, 1, 2, 1], "dilations": [2, 1], "group": 2},
    {"auto_pad": "SAME_UPPER", "strides": [2, 1]},
])
def test_conv_grad(attrs: dict) -> None:
    g = attrs.get("group", 1)
    x, w, b = randn(2, 4, 6, 5), randn(6, 4 // g, 3, 2), randn(6)
    y = call("Conv", [x, w, b], attrs, domain="")[0]
    dy = randn(*y.shape)
    dx, dw, db = call("ConvGrad", [dy, x, w], attrs, n_outputs=3)
    assert dx.shape == x.shape and dw.shape == w.shape and db.shape == (6,)
    assert_vjp(lambda z: call("Conv", [z, w, b], attrs, domain="")[0], x, dy, dx)
    assert_vjp(lambda k: call("Conv", [x, k, b], attrs, domain="")[0], w, dy, dw)
    assert_vjp(lambda c: call("Conv", [x, w, c], attrs, domain="")[0], b, dy, db)


@needs_torch
def test_conv_grad_matches_torch() -> None:
    x, w = randn(2, 4, 7, 6), randn(4, 2, 3, 3)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=2, padding=1, groups=2)
    dy = randn(*ty.shape)
    ty.backward(torch.tensor(dy))
    dx, dw, db = call("ConvGrad", [dy, x, w], {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2},
                      n_outputs=3)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3)), rtol=1e-12)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "ceil_mode": 1},
])
def test_max_pool_grad_matches_finite_differences(attrs: dict) -> None:
    x = RNG.permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6).astype(np.float64) / 10  # distinct
    y, idx = call("MaxPool", [x], attrs, domain="", n_outputs=2)
    assert idx.dtype == np.int64 and idx.max() < x.size
    np.testing.assert_array_equal(x.reshape(-1)[idx], y)
    dy = randn(*y.shape)
    dx = call("MaxPoolGrad", [dy, idx], {}, domain="", shapes=(x.shape,))[0]
    assert dx.shape == x.shape
    assert_vjp(lambda z: call("MaxPool", [z], attrs, domain="", n_outputs=2)[0], x, dy, dx)


def test_max_pool_grad_needs_static_shape() -> None:
    with pytest.raises(ValueError, match="static shape"):
        call("MaxPoolGrad", [np.ones((1, 1, 1, 1)), np.zeros((1, 1, 1, 1), np.int64)], domain="")


def test_dropout_grad() -> None:
    dy = randn(4, 5).astype(np.float32)
    mask = RNG.uniform(size=(4, 5)) > 0.3
    ratio = np.array(0.25, np.float32)
    got = call("DropoutGrad", [dy, mask, ratio, np.array(True)])[0]
    np.testing.assert_allclose(got, dy * mask / 0.75, rtol=1e-6)
    np.testing.assert_array_equal(call("DropoutGrad", [dy, mask, ratio, np.array(False)])[0], dy)
    np.testing.assert_allclose(call("DropoutGrad", [dy, mask])[0], dy * mask / 0.5, rtol=1e-6)


def test_dropout_training_mask_and_scale() -> None:
    x = np.ones((200, 50), np.float32)
    y, mask = call("Dropout", [x, np.array(0.2, np.float32), np.array(True)], {"seed": 3},
                   domain="", n_outputs=2, opset=13)
    assert mask.dtype == np.bool_
    np.testing.assert_allclose(y[mask], 1 / 0.8, rtol=1e-6)
    assert np.all(y[~mask] == 0)
    assert 0.15 < 1 - mask.mean() < 0.25


# ------------------------------------------------------------------ optimizers

def numpy_adamw(p, g, m, v, lr, t, b1, b2, eps, wd, mode):
    """Hand-written float64 reference of one AdamW step (mode 0: torch, 1: HuggingFace)."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    if mode == 0:
        p = p * (1 - lr * wd)
        mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        return p - lr * mhat / (np.sqrt(vhat) + eps), m, v
    denom = np.sqrt(v) + eps
    step_size = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    p = p - step_size * m / denom
    return (p - lr * wd * p if wd else p), m, v


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_adamw_matches_numpy_reference(mode: int, wd: float) -> None:
    p, m, v = randn(5, 3), np.zeros((5, 3)), np.zeros((5, 3))
    rp, rm, rv = p.copy(), m.copy(), v.copy()
    attrs = {"alpha": 0.8, "beta": 0.95, "epsilon": 1e-6, "weight_decay": wd, "adam_mode": mode}
    for t in range(1, 6):
        g = randn(5, 3)
        p, m, v = call("AdamW", [np.array([0.01]), np.array([t]), p, g, m, v], attrs,
                       domain=STUDIO_DOMAIN, n_outputs=3)
        rp, rm, rv = numpy_adamw(rp, g, rm, rv, 0.01, t, 0.8, 0.95, 1e-6, wd, mode)
        np.testing.assert_allclose(p, rp, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(m, rm, rtol=1e-12)
        np.testing.assert_allclose(v, rv, rtol=1e-12)


def test_adamw_modes_differ_with_weight_decay() -> None:
    p, g, z = randn(4), randn(4), np.zeros(4)
    args = [np.array([0.1]), np.array([1]), p, g, z, z]
    a0 = call("AdamW", args, {"weight_decay": 0.1, "adam_mode": 0}, domain=STUDIO_DOMAIN, n_outputs=3)
    a1 = call("AdamW", args, {"weight_decay": 0.1, "adam_mode": 1}, domain=STUDIO_DOMAIN, n_outputs=3)
    assert not np.allclose(a0[0], a1[0])


def test_adamw_without_bias_correction() -> None:
    p, g, z = randn(4), randn(4), np.zeros(4)
    out = call("AdamW", [np.array([0.1]), np.array([3]), p, g, z, z], {"correct_bias": 0},
               domain=STUDIO_DOMAIN, n_outputs=3)[0]
    m, v = 0.1 * g, 0.001 * g * g
    np.testing.assert_allclose(out, p - 0.1 * m / (np.sqrt(v) + 1e-8), rtol=1e-10)


def test_adamw_keeps_float32_and_inputs() -> None:
    p = randn(6).astype(np.float32)
    keep = p.copy()
    z = np.zeros(6, np.float32)
    out = call("AdamW", [np.array([1e-3], np.float32), np.array([1], np.int64), p,
                         randn(6).astype(np.float32), z, z], {}, domain=STUDIO_DOMAIN, n_outputs=3)
    assert all(o.dtype == np.float32 for o in out)
    np.testing.assert_array_equal(p, keep)


@needs_torch
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_adamw_mode0_matches_torch(wd: float) -> None:
    p0 = randn(7, 2)
    tp = torch.nn.Parameter(torch.tensor(p0))
    opt = torch.optim.AdamW([tp], lr=0.02, betas=(0.85, 0.99), eps=1e-7, weight_decay=wd)
    p, m, v = p0.copy(), np.zeros_like(p0), np.zeros_like(p0)
    attrs = {"alpha": 0.85, "beta": 0.99, "epsilon": 1e-7, "weight_decay": wd, "adam_mode": 0}
    for t in range(1, 8):
        g = randn(7, 2)
        tp.grad = torch.tensor(g)
        opt.step()
        p, m, v = call("AdamW", [np.array([0.02]), np.array([t]), p, g, m, v], attrs,
                       domain=STUDIO_DOMAIN, n_outputs=3)
    np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-9, atol=1e-12)


def _torch_sgd_run(kwargs: dict, steps: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    p0 = randn(5)
    tp = torch.nn.Parameter(torch.tensor(p0))
    opt = torch.optim.SGD([tp], lr=0.1, **kwargs)
    grads = [randn(5) for _ in range(steps)]
    for g in grads:
        tp.grad = torch.tensor(g)
        opt.step()
    return p0, tp.detach().numpy(), grads


@needs_torch
@pytest.mark.parametrize("kwargs", [
    {}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True},
    {"momentum": 0.8, "weight_decay": 0.01}, {"weight_decay": 0.1},
])
def test_sgd_matches_torch(kwargs: dict) -> None:
    p0, expected, grads = _torch_sgd_run(kwargs, 6)
    attrs = {"momentum": kwargs.get("momentum", 0.0), "weight_decay": kwargs.get("weight_decay", 0.0),
             "nesterov": int(kwargs.get("nesterov", False))}
    p, m = p0.copy(), np.zeros(5)
    for g in grads:
        p, m = call("SGD", [np.array([0.1]), p, g, m], attrs, domain=STUDIO_DOMAIN, n_outputs=2)
    np.testing.assert_allclose(p, expected, rtol=1e-12, atol=1e-14)


def test_sgd_plain_formula() -> None:
    p, g, m = randn(3), randn(3), randn(3)
    out, m_new = call("SGD", [np.array([0.5]), p, g, m], {"momentum": 0.5, "dampening": 0.2},
                      domain=STUDIO_DOMAIN, n_outputs=2)
    np.testing.assert_allclose(m_new, 0.5 * m + 0.8 * g)
    np.testing.assert_allclose(out, p - 0.5 * m_new)


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lion_matches_formula(wd: float) -> None:
    p, m = randn(4, 4), randn(4, 4)
    for _ in range(3):
        g = randn(4, 4)
        c = 0.9 * m + 0.1 * g
        ref_p, ref_m = p - 0.01 * (np.sign(c) + wd * p), 0.99 * m + 0.01 * g
        p, m = call("Lion", [np.array([0.01]), p, g, m], {"weight_decay": wd},
                    domain=STUDIO_DOMAIN, n_outputs=2)
        np.testing.assert_allclose(p, ref_p, rtol=1e-12)
        np.testing.assert_allclose(m, ref_m, rtol=1e-12)
