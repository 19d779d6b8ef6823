"""Gradient rules for activations: Tanh Sigmoid Relu LeakyRelu Gelu Erf HardSigmoid HardSwish
Softmax LogSoftmax Softplus Softsign Elu ThresholdedRelu Clip.

With ``y = f(x)``: ``Tanh: dy (1 - y^2)``, ``Sigmoid: dy y (1 - y)``, ``Relu: dy [y > 0]``,
``Erf: dy 2/sqrt(pi) exp(-x^2)``, ``Softmax: y (dy - sum(dy y))``,
``LogSoftmax: dy - exp(y) sum(dy)`` (sums over ``axis``, opset >= 13 semantics),
``Softsign: dy / (1 + |x|)^2``, ``Elu: dy`` for ``x > 0`` else ``dy (y + alpha)``,
``ThresholdedRelu: dy [x > alpha]``.
``Gelu`` (opset 20) handles ``approximate="none"`` (erf) and ``"tanh"``. Kinks follow
PyTorch: HardSwish uses ``x/3 + 1/2`` on ``[-3, 3]``; Clip passes ``dy`` where
``min <= x <= max``; HardSigmoid passes ``alpha dy`` strictly inside the linear part.
"""
from __future__ import annotations

import math

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, gradient


@gradient("Tanh")
def tanh(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    return [em.mul(req.dy(), em.sub(em.scalar(1, y), em.mul(y, y)))]


@gradient("Sigmoid")
def sigmoid(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    return [em.mul(req.dy(), em.mul(y, em.sub(em.scalar(1, y), y)))]


@gradient("Relu")
def relu(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    zero = em.scalar(0, y)
    return [em.op("Where", em.op("Greater", y, zero), req.dy(), zero)]


@gradient("LeakyRelu")
def leaky_relu(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    alpha = req.attrs.get("alpha", 0.01)
    dy = req.dy()
    positive = em.op("Greater", x, em.scalar(0, x))
    return [em.op("Where", positive, dy, em.mul(dy, em.scalar(alpha, x)))]


@gradient("Erf")
def erf(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    bell = em.op("Exp", em.neg(em.mul(x, x)))
    return [em.mul(req.dy(), em.mul(bell, em.scalar(2 / math.sqrt(math.pi), x)))]


@gradient("Gelu")
def gelu(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    if req.attrs.get("approximate", "none") == "tanh":
        return [em.mul(req.dy(), _gelu_tanh_slope(em, x))]
    cdf = em.mul(em.add(em.op("Erf", em.mul(x, em.scalar(1 / math.sqrt(2), x))), em.scalar(1, x)),
                 em.scalar(0.5, x))
    pdf = em.mul(em.op("Exp", em.mul(em.mul(x, x), em.scalar(-0.5, x))),
                 em.scalar(1 / math.sqrt(2 * math.pi), x))
    return [em.mul(req.dy(), em.add(cdf, em.mul(x, pdf)))]


def _gelu_tanh_slope(em: Emitter, x: str) -> str:
    """d/dx of 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    c, k = math.sqrt(2 / math.pi), 0.044715
    x2 = em.mul(x, x)
    u = em.mul(em.mul(x, em.add(em.mul(x2, em.scalar(k, x)), em.scalar(1, x))), em.scalar(c, x))
    t = em.op("Tanh", u)
    du = em.add(em.mul(x2, em.scalar(3 * k * c, x)), em.scalar(c, x))
    sech2 = em.sub(em.scalar(1, x), em.mul(t, t))
    left = em.mul(em.add(t, em.scalar(1, x)), em.scalar(0.5, x))
    return em.add(left, em.mul(em.mul(x, em.scalar(0.5, x)), em.mul(sech2, du)))


@gradient("HardSigmoid")
def hard_sigmoid(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    alpha, beta = req.attrs.get("alpha", 0.2), req.attrs.get("beta", 0.5)
    t = em.add(em.mul(x, em.scalar(alpha, x)), em.scalar(beta, x))
    inside = em.op("And", em.op("Greater", t, em.scalar(0, x)), em.op("Less", t, em.scalar(1, x)))
    return [em.op("Where", inside, em.mul(req.dy(), em.scalar(alpha, x)), em.scalar(0, x))]


@gradient("HardSwish")
def hard_swish(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    ramp = em.add(em.mul(x, em.scalar(1 / 3, x)), em.scalar(0.5, x))
    upper = em.op("Where", em.op("Greater", x, em.scalar(3, x)), em.scalar(1, x), ramp)
    slope = em.op("Where", em.op("Less", x, em.scalar(-3, x)), em.scalar(0, x), upper)
    return [em.mul(req.dy(), slope)]


@gradient("Softmax")
def softmax(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    axis = req.attrs.get("axis", -1) % em.rank(y)
    dy = req.dy()
    inner = em.reduce_sum(em.mul(dy, y), [axis], keepdims=True)
    return [em.mul(y, em.sub(dy, inner))]


@gradient("LogSoftmax")
def log_softmax(em: Emitter, req: GradRequest) -> Grads:
    y = req.node.output[0]
    axis = req.attrs.get("axis", -1) % em.rank(y)
    dy = req.dy()
    total = em.reduce_sum(dy, [axis], keepdims=True)
    return [em.sub(dy, em.mul(em.op("Exp", y), total))]


@gradient("Softplus")
def softplus(em: Emitter, req: GradRequest) -> Grads:
    return [em.mul(req.dy(), em.op("Sigmoid", req.node.input[0]))]


@gradient("Softsign")
def softsign(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    denom = em.add(em.op("Abs", x), em.scalar(1, x))
    return [em.op("Div", req.dy(), em.mul(denom, denom))]


@gradient("Elu")
def elu(em: Emitter, req: GradRequest) -> Grads:
    x, y = req.node.input[0], req.node.output[0]
    dy = req.dy()
    slope = em.add(y, em.scalar(req.attrs.get("alpha", 1.0), y))
    return [em.op("Where", em.op("Greater", x, em.scalar(0, x)), dy, em.mul(dy, slope))]


@gradient("ThresholdedRelu")
def thresholded_relu(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    above = em.op("Greater", x, em.scalar(req.attrs.get("alpha", 1.0), x))
    return [em.op("Where", above, req.dy(), em.scalar(0, x))]


@gradient("Clip", inputs=(0,))
def clip(em: Emitter, req: GradRequest) -> Grads:
    x = req.node.input[0]
    keep = None
    for i, cmp in ((1, "GreaterOrEqual"), (2, "LessOrEqual")):
        bound = req.input(i)
        if bound is not None:
            test = em.op(cmp, x, bound)
            keep = test if keep is None else em.op("And", keep, test)
    if keep is None:
        return [req.dy()]
    return [em.op("Where", keep, req.dy(), em.scalar(0, x))]
