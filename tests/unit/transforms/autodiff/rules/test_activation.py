"""Activation gradient rules against finite differences, onnxruntime, the executor and torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand

X = rand((3, 5), 11, -2.5, 2.5, away=0.05)


@pytest.mark.parametrize("op,fn,f64", [
    ("Tanh", torch.tanh, True), ("Sigmoid", torch.sigmoid, True), ("Relu", torch.relu, True),
    ("Erf", torch.erf, False), ("Softplus", F.softplus, False),
])
def test_pointwise(op, fn, f64):
    check_op(OpCase(op, [X], ort_float64=f64), fn)


@pytest.mark.parametrize("alpha", [0.01, 0.3])
def test_leaky_relu(alpha):
    check_op(OpCase("LeakyRelu", [X], {"alpha": alpha}), lambda x: F.leaky_relu(x, alpha))


def test_softsign():
    check_op(OpCase("Softsign", [X], ort_float64=False), F.softsign)


@pytest.mark.parametrize("alpha", [1.0, 0.4])
def test_elu(alpha):
    check_op(OpCase("Elu", [X], {"alpha": alpha}, ort_float64=False), lambda x: F.elu(x, alpha))


def test_thresholded_relu():
    x = _off_kinks(X, [0.7])
    check_op(OpCase("ThresholdedRelu", [x], {"alpha": 0.7}, ort_float64=False), lambda x: F.threshold(x, 0.7, 0.0))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    check_op(OpCase("Gelu", [X], {"approximate": approximate}, opset=20, ort_float64=False),
             lambda x: F.gelu(x, approximate=approximate))


def _off_kinks(x: np.ndarray, kinks: list[float]) -> np.ndarray:
    for k in kinks:
        x = np.where(np.abs(x - k) < 0.05, x + 0.1, x)
    return x


def test_hard_sigmoid():
    x = _off_kinks(rand((4, 5), 12, -4, 4), [-3, 3, -2.5, 2.5])
    check_op(OpCase("HardSigmoid", [x], {"alpha": 1 / 6, "beta": 0.5}, ort_float64=False), F.hardsigmoid)
    check_op(OpCase("HardSigmoid", [x], {"alpha": 0.2, "beta": 0.5}, ort_float64=False),
             lambda t: torch.clamp(0.2 * t + 0.5, 0, 1))


def test_hard_swish():
    x = _off_kinks(rand((4, 5), 13, -4.5, 4.5), [-3, 3])
    check_op(OpCase("HardSwish", [x], opset=17, ort_float64=False), F.hardswish)


@pytest.mark.parametrize("op,fn", [("Softmax", torch.softmax), ("LogSoftmax", torch.log_softmax)])
@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_softmax_family(op, fn, axis):
    x = rand((2, 3, 4), 14, -2, 2)
    check_op(OpCase(op, [x], {"axis": axis}), lambda t: fn(t, axis))


def test_clip_with_bounds_and_without():
    x = _off_kinks(rand((3, 4), 15, -2, 2), [-0.5, 0.7])
    lo, hi = np.asarray(-0.5), np.asarray(0.7)
    check_op(OpCase("Clip", [x, lo, hi], trainable=[0]), lambda t, a, b: torch.clamp(t, -0.5, 0.7))
    check_op(OpCase("Clip", [x, None, hi], trainable=[0]), lambda t, a, b: torch.clamp(t, max=0.7))
    check_op(OpCase("Clip", [x]), lambda t: t)
